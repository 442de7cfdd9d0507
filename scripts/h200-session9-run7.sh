#!/usr/bin/env bash
# Session 9, run 7: run 6's tour measured the f32 GEMV 4096^2 at 977 GB/s
# (0.069 ms) against 2763 (0.024 ms) in session 8's last tour, same kernel
# label. Is it real? The GEMV alone (matmul_kernels --gemv), then the tour
# again (the final code: run 6's two A/B changes reverted).
set -u
source scripts/device-env.sh
for r in 1 2; do
  LIMIT=60 TAIL=8 run "gemv r$r" $B/matmul_kernels --gemv 4096x4096,4096x14336 --repeats 20
done
LIMIT=200 TAIL=400 run tour $B/tour
