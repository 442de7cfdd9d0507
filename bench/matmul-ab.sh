#!/usr/bin/env bash
# Kernel experiments on the device: the previous build (.bin/matmul_kernels_old,
# when carried) against the current one, side by side in one call, plus
# PyTorch. Carry .bin and .gl.
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export WGPU_BACKEND=vulkan XDG_RUNTIME_DIR=/tmp WGTILE_COOPERATIVE_MATRIX=1 WGTILE_AUTOTUNE=off
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
OLD=./.bin/matmul_kernels_old
NEW=./.bin/matmul_kernels
F16_OLD=${F16_OLD:-4x4x32,2x4x64,2x2x32}
F16_NEW=${F16_NEW:-4x4x32x2,4x4x64x2,2x4x32x4,4x2x32x4,2x2x32x4,2x4x64x4,4x2x64x4}
for round in 1 2; do
  if [ -x $OLD ]; then echo "== f32 old ($round)"; $OLD --sizes 4096,2048 --dtype f32 2>&1 | grep -v naive; fi
  echo "== f32 new ($round)"; $NEW --sizes 4096,2048 --dtype f32 2>&1 | grep -v naive
  if [ -x $OLD ]; then echo "== f16 old ($round)"; $OLD --sizes 4096,2048 --dtype f16 --coop $F16_OLD --tiles 128x128x8 2>&1 | grep -E "coop|skipped"; fi
  echo "== f16 new ($round)"; $NEW --sizes 4096,2048 --dtype f16 --coop $F16_NEW --tiles 128x128x8 2>&1 | grep -E "coop|skipped"
done
echo "== torch"
python3 scripts/torch_baseline.py --sizes 2048,4096 2>&1 | grep -E "torch (copy|f32|f16|matmul)" | head -20
