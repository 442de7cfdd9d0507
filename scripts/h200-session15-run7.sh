#!/usr/bin/env bash
# Session 15, run 7: the committed build. The whole attention suite on the
# H200 (decode's new epilogue and f32 without V prefetch included), then
# decode as the dispatcher now runs it (f32: V loaded with its own block,
# predicted ~85 us at 32k from the grids of runs 95 and 97), PyTorch's
# decode alongside.
set -u
source scripts/device-env.sh
LIMIT=300 TAIL=8 run "test_attention" sh -c "$B/test_attention 2>&1 | grep -E 'panicked|FAILED|test result'"
for r in 1 2; do
  LIMIT=60 TAIL=8 run "decode r$r" $B/attention --decode-only --decode-lens 4096,32768,131072
done
LIMIT=60 TAIL=8 run torch_decode python3 scripts/torch_attention.py --decode-only --decode-lens 4096,32768,131072
