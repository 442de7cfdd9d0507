#!/usr/bin/env bash
# Next device call (NVIDIA H200), prepared in session 5 (which had no device
# time left to run it), most valuable first: the attention tests (the
# tensor-core decode kernel's first run on tensor cores), the decode table
# (decode vs decode-tc vs flash-split, PyTorch decode after it), the forward
# coop sweep (with the direct-load decode-tc kernel as a forward), the
# backward sweep (dK/dV and dQ tile pairs), PyTorch forward/backward, the
# tour (now with the tensor-core backward line).
# Build: scripts/build-device.sh; carry .bin and .gl. Logs under $OUT.
set -u
source scripts/device-env.sh
LIMIT=200 TAIL=8 run test_attention sh -c "$B/test_attention --test-threads=4 2>&1 | grep -E '^test |panicked|test result|left|right|error' | grep -v ' ok$' | head -40"
LIMIT=90 TAIL=16 run decode $B/attention --decode-only
LIMIT=60 TAIL=8 run torch_decode python3 scripts/torch_attention.py --decode-only
LIMIT=150 TAIL=9 run sweep_coop $B/attention --sweep-coop --sweep-only --repeats 5
LIMIT=200 TAIL=12 run sweep_backward $B/attention --sweep-backward --repeats 5
LIMIT=150 TAIL=30 run torch_attention python3 scripts/torch_attention.py --no-long
LIMIT=150 TAIL=60 run tour $B/tour
