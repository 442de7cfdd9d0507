#!/usr/bin/env bash
# Session 3, device run 4 (NVIDIA H200): the new kernels' first contact with
# the device. GPU tests (coop transposes, coop attention, decode), the tiled
# kernel's double buffering and the coop transposes against the previous
# build (mk_old), the attention sweeps (coop forward tiles, decode variants)
# and PyTorch's attention on the same cases. Build: EXTRA_BINS=<dir with
# mk_old> scripts/build-device.sh; carry .bin and .gl. Log: $OUT/all.log.
set -u
source scripts/device-env.sh
TAIL=3 run test_matmul $B/test_matmul --test-threads=1
TAIL=30 run test_attention $B/test_attention --test-threads=1
# f32 tiled: double buffering vs mk_old (single), two rounds
for round in 1 2; do
  for v in mk_old matmul_kernels; do
    TAIL=4 run "tiled $v r$round" sh -c "$B/$v --sizes 4096 --dtype f32 --tiles 128x128x8,128x128x16 --coop 4x4x32x2 2>&1 | grep -E 'tiled|error'"
  done
done
# coop with transposed operands (new) vs the tiled f16 kernel the old build ran
for t in b ab; do
  TAIL=6 run "transpose $t" sh -c "$B/matmul_kernels --sizes 4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32x2,2x2x32x4 --transpose $t 2>&1 | grep -E 'coop|tiled|error'"
done
# attention: the tensor-core forward (every tile), the decode tiles, then
# the forward table (scalar flash vs coop), backward and decode, and PyTorch
LIMIT=150 TAIL=40 run sweep_coop $B/attention --sweep-coop --sweep-only
LIMIT=120 TAIL=40 run decode_sweep $B/attention --decode-sweep
LIMIT=200 TAIL=60 run attention $B/attention --kernels flash,coop --no-long --sizes 1024,4096 --dims 128,64
LIMIT=200 TAIL=60 run torch_attention python3 scripts/torch_attention.py
# last: the emulated tensor-core algorithm's full test (ignored on lavapipe)
LIMIT=100 TAIL=6 run test_attention_emulated $B/test_attention --test-threads=1 --ignored
