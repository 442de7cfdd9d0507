#!/usr/bin/env bash
# Session 12, run 8: the tour with its f32 tensor-core lines (matmul split
# into halves in section 3, attention f32 in section 8's tensor-core table).
# Build: only the tour (.bin/bins.tar.xz with `tour`).
set -u
source scripts/device-env.sh
LIMIT=200 TAIL=60 run tour sh -c "$B/tour | sed -n '/== 3/,/== 4/p;/On tensor cores/,/backward/p;/tour finished/p'"
