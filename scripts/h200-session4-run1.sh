#!/usr/bin/env bash
# Session 4, first device call (NVIDIA H200): the coop transposes after the
# stride fix (both staging variants), and the tensor-core attention kernel
# rewritten with named fragments (its ignored tests, then its tile sweep).
# Build: scripts/build-device.sh; carry .bin and .gl. Logs under $OUT.
set -u
source scripts/device-env.sh
{
echo "== tensor-core attention (ignored tests)"
timeout 150 $B/test_attention --test-threads=1 --ignored coop 2>&1 | grep -E "^test |panicked|differ|error" | head -30
for cm in 0 1; do
  echo "== WGTILE_COOP_COLMAJOR=$cm"
  WGTILE_COOP_COLMAJOR=$cm timeout 60 $B/test_matmul --test-threads=1 transposed 2>&1 \
    | grep -E "^test |panicked|element" | head -6
  for t in b a ab; do
    WGTILE_COOP_COLMAJOR=$cm timeout 30 $B/matmul_kernels --sizes 4096 --dtype f16 \
      --tiles 128x128x8 --coop 4x4x32x2 --transpose $t --repeats 3 2>&1 | grep -E "coop|tiled"
  done
done
echo "== tensor-core attention tiles"
timeout 200 $B/attention --sweep-coop --sweep-only --repeats 5 2>&1 | tail -30
} 2>&1 | tee "$OUT/run1.log"
