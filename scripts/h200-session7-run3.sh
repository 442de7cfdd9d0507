#!/usr/bin/env bash
# Session 7, call 3.
# 1. the test suites the new code touches, on tensor cores: pad / padded /
#    matmul (the last row's GEMV reading A in place and writing C's row,
#    GEMV partials per dispatch, the new f16 pad copy), and attention with
#    Q kept in workgroup memory (WGTILE_ATTN_QSH=1);
# 2. f16 1792 / 1793 / 4096 / 4097 through the padding layer, each kernel
#    timed alone. Predicted: each 4097 pad copy 22 -> ~17 us (aligned
#    16-byte loads, a warp per row segment), the two one-row copies gone
#    (~10 us of stages alone), 4097 at ~0.89x of 4096 (was 0.87x);
# 3. GEMV against a copy of the same bytes;
# 4. tensor-core attention forward with Q in workgroup memory against Q in
#    registers, every tile, two rounds; predicted +10-25% if registers limit
#    the workgroups per SM (session 4: smaller blocks, more workgroups per
#    SM, 1.65x), a loss if the extra fragment loads cost more;
# 5. PyTorch SDPA in the same call.
set -u
source scripts/device-env.sh
for t in pad padded matmul; do
  LIMIT=150 TAIL=4 run "test_$t" sh -c "$B/test_$t --test-threads=4 2>&1 | grep -E '^test |panicked|test result|error' | grep -v ' ok$' | head -20"
done
WGTILE_ATTN_QSH=1 LIMIT=200 TAIL=8 run test_attention_qsh sh -c "$B/test_attention --test-threads=4 coop 2>&1 | grep -E '^test |panicked|test result|left|right|error' | grep -v ' ok$' | head -40"
LIMIT=90 TAIL=12 run sweep_f16_stages $B/matmul_sweep --sizes 1792,1793,4096,4097 --dtype f16 --repeats 10 --stages
LIMIT=60 TAIL=8 run gemv $B/matmul_kernels --gemv 4096x4096,4096x14336,14336x4096
for q in 0 1 0 1; do
  WGTILE_ATTN_QSH=$q LIMIT=150 TAIL=12 run "sweep_coop_qsh$q" $B/attention --sweep-coop --sweep-only --repeats 5
done
LIMIT=150 TAIL=30 run torch_attention python3 scripts/torch_attention.py --no-long --no-backward
