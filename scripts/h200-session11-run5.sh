#!/usr/bin/env bash
# Session 11, run 5: the tour on the final build (the vectorised softmax and
# P/dS, D <= 64 on 2 subgroups), with PyTorch's attention in the same call.
set -u
source scripts/device-env.sh
LIMIT=200 TAIL=70 run tour $B/tour
LIMIT=120 TAIL=40 run torch_attention python3 scripts/torch_attention.py --no-long
