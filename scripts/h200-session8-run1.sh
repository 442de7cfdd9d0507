#!/usr/bin/env bash
# Prepared in session 7 (its device time ran out: with 219 s left no fresh
# machine could be started). Run first next session. Nothing here has run
# on the GPU yet.
# 1. every attention test on tensor cores with K and V in separate
#    regions (WGTILE_ATTN_SEPARATE=1): subgroup barriers and subgroupAny
#    on the real kernel are only checked by naga so far (lavapipe runs the
#    emulated kernel, which keeps workgroup barriers);
# 2. tensor-core forward, separate regions against the shared one, every
#    tile, two rounds. Predicted +15-40% (two workgroup barriers per
#    16-key block instead of four; warps drift between them), less where
#    the extra 4.3 KiB costs workgroups per SM;
# 3. the decode kernel with query elements in registers
#    (WGTILE_DECODE_QREG=1) over the tile grid at 32k and 128k. Predicted
#    -3 to -8 us at 32k on the LK 8 tiles (no 16-byte workgroup read per
#    element and key); f16's default LK 4 tile cannot take it (32 vec4);
# 4. PyTorch in the same call.
set -u
source scripts/device-env.sh
WGTILE_ATTN_SEPARATE=1 LIMIT=200 TAIL=8 run test_attention_separate sh -c "$B/test_attention --test-threads=4 2>&1 | grep -E '^test |panicked|test result|left|right|error' | grep -v ' ok$' | head -40"
for sep in 0 1 0 1; do
  WGTILE_ATTN_SEPARATE=$sep LIMIT=150 TAIL=4 run "sweep_coop_separate$sep" $B/attention --sweep-coop --sweep-only --repeats 5
done
for q in 0 1; do
  WGTILE_DECODE_QREG=$q LIMIT=120 TAIL=2 run "decode_grid_qreg$q" $B/attention --decode-grid --decode-lens 32768,131072
done
for q in 0 1; do
  echo "== qreg $q"; awk -v sec="== decode_grid_qreg$q" '$0 == sec {on=1; next} /^== /{on=0} on' "$OUT/all.log" > "$OUT/grid$q.log"
  python3 scripts/decode_grid_best.py "$OUT/grid$q.log"
done
LIMIT=150 TAIL=30 run torch_attention python3 scripts/torch_attention.py --no-long --no-backward
