#!/usr/bin/env bash
# Session 13, run 8: after run 7's tour failure (f16 problems took the f32
# split kernel: the dtype check was lost when the choice moved into
# f32_on_tensor_cores; test_matmul now checks an f16 1024^3 plan), the
# tour's section 2 summary per kernel. The matmul suite and the tour.
set -u
source scripts/device-env.sh
LIMIT=100 TAIL=4 run "test_matmul" sh -c "$B/test_matmul --test-threads 4 2>&1 | grep -E '^test .*FAILED|panicked|test result'"
LIMIT=220 TAIL=150 run "tour" $B/tour
