#!/usr/bin/env bash
# One whole benchmark pass on the H200 device machine (see ../shared/GPU.md):
# unpack the Vulkan loader, run the GPU test suites with tensor cores on, the
# tour, the throughput-vs-size sweeps, an autotune cache demonstration and the
# PyTorch baselines, all in one call; logs and figures to $OUT.
#
# Build here first:   scripts/build-device.sh   (release binaries packed into .bin/)
# Then, through the device tool, from the repo root:
#   bash scripts/h200.sh           with carry [".bin", ".gl"]
# Variables: SWEEP_STEP (128), SKIP_SWEEP=1, SKIP_TOUR=1.
set -uo pipefail
OUT=${OUT:-/tmp/wgtile-out}
mkdir -p "$OUT"
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
[ -f .bin/bins.tar.xz ] && tar -C .bin -xJf .bin/bins.tar.xz
export WGPU_BACKEND=vulkan XDG_RUNTIME_DIR=/tmp RUST_LOG=${RUST_LOG:-warn}
if [ ! -e /usr/share/vulkan/icd.d/nvidia_icd.json ] && [ -e /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/nvidia-smi.txt"
nvidia-smi dmon -s pc -d 1 > "$OUT/dmon.log" 2>&1 &
DMON=$!

echo "== GPU tests with cooperative matrices enabled (edge shapes on every kernel)"
for t in matmul padded attention; do
    [ -x ./.bin/test_$t ] || continue
    WGTILE_COOPERATIVE_MATRIX=1 WGTILE_AUTOTUNE=off ./.bin/test_$t --test-threads=1 2>&1 | tail -n 4 | tee -a "$OUT/tests.log"
done

if [ -z "${SKIP_TOUR:-}" ]; then
    echo "== wgtile tour"
    WGTILE_CACHE_DIR=/tmp/wgtile-tour-cache ./.bin/tour --repeats 20 2>&1 | tee "$OUT/tour.log"
fi

echo "== autotune: a new shape bucket in one process, then the cache in a second"
for run in first second; do
    WGTILE_CACHE_DIR=/tmp/wgtile-cache RUST_LOG=wgtile=info ./.bin/matmul_sweep --sizes 3000 --dtype f16 --no-pad --repeats 5 2>&1 \
        | grep -E "autotune|3000" | tee -a "$OUT/autotune.log"
done

if [ -z "${SKIP_SWEEP:-}" ]; then
    echo "== throughput vs N (heuristic kernels, autotune off so the figure shows the dispatcher's rules)"
    for dt in f32 f16; do
        WGTILE_AUTOTUNE=off ./.bin/matmul_sweep --dtype $dt --min 256 --max 4352 --step "${SWEEP_STEP:-128}" \
            --csv "$OUT/sweep_h200_$dt.csv" --svg "$OUT/sweep_h200_$dt.svg" 2>&1 | tail -n 14 | tee "$OUT/sweep_$dt.log"
    done
fi
kill $DMON 2>/dev/null

echo "== PyTorch baselines"
PYTHONUNBUFFERED=1 python3 scripts/torch_baseline.py 2>&1 | tee "$OUT/torch.log"

echo "== summary"
grep -h "test result" "$OUT/tests.log"
grep -A4 "^Summary" "$OUT/tour.log" 2>/dev/null
grep -E "GB/s|padding layer|unpadded|coop" "$OUT/tour.log" 2>/dev/null | head -30
cat "$OUT/autotune.log"
grep "^torch" "$OUT/torch.log"
