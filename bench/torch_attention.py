#!/usr/bin/env python3
"""PyTorch SDPA on the cases of `cargo run --release --example attention`.

Prints one line per measurement: `torch attention <case> <ms> <TFLOP/s>`.
fp32 with TF32 off, and fp16; forward and backward; CUDA events, warm-up,
median. FLOPs as FlashAttention counts them: forward 4*B*H*Sq*Sk*D (half
when causal), backward 2.5x the forward.
"""
import argparse
import statistics

import torch
import torch.nn.functional as F


def bench(fn, warmup=3, repeats=10):
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


def flops(b, h, sq, sk, d, causal):
    f = 4.0 * b * h * sq * sk * d
    return f / 2 if causal else f


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--no-long", action="store_true")
    p.add_argument("--no-backward", action="store_true")
    p.add_argument("--decode-only", action="store_true")
    p.add_argument("--decode-lens", default="")
    args = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    if args.decode_only:
        decode(args, dev)
        return
    if args.quick:
        b, h, sizes, dims = 1, 2, [128, 256], [64]
    else:
        b, h, sizes, dims = 4, 16, [1024, 4096], [128, 64]
    cases = [(b, h, s, d, causal, dt) for d in dims for s in sizes
             for causal in (False, True) for dt in (torch.float32, torch.float16)]
    if not args.quick and not args.no_long:
        cases += [(1, 8, 65536, 128, causal, dt) for causal in (False, True)
                  for dt in (torch.float32, torch.float16)]
    for (b, h, s, d, causal, dt) in cases:
        name = f"{b},{h},{s},{d} {'causal' if causal else 'full'} {'f32' if dt == torch.float32 else 'f16'}"
        q, k, v = (torch.rand(b, h, s, d, device=dev, dtype=dt) * 2 - 1 for _ in range(3))
        reps = 3 if s > 16384 else 10
        try:
            t = bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), repeats=reps)
            f = flops(b, h, s, s, d, causal)
            print(f"torch attention fwd {name} {t*1e3:.3f} ms {f/t/1e12:.2f} TFLOP/s")
        except RuntimeError as e:
            print(f"torch attention fwd {name} failed: {str(e).splitlines()[0]}")
            torch.cuda.empty_cache()
            continue
        if args.no_backward or s > 16384:
            continue
        try:
            qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))
            out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
            do = torch.rand_like(out)
            t = bench(lambda: torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True), repeats=reps)
            f = 2.5 * flops(b, h, s, s, d, causal)
            print(f"torch attention bwd {name} {t*1e3:.3f} ms {f/t/1e12:.2f} TFLOP/s")
            del qg, kg, vg, out, do
        except RuntimeError as e:
            print(f"torch attention bwd {name} failed: {str(e).splitlines()[0]}")
        torch.cuda.empty_cache()

    decode(args, dev)


def decode(args, dev):
    """Decode: one query row per head (B=1, GQA 32:8, D=128) against caches
    of 4k, 32k and 128k keys, fp16 and fp32, in GB/s of the K/V read and %
    of a device copy (the example's `decode` table)."""
    hq, hkv, d = (8, 2, 64) if args.quick else (32, 8, 128)
    lens = [1024, 4096] if args.quick else [4096, 32768, 131072]
    if args.decode_lens:
        lens = [int(x) for x in args.decode_lens.split(",")]
    src = torch.empty(1 << 28, device=dev)
    dst = torch.empty_like(src)
    tc = bench(lambda: dst.copy_(src))
    copy = 2 * src.numel() * 4 / tc
    del src, dst
    print(f"torch copy {copy / 1e9:.0f} GB/s (read+write)")
    for dt, dname in ((torch.float16, "f16"), (torch.float32, "f32")):
        for n in lens:
            try:
                q = torch.rand(1, hq, 1, d, device=dev, dtype=dt)
                k = torch.rand(1, hkv, n, d, device=dev, dtype=dt)
                v = torch.rand(1, hkv, n, d, device=dev, dtype=dt)
                try:
                    t = bench(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), repeats=50)
                except TypeError:  # torch < 2.5: repeat the KV heads
                    kr, vr = (x.repeat_interleave(hq // hkv, dim=1) for x in (k, v))
                    t = bench(lambda: F.scaled_dot_product_attention(q, kr, vr), repeats=50)
            except RuntimeError as e:
                print(f"torch attention decode {n} {dname} failed: {str(e).splitlines()[0]}")
                torch.cuda.empty_cache()
                continue
            nbytes = 2 * hkv * n * d * k.element_size()
            gbps = nbytes / t
            print(f"torch attention decode Hq={hq} Hkv={hkv} D={d} cache {n} {dname} "
                  f"{t*1e6:.1f} us {gbps/1e9:.0f} GB/s of cache {100*gbps/copy:.1f}% of copy")
            del q, k, v
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
