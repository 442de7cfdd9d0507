#!/usr/bin/env bash
# The first device call of the next session (NVIDIA H200): verify what
# session 3 fixed without device time left, in about two minutes.
# 1. The coop kernel's transposed operands after the stride fix, in both
#    staging variants (WGTILE_COOP_COLMAJOR=0: scattered into row-major
#    tiles; =1: staged as stored, column-major loads), and their speed: if a
#    variant passes, set tune::COOP_TRANSPOSED_IN_DISPATCH (and make the
#    faster passing variant the default).
# 2. The tensor-core attention tests (ignored by default while the kernel
#    gives wrong rows), to see where it stands.
# Build: scripts/build-device.sh; carry .bin and .gl. Log: $OUT/verify.log.
set -u
OUT=${OUT:-/tmp/wgtile-out}; mkdir -p "$OUT"
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
tar -C .bin -xJf .bin/bins.tar.xz
export WGPU_BACKEND=vulkan XDG_RUNTIME_DIR=/tmp WGTILE_COOPERATIVE_MATRIX=1 WGTILE_AUTOTUNE=off
B=./.bin
{
for cm in 0 1; do
  echo "== WGTILE_COOP_COLMAJOR=$cm"
  WGTILE_COOP_COLMAJOR=$cm timeout 60 $B/test_matmul --test-threads=1 transposed 2>&1 \
    | grep -E "^test |panicked|element" | head -6
  for t in b ab; do
    WGTILE_COOP_COLMAJOR=$cm timeout 30 $B/matmul_kernels --sizes 4096 --dtype f16 \
      --tiles 128x128x8 --coop 4x4x32x2,2x2x32x4 --transpose $t --repeats 5 2>&1 | grep -E "coop|tiled"
  done
done
echo "== tensor-core attention (ignored tests)"
timeout 120 $B/test_attention --test-threads=1 --ignored coop 2>&1 | grep -E "^test |panicked|error" | head -20
} 2>&1 | tee "$OUT/verify.log"
