#!/usr/bin/env bash
# Session 19, run 3 (run 122): where the open targets of issues 3 and 5
# stand, all in one call with PyTorch: f16 matmul 1792 / 1793 / 4096 / 4097
# (the padding layer on), attention forward f16 S4096 D128 (B4 H16) on
# tensor cores, the backward, decode at a 32k cache, then the tour as
# `cargo xtask tour` runs it.
set -u
source scripts/device-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$OUT/all.log"
LIMIT=90 TAIL=8 run "sweep f16" $B/matmul_sweep --dtype f16 --sizes 1792,1793,4096,4097 --repeats 10
LIMIT=90 TAIL=8 run "sweep f32" $B/matmul_sweep --dtype f32 --sizes 1792,1793,4096,4097 --repeats 10
LIMIT=90 TAIL=14 run "torch matmul" python3 scripts/torch_baseline.py --sizes 1792,1793,4096,4097
LIMIT=240 TAIL=40 run "attention" $B/attention --sizes 4096 --dims 128 --no-long --decode-lens 32768
LIMIT=180 TAIL=30 run "torch attention" python3 scripts/torch_attention.py --no-long --decode-lens 32768
LIMIT=240 TAIL=60 run "tour" $B/tour
