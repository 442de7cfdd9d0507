#!/usr/bin/env bash
# Does splitting K over workgroups (or fewer invocations per workgroup)
# speed the column-blocked quantised GEMV, does the autotuner find the
# winner by itself, and what do the quantisation kernels cost now? In one
# call: the quantisation tests on this GPU (every GEMV launch and every
# tensor-core GEMM layout the autotuner may pick, the fused epilogue on
# every route), the GEMV sweep over workgroup size and K split, the
# driver's register counts of the GEMV kernels, then the quantization
# example with autotuning on (its log names each tuned launch) next to
# autotuning off, with quantise / dequantise against a copy, and the
# quantisers' timing probe (without the rounding, without the exchange of
# block statistics; each with the workgroup-memory kernels too), and
# MXFP4's compares against the bit arithmetic they replaced.
#
#   bench/build.sh && bash bench/quant-tuning.sh
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/env.sh || exit 1
[ -x "$B/test_quant" ] && LIMIT=300 TAIL=3 run "test_quant" "$B/test_quant" --test-threads=1
LIMIT=300 TAIL=40 run "GEMV launches" "$B/quant_gemv_sweep" --shapes 4096x4096,4096x14336 \
  --formats mxfp4,int4 --rows 1,8 --wgs 1024,512 --columns 32 --ksplits 1,2,4
LIMIT=300 TAIL=30 run "GEMV registers" "$B/pipeline_stats" --quant --filter QuantGemvCols
LIMIT=300 TAIL=90 run "quantise probes" "$B/quant_gemv_sweep" --shapes 4096x14336 \
  --formats mxfp4,mxfp8e4m3,nvfp4,int8,int4zp,fp8e4m3 --quantize-probes 0,1,2
LIMIT=120 TAIL=12 run "MXFP4 by bit arithmetic" env WGTILE_E2M1_BITS=1 "$B/quant_gemv_sweep" \
  --shapes 4096x14336 --formats mxfp4 --quantize-probes 0
LIMIT=300 TAIL=60 run "quantization, autotune off" "$B/quantization" --shapes 4096x4096,4096x14336 --rows 1,8 --stages
export WGTILE_AUTOTUNE=fast WGTILE_CACHE_DIR="$OUT/autotune-cache"
rm -rf "$WGTILE_CACHE_DIR"
LIMIT=300 TAIL=50 run "quantization, autotune fast" env RUST_LOG=wgtile=info "$B/quantization" \
  --shapes 4096x4096,4096x14336 --rows 1,8
summary
