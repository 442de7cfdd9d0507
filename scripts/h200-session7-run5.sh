#!/usr/bin/env bash
# Session 7, call 5: the decode tile grid again now that the kernel adds
# each key's partials by subgroup shuffles (one barrier per block): the
# best LK, workgroup size and splits per unit may have moved (session 6's
# grid, with two barriers: 128 invocations, LK 4 (f16) / 8 (f32), 4 per
# unit). Then the summary.
set -u
source scripts/device-env.sh
LIMIT=240 TAIL=3 run decode_grid $B/attention --decode-grid --decode-lens 32768,131072
python3 scripts/decode_grid_best.py "$OUT/all.log"
