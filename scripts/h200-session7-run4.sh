#!/usr/bin/env bash
# Session 7, call 4 (the last of the session's device time).
# 1. every attention test on tensor cores (the decode kernel's shuffle
#    path is new; the Q-in-workgroup-memory experiment is reverted);
# 2. decode with subgroup shuffles (one barrier per block, logits spread
#    over all warps) against workgroup memory (two barriers, warp 0 does
#    the logits), alternating, two rounds. Predicted -3 to -6 us of the
#    76 us at 32k f16 (the score phase cost 13.6 us in session 6's probe);
# 3. PyTorch decode in the same call; 4. the tour.
set -u
source scripts/device-env.sh
LIMIT=200 TAIL=8 run test_attention sh -c "$B/test_attention --test-threads=4 2>&1 | grep -E '^test |panicked|test result|left|right|error' | grep -v ' ok$' | head -40"
for sh in 0 1 0 1; do
  WGTILE_DECODE_SHUFFLE=$sh LIMIT=60 TAIL=8 run "decode_shuffle$sh" $B/attention --decode-only --decode-lens 32768,131072
done
LIMIT=60 TAIL=8 run torch_decode python3 scripts/torch_attention.py --decode-only
LIMIT=150 TAIL=60 run tour $B/tour
