#!/usr/bin/env bash
# Session 12, run 7: the tour on the H200 with the f32 tensor-core attention
# in Auto (the build of run 6).
set -u
source scripts/device-env.sh
LIMIT=230 TAIL=80 run tour $B/tour
