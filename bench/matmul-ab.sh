#!/usr/bin/env bash
# Did a change make the matmul kernels faster? The previous build's
# matmul_kernels (.bin/matmul_kernels_old, packed with
# `EXTRA_BINS=DIR bench/build.sh`) and the current one alternate in one
# call, two rounds, then PyTorch at the same sizes. Without the old binary
# only the current build runs.
#
#   F16_OLD=4x4x32x2 F16_NEW=4x4x32x2,2x2x32x4 bash bench/matmul-ab.sh
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/env.sh || exit 1
OLD=$B/matmul_kernels_old
NEW=$B/matmul_kernels
F16_OLD=${F16_OLD:-4x4x32x2,2x2x32x4}
F16_NEW=${F16_NEW:-4x4x32x2,2x2x32x4}
for round in 1 2; do
  [ -x "$OLD" ] && TAIL=12 run "f32 old r$round" "$OLD" --sizes 4096,2048 --dtype f32
  TAIL=12 run "f32 new r$round" "$NEW" --sizes 4096,2048 --dtype f32
  [ -x "$OLD" ] && TAIL=12 run "f16 old r$round" "$OLD" --sizes 4096,2048 --dtype f16 --coop "$F16_OLD" --tiles 128x128x8
  TAIL=12 run "f16 new r$round" "$NEW" --sizes 4096,2048 --dtype f16 --coop "$F16_NEW" --tiles 128x128x8
done
if have_torch; then
  TAIL=16 run "torch matmul" python3 bench/torch_matmul.py --sizes 2048,4096
else
  skip "torch matmul" "no PyTorch with a GPU here"
fi
summary
