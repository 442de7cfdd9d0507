#!/usr/bin/env bash
# Prepared in session 11 (not run). Build first:
#   git worktree add /tmp/old e8da73a && (cd /tmp/old && cargo build --release --example attention)
#   mkdir -p /tmp/oldbins && cp /tmp/old/target/release/examples/attention /tmp/oldbins/attention_old
#   EXTRA_BINS=/tmp/oldbins bash scripts/build-device.sh
# e8da73a is the build session 11 measured (runs 67-69) plus the backward
# probes. Since then, unmeasured: the tensor-core forward's NaN sum (one
# vec4 add per 4 scores: predicted <= 2% slower), the scalar flash and
# decode kernels' interior blocks (one multiply instead of `logit` per
# score: predicted f32 flash +3-8%, decode 32k f16 -1..-3 us).
# Then where the tensor-core backward's time goes (session 11: S4096 D128
# 129 TFLOP/s, 0.24x of PyTorch; target 0.3x): WGTILE_COOP_BWD_PROBE bits
# (1 P/dS, 2 S/dP products, 4 gradient products, 8 next-block loads
# skipped; results wrong), each kernel's time printed by --backward-only.
set -u
source scripts/device-env.sh
LIMIT=200 TAIL=8 run "test_attention" sh -c "$B/test_attention --test-threads 4 2>&1 | grep -E '^test |panicked|element|test result' | grep -v ' ok$' | head -20"
for r in 1 2; do
  LIMIT=90 TAIL=8 run "forward old $r" sh -c "$B/attention_old --forward-only --kernels flash,coop --sizes 4096 --dims 128 --no-long; $B/attention_old --sweep-coop --sweep-only --sizes 4096 --dims 128 | grep full"
  LIMIT=90 TAIL=8 run "forward new $r" sh -c "$B/attention --forward-only --kernels flash,coop --sizes 4096 --dims 128 --no-long; $B/attention --sweep-coop --sweep-only --sizes 4096 --dims 128 | grep full"
  LIMIT=60 TAIL=4 run "decode old $r" sh -c "$B/attention_old --decode-only --decode-lens 32768 | grep -E ' decode '"
  LIMIT=60 TAIL=4 run "decode new $r" sh -c "$B/attention --decode-only --decode-lens 32768 | grep -E ' decode '"
done
for p in 0 1 2 4 8 3 6 9 15; do
  WGTILE_COOP_BWD_PROBE=$p LIMIT=60 TAIL=3 run "backward probe $p" sh -c "$B/attention --backward-only --sizes 4096 --dims 128 | grep -E '^4,16,4096'"
done
