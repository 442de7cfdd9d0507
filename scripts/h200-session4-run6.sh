#!/usr/bin/env bash
# Session 4, sixth (last) device call (NVIDIA H200): the tensor-core attention
# kernel with vec4 staging and the interior fast path, 16-key blocks by default: its tests,
# its tile sweep, the attention table (flash, naive, coop) and PyTorch SDPA
# in the same call, the tour.
# Build: scripts/build-device.sh; carry .bin and .gl. Logs under $OUT.
set -u
source scripts/device-env.sh
LIMIT=150 TAIL=4 run test_attention sh -c "$B/test_attention --test-threads=4 2>&1 | grep -E '^test |panicked|test result' | grep -v ' ok$'"
LIMIT=120 TAIL=9 run sweep_coop $B/attention --sweep-coop --sweep-only --repeats 5
LIMIT=150 TAIL=45 run attention $B/attention --no-long
LIMIT=150 TAIL=40 run torch_attention python3 scripts/torch_attention.py --no-long
LIMIT=150 TAIL=70 run tour $B/tour
