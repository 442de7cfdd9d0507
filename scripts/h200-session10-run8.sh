#!/usr/bin/env bash
# Session 10, call 8: the final build's tests on the H200 (attention: the
# subgroup barrier now on NVIDIA only; matmul: the autotune threads), then
# the backward sweep with dQ also on 32-key blocks (the dK/dV tiles x every
# dQ tile), f16 D128. Predicted: dQ W4 B32 -5..-10% dQ time (twice the
# MMAs per barrier pair).
set -u
source scripts/device-env.sh
LIMIT=200 TAIL=3 run "test_attention" $B/test_attention --test-threads 4
LIMIT=150 TAIL=3 run "test_matmul" $B/test_matmul --test-threads 4
LIMIT=200 TAIL=4 run "backward sweep" $B/attention --sizes 1024,4096 --dims 128 --repeats 5 --sweep-backward
