#!/usr/bin/env bash
# Session 6, fourth device call: the decode table with the new defaults
# (one wave of 4 workgroups per SM, one-pass merge), then the timing probe
# (WGTILE_DECODE_PROBE: 1 no score math, 2 no softmax/P V math, 3 neither)
# at 32k keys: what the loads, barriers and epilogue cost alone.
set -u
source scripts/device-env.sh
LIMIT=120 TAIL=20 run decode $B/attention --decode-only
for p in 1 2 3; do
  WGTILE_DECODE_PROBE=$p LIMIT=60 TAIL=8 run "probe_$p" $B/attention --decode-only --decode-lens 32768,131072
done
