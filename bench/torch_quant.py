#!/usr/bin/env python3
"""PyTorch's GEMV at the shapes of wgtile's quantisation benchmark
(examples/quantization.rs), run in the same call: x[M, K] @ W.T for a weight
W[N, K] (a Linear layer's layout) in f16, bf16 and f32 (TF32 off), and the
copy bandwidth of a large tensor.

    python3 bench/torch_quant.py [--shapes 4096x4096,4096x14336] [--rows 1,4,8]
        [--gemm 4096x4096x4096]

Prints one line per measurement: `torch <what> <KxN> M<m> <us> us <GB/s> GB/s`;
`--gemm MxKxN`: the f16 and bf16 products of that shape (the quantised
GEMM's baseline), `torch gemm_<dtype> <MxKxN> <us> us <TFLOP/s> TFLOP/s`.
Times with CUDA events, median of repeats after warm-up, random data.
"""
import argparse

import torch

from torch_matmul import bench  # CUDA-event median; bench/ is on sys.path


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="4096x4096,4096x14336")
    p.add_argument("--rows", default="1")
    p.add_argument("--gemm", default="")
    args = p.parse_args()
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    n = 1 << 26
    src = torch.rand(n, device=dev)
    dst = torch.empty_like(src)
    t = bench(lambda: dst.copy_(src), repeats=50)
    print(f"torch copy {n*4>>20}MiB {2*n*4/t/1e9:.1f} GB/s")
    del src, dst
    for shape in filter(None, args.gemm.split(",")):
        m, k, n = (int(v) for v in shape.split("x"))
        for dtype, name in [(torch.float16, "f16"), (torch.bfloat16, "bf16")]:
            x = torch.rand(m, k, device=dev, dtype=dtype) * 2 - 1
            w = torch.rand(n, k, device=dev, dtype=dtype) * 2 - 1
            t = bench(lambda: torch.nn.functional.linear(x, w), warmup=10, repeats=50)
            print(f"torch gemm_{name} {shape} {t*1e6:.1f} us {2*m*n*k/t/1e12:.1f} TFLOP/s")
    if args.gemm and not args.shapes:
        return
    for shape in args.shapes.split(","):
        k, n = (int(v) for v in shape.split("x"))
        for m in (int(r) for r in args.rows.split(",")):
            for dtype, name in [(torch.float16, "f16"), (torch.bfloat16, "bf16"), (torch.float32, "f32")]:
                x = torch.rand(m, k, device=dev, dtype=dtype) * 2 - 1
                w = torch.rand(n, k, device=dev, dtype=dtype) * 2 - 1
                t = bench(lambda: torch.nn.functional.linear(x, w), warmup=10, repeats=200)
                nbytes = (n * k + m * k + m * n) * x.element_size()
                print(f"torch gemv_{name} {k}x{n} M{m} {t*1e6:.1f} us {nbytes/t/1e9:.1f} GB/s")


if __name__ == "__main__":
    main()
