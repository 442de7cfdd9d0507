#!/usr/bin/env bash
# Session 6, third device call: the decode table with the one-pass merge
# (stage times: split pass + merge), then the decode tile grid (workgroup
# shapes x workgroups per compute unit) at 4k, 32k and 128k keys.
# Build: scripts/build-device.sh; carry .bin and .gl. Logs under $OUT.
set -u
source scripts/device-env.sh
LIMIT=120 TAIL=20 run decode $B/attention --decode-only
LIMIT=300 TAIL=5 run decode_grid $B/attention --decode-grid --decode-lens 4096,32768,131072
# The grid's best per (dtype, cache length), to pick the defaults.
python3 scripts/decode_grid_best.py "$OUT/all.log"
