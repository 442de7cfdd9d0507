#!/usr/bin/env python3
"""PyTorch baselines for `cargo run --release --example rowops`: the same
cases (softmax, log-softmax, LayerNorm, RMSNorm with affine weights, sum over
the last axis; rows of 1024, 4096 and 32768; f32 and f16), in eager mode and
under torch.compile, against a copy of the same tensor.

GB/s counts the memory floor like wgtile's plans: input read once + output
written once (+ the weight and bias vectors for the norms). Times are CUDA
events around each call, median of repeats after warm-up.

    python3 bench/torch_rowops.py [--quick] [--dtype f32|f16|both] [--no-compile]
"""
import argparse
import statistics

import torch
import torch.nn.functional as F


def bench(fn, warmup=10, repeats=50):
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


def rms_norm(x, w, eps):
    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), w, eps)
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


OPS = {
    "softmax": lambda x, w, b: torch.softmax(x, dim=-1),
    "log_softmax": lambda x, w, b: torch.log_softmax(x, dim=-1),
    "layer_norm": lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5),
    "rms_norm": lambda x, w, b: rms_norm(x, w, 1e-5),
    "sum": lambda x, w, b: x.sum(dim=-1),
}


def floor_bytes(op, rows, n, esize):
    params = {"layer_norm": 2 * n, "rms_norm": n}.get(op, 0)
    out = rows if op == "sum" else rows * n
    return (rows * n + out + params) * esize


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="small shapes")
    p.add_argument("--dtype", default="both", choices=["f32", "f16", "both"])
    p.add_argument("--no-compile", action="store_true", help="eager only")
    p.add_argument("--shapes", default="", help="ROWSxN,... (default: 256 MiB of f32 each)")
    args = p.parse_args()
    if args.shapes:
        shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    elif args.quick:
        shapes = [(256, 1024), (64, 4096), (8, 32768)]
    else:
        shapes = [(65536, 1024), (16384, 4096), (2048, 32768)]
    dtypes = {"f32": [torch.float32], "f16": [torch.float16],
              "both": [torch.float32, torch.float16]}[args.dtype]
    dev = torch.device("cuda")
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    modes = ["eager"] + ([] if args.no_compile else ["compile"])
    print(f"{'op':<12} {'type':<4} {'shape':>13} {'mode':<8} {'ms':>9} {'GB/s':>8} {'copy%':>6}")
    for dtype in dtypes:
        name = "f32" if dtype == torch.float32 else "f16"
        esize = torch.tensor([], dtype=dtype).element_size()
        for rows, n in shapes:
            x = torch.rand(rows, n, device=dev, dtype=dtype) * 2 - 1
            w = torch.rand(n, device=dev, dtype=dtype) * 2 - 1
            b = torch.rand(n, device=dev, dtype=dtype) * 2 - 1
            y = torch.empty_like(x)
            t = bench(lambda: y.copy_(x))
            copy = 2 * rows * n * esize / t / 1e9
            print(f"{'copy':<12} {name:<4} {f'{rows}x{n}':>13} {'eager':<8} {t*1e3:>9.4f} {copy:>8.1f} {'100%':>6}")
            for op, fn in OPS.items():
                for mode in modes:
                    f = fn if mode == "eager" else torch.compile(fn, dynamic=False)
                    try:
                        t = bench(lambda: f(x, w, b))
                    except Exception as e:  # a compile failure should not end the run
                        print(f"{op:<12} {name:<4} {f'{rows}x{n}':>13} {mode:<8} failed: {e}")
                        continue
                    gbps = floor_bytes(op, rows, n, esize) / t / 1e9
                    print(f"{op:<12} {name:<4} {f'{rows}x{n}':>13} {mode:<8} {t*1e3:>9.4f} "
                          f"{gbps:>8.1f} {100*gbps/copy:>5.0f}%")
            del x, y, w, b
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
