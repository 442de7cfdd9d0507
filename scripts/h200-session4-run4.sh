#!/usr/bin/env bash
# Session 4, fourth device call (NVIDIA H200): the tensor-core attention
# kernel with K read column-major (no transposed staging) and in Auto: the
# whole attention test suite, then its tile sweep.
set -u
source scripts/device-env.sh
{
timeout 240 $B/test_attention --test-threads=4 2>&1 | grep -E "^test |panicked|test result" | grep -v " ok$" | head -20
timeout 200 $B/attention --sweep-coop --sweep-only --repeats 5 2>&1 | grep -v WARN | tail -9
} 2>&1 | tee "$OUT/run4.log"
