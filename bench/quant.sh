#!/usr/bin/env bash
# How fast is a quantised weight times a vector (the decode step of a
# language model), per format, next to wgtile's f32 and f16 GEMVs and
# PyTorch's f16 / bf16 / f32 ones in the same call; how fast do the
# quantise and dequantise kernels run against a copy? The quantisation
# tests come first, on this GPU (bit-exact codes, the GEMV against f64).
#
# Then the quantised GEMM at 4096^3 (f16 activations, tensor cores) next
# to the f16 matmul; STAGES=1 times each dispatch of its plan.
#
#   bench/build.sh && bash bench/quant.sh
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/env.sh || exit 1
[ -x "$B/test_quant" ] && LIMIT=300 TAIL=3 run "test_quant" "$B/test_quant" --test-threads=1
LIMIT=300 TAIL=60 run "quantization" "$B/quantization" --shapes 4096x4096,4096x14336 --rows 1,4,8
LIMIT=300 TAIL=40 run "quantized GEMM" "$B/quantization" --gemm 4096x4096x4096 ${STAGES:+--stages}
if have_torch; then
  LIMIT=120 TAIL=20 run "torch quant" python3 bench/torch_quant.py --shapes 4096x4096,4096x14336 --rows 1,4,8 --gemm 4096x4096x4096
else
  skip "torch quant" "no PyTorch with a GPU here"
fi
summary
