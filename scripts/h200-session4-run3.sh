#!/usr/bin/env bash
# Session 4, third device call (NVIDIA H200): the tensor-core attention
# kernel after the workgroup-alignment fix: probe diagnostics, its tests,
# its tile sweep.
set -u
OUT=${OUT:-/tmp/wgtile-out}; mkdir -p "$OUT"
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
tar -C .bin -xJf .bin/bins.tar.xz
export WGPU_BACKEND=vulkan XDG_RUNTIME_DIR=/tmp WGTILE_COOPERATIVE_MATRIX=1 WGTILE_AUTOTUNE=off
B=./.bin
{
for p in 0 2; do
  WGTILE_COOP_ATTN_PROBE=$p timeout 60 $B/test_attention --ignored --nocapture coop_probe_diagnostics 2>&1 | grep -E "^probe|panicked"
done
timeout 200 $B/test_attention --ignored --test-threads=4 coop_sizes coop_causal coop_masks coop_packed coop_rescale 2>&1 | grep -E "^test |panicked|test result" | head -20
timeout 200 $B/attention --sweep-coop --sweep-only --repeats 5 2>&1 | grep -v WARN | tail -12
} 2>&1 | tee "$OUT/run3.log"
