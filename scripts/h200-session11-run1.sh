#!/usr/bin/env bash
# Session 11, run 1: the attention tests on the H200 (the tensor-core
# backward under the relative error bound, not yet run there; the decode
# kernel's new staged K/V path), then the decode table with the tensor-core
# decode kernel at several split counts against the scalar decode kernel
# and PyTorch, the staged decode kernel as a forward kernel, and the
# aligned f16 kernel at 1792..1824 (does the 120-workgroup grid at 1800
# cost the 9% that keeps padded 1793 under 0.9x of 1792?).
set -u
source scripts/device-env.sh
LIMIT=200 TAIL=8 run "test_attention" sh -c "$B/test_attention --test-threads 4 2>&1 | grep -E '^test |panicked|element|test result' | grep -v ' ok$' | head -20"
LIMIT=120 TAIL=14 run decode $B/attention --decode-only --decode-lens 4096,32768,131072 --decode-tc-splits 64,128,256,384,512
LIMIT=60 TAIL=8 run torch_decode python3 scripts/torch_attention.py --decode-only --decode-lens 4096,32768,131072
LIMIT=60 TAIL=12 run matmul_1792 $B/matmul_kernels --sizes 1792,1800,1808,1824 --dtype f16 --tiles 128x128x8 --repeats 20 --rounds 2
LIMIT=150 TAIL=12 run sweep_coop $B/attention --sweep-coop --sweep-only --sizes 4096 --dims 128
