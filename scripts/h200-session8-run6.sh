#!/usr/bin/env bash
# Session 8, call 7: the tour with padded rows of 32 halves as the default
# (run 46 measured them through WGTILE_PAD_ALIGN), and PyTorch's matmul.
set -u
source scripts/device-env.sh
LIMIT=40 TAIL=10 run torch_matmul python3 scripts/torch_baseline.py --sizes 1792,1793,4096,4097
LIMIT=160 TAIL=200 run tour $B/tour
