#!/usr/bin/env bash
# Session 15, run 2. (1) Where the decode split pass's fixed time goes.
# Run 93 over cache lengths: split pass 20.1 us at 2k (2 blocks of 32 keys
# per workgroup, from L2), 21.6 at 4k, 25.8 at 8k; from DRAM 47.5 / 63.9 /
# 105 / 179.5 at 16k / 32k / 64k / 128k: ~0.077 us per key of the split
# plus ~24 us that does not scale. WGTILE_DECODE_PROBE bits: 4 drops the
# epilogue (one store per invocation instead), 8 the key loop, 12 both
# (launch, prologue and one store), 3 the score and P V math. (2) f16 coop
# 2x8x32x2 (128x256 blocks on 16 subgroups of 64x32: the same loads and
# fragments per subgroup as 4x4x32x2, B tile rows of 512 bytes).
set -u
source scripts/device-env.sh
for pr in 0 4 8 12 3; do
  LIMIT=60 TAIL=4 run "decode probe $pr" env WGTILE_DECODE_PROBE=$pr $B/attention --decode-only --decode-lens 4096,32768
done
for r in 1 2; do
  LIMIT=60 TAIL=6 run "coop 2x8 r$r" $B/matmul_kernels --sizes 2048,4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32x2,2x8x32x2
done
