#!/usr/bin/env bash
# Session 13, run 7: the committed state. f32 matmul takes the split kernel
# by default from 1024^3 on (each k slice summed apart: run 6, max|err|
# 5.6e-5 against the tiled kernel's 2.2e-4 at 4096); the f32 tensor-core
# attention's first tile is 4 subgroups (run 5-6: 65-69 against 61-64 for
# 8). The GPU suites, the forward table, the f32 dispatcher at the
# lecture's sizes, the tour, PyTorch's attention in the same call.
set -u
source scripts/device-env.sh
LIMIT=300 TAIL=12 run "tests" sh -c "for t in matmul padded pad attention; do $B/test_\$t --test-threads 4 2>&1 | grep -E '^test .*FAILED|panicked|test result'; done"
LIMIT=100 TAIL=10 run "forward" sh -c "$B/attention --forward-only --kernels coop --sizes 1024,4096 --dims 128,64 --no-long | grep -E '^4,16'"
LIMIT=100 TAIL=10 run "f32 dispatcher" $B/matmul_sweep --sizes 1024,1792,1793,2048,4096,4097 --dtype f32
LIMIT=240 TAIL=100 run "tour" $B/tour
LIMIT=90 TAIL=8 run torch_attention sh -c "python3 scripts/torch_attention.py --no-long --no-backward | grep -v decode"
