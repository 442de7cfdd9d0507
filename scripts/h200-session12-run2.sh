#!/usr/bin/env bash
# Session 12, run 2: the f32 tensor-core attention (each value split into
# two halves, three products; AttentionKernel::FlashCoop and Auto for f32)
# on the H200 for the first time. Build: the previous commit's attention
# example as .bin/attention_old (ddcebea: EXTRA_BINS=/tmp/oldbins), then
# scripts/build-device.sh. Prediction: f32 S4096 D128 at 0.4-0.6x of the f16
# kernel's 165 TFLOP/s (3x the products, 2x the loads): 65-100 TFLOP/s,
# against PyTorch's fp32 ~46 and our scalar flash 24.8. The f16 kernel is
# unchanged in speed (its SPLIT = 0 branches are constant).
set -u
source scripts/device-env.sh
LIMIT=240 TAIL=12 run "test_attention" sh -c "$B/test_attention --test-threads 4 2>&1 | grep -E '^test |panicked|error|test result' | grep -v ' ok$' | head -30"
for r in 1 2; do
  LIMIT=90 TAIL=6 run "forward old $r" sh -c "$B/attention_old --forward-only --kernels coop --sizes 4096 --dims 128 --no-long"
  LIMIT=90 TAIL=6 run "forward new $r" sh -c "$B/attention --forward-only --kernels flash,coop --sizes 1024,4096 --dims 128,64 --no-long"
done
LIMIT=200 TAIL=6 run "sweep f32" sh -c "$B/attention --sweep-coop --sweep-only --coop-dtypes f32 --sizes 4096 --dims 128,64 --repeats 5"
LIMIT=120 TAIL=30 run torch_attention python3 scripts/torch_attention.py --no-long
