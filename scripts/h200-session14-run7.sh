#!/usr/bin/env bash
# Session 14, run 7: (1) where f16 1793's 9% goes. The kernel on operands
# stored with rows of 1824 halves (as the padding layer's copies) at
# logical shapes that move one edge at a time (matmul_kernels
# --padded-shapes). Runs 89-90: 1793 71.1-71.4 us, 1792 65.5; session 11:
# 1824^3 at 67.8 us. (2) The row-pitch effect: 4096^3 with rows of 4096
# against 4128 halves (run 89: the 4097 kernel, rows of 4128, 533-537 us
# against 4096's 555). (3) The tour with everything of this session.
set -u
source scripts/device-env.sh
for r in 1 2; do
  LIMIT=60 TAIL=12 run "f16 edges r$r" $B/matmul_kernels --dtype f16 --padded-shapes 1792x1792x1792,1824x1824x1824,1793x1793x1793,1824x1793x1793,1793x1824x1793,1793x1793x1824,1824x1824x1793,1792x1824x1824,1824x1792x1824 --pad-multiple 32
  LIMIT=60 TAIL=4 run "f16 pitch r$r" sh -c "$B/matmul_kernels --dtype f16 --padded-shapes 4096x4096x4096 --pad-multiple 4096 | tail -1; $B/matmul_kernels --dtype f16 --padded-shapes 4096x4096x4096 --pad-multiple 4128 | tail -1; $B/matmul_kernels --dtype f16 --padded-shapes 4096x4096x4096 --pad-multiple 4160 | tail -1"
done
LIMIT=220 TAIL=80 run "tour" $B/tour
