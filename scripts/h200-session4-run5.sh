#!/usr/bin/env bash
# Session 4, fifth device call (NVIDIA H200): the tensor-core attention
# kernel with vec4 staging and the interior fast path, in Auto: its tests,
# its tile sweep, the attention table (flash, naive, coop) and PyTorch SDPA
# in the same call, the matmul baseline at 4096 (ours and PyTorch), the tour.
# Build: scripts/build-device.sh; carry .bin and .gl. Logs under $OUT.
set -u
source scripts/device-env.sh
LIMIT=150 TAIL=4 run test_attention sh -c "$B/test_attention --test-threads=4 2>&1 | grep -E '^test |panicked|test result' | grep -v ' ok$'"
LIMIT=120 TAIL=9 run sweep_coop $B/attention --sweep-coop --sweep-only --repeats 5
LIMIT=150 TAIL=45 run attention $B/attention --no-long
LIMIT=150 TAIL=40 run torch_attention python3 scripts/torch_attention.py --no-long
LIMIT=60 TAIL=12 run matmul sh -c "$B/matmul_kernels --sizes 4096 --dtype f16 --coop 4x4x32x2 --tiles 128x128x8 --repeats 3; $B/matmul_kernels --sizes 4096 --dtype f16 --coop 4x4x32x2 --tiles 128x128x8 --transpose ab --repeats 3"
LIMIT=60 TAIL=12 run torch_matmul python3 scripts/torch_baseline.py --sizes 4096
LIMIT=150 TAIL=70 run tour $B/tour
