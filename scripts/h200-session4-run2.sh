#!/usr/bin/env bash
# Session 4, second device call (NVIDIA H200): probes of the tensor-core
# attention kernel on tiny shapes (tests/attention.rs::coop_probe_diagnostics
# with WGTILE_COOP_ATTN_PROBE 0, 1 = P of ones, 2 = raw S), and the matmul
# tests with transposed f16 on tensor cores in the dispatcher.
set -u
source scripts/device-env.sh
{
for p in 0 1 2; do
  WGTILE_COOP_ATTN_PROBE=$p timeout 60 $B/test_attention --ignored --nocapture coop_probe_diagnostics 2>&1 | grep -E "^probe|panicked"
done
timeout 120 $B/test_matmul --test-threads=2 2>&1 | grep -E "^test |panicked|test result" | head -20
} 2>&1 | tee "$OUT/run2.log"
