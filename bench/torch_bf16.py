#!/usr/bin/env python3
"""PyTorch at the shapes of wgtile's bf16 benchmark (examples/bf16.rs), run
in the same call: square matmuls and SDPA attention in bf16, f16 and f32
(TF32 off), softmax and ReLU over a matrix.

    python3 bench/torch_bf16.py

Prints one line per measurement: `torch <what> <dtype> <us> us`.
Times with CUDA events, median of repeats after warm-up, random data.
"""
import torch
import torch.nn.functional as F

from torch_matmul import bench  # CUDA-event median; bench/ is on sys.path


def main():
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    dtypes = [(torch.bfloat16, "bf16"), (torch.float16, "f16"), (torch.float32, "f32")]
    for n in (2048, 4096):
        for dtype, name in dtypes:
            a = torch.rand(n, n, device=dev, dtype=dtype) * 2 - 1
            b = torch.rand(n, n, device=dev, dtype=dtype) * 2 - 1
            t = bench(lambda: a @ b, warmup=5, repeats=30)
            print(f"torch matmul {n}^3 {name} {t*1e6:.1f} us {2*n**3/t/1e12:.1f} TFLOP/s")
    h, s, d = 16, 4096, 128
    for dtype, name in dtypes:
        q, k, v = (torch.rand(1, h, s, d, device=dev, dtype=dtype) * 2 - 1 for _ in range(3))
        t = bench(lambda: F.scaled_dot_product_attention(q, k, v), warmup=5, repeats=30)
        print(f"torch attention {h}x{s}x{d} {name} {t*1e6:.1f} us {4*h*s*s*d/t/1e12:.1f} TFLOP/s")
    for dtype, name in dtypes:
        x = torch.rand(8192, 8192, device=dev, dtype=dtype) * 8 - 4
        t = bench(lambda: torch.softmax(x, -1), warmup=5, repeats=30)
        print(f"torch softmax 8192x8192 {name} {t*1e6:.1f} us {2*x.numel()*x.element_size()/t/1e9:.1f} GB/s")
        t = bench(lambda: torch.relu(x), warmup=5, repeats=30)
        print(f"torch relu 8192x8192 {name} {t*1e6:.1f} us {2*x.numel()*x.element_size()/t/1e9:.1f} GB/s")


if __name__ == "__main__":
    main()
