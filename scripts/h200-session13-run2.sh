#!/usr/bin/env bash
# Session 13, run 2: the tensor-core attention forward with D split between
# pairs of subgroups (FlashCoopTiles::ds = 2: each holds half of Q's and
# O's fragments, computes partial scores over its half of D, the softmax
# adds the two). Sweep tiles only; the dispatcher is unchanged.
# Predictions: f32 (split) at 246 registers now (Q twice + O = 128 of
# them): DS 2 halves those 128 to 64, so ~150-180 registers; W8 DS2 (64
# rows) +10-30% over W8 (42 TFLOP/s) if the driver gets under 128
# registers (2 workgroups per SM), else about even; W4 DS2 fewer rows per
# K/V block (more staging per row). f16 (164 registers, 3 x 4 warps per
# SM): W8 DS2 near 100 registers, 2 x 8 warps: +0-20%.
set -u
source scripts/device-env.sh
LIMIT=300 TAIL=12 run "test_attention coop" sh -c "$B/test_attention --test-threads 4 coop 2>&1 | grep -E '^test |panicked|error|test result' | grep -v ' ok$' | head -30"
LIMIT=90 TAIL=40 run stats sh -c "$B/pipeline_stats --attention 2>&1 | grep -E 'AttentionFlashCoop|Register|Shared'"
LIMIT=200 TAIL=8 run "sweep" sh -c "$B/attention --sweep-coop --sweep-only --coop-dtypes f16,f32 --sizes 4096 --dims 128 --repeats 5"
LIMIT=150 TAIL=8 run "sweep causal S1024" sh -c "$B/attention --sweep-coop --sweep-only --coop-dtypes f16,f32 --sizes 1024 --dims 128 --repeats 5"
LIMIT=120 TAIL=8 run torch_attention sh -c "python3 scripts/torch_attention.py --no-long --no-backward | grep -v decode"
