#!/usr/bin/env bash
# Session 6, second device call: where the decode kernel's time goes (each
# kernel of the plan timed alone: split pass, merge), the decode tile sweep
# with the f16 default at 2 to 16 workgroups per compute unit.
# Build: scripts/build-device.sh; carry .bin and .gl. Logs under $OUT.
set -u
source scripts/device-env.sh
LIMIT=120 TAIL=20 run decode $B/attention --decode-only
LIMIT=200 TAIL=40 run decode_sweep $B/attention --decode-sweep
