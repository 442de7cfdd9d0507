#!/usr/bin/env bash
# Session 4, sixth (last) device call (NVIDIA H200): the tensor-core attention
# kernel with vec4 staging and the interior fast path, 16-key blocks by default: its tests,
# its tile sweep, the attention table (flash, naive, coop) and PyTorch SDPA
# in the same call, the tour.
# Build: scripts/build-device.sh; carry .bin and .gl. Logs under $OUT.
set -u
OUT=${OUT:-/tmp/wgtile-out}; mkdir -p "$OUT"
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
tar -C .bin -xJf .bin/bins.tar.xz
export WGPU_BACKEND=vulkan XDG_RUNTIME_DIR=/tmp WGTILE_COOPERATIVE_MATRIX=1 WGTILE_AUTOTUNE=off
B=./.bin
run() {
  local name=$1; shift
  echo "== $name" | tee -a "$OUT/all.log"
  ( timeout "${LIMIT:-120}" "$@" ) 2>&1 | grep -v WARN | tee -a "$OUT/all.log" | tail -n "${TAIL:-40}"
}
LIMIT=150 TAIL=4 run test_attention sh -c "$B/test_attention --test-threads=4 2>&1 | grep -E '^test |panicked|test result' | grep -v ' ok$'"
LIMIT=120 TAIL=9 run sweep_coop $B/attention --sweep-coop --sweep-only --repeats 5
LIMIT=150 TAIL=45 run attention $B/attention --no-long
LIMIT=150 TAIL=40 run torch_attention python3 scripts/torch_attention.py --no-long
LIMIT=150 TAIL=70 run tour $B/tour
