#!/usr/bin/env python3
"""PyTorch baselines for examples/fusion.rs: the same elementwise cases in eager
mode (one kernel per op, like wgtile's unfused path) and with torch.compile
(Inductor fuses them, like wgtile's fused path).

Times with CUDA events, median of repeats after warm-up. GB/s is the fused
memory floor (every input read once + the output written once) divided by
the time, the same numerator wgtile's example uses, so the numbers compare
directly. The row cases (sum(x*x) over rows, softmax(x*s+mask) on attention
scores with a broadcast mask, rms_norm(x+res)*w) compare with the fused row
ops of examples/fusion.rs (eager: one kernel per op). Prints one line per
measurement:
`torch <case> <mode> <shape> <us> us <GB/s> GB/s`.
"""
import argparse
import math
import statistics

import torch


def bench(fn, warmup=5, repeats=20):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    # Let the clocks ramp up (the GPU idles at a low clock).
    end_at = torch.cuda.Event(enable_timing=True)
    start_at = torch.cuda.Event(enable_timing=True)
    start_at.record()
    while True:
        for _ in range(10):
            fn()
        end_at.record()
        end_at.synchronize()
        if start_at.elapsed_time(end_at) > 300:
            break
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
    p.add_argument("--quick", action="store_true", help="about 1M elements")
    p.add_argument("--elements", type=int, default=None)
    p.add_argument("--dtype", default="f32", choices=["f32", "f16"])
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--no-compile", action="store_true", help="eager only")
    args = p.parse_args()
    n = args.elements or ((1 << 20) if args.quick else (1 << 26))
    side = max(1, int(math.isqrt(n)))
    dtype = torch.float32 if args.dtype == "f32" else torch.float16
    dev = torch.device("cuda")
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}, {n} elements {args.dtype}")

    esize = torch.empty((), dtype=dtype).element_size()
    x = (torch.rand(n, device=dev, dtype=torch.float32) * 8 - 4).to(dtype)
    m = (torch.rand(side, side, device=dev, dtype=torch.float32) * 8 - 4).to(dtype)
    w = (torch.rand(side, device=dev, dtype=torch.float32) * 2 - 1).to(dtype)
    b = (torch.rand(side, 1, device=dev, dtype=torch.float32) * 2 - 1).to(dtype)

    dst = torch.empty_like(x)
    t = bench(lambda: dst.copy_(x), repeats=args.repeats)
    print(f"torch copy eager [{n}] {t*1e6:.1f} us {2*n*esize/t/1e9:.1f} GB/s")

    def gelu_written(v):
        return 0.5 * v * (1.0 + torch.tanh(0.7978846 * (v + 0.044715 * v * v * v)))

    cases = [
        ("x*2+1", lambda: x * 2 + 1, 2 * n * esize, [n]),
        ("sin(x)^2+cos(x)^2", lambda: torch.sin(x) ** 2 + torch.cos(x) ** 2, 2 * n * esize, [n]),
        ("gelu(x)(one_op)", lambda: torch.nn.functional.gelu(x, approximate="tanh"), 2 * n * esize, [n]),
        ("gelu(x)written_out", lambda: gelu_written(x), 2 * n * esize, [n]),
        (
            "relu(m*w[col]+b[row])",
            lambda: torch.relu(m * w + b),
            (2 * side * side + 2 * side) * esize,
            [side, side],
        ),
    ]
    # Row ops fed by expressions (examples/fusion.rs's row cases): rows of
    # 4096, attention scores [1, H, Sq, 4096] with an additive mask [Sq, 4096].
    cols = 4096
    rows = max(1, n // cols)
    sq = min(rows, 1024)
    heads = max(1, rows // sq)
    rows = heads * sq
    xa = (torch.rand(1, heads, sq, cols, device=dev, dtype=torch.float32) * 8 - 4).to(dtype)
    qi = torch.arange(sq, device=dev).unsqueeze(1)
    kj = torch.arange(cols, device=dev).unsqueeze(0)
    mask = torch.where(kj > qi * cols // sq, float("-inf"), 0.0).to(dtype)
    res = (torch.rand(1, heads, sq, cols, device=dev, dtype=torch.float32) * 2 - 1).to(dtype)
    wr = (torch.rand(cols, device=dev, dtype=torch.float32) + 0.5).to(dtype)

    def rms_norm(v, w):
        if hasattr(torch.nn.functional, "rms_norm"):
            return torch.nn.functional.rms_norm(v, (cols,), w, 1e-6)
        vf = v.float()
        return (vf * torch.rsqrt(vf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(v.dtype) * w

    big = rows * cols * esize
    cases += [
        ("sum(x*x)rows", lambda: (xa * xa).sum(-1), big + rows * esize, [rows, cols]),
        (
            "softmax(x*s+mask)",
            lambda: torch.softmax(xa * 0.125 + mask, dim=-1),
            2 * big + sq * cols * esize,
            [rows, cols],
        ),
        ("rms_norm(x+res)*w", lambda: rms_norm(xa + res, wr), 3 * big + cols * esize, [rows, cols]),
    ]
    for name, fn, floor, shape in cases:
        modes = [("eager", fn)]
        if not args.no_compile:
            modes.append(("compile", torch.compile(fn)))
        for mode, f in modes:
            t = bench(f, repeats=args.repeats)
            shape_s = "x".join(str(s) for s in shape)
            print(f"torch {name} {mode} [{shape_s}] {t*1e6:.1f} us {floor/t/1e9:.1f} GB/s")


if __name__ == "__main__":
    main()
