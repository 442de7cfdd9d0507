#!/usr/bin/env bash
# Session 4, third device call (NVIDIA H200): the tensor-core attention
# kernel after the workgroup-alignment fix: probe diagnostics, its tests,
# its tile sweep.
set -u
source scripts/device-env.sh
{
for p in 0 2; do
  WGTILE_COOP_ATTN_PROBE=$p timeout 60 $B/test_attention --ignored --nocapture coop_probe_diagnostics 2>&1 | grep -E "^probe|panicked"
done
timeout 200 $B/test_attention --ignored --test-threads=4 coop_sizes coop_causal coop_masks coop_packed coop_rescale 2>&1 | grep -E "^test |panicked|test result" | head -20
timeout 200 $B/attention --sweep-coop --sweep-only --repeats 5 2>&1 | grep -v WARN | tail -12
} 2>&1 | tee "$OUT/run3.log"
