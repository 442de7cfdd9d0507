#!/usr/bin/env bash
# Session 12, run 6: the matmul tests after the split became opt-in
# (MatmulOptions::split_f32; the dispatcher's pick at 1024x1024x4096), and
# the f32 tensor-core attention tests once more.
set -u
source scripts/device-env.sh
LIMIT=200 TAIL=12 run "tests" sh -c "$B/test_matmul --test-threads 4 2>&1 | grep -E 'panicked|test result'; $B/test_attention coop 2>&1 | grep -E 'panicked|test result'"
