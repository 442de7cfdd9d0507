#!/usr/bin/env bash
# Where wgtile stands on this GPU, next to PyTorch in the same call: the GPU
# test suites with tensor cores on, matmul at aligned and odd sizes (f16 and
# f32, the padding layer on), the GEMV, fusion, row ops, attention forward,
# backward and decode, then the tour as `cargo xtask tour` runs it. The
# commands of docs/perf/README.md's headline numbers (run 122 of
# docs/perf/log-2026-11.md). Several minutes on an NVIDIA H200 (the tour
# alone took 137 s in run 122).
#
#   bench/build.sh                 # where the code is: packs .bin/bins.tar.xz
#   bash bench/run-all.sh          # on the GPU machine, from the repository root
#
# The whole log goes to $OUT/all.log (default ./bench-out); the last thing
# printed is a table of the steps. PyTorch steps run where `torch` imports
# and sees a GPU, and are listed as skipped otherwise.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/env.sh || exit 1
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$OUT/all.log"
fi
torch() {
  local name=$1; shift
  if have_torch; then run "$name" python3 "$@"; else skip "$name" "no PyTorch with a GPU here"; fi
}

# 1. correctness of the kernels lavapipe cannot run (tensor cores)
for t in matmul attention; do
  [ -x "$B/test_$t" ] && LIMIT=600 TAIL=3 run "test_$t" "$B/test_$t" --test-threads=1
done
# 2. matmul: aligned and odd sizes through the dispatcher and the padding
#    layer, the GEMV, PyTorch at the same sizes
LIMIT=120 TAIL=8 run "matmul f16" "$B/matmul_sweep" --dtype f16 --sizes 1792,1793,4096,4097 --repeats 10
LIMIT=120 TAIL=8 run "matmul f32" "$B/matmul_sweep" --dtype f32 --sizes 1792,1793,4096,4097 --repeats 10
LIMIT=60 TAIL=8 run "gemv" "$B/matmul_kernels" --gemv 4096x4096,4096x14336
LIMIT=120 TAIL=16 torch "torch matmul" bench/torch_matmul.py --sizes 1792,1793,4096,4097
# 3. fusion and row ops
LIMIT=120 TAIL=20 run "fusion" "$B/fusion"
LIMIT=300 TAIL=20 torch "torch fusion" bench/torch_fusion.py
LIMIT=120 TAIL=30 run "rowops" "$B/rowops" --dtype f32
LIMIT=300 TAIL=30 torch "torch rowops" bench/torch_rowops.py --dtype f32 --no-compile
# 4. attention: forward f32 and f16 at B4 H16 S4096 D128, backward, decode at a 32k cache
LIMIT=300 TAIL=40 run "attention" "$B/attention" --sizes 4096 --dims 128 --no-long --decode-lens 32768
LIMIT=240 TAIL=30 torch "torch attention" bench/torch_attention.py --no-long --decode-lens 32768
# 5. the tour, as `cargo xtask tour` runs it
LIMIT=300 TAIL=60 run "tour" "$B/tour"
summary
