#!/usr/bin/env bash
# Session 19, run 5 (run 124): the read floor for a 32-64 MiB pass, next
# to the GEMV at 4096 x 4096. Row operations (sum over the last axis reads
# the tensor once and writes one value per row) on exactly W's bytes: f32
# 4096 x 4096 (64 MiB) and 2048 x 4096 (32 MiB), f16 4096 x 4096 (32 MiB).
# If a plain read of W runs well above the GEMV, the GEMV target stays
# open; if not, the 4096^2 GEMV is at this GPU's floor for its size.
set -u
source scripts/device-env.sh
LIMIT=90 TAIL=30 run "rowops f32" $B/rowops --dtype f32 --shapes 4096x4096,2048x4096 --no-tree
LIMIT=90 TAIL=30 run "rowops f16" $B/rowops --dtype f16 --shapes 4096x4096 --no-tree
LIMIT=60 TAIL=4 run "gemv" $B/matmul_kernels --gemv 4096x4096
