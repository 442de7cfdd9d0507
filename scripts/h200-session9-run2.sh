#!/usr/bin/env bash
# Session 9, run 2.
# 1. test_matmul with the coop kernel's prefetch distance 2
#    (WGTILE_COOP_PREFETCH=2: two register sets, loads of step k + 2 issued
#    before the multiply-adds of step k);
# 2. coop layouts at 1792/2048/4096, prefetch 1 and 2 alternating, two
#    rounds. Predicted: +5-15% at 4096 for 4x4x32x2 (its loads from L2 get
#    two multiply-add phases to land) unless the 24 extra registers spill;
# 3. the padded odd sizes with prefetch 2;
# 4. f32 tile shapes beyond 128x128 (512-invocation workgroups).
set -u
source scripts/device-env.sh
LIMIT=150 TAIL=4 run test_matmul_pf2 sh -c "WGTILE_COOP_PREFETCH=2 $B/test_matmul --test-threads=4 2>&1 | grep -E '^test |panicked|test result|error' | grep -v ' ok$' | head -20"
for r in 1 2; do
  for pf in 1 2; do
    LIMIT=120 TAIL=9 run "coop pf$pf r$r" env WGTILE_COOP_PREFETCH=$pf $B/matmul_kernels --sizes 1792,2048,4096 --dtype f16 --repeats 10 --tiles 128x128x8 --coop 4x4x32x2,2x2x32x4,4x2x32x4,2x4x32x2
  done
done
LIMIT=60 TAIL=10 run sweep_pf2 env WGTILE_COOP_PREFETCH=2 $B/matmul_sweep --sizes 1792,1793,4096,4097 --dtype f16 --repeats 10 --stages
LIMIT=120 TAIL=16 run f32_tiles $B/matmul_kernels --sizes 4096 --dtype f32 --repeats 10 --tiles 128x128x8,128x256x8,256x128x8,128x256x16,256x128x16,128x128x4
