#!/usr/bin/env bash
# One whole device pass (NVIDIA H200, see ../shared/GPU.md): GPU tests with
# tensor cores on, matmul at aligned and odd sizes, fusion, row ops and
# attention, each next to PyTorch in the same call. Build with
# `scripts/build-device.sh` (it packs the binaries into .bin/bins.tar.xz),
# carry .bin and .gl. The whole log goes to $OUT/all.log.
set -u
OUT=${OUT:-/tmp/wgtile-out}; mkdir -p "$OUT"
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
[ -f .bin/bins.tar.xz ] && tar -C .bin -xJf .bin/bins.tar.xz
export WGPU_BACKEND=vulkan XDG_RUNTIME_DIR=/tmp WGTILE_COOPERATIVE_MATRIX=1 WGTILE_AUTOTUNE=off
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/all.log"
B=./.bin
# Every part's full output goes to $OUT/all.log (the device returns few
# files); the terminal gets its last lines.
run() {
  local name=$1; shift
  echo "== $name" | tee -a "$OUT/all.log"
  ( "$@" ) 2>&1 | tee -a "$OUT/all.log" | tail -n "${TAIL:-40}"
}
# 1. correctness on the kernels lavapipe cannot run (tensor cores)
for t in matmul padded attention; do
  [ -x $B/test_$t ] && TAIL=4 run test_$t $B/test_$t --test-threads=1
done
# 2. matmul: aligned vs odd sizes (odd f16 sizes run the coop word-load
#    variant, no copies), f32 on tensor cores, PyTorch at the same sizes
TAIL=12 run sweep_f16 $B/matmul_sweep --sizes 1792,1793,4096,4097 --dtype f16 --no-pad --repeats 10
TAIL=12 run sweep_f32 $B/matmul_sweep --sizes 1792,1793,4096,4097 --dtype f32 --repeats 10
TAIL=12 run kernels_f32 $B/matmul_kernels --sizes 4096 --dtype f32 --tiles 128x128x8 --coop 4x4x32x2,2x2x32x4
TAIL=12 run gemv_pairs $B/matmul_kernels --gemv 4096x4096,4096x14336
TAIL=12 run gemv_single env WGTILE_GEMV_PAIRS=0 $B/matmul_kernels --gemv 4096x4096,4096x14336
TAIL=20 run torch_matmul python3 scripts/torch_baseline.py --sizes 1792,1793,4096,4097
# 3. fusion and row ops
[ -x $B/fusion ] && TAIL=20 run fusion $B/fusion
TAIL=20 run torch_fusion python3 scripts/torch_fusion.py
[ -x $B/rowops ] && TAIL=30 run rowops $B/rowops --dtype f32
TAIL=30 run torch_rowops python3 scripts/torch_rowops.py --dtype f32 --no-compile
# 4. attention
[ -x $B/attention ] && TAIL=40 run attention $B/attention
[ -f scripts/torch_attention.py ] && TAIL=40 run torch_attention python3 scripts/torch_attention.py
# 5. the tour, as `cargo xtask tour` runs it
[ -x $B/tour ] && TAIL=200 run tour $B/tour
