#!/usr/bin/env bash
# Session 14, run 4: the lecture's figure again on the H200, f32 (now the
# split kernel with the padding layer) and f16 (since session 3: the last
# row apart, 64-byte padded rows); the f16 1792/1793 plans kernel by kernel
# (--stages: where 1793's 0.84x goes); the tensor-core attention tiles
# re-swept after sessions 11-13 (forward f16 and the backward pairs; the
# dispatcher's picks date from sessions 4-10); the tour.
set -u
source scripts/device-env.sh
for dt in f32 f16; do
  LIMIT=150 TAIL=6 run "figure $dt" $B/matmul_sweep --dtype $dt --csv $OUT/matmul_sweep_h200_$dt.csv --svg $OUT/matmul_sweep_h200_$dt.svg
done
LIMIT=60 TAIL=14 run "f16 stages" $B/matmul_sweep --dtype f16 --sizes 1792,1793,4096,4097 --stages
LIMIT=150 TAIL=14 run "sweep coop f16" sh -c "$B/attention --sweep-coop --sweep-only --coop-dtypes f16 --sizes 4096,1024 --dims 128,64 --repeats 5"
LIMIT=150 TAIL=14 run "sweep backward" sh -c "$B/attention --sweep-backward --sweep-only --sizes 4096 --dims 128 --repeats 3"
LIMIT=240 TAIL=60 run "tour" $B/tour
