#!/usr/bin/env bash
# Session 3, device run 2 (NVIDIA H200): the coop kernel with vec4<f16>
# tiles against the previous build (mk_old) in one call, f16 padding at odd
# sizes (Auto pads now) against the word-load variant, the GEMV dispatcher,
# and the new decode kernel with PyTorch's decode. Build:
# EXTRA_BINS=<dir with mk_old> scripts/build-device.sh; carry .bin and .gl.
set -u
source scripts/device-env.sh
for t in matmul padded; do TAIL=3 run test_$t $B/test_$t --test-threads=1; done
TAIL=14 run test_attention_decode $B/test_attention --test-threads=1 decode kv_cache nan_ all_masked
for round in 1 2; do
  for v in mk_old matmul_kernels; do
    TAIL=8 run "coop $v r$round" sh -c "$B/$v --sizes 4096,4104 --dtype f16 --tiles 128x128x8 --coop 4x4x32x2,2x2x32x4 2>&1 | grep -E 'coop|error'"
  done
done
TAIL=12 run sweep_f16_auto $B/matmul_sweep --sizes 1792,1793,4096,4097 --dtype f16 --repeats 10
TAIL=6 run gemv_default $B/matmul_kernels --gemv 4096x4096,4096x14336,14336x4096
TAIL=30 run decode $B/attention --decode-only
TAIL=30 run torch_decode python3 scripts/torch_attention.py --decode-only
