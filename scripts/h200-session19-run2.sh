#!/usr/bin/env bash
# Session 19, run 2 (run 121): why the ping-pong kernel ran at 0.26x (run
# 120). Hypothesis: the tensor-core operations under a subgroup-uniform but
# non-constant loop bound (naga's way past its uniformity rule) take a slow
# path in the driver. WGTILE_COOP_PPV probes: 1 the condition through
# subgroupBroadcastFirst, 2 products in every phase (wrong results), 3 the
# one-group kernel with its products under such a loop bound.
set -u
source scripts/device-env.sh
for v in 0 1 2; do
  LIMIT=60 TAIL=8 run "registers ppv=$v" sh -c "$B/pipeline_stats --filter GROUPS=2 --set PPV=$v 2>&1 | grep -E 'MatmulCoop|Register|Local'"
done
for r in 1 2; do
  for v in 0 1 2; do
    LIMIT=60 TAIL=3 run "pp ppv=$v r$r" env WGTILE_COOP_PPV=$v $B/matmul_kernels --sizes 4096 --dtype f16 --tiles 128x128x8 --coop 2x4x32x2p,2x2x32x2p
  done
  for v in 0 3; do
    LIMIT=60 TAIL=2 run "one group ppv=$v r$r" env WGTILE_COOP_PPV=$v $B/matmul_kernels --sizes 4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32x2
  done
done
