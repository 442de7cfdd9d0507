#!/usr/bin/env bash
# Session 6, eighth device call: the decode tile grid again with the lazy
# rescaling kernel (fewer instructions per key may change which shape and
# split count win), 32k and 128k keys.
set -u
source scripts/device-env.sh
LIMIT=240 TAIL=5 run decode_grid $B/attention --decode-grid --decode-lens 32768,131072
python3 scripts/decode_grid_best.py "$OUT/all.log"
