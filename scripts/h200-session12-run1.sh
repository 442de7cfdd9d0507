#!/usr/bin/env bash
# Prepared in session 11 (not run). Where the tensor-core backward's time
# goes after the vectorised P/dS (session 11: S4096 D128 129 TFLOP/s,
# 0.24x of PyTorch; target 0.3x): WGTILE_COOP_BWD_PROBE bits (1 P/dS, 2
# S/dP products, 4 gradient products, 8 next-block loads skipped; results
# wrong), each kernel's time printed by --backward-only. Then the forward's
# probes once more, and the tests on tensor cores first.
set -u
source scripts/device-env.sh
LIMIT=200 TAIL=8 run "test_attention" sh -c "$B/test_attention --test-threads 4 2>&1 | grep -E '^test |panicked|element|test result' | grep -v ' ok$' | head -20"
for p in 0 1 2 4 8 3 6 9 15; do
  WGTILE_COOP_BWD_PROBE=$p LIMIT=60 TAIL=3 run "backward probe $p" sh -c "$B/attention --backward-only --sizes 4096 --dims 128 | grep -E '^4,16,4096'"
done
for p in 0 4 8 16 28; do
  WGTILE_COOP_ATTN_PROBE=$p LIMIT=60 TAIL=2 run "forward probe $p" sh -c "$B/attention --forward-only --kernels coop --sizes 4096 --dims 128 --no-long | grep -E '^4,16,4096.*f16'"
done
