#!/usr/bin/env bash
# Session 12, run 4: the f32 tensor-core matmul (each value split into two
# halves, MatmulKernel::Coop { split: true }) on the H200 for the first
# time, and the attention split with hi rounded (not truncated) to 11 bits.
# Build: f472b40's matmul_kernels as .bin/matmul_kernels_old
# (EXTRA_BINS=/tmp/oldbins), then scripts/build-device.sh.
# Predictions: f32 4096^3 split 2x4x32x2 60-80 TFLOP/s (the f16 kernel's
# ~248 over 3 products, less for the 2x-wider loads and 128x128 blocks)
# against the f32 tiled kernel's 33 and PyTorch fp32 ~51; max|err| at f32's
# level (~1e-5 at 4096 for values in [-1, 1]). f16 coop unchanged (its
# SPLIT = 0 blocks are empty).
set -u
source scripts/device-env.sh
LIMIT=200 TAIL=12 run "tests" sh -c "$B/test_matmul --test-threads 4 2>&1 | grep -E '^test |panicked|error|test result' | grep -v ' ok$' | head -20; $B/test_padded 2>&1 | grep -E 'panicked|test result'; $B/test_attention coop_f32 2>&1 | grep -E 'panicked|test result'"
for r in 1 2; do
  LIMIT=100 TAIL=4 run "f16 old $r" $B/matmul_kernels_old --sizes 4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32 --repeats 20
  LIMIT=100 TAIL=4 run "f16 new $r" $B/matmul_kernels --sizes 4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32 --repeats 20
done
LIMIT=200 TAIL=24 run "f32 split" $B/matmul_kernels --sizes 1024,2048,4096,4097 --dtype f32 --tiles 128x128x8 --coop 4x4x32 --repeats 10
LIMIT=60 TAIL=6 run "attention f32" sh -c "$B/attention --forward-only --kernels flash,coop --sizes 4096 --dims 128 --no-long | grep f32"
LIMIT=90 TAIL=20 run torch python3 scripts/torch_baseline.py --sizes 1024,2048,4096,4097
LIMIT=60 TAIL=30 run stats sh -c "$B/pipeline_stats --filter SPLIT=1 2>&1 | grep -E 'MatmulCoop|Register|Shared'"
