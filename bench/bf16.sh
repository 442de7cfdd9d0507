#!/usr/bin/env bash
# bf16 next to f16 and f32: matmul (read in place by the tensor cores after
# the range test, or staged to f16 for large products; an f32 fallback
# armed), attention, softmax and a fused
# ReLU, each bf16 plan's stages apart, on uniform and on normal data (what
# models hold: a few values below 2^-17, which the range test lets
# through), and PyTorch's bf16 / f16 / f32 in the same call; then the
# matmul's forms (wgtile-dev's bf16_matmul: narrowed in the kernel, staged
# to f16, scaled with no check and no fallback) against the route on both
# kinds of data. The bf16 tests come first, on this GPU.
#
#   bench/build.sh && bash bench/bf16.sh
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/env.sh || exit 1
[ -x "$B/test_bf16" ] && LIMIT=300 TAIL=3 run "test_bf16" "$B/test_bf16" --test-threads=1
LIMIT=300 TAIL=40 run "bf16" "$B/bf16"
LIMIT=300 TAIL=32 run "bf16 matmul forms" "$B/bf16_matmul" --sizes 2048,4096,8192 --repeats 10
if have_torch; then
  LIMIT=180 TAIL=20 run "torch bf16" python3 bench/torch_bf16.py
else
  skip "torch bf16" "no PyTorch with a GPU here"
fi
summary
