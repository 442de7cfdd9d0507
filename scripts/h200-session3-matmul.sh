#!/usr/bin/env bash
# Session 3, device run 1 (NVIDIA H200): the coop kernel's mat2x4<f16>
# staging against the previous build (mk_old, a193cad) in one call, the f16
# padding copies at odd sizes, and the one-dispatch GEMV against the split
# one; PyTorch at the same sizes. Build: EXTRA_BINS=<dir with mk_old>
# scripts/build-device.sh; carry .bin and .gl. Full log: $OUT/all.log.
set -u
source scripts/device-env.sh
# correctness first: the coop kernel's new staging and the padding copies
for t in matmul padded; do TAIL=3 run test_$t $B/test_$t --test-threads=1; done
# coop A/B, two rounds alternating
for round in 1 2; do
  for v in mk_old matmul_kernels; do
    TAIL=8 run "coop $v r$round" sh -c "$B/$v --sizes 4096,2048 --dtype f16 --tiles 128x128x8 --coop 4x4x32x2,2x2x32x4,2x2x64x4,2x4x32x4 2>&1 | grep -E 'coop|error'"
  done
done
# odd sizes: padded (Auto) vs the word-load variant (--no-pad runs Never)
TAIL=12 run sweep_f16_auto $B/matmul_sweep --sizes 1792,1793,4096,4097 --dtype f16 --repeats 10
TAIL=12 run sweep_f16_nopad $B/matmul_sweep --sizes 1793,4097 --dtype f16 --no-pad --repeats 10
# GEMV: dispatcher default, one dispatch forced, split forced
TAIL=6 run gemv_default $B/matmul_kernels --gemv 4096x4096,4096x14336,14336x4096
TAIL=6 run gemv_wide env WGTILE_GEMV_WIDE=1 $B/matmul_kernels --gemv 4096x4096,4096x14336,14336x4096
TAIL=6 run gemv_split env WGTILE_GEMV_WIDE=0 $B/matmul_kernels --gemv 4096x4096,4096x14336,14336x4096
TAIL=20 run torch_matmul python3 scripts/torch_baseline.py --sizes 1792,1793,4096,4097
