#!/usr/bin/env bash
# Session 9, run 4: what the NVIDIA driver made of the matmul kernels
# (registers per invocation, spills, shared memory) through
# VK_KHR_pipeline_executable_properties (examples/pipeline_stats).
# Question: does the f32 128x128x8 tiled kernel (256 invocations) stay at or
# under 128 registers (two workgroups per SM), and does the coop 4x4x32x2
# kernel (512 invocations) fit 128 without spilling?
set -u
source scripts/device-env.sh
[ "${ATTN:-0}" = 1 ] || LIMIT=120 TAIL=400 run pipeline_stats $B/pipeline_stats
# Run 5 (same script, --attention): the attention kernels this adapter gets.
if [ "${ATTN:-0}" = 1 ]; then LIMIT=120 TAIL=400 run pipeline_stats_attention $B/pipeline_stats --attention; fi
