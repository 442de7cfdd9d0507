#!/usr/bin/env bash
# Prepared in session 10 (not run). First: the attention tests on the H200,
# where `coop_backward_on_tensor_cores` has not yet run under the backward
# tests' relative error bound (session 10: tol x max(1e-3, max |grad|)
# instead of max(1, ...); the emulated kernels pass it on lavapipe). Then
# the matmul tests and the tour with PyTorch, as a baseline for the session.
set -u
source scripts/device-env.sh
LIMIT=200 TAIL=8 run "test_attention" sh -c "$B/test_attention --test-threads 4 2>&1 | grep -E '^test |panicked|element|test result' | grep -v ' ok$' | head -20"
LIMIT=150 TAIL=3 run "test_matmul" $B/test_matmul --test-threads 4
LIMIT=300 TAIL=60 run tour $B/tour
LIMIT=60 TAIL=12 run torch_matmul python3 scripts/torch_baseline.py --sizes 1792,1793,4096,4097
LIMIT=150 TAIL=40 run torch_attention python3 scripts/torch_attention.py --no-long
