#!/usr/bin/env bash
# Session 8, call 2. Call 1 found session 7's tensor-core attention kernel
# rejected by wgpu on the H200 (subgroupBarrier without SUBGROUP_BARRIER,
# even behind SEPARATE == 0). After the fix:
# 1. every GPU suite with tensor cores on (attention default, then with
#    K and V in separate regions);
# 2. tensor-core forward, separate regions against the shared one, two
#    rounds. Predicted +15-40%;
# 3. PyTorch's forward in the same call; 4. the tour.
set -u
source scripts/device-env.sh
for t in matmul padded pad attention; do
  LIMIT=200 TAIL=6 run "test_$t" sh -c "$B/test_$t --test-threads=4 2>&1 | grep -E '^test |panicked|test result|error' | grep -v ' ok$' | head -20"
done
WGTILE_ATTN_SEPARATE=1 LIMIT=200 TAIL=6 run test_attention_separate sh -c "$B/test_attention --test-threads=4 2>&1 | grep -E '^test |panicked|test result|left|right|error' | grep -v ' ok$' | head -40"
for sep in 0 1 0 1; do
  WGTILE_ATTN_SEPARATE=$sep LIMIT=150 TAIL=30 run "sweep_coop_separate$sep" $B/attention --sweep-coop --sweep-only --repeats 5
done
LIMIT=150 TAIL=20 run torch_attention python3 scripts/torch_attention.py --no-long --no-backward
LIMIT=150 TAIL=80 run tour $B/tour
