#!/usr/bin/env bash
# Session 15, run 3: the decode kernel's epilogue. Run 94's probes: the
# split pass at f16 32k took 64.6 us, 57.4 without its epilogue, 13.5
# without its key loop, 6.5 without both: the epilogue (the G key groups'
# states merged one value element per barrier pair, ~20 barriers, with a
# max and rescale that cannot change anything since m is common) cost
# ~7 us. Now the groups' sums go through workgroup memory 4 elements per
# barrier pair (6 barriers for f16 D 128) and l is the only statistic
# summed. Prediction: the split pass 64.6 -> ~59 us at 32k, the plan 70.6
# -> ~65 (52% of copy); 4k 25.8 -> ~20. The previous build
# (attention_old, ae2d40d) alongside; then the split grid again (the
# fixed cost per workgroup moved) and PyTorch's decode.
set -u
source scripts/device-env.sh
for r in 1 2; do
  LIMIT=60 TAIL=4 run "decode old r$r" $B/attention_old --decode-only --decode-lens 4096,32768,131072
  LIMIT=60 TAIL=4 run "decode new r$r" $B/attention --decode-only --decode-lens 4096,32768,131072
done
LIMIT=200 TAIL=30 run "decode grid" $B/attention --decode-grid --decode-lens 32768,131072
LIMIT=60 TAIL=8 run torch_decode python3 scripts/torch_attention.py --decode-only --decode-lens 4096,32768,131072
