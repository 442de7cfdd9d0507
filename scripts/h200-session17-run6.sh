#!/usr/bin/env bash
# Session 17, run 6 (run 114): the coop matmul without edge checks where
# M, N or K is a whole number of blocks (EDGE_M/N/K = 0, set by the host;
# WGTILE_COOP_EDGES=1 keeps every check). Run 112 found the staging
# sensitive to its instruction count (~5 more per run cost 5%); the checks
# are ~3-6 compares and selects per run in the fetch and the put.
# Predicted: f16 4096 +2-6% (248 -> 253-263), the f32 split +1-3%; padded
# 1793 (N and K whole blocks, M not) about half that.
# (After this run the knob was inverted: WGTILE_COOP_EDGES=1 now turns the
# specialisation on, for the f32 split kernel only; see BENCHMARKS.md.)
set -u
source scripts/device-env.sh
LIMIT=200 TAIL=6 run "tests" sh -c "$B/test_matmul 2>&1 | grep -E 'panicked|test result'; $B/test_padded 2>&1 | grep -E 'panicked|test result'"
for r in 1 2; do
  for e in 1 0; do
    LIMIT=40 TAIL=2 run "coop edges-kept=$e r$r" env WGTILE_COOP_EDGES=$e $B/matmul_kernels --sizes 2048,4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32x2
  done
done
for e in 1 0; do
  LIMIT=60 TAIL=6 run "f16 sweep edges-kept=$e" env WGTILE_COOP_EDGES=$e $B/matmul_sweep --dtype f16 --sizes 1792,1793,4096,4097
  LIMIT=60 TAIL=5 run "f32 sweep edges-kept=$e" env WGTILE_COOP_EDGES=$e $B/matmul_sweep --dtype f32 --sizes 1024,2048,4096
done
