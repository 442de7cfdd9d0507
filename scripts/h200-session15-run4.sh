#!/usr/bin/env bash
# Session 15, run 4: why the decode epilogue with 4 elements per barrier
# pair made the whole f16 kernel (LK 4) 1.4x slower (run 95: 32k split
# pass 64.6 -> 91-92 us, 128k 178 -> 249; LK 8 tiles got faster, 67.0 us
# at 32k). Hypotheses: registers (the LK 4 kernel sat at 128, the most 4
# workgroups of 128 allow) or the workgroup memory (comb 2 -> 8 KiB).
# WGTILE_DECODE_CE=1 keeps comb at 2 KiB with the new code; 2 is between.
# pipeline_stats (registers, stack) for the new build and the old.
set -u
source scripts/device-env.sh
for ce in 4 2 1; do
  LIMIT=60 TAIL=4 run "decode CE $ce" env WGTILE_DECODE_CE=$ce $B/attention --decode-only --decode-lens 32768,131072
done
LIMIT=120 TAIL=400 run "stats new" $B/pipeline_stats --attention
LIMIT=120 TAIL=400 run "stats old" $B/pipeline_stats_old --attention
