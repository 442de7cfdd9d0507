#!/usr/bin/env bash
# Session 5, first device call (NVIDIA H200): the tensor-core attention
# backward. Its tests (and every other attention test), the backward sweep
# (scalar vs every tensor-core tile, f16 B4 H16 S1024/4096 D64/128) and
# PyTorch SDPA forward+backward in the same call.
# Build: scripts/build-device.sh; carry .bin and .gl. Logs under $OUT.
set -u
source scripts/device-env.sh
LIMIT=200 TAIL=6 run test_attention sh -c "$B/test_attention --test-threads=4 2>&1 | grep -E '^test |panicked|test result|left|right|error' | grep -v ' ok$' | head -40"
LIMIT=200 TAIL=12 run sweep_backward $B/attention --sweep-backward --repeats 5
LIMIT=150 TAIL=30 run torch_attention python3 scripts/torch_attention.py --no-long
