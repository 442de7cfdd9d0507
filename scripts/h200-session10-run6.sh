#!/usr/bin/env bash
# Session 10, call 6: the tour (the committed code; its GEMV lines now show
# min and max next to the median) and PyTorch in the same call.
set -u
source scripts/device-env.sh
LIMIT=300 TAIL=400 run tour $B/tour
LIMIT=60 TAIL=12 run torch_matmul python3 scripts/torch_baseline.py --sizes 1792,1793,4096,4097
LIMIT=150 TAIL=40 run torch_attention python3 scripts/torch_attention.py --no-long
