#!/usr/bin/env bash
# Session 10, call 7: the scalar backward (f32, and f16 without tensor
# cores) loads its row statistics once per block (dK/dV) or once (dQ)
# instead of per element, against attention_old, two rounds. Predicted
# +5-15% on the scalar columns (f32 S1024 D128 14.2 TFLOP/s, PyTorch 32.1);
# the tensor-core columns unchanged.
set -u
source scripts/device-env.sh
LIMIT=200 TAIL=3 run "test_attention" $B/test_attention --test-threads 4 backward
for r in 1 2; do
  for bin in attention attention_old; do
    LIMIT=120 TAIL=12 run "backward $bin r$r" sh -c "$B/$bin --sizes 1024 --dims 128,64 --repeats 5 --no-long | sed -n '/^backward/,/^decode/p'"
  done
done
