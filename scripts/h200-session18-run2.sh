#!/usr/bin/env bash
# Session 18, run 2 (run 116): the lane-parallel decode kernel
# (attention_decode_lanes.wgsl: LK lanes per key stream their own keys, no
# workgroup barrier in the key loop, query rows in registers) against the
# block decode kernel (WGTILE_DECODE_LANES=off). Session 15's probes put
# the block kernel's key loop at ~2.6 TB/s with its math and ~3.2 without
# (55 us at 32k without the score and P V math): predicted the lanes
# kernel near the no-math probe, 32k f16 ~57-60 us (from 67.6), 128k
# ~155-165 (from 182). Also: the tests on the H200 (the f32 split padding
# on K' and both decode kernels), registers, and PyTorch's decode.
set -u
source scripts/device-env.sh
LIMIT=200 TAIL=8 run "tests" sh -c "$B/test_matmul 2>&1 | grep -E 'panicked|test result'; $B/test_attention 2>&1 | grep -E 'panicked|test result'"
LIMIT=60 TAIL=14 run "registers" $B/pipeline_stats --attention --filter decode
for r in 1 2; do
  for e in off 128,2,4; do
    LIMIT=60 TAIL=7 run "decode lanes=$e r$r" env WGTILE_DECODE_LANES=$e $B/attention --decode-only --decode-lens 4096,32768,131072
  done
done
for e in 128,1,4 128,4,4 256,2,4 128,2,8 64,2,8 256,1,4 128,1,8; do
  LIMIT=60 TAIL=7 run "decode lanes=$e" env WGTILE_DECODE_LANES=$e $B/attention --decode-only --decode-lens 4096,32768,131072
done
LIMIT=90 TAIL=8 run torch_decode python3 scripts/torch_attention.py --decode-only --decode-lens 4096,32768,131072
