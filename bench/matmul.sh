#!/usr/bin/env bash
# How fast is matmul after a kernel change, at aligned and odd sizes, per
# tensor-core layout and f32 tile, with and without the padding layer's
# copies, next to PyTorch? The GPU tests with tensor cores on come first
# (the coop variants lavapipe cannot run).
#
#   COOP=4x4x32x2,2x2x32x4 bash bench/matmul.sh   # layouts: WARPS_MxWARPS_NxBKxFN
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/env.sh || exit 1
for t in matmul; do
  [ -x "$B/test_$t" ] && LIMIT=600 TAIL=3 run "test_$t" "$B/test_$t" --test-threads=1
done
LIMIT=120 TAIL=20 run "coop layouts f16" "$B/matmul_kernels" --sizes 4096,2048 --dtype f16 --tiles 128x128x8 \
  --coop "${COOP:-4x4x32x2,2x4x32x4,2x2x32x4,4x2x32x4,2x4x32x2}"
LIMIT=120 TAIL=12 run "f32 tiles" "$B/matmul_kernels" --sizes 4096 --dtype f32 --tiles 128x128x8,128x128x16,128x64x8,64x128x8
for dt in f16 f32; do
  LIMIT=120 TAIL=8 run "$dt padding auto" "$B/matmul_sweep" --sizes 1792,1793,2048,4096,4097 --dtype "$dt" --repeats 10
  LIMIT=120 TAIL=8 run "$dt padding always" "$B/matmul_sweep" --sizes 1793,4097 --dtype "$dt" --repeats 10 --always-pad
done
if have_torch; then
  LIMIT=120 TAIL=16 run "torch matmul" python3 bench/torch_matmul.py --sizes 1792,1793,2048,4096,4097
else
  skip "torch matmul" "no PyTorch with a GPU here"
fi
summary
