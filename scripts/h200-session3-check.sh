#!/usr/bin/env bash
# Session 3, a last short check (NVIDIA H200): coop transposes after the
# stride fix, both staging variants, and their speed. Carry .bin and .gl.
set -u
source scripts/device-env.sh
for cm in 0 1; do
  echo "== WGTILE_COOP_COLMAJOR=$cm"
  WGTILE_COOP_COLMAJOR=$cm timeout 30 $B/test_matmul --test-threads=1 transposed 2>&1 | grep -E "test |panicked|element" | head -4
  for t in b ab; do
    WGTILE_COOP_COLMAJOR=$cm timeout 20 $B/matmul_kernels --sizes 4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32x2 --transpose $t --repeats 5 2>&1 | grep coop
  done
done 2>&1 | tee "$OUT/check.log"
