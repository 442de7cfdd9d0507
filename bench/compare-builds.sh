#!/usr/bin/env bash
# Do two builds run at the same speed? The headline benchmarks (matmul f16
# and f32 at aligned and odd sizes, the GEMV, fusion, softmax and layer
# norm, attention forward, backward and decode) for build A, then B, then A
# and B again, so each number has its own run-to-run spread beside the
# other build's. Autotune off: both builds run the dispatcher's rules.
#
#   mkdir -p .bin/a .bin/b     # each: matmul_sweep fusion rowops attention
#                              # matmul_kernels (bench/build.sh builds them);
#                              # a benchmark whose binary a build lacks is skipped
#   A=.bin/a B=.bin/b bash bench/compare-builds.sh
#
# The log goes to $OUT/all.log (default ./bench-out); the last thing printed
# is the table of steps. ROUNDS (default 2) sets how often each build runs.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export B=${B:?set B to the second build's directory}
A=${A:?set A to the first build's directory}
SECOND=$B
source bench/env.sh || exit 1
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$OUT/all.log"
fi
for dir in "$A" "$SECOND"; do
  [ -f "$dir/bins.tar.xz" ] && tar -C "$dir" -xJf "$dir/bins.tar.xz"
done
# One benchmark of one build: skipped where the build lacks the binary.
bench() {
  local name=$1 bin=$2; shift 2
  if [ -x "$bin" ]; then run "$name" "$bin" "$@"; else skip "$name" "no $bin"; fi
}
rounds=${ROUNDS:-2}
for round in $(seq "$rounds"); do
  for side in A B; do
    if [ "$side" = A ]; then d=$A; else d=$SECOND; fi
    tag="$side$round"
    LIMIT=120 TAIL=6 bench "$tag matmul f16" "$d/matmul_sweep" --dtype f16 --sizes 1792,1793,4096,4097 --repeats 10
    LIMIT=120 TAIL=6 bench "$tag matmul f32" "$d/matmul_sweep" --dtype f32 --sizes 1792,1793,4096,4097 --repeats 10
    LIMIT=60 TAIL=6 bench "$tag gemv" "$d/matmul_kernels" --gemv 4096x4096,4096x14336
    LIMIT=90 TAIL=12 bench "$tag fusion" "$d/fusion"
    LIMIT=90 TAIL=16 bench "$tag rowops" "$d/rowops" --dtype f32
    LIMIT=180 TAIL=30 bench "$tag attention" "$d/attention" --sizes 4096 --dims 128 --no-long --decode-lens 32768
  done
done
summary
