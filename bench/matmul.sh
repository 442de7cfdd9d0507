#!/usr/bin/env bash
# Matmul device pass after kernel changes: the GPU tests with tensor cores on
# (the coop variants lavapipe cannot run), odd vs aligned sizes with and
# without padding copies, coop layouts, and PyTorch at the same sizes.
# Carry .bin (scripts/build-device.sh) and .gl.
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
[ -f .bin/bins.tar.xz ] && tar -C .bin -xJf .bin/bins.tar.xz
export WGPU_BACKEND=vulkan XDG_RUNTIME_DIR=/tmp WGTILE_COOPERATIVE_MATRIX=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== tests (coop on)"
for t in matmul padded epilogue pad; do
  [ -x .bin/test_$t ] && WGTILE_AUTOTUNE=off ./.bin/test_$t --test-threads=1 2>&1 | grep -E "test result|panicked|FAILED" -A1
done
export WGTILE_AUTOTUNE=off
echo "== coop layouts (f16)"
./.bin/matmul_kernels --sizes 4096,2048 --dtype f16 --tiles 128x128x8 \
  --coop ${COOP:-2x2x32x4,2x2x64x4,1x2x32x4,2x1x32x4,1x2x64x4} 2>&1 | grep -E "coop|skipped"
echo "== f32 tiles"
./.bin/matmul_kernels --sizes 4096 --dtype f32 --tiles 128x128x8,128x128x16,128x64x8,64x128x8 2>&1 | grep -E "tiled"
for dt in f16 f32; do
  echo "== $dt odd vs aligned (padded column: Padding::Auto)"
  ./.bin/matmul_sweep --sizes 1792,1793,2048,4096,4097 --dtype $dt --repeats 10 2>&1 | grep -E "^ +[0-9]+ "
  echo "== $dt with Padding::Always"
  ./.bin/matmul_sweep --sizes 1793,4097 --dtype $dt --repeats 10 --always-pad 2>&1 | grep -E "^ +[0-9]+ "
done
echo "== torch"
python3 scripts/torch_baseline.py --sizes 1792,1793,2048,4096,4097 2>&1 | grep -E "torch (copy|matmul)"
