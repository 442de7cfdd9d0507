#!/usr/bin/env bash
# Session 7, call 2: the cooperative-matrix matmul's new variants, first on
# the GPU here.
# 1. test_matmul (edge shapes on every coop layout, the double-buffered
#    sweep layouts included), once as is and once with the grouped launch
#    order (WGTILE_COOP_GROUP=8);
# 2. f16 2048 / 4096 over the layouts, single- and double-buffered, with
#    launch order by rows, groups of 8 and of 16 block rows. Predicted: 2
#    stages (one barrier per K step instead of two) +5-15% on the layouts
#    that fit; grouping +0-10% at 4096 (less B traffic from DRAM per wave),
#    nothing at 2048 (A and B, 16 MiB, stay in L2 anyway);
# 3. 1793 / 4097 through the padding layer with each kernel timed alone
#    (where the 0.84x / 0.87x goes), PyTorch in the same call.
set -u
source scripts/device-env.sh
LIMIT=150 TAIL=6 run test_matmul sh -c "$B/test_matmul --test-threads=4 2>&1 | grep -E '^test |panicked|test result|error' | grep -v ' ok$' | head -20"
WGTILE_COOP_GROUP=8 LIMIT=150 TAIL=6 run test_matmul_group8 sh -c "$B/test_matmul --test-threads=4 2>&1 | grep -E '^test |panicked|test result|error' | grep -v ' ok$' | head -20"
COOPS=4x4x32x2,2x2x32x4,2x4x32x4,2x2x32x4x2,2x2x16x4x2,2x4x16x4x2,4x2x16x4x2
for g in 0 8 16 0 8; do
  WGTILE_COOP_GROUP=$g LIMIT=120 TAIL=14 run "coop_group$g" $B/matmul_kernels --sizes 2048,4096 --dtype f16 --tiles 128x128x16 --coop $COOPS
done
LIMIT=90 TAIL=10 run sweep_f16_stages $B/matmul_sweep --sizes 1792,1793,4096,4097 --dtype f16 --repeats 10 --stages
LIMIT=60 TAIL=8 run torch_matmul python3 scripts/torch_baseline.py --sizes 4096
