#!/usr/bin/env bash
# Session 8, call 3: two matmul changes against the build before them
# (EXTRA_BINS: matmul_kernels_old, matmul_sweep_old from 97449af).
# 1. the matmul suites with tensor cores on (the fused pad copy, the
#    pipelined GEMV);
# 2. GEMV, pipelined 16-row steps vs not, two rounds alternating.
#    Predicted +5-10% at 4096^2 (4 steps per invocation, each waiting a
#    memory latency before), less on the 14336-row shapes;
# 3. the padding layer's A and B copies in one dispatch vs two, stages
#    and whole plans at 1792/1793/4096/4097 f16, two rounds alternating.
#    Predicted 1793 -3 to -5 us (one launch and drain fewer, 0.84x ->
#    ~0.87x), 4097 -5 to -9 us (one 134 MB copy instead of two of 67 MB);
# 4. PyTorch at the same sizes.
set -u
source scripts/device-env.sh
for t in matmul pad padded; do
  LIMIT=120 TAIL=4 run "test_$t" sh -c "$B/test_$t --test-threads=4 2>&1 | grep -E '^test |panicked|test result|error' | grep -v ' ok$' | head -20"
done
for r in 1 2; do
  for v in _old ""; do
    LIMIT=40 TAIL=8 run "gemv$v r$r" $B/matmul_kernels$v --gemv 4096x4096,4096x14336,14336x4096
  done
done
for r in 1 2; do
  for v in _old ""; do
    LIMIT=80 TAIL=10 run "stages$v r$r" $B/matmul_sweep$v --sizes 1792,1793,4096,4097 --dtype f16 --repeats 10 --stages
  done
done
LIMIT=60 TAIL=8 run torch_matmul python3 scripts/torch_baseline.py --sizes 1792,1793,4096,4097
