#!/usr/bin/env bash
# Attention on this GPU, next to PyTorch SDPA on the same cases.
#
#   bash bench/attention.sh          # the attention tests (edge shapes, the
#                                    # tensor-core kernels lavapipe cannot run),
#                                    # forward, backward and decode tables with
#                                    # the flash tile sweep, PyTorch SDPA
#   bash bench/attention.sh decode   # decode only: its tests, the decode tile
#                                    # sweep and grid, the decode table, PyTorch
#
# `python3 bench/decode_grid_best.py $OUT/all.log` lists the fastest decode
# tiles of the grid per dtype and cache length.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/env.sh || exit 1
torch() {
  local name=$1; shift
  if have_torch; then run "$name" python3 "$@"; else skip "$name" "no PyTorch with a GPU here"; fi
}
case "${1:-all}" in
all)
  LIMIT=600 TAIL=6 run "test_attention" "$B/test_attention" --test-threads=1
  LIMIT=600 TAIL=80 run "attention tiles" "$B/attention_sweep" --sweep-tiles
  LIMIT=300 TAIL=60 torch "torch attention" bench/torch_attention.py
  ;;
decode)
  LIMIT=300 TAIL=6 run "decode tests" "$B/test_attention" --test-threads=1 decode kv_cache nan_ all_masked
  LIMIT=300 TAIL=30 run "decode sweep" "$B/attention_sweep" --decode-sweep
  LIMIT=600 TAIL=10 run "decode_grid" "$B/attention_sweep" --decode-grid --decode-lens 32768,131072
  LIMIT=120 TAIL=20 run "decode" "$B/attention" --decode-only
  LIMIT=120 TAIL=20 torch "torch decode" bench/torch_attention.py --decode-only
  ;;
*)
  echo "usage: $0 [all|decode]" >&2
  exit 2
  ;;
esac
summary
