#!/usr/bin/env bash
# Session 7, call 6 (the device time left, ~250 s): the decode kernel
# with each invocation's query elements in registers (WGTILE_DECODE_QREG=1,
# where they are at most 16 vec4: f32 with LK 8, f16 with LK 8) against
# workgroup memory, over the tile grid at 32k (f16's default LK 4 cannot
# take it; the grid's LK 8 tiles can). Predicted: the q_t reads (one
# 16-byte workgroup load per element and key) are a large share of the
# score step: -3 to -8 us at 32k where it applies.
set -u
source scripts/device-env.sh
for q in 0 1; do
  WGTILE_DECODE_QREG=$q LIMIT=70 TAIL=2 run "decode_grid_qreg$q" $B/attention --decode-grid --decode-lens 32768
done
for q in 0 1; do
  echo "== qreg $q"; awk -v sec="== decode_grid_qreg$q" '$0 == sec {on=1; next} /^== /{on=0} on' "$OUT/all.log" > "$OUT/grid$q.log"
  python3 scripts/decode_grid_best.py "$OUT/grid$q.log"
done
