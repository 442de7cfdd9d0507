#!/usr/bin/env python3
"""PyTorch's matmul and GEMV at wgtile's benchmark sizes, run in the same call
as wgtile's (bench/run-all.sh, bench/matmul.sh), with the copy bandwidth at
1 GiB and at a GEMV matrix's size. fp32 with TF32 off, and fp16.

    python3 bench/torch_matmul.py [--sizes 1792,1793,4096,4097]

Prints one line per measurement: `torch <what> <size> <value> <unit>`.
Times with CUDA events, median of repeats after warm-up, random data.
"""
import argparse
import statistics

import torch


def bench(fn, warmup=3, repeats=20):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="1024,1792,1793,2048,3000,4096,4097")
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    dev = torch.device("cuda")
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")

    # Copy bandwidth: the memory ceiling (bytes read + written).
    n = 1 << 28  # 1 GiB of f32
    src = torch.rand(n, device=dev)
    dst = torch.empty_like(src)
    t = bench(lambda: dst.copy_(src))
    print(f"torch copy {n*4>>20}MiB {2*n*4/t/1e9:.1f} GB/s")
    del src, dst
    # The same at a GEMV's size (a 4096 x 4096 f16 matrix, 32 MiB): the
    # fixed cost of one kernel shows at this size.
    n = 1 << 23
    src = torch.rand(n, device=dev)
    dst = torch.empty_like(src)
    t = bench(lambda: dst.copy_(src), repeats=100)
    print(f"torch copy {n*4>>20}MiB {2*n*4/t/1e9:.1f} GB/s")
    del src, dst

    for dtype, name in [(torch.float32, "f32"), (torch.float16, "f16")]:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        for s in sizes:
            a = torch.rand(s, s, device=dev, dtype=dtype) * 2 - 1
            b = torch.rand(s, s, device=dev, dtype=dtype) * 2 - 1
            t = bench(lambda: a @ b)
            print(f"torch matmul_{name} {s} {2*s**3/t/1e12:.2f} TFLOP/s")
        # GEMV: x[1, K] @ W[K, N], judged in GB/s of W (plus x and y).
        for k, n in [(4096, 4096), (4096, 14336), (14336, 4096)]:
            x = torch.rand(1, k, device=dev, dtype=dtype) * 2 - 1
            w = torch.rand(k, n, device=dev, dtype=dtype) * 2 - 1
            t = bench(lambda: x @ w, repeats=100)
            nbytes = (k * n + k + n) * x.element_size()
            print(f"torch gemv_{name} {k}x{n} {nbytes/t/1e9:.1f} GB/s")


if __name__ == "__main__":
    main()
