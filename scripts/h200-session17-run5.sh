#!/usr/bin/env bash
# Session 17, run 5 (run 113): aligned f16 operands loaded as two
# vec4<f16> per 16-byte run and staged as loaded (matmul_coop.wgsl
# F16_LOADS; WGTILE_COOP_F16_LOADS=1), instead of one 16-byte word
# unpacked to f32 and narrowed back: 16 conversions fewer per run, 1 load
# more. Run 112 found the staging sensitive to instruction count.
# Predicted: +3-10% at 4096 if the driver keeps the 8-byte loads vector
# loads and registers stay at 125; session 3's mat2x4<f16> loads ran at
# 0.56x, so a loss is possible.
set -u
source scripts/device-env.sh
LIMIT=200 TAIL=6 run "tests f16 loads" env WGTILE_COOP_F16_LOADS=1 sh -c "$B/test_matmul 2>&1 | grep -E 'panicked|test result'; $B/test_padded 2>&1 | grep -E 'panicked|test result'"
LIMIT=120 TAIL=30 run "stats f16 loads" $B/pipeline_stats --filter "MatmulCoop F16" --set F16_LOADS=1
for r in 1 2; do
  for fl in 0 1; do
    LIMIT=40 TAIL=2 run "coop f16 loads $fl r$r" env WGTILE_COOP_F16_LOADS=$fl $B/matmul_kernels --sizes 2048,4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32x2
  done
done
for fl in 0 1; do
  LIMIT=60 TAIL=6 run "f16 sweep f16 loads $fl" env WGTILE_COOP_F16_LOADS=$fl $B/matmul_sweep --dtype f16 --sizes 1792,1793,4096,4097
done
