#!/usr/bin/env bash
# How long does autotuning take, and does its cache work across processes?
# Two processes per shape on one fresh WGTILE_CACHE_DIR: the first tunes
# (its log says how long, over how many candidates, and the winner), the
# second should log a cache hit and run at the same speed.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/env.sh || exit 1
export WGTILE_AUTOTUNE=fast WGTILE_CACHE_DIR="$OUT/autotune-cache"
rm -rf "$WGTILE_CACHE_DIR"
for proc in first second; do
  for spec in "4096 f32" "3000 f16" "4096 f16"; do
    set -- $spec
    TAIL=6 run "$2 $1 $proc" env RUST_LOG=wgtile=info "$B/matmul_sweep" --sizes "$1" --dtype "$2" --no-pad --repeats 10
  done
done
summary
