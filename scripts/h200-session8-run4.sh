#!/usr/bin/env bash
# Session 8, call 4 (the last): the padding layer's last column apart,
# against the build before it (EXTRA_BINS: matmul_sweep_old from c5ee5df),
# then the tour and PyTorch.
# 1. the matmul suites with tensor cores on (the split forced on small
#    shapes runs the tensor-core kernel with its last block column left out);
# 2. 1792/1793/4096/4097 f16, stages and whole plans, three rounds
#    alternating. Predicted 4097: 634 -> 600-615 us (0.88x -> 0.90-0.92x of
#    4096): the kernel on 512 workgroups instead of 528, the last row's and
#    column's GEMVs in the idle units of its last wave, one small copy into
#    C after it. 1793: about the same (its kernel is one wave either way);
# 3. PyTorch matmul; 4. the tour; 5. PyTorch attention for the tour's rows.
set -u
source scripts/device-env.sh
for t in pad padded matmul; do
  LIMIT=120 TAIL=4 run "test_$t" sh -c "$B/test_$t --test-threads=4 2>&1 | grep -E '^test |panicked|test result|error' | grep -v ' ok$' | head -20"
done
for r in 1 2 3; do
  for v in _old ""; do
    LIMIT=40 TAIL=6 run "stages$v r$r" $B/matmul_sweep$v --sizes 1792,1793,4096,4097 --dtype f16 --repeats 10 --stages
  done
done
LIMIT=60 TAIL=8 run torch_matmul python3 scripts/torch_baseline.py --sizes 1792,1793,4096,4097
LIMIT=200 TAIL=150 run tour $B/tour
LIMIT=120 TAIL=40 run torch_attention python3 scripts/torch_attention.py --no-long
