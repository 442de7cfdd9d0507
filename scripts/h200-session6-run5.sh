#!/usr/bin/env bash
# Session 6, fifth device call: the decode kernel computing each
# probability once per (row, key) (was: once per value word), the leaner
# epilogue; decode table, the grid at 32k and 128k, probes.
set -u
source scripts/device-env.sh
LIMIT=120 TAIL=20 run decode $B/attention --decode-only
LIMIT=60 TAIL=8 run probe_2 env WGTILE_DECODE_PROBE=2 $B/attention --decode-only --decode-lens 32768,131072
LIMIT=240 TAIL=5 run decode_grid $B/attention --decode-grid --decode-lens 32768,131072
python3 scripts/decode_grid_best.py "$OUT/all.log"
