#!/usr/bin/env bash
# Session 15, run 5: the decode epilogue at CE 2 (f16) / 4 (f32) as
# committed (run 96: f16 32k split pass 61.9 us against 64.6), against the
# previous build (attention_old, ae2d40d), two rounds; the merge with 8
# splits' loads in flight per lane (WGTILE_MERGE_UNROLL=8; predicted: the
# merge stage 7.3 -> ~6.5 us at 32k, one L2 round trip fewer); the split
# grid again with the new epilogue; the decode tests on the H200;
# PyTorch's decode; the tour.
set -u
source scripts/device-env.sh
LIMIT=120 TAIL=12 run "tests decode" sh -c "$B/test_attention decode 2>&1 | grep -E '^test |panicked|test result'"
for r in 1 2; do
  LIMIT=60 TAIL=4 run "decode old r$r" $B/attention_old --decode-only --decode-lens 4096,32768,131072
  LIMIT=60 TAIL=4 run "decode new r$r" $B/attention --decode-only --decode-lens 4096,32768,131072
  LIMIT=60 TAIL=4 run "decode merge8 r$r" env WGTILE_MERGE_UNROLL=8 $B/attention --decode-only --decode-lens 4096,32768,131072
done
LIMIT=60 TAIL=8 run torch_decode python3 scripts/torch_attention.py --decode-only --decode-lens 4096,32768,131072
LIMIT=200 TAIL=12 run "decode grid" $B/attention --decode-grid --decode-lens 32768,131072
LIMIT=220 TAIL=80 run "tour" $B/tour
