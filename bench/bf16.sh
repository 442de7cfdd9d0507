#!/usr/bin/env bash
# bf16 next to f16 and f32: matmul (staged to f16 with an armed f32
# fallback), attention, softmax and a fused ReLU, each bf16 plan's stages
# apart, and PyTorch's bf16 / f16 / f32 in the same call. The bf16 tests
# come first, on this GPU.
#
#   bench/build.sh && bash bench/bf16.sh
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/env.sh || exit 1
[ -x "$B/test_bf16" ] && LIMIT=300 TAIL=3 run "test_bf16" "$B/test_bf16" --test-threads=1
LIMIT=300 TAIL=40 run "bf16" "$B/bf16"
if have_torch; then
  LIMIT=180 TAIL=20 run "torch bf16" python3 bench/torch_bf16.py
else
  skip "torch bf16" "no PyTorch with a GPU here"
fi
summary
