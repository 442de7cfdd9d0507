#!/usr/bin/env bash
# Session 13, run 4: the f32 split kernels scale each staged value by a
# multiply with 2^e (computed once) instead of a vector ldexp. Run 3's
# probe: the K/V staging without the split arithmetic took the f32
# attention forward from 13.1 to 7.5 ms (S4096 D128, B4 H16).
# Build: HEAD (a3...) examples as *_old (EXTRA_BINS=/tmp/oldbins).
# Predictions: if ldexp is that cost, f32 attention S4096 D128 42 -> 60-75
# TFLOP/s (PyTorch fp32 ~46: 1.3-1.6x); the split matmul at 4096, whose put
# has the same ldexp, 46.6 -> 50-60. f16 kernels unchanged (no split).
set -u
source scripts/device-env.sh
LIMIT=240 TAIL=12 run "tests" sh -c "$B/test_attention coop_f32 2>&1 | grep -E '^test |panicked|test result' | grep -v ' ok$'; $B/test_matmul split 2>&1 | grep -E '^test |panicked|test result' | grep -v ' ok$'"
for r in 1 2; do
  LIMIT=100 TAIL=10 run "attention old $r" sh -c "$B/attention_old --forward-only --kernels coop --sizes 1024,4096 --dims 128,64 --no-long | grep -E '^4,16'"
  LIMIT=100 TAIL=10 run "attention new $r" sh -c "$B/attention --forward-only --kernels coop --sizes 1024,4096 --dims 128,64 --no-long | grep -E '^4,16'"
done
WGTILE_COOP_ATTN_PROBE=64 LIMIT=60 TAIL=4 run "new, probe 64 (no K/V split)" sh -c "$B/attention --forward-only --kernels coop --sizes 4096 --dims 128 --no-long | grep -E '^4,16,4096'"
for r in 1 2; do
  LIMIT=100 TAIL=8 run "matmul split old $r" $B/matmul_kernels_old --sizes 2048,4096 --dtype f32 --tiles 128x128x8 --coop 4x4x32 --coop-split 2x4x16x4,2x4x32x2 --repeats 10
  LIMIT=100 TAIL=8 run "matmul split new $r" $B/matmul_kernels --sizes 2048,4096 --dtype f32 --tiles 128x128x8 --coop 4x4x32 --coop-split 2x4x16x4,2x4x32x2 --repeats 10
done
LIMIT=120 TAIL=8 run torch_attention sh -c "python3 scripts/torch_attention.py --no-long --no-backward | grep -v decode"
LIMIT=90 TAIL=8 run torch python3 scripts/torch_baseline.py --sizes 2048,4096
