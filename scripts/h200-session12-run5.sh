#!/usr/bin/env bash
# Session 12, run 5: the split kernels' first passes rewritten (run 4: the
# f32 split matmul at 4096 took 4.21 ms = 32.6 TFLOP/s, of which the
# 64-workgroup max pass was estimated at ~1 ms), the f16 matmul path
# restored textually (run 4: 244.0 against 247.5 for f472b40), two more
# split layouts with 4 fragments per subgroup along N.
# Predictions: f32 split 4096 >= 43 TFLOP/s (the kernel's ~3.2 ms alone);
# FN 4 layouts +10-30% over FN 2 (48 products per 16 fragment loads instead
# of 24 per 12); f16 coop back to ~247.5; attention f32 +2-4%.
set -u
source scripts/device-env.sh
LIMIT=200 TAIL=12 run "tests" sh -c "$B/test_matmul --test-threads 4 2>&1 | grep -E 'panicked|test result'; $B/test_padded 2>&1 | grep -E 'panicked|test result'; $B/test_attention --test-threads 4 2>&1 | grep -E 'panicked|test result'"
for r in 1 2; do
  LIMIT=100 TAIL=1 run "f16 old $r" $B/matmul_kernels_old --sizes 4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32 --repeats 20
  LIMIT=100 TAIL=1 run "f16 new $r" $B/matmul_kernels --sizes 4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32 --repeats 20
done
LIMIT=240 TAIL=30 run "f32 split" sh -c "$B/matmul_kernels --sizes 1024,2048,4096,4097 --dtype f32 --tiles 128x128x8 --coop 4x4x32 --repeats 10 | grep -v naive"
LIMIT=90 TAIL=8 run "attention f32" sh -c "$B/attention --forward-only --kernels flash,coop --sizes 1024,4096 --dims 128,64 --no-long | grep f32"
LIMIT=60 TAIL=20 run stats sh -c "$B/pipeline_stats --filter SPLIT=1 2>&1 | grep -E 'MatmulCoop|Register|Shared'"
LIMIT=60 TAIL=6 run torch sh -c "python3 scripts/torch_baseline.py --sizes 1024,2048,4096,4097 | grep matmul_f32"
