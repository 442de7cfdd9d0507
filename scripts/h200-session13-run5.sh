#!/usr/bin/env bash
# Session 13, run 5: tiles again for the f32 split kernels now that the
# split costs a multiply (run 4: attention f32 S4096 D128 42 -> 63.7,
# matmul split 4096 46.3 -> 92.8 TFLOP/s). Which attention tile and which
# matmul layout lead now, and from what size the split matmul beats the
# tiled f32 kernel (COOP_SPLIT_MIN_MACS = 2^32: 1024^3 lost in session 12).
set -u
source scripts/device-env.sh
LIMIT=200 TAIL=8 run "sweep f32 S4096" sh -c "$B/attention --sweep-coop --sweep-only --coop-dtypes f32 --sizes 4096,1024 --dims 128,64 --repeats 5"
LIMIT=200 TAIL=40 run "matmul split layouts" $B/matmul_kernels --sizes 512,1024,1536,2048,4096,4097 --dtype f32 --tiles 128x128x8 --coop 4x4x32 --repeats 10
