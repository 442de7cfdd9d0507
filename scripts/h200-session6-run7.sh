#!/usr/bin/env bash
# Session 6, seventh device call: the decode kernel with lazy rescaling
# (probabilities once per (row, key), the running max moving only past
# TAU): the decode table, PyTorch's decode in the same call, and the
# attention tests on tensor cores (the one-pass merge, the ramp cases).
set -u
source scripts/device-env.sh
LIMIT=90 TAIL=20 run decode $B/attention --decode-only
LIMIT=60 TAIL=8 run torch_decode python3 scripts/torch_attention.py --decode-only
LIMIT=200 TAIL=8 run test_attention sh -c "$B/test_attention --test-threads=4 2>&1 | grep -E '^test |panicked|test result|error' | grep -v ' ok$' | head -40"
