#!/usr/bin/env bash
# Prepared in session 6 (its device time ran out; nothing here has run on
# the GPU yet). Most valuable first:
# 1. the matmul, padded and pad test suites on tensor cores: the padding
#    layer's last-row split on the coop kernel (pad.rs
#    last_row_split_equals_the_full_product forces it; f16 goes to the
#    coop kernel on the H200) has only run on lavapipe's tiled kernels;
# 2. f16 1792 / 1793 / 4096 / 4097 through the padding layer with the
#    last-row split (the dispatcher takes it at 4097), without it and
#    with it forced (--fringe auto / off / on), PyTorch in the same call: predicted 4097 at ~0.9x of
#    4096 (was 0.74x: 561 workgroups = 5 waves, now 528 = 4 + a GEMV);
# 3. the one-dispatch GEMV with 16 rows per step (WGTILE_GEMV_DEEP=1)
#    against 8, two rounds alternating: predicted +5-10% at 4096^2 f16
#    (twice the loads in flight per invocation; 128 workgroups there);
# 4. the decode kernel's logit step spread over all warps
#    (WGTILE_DECODE_SPREAD=1) against the first RQ * KB invocations (warp 0
#    on NVIDIA): predicted a few us at 32k (step 2, now with an exp2 per
#    row and key, is on the critical path while three warps wait);
# 5. the tour.
# Build: scripts/build-device.sh; carry .bin and .gl. Logs under $OUT.
set -u
source scripts/device-env.sh
for t in matmul padded pad; do
  LIMIT=150 TAIL=6 run "test_$t" sh -c "$B/test_$t --test-threads=4 2>&1 | grep -E '^test |panicked|test result|error' | grep -v ' ok$' | head -20"
done
# (1793 with the split forced too: is the kernel's 9% over 1792 the fringe
# row's 15 extra workgroups?)
for fr in auto off on; do
  LIMIT=90 TAIL=8 run "sweep_f16_fringe_$fr" $B/matmul_sweep --sizes 1792,1793,4096,4097 --dtype f16 --repeats 10 --fringe $fr
done
LIMIT=60 TAIL=8 run torch_matmul python3 scripts/torch_baseline.py --sizes 1792,1793,4096,4097
for round in 1 2; do
  for deep in 0 1; do
    WGTILE_GEMV_DEEP=$deep LIMIT=40 TAIL=6 run "gemv_deep${deep}_r$round" $B/matmul_kernels --gemv 4096x4096,4096x14336,14336x4096
  done
done
for sp in 0 1 0 1; do
  WGTILE_DECODE_SPREAD=$sp LIMIT=60 TAIL=8 run "decode_spread$sp" $B/attention --decode-only --decode-lens 32768,131072
done
LIMIT=150 TAIL=80 run tour $B/tour
