#!/usr/bin/env bash
# One whole benchmark pass on the H200 device machine (see ../shared/GPU.md):
# unpack the Vulkan loader, run the tour (wgtile's kernels, timed with GPU
# timestamps) and the PyTorch baselines in the same call, logs to $OUT.
#
# Build here first:   scripts/build-device.sh   (release binaries into .bin/)
# Then, through the device tool, from the repo root:
#   bash scripts/h200.sh           with carry [".bin", ".gl"]
set -uo pipefail
OUT=${OUT:-/tmp/wgtile-out}
mkdir -p "$OUT"
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
export WGPU_BACKEND=vulkan XDG_RUNTIME_DIR=/tmp RUST_LOG=${RUST_LOG:-warn}
if [ ! -e /usr/share/vulkan/icd.d/nvidia_icd.json ] && [ -e /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/nvidia-smi.txt"

echo "== GPU tests with cooperative matrices enabled (edge shapes on every kernel)"
for t in matmul tensor errors; do
    WGTILE_COOPERATIVE_MATRIX=1 ./.bin/test_$t --test-threads=1 2>&1 | tail -n 25 | tee "$OUT/test_$t.log"
done

echo "== wgtile tour"
WGTILE_COOPERATIVE_MATRIX=1 ./.bin/tour --sizes "${SIZES:-1024,2048,4096}" --repeats 20 2>&1 | tee "$OUT/tour.log"

nvidia-smi dmon -s pc -d 1 > "$OUT/dmon.log" 2>&1 &
DMON=$!
echo "== every matmul kernel, f32 (two rounds, the second reversed) and f16"
TILES=${TILES:-128x128x8,128x128x16,64x128x8,128x64x8,64x64x16}
./.bin/matmul_kernels --sizes "${KSIZES:-2048,4096}" --dtype f32 --rounds "${ROUNDS:-1}" --tiles "$TILES" 2>&1 | tee "$OUT/kernels_f32.log"
./.bin/matmul_kernels --sizes "${F16SIZES:-1024,2048,4096}" --dtype f16 --tiles "$TILES" 2>&1 | tee "$OUT/kernels_f16.log"
echo "== the same with wgpu's runtime checks on every kernel (what trusted modules buy)"
WGTILE_CHECKED_SHADERS=1 ./.bin/matmul_kernels --sizes 4096 --dtype f32 --tiles "$TILES" 2>&1 | tee "$OUT/kernels_f32_checked.log"
kill $DMON 2>/dev/null

echo "== PyTorch baselines"
PYTHONUNBUFFERED=1 python3 scripts/torch_baseline.py --sizes "${SIZES:-1024,2048,4096}" 2>&1 | tee "$OUT/torch.log"

echo "== summary"
grep -A20 "^Summary" "$OUT/tour.log" | head -12
grep -h "test result" "$OUT"/test_*.log
for f in kernels_f32 kernels_f16 kernels_f32_checked; do echo "-- $f"; grep -E "^ +[0-9]+ " "$OUT/$f.log" | grep -E "^ +4096|coop"; done
grep "^torch" "$OUT/torch.log"
