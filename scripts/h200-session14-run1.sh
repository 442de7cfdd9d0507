#!/usr/bin/env bash
# Session 14, run 1: the padding layer for the f32 split kernel (rows not
# on 16 bytes copied into rows of 16 floats; the last row of C as an f32
# GEMV where that saves a wave). Session 13 left 1793 at 0.83x of 1792 and
# 4097 at 0.68x of 4096 (the word loads; 4097 on 5 rounds of 2x4x16x4).
# Predictions: 1793 padded ~0.93x of 1792 (the copies ~17 us of ~275);
# 4097 padded on 2x4x16x4 ~0.8x (544 workgroups: 4.12 waves, no split
# saves a wave with 128-row blocks); on 4x2x16x4 (256 x 128, as the f16
# kernel) with the last row apart, 528 workgroups: ~0.95x if that layout
# runs 4096 as fast as 2x4x16x4. Pitches 4 / 16 / 32 floats compared.
set -u
source scripts/device-env.sh
LIMIT=150 TAIL=12 run "tests" sh -c "$B/test_matmul f32_split 2>&1 | grep -E '^test |panicked|test result'; $B/test_pad 2>&1 | grep -E 'panicked|test result'; $B/test_padded 2>&1 | grep -E 'panicked|test result'"
LIMIT=60 TAIL=12 run "split kernels alone" $B/matmul_kernels --sizes 4096 --dtype f32 --tiles 128x128x8 --coop 4x4x32 --coop-split 2x4x16x4,4x2x16x4,2x4x32x2,4x2x16x2 --repeats 10
for lay in default 4x2x16x4 2x4x32x2; do
  if [ $lay = default ]; then unset WGTILE_SPLIT_LAYOUT; else export WGTILE_SPLIT_LAYOUT=$lay; fi
  LIMIT=90 TAIL=8 run "sweep f32 layout $lay" $B/matmul_sweep --dtype f32 --sizes 1792,1793,4096,4097
done
unset WGTILE_SPLIT_LAYOUT
for pf in 4 32; do
  LIMIT=60 TAIL=6 run "sweep f32 pitch $pf" env WGTILE_SPLIT_PAD_FLOATS=$pf WGTILE_SPLIT_LAYOUT=4x2x16x4 $B/matmul_sweep --dtype f32 --sizes 1793,4097
done
LIMIT=90 TAIL=10 run "torch matmul" python3 scripts/torch_baseline.py --sizes 1792,1793,4096,4097
