#!/usr/bin/env bash
# Builds what the bench/ scripts run on the GPU machine: the release
# examples and the GPU test suites, stripped and packed into
# .bin/bins.tar.xz (git-ignored; the stripped binaries compress about 3x,
# which keeps the copy to the GPU machine small). bench/env.sh unpacks it.
#
#   bench/build.sh                      # this checkout
#   EXTRA_BINS=DIR bench/build.sh       # also pack DIR/* (e.g. an older build
#                                       # as matmul_kernels_old, for an A/B run)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# wgtile's examples, and the measuring programs of the wgtile-dev crate
# (dev/: every kernel variant side by side, the driver's register counts,
# the atomics probe).
examples=(tour matmul_sweep fusion rowops attention quantization bf16 bert_embed layout batch)
dev_bins=(matmul_kernels pipeline_stats atomics_probe attention_sweep coop_attention_probe quant_gemv_sweep bf16_matmul)
cargo build --release -p wgtile $(printf -- '--example %s ' "${examples[@]}")
cargo build --release -p wgtile-dev $(printf -- '--bin %s ' "${dev_bins[@]}")
rm -rf .bin/stage && mkdir -p .bin/stage
for e in "${examples[@]}"; do cp "target/release/examples/$e" .bin/stage/; done
for e in "${dev_bins[@]}"; do cp "target/release/$e" .bin/stage/; done
# The GPU test suites, to run the kernels lavapipe cannot (cooperative
# matrices) with WGTILE_COOPERATIVE_MATRIX=1.
tests=(matmul attention quant bf16)
for t in "${tests[@]}"; do
    exe=$(cargo test --release -p wgtile --no-run --test "$t" --message-format=json 2>/dev/null \
        | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["executable"])' | tail -1)
    cp "$exe" ".bin/stage/test_$t"
done
# Extra binaries (e.g. an older build for an A/B run) from $EXTRA_BINS. Build
# an older commit in its own git worktree with its own CARGO_TARGET_DIR:
# sharing this checkout's target makes cargo take one build's artifacts for
# the other's (same package name and version; run 70 of
# docs/perf/log-2026-11.md compared a binary with itself that way).
if [ -n "${EXTRA_BINS:-}" ]; then cp "$EXTRA_BINS"/* .bin/stage/; fi
strip .bin/stage/*
find .bin -maxdepth 1 -type f -delete
tar -C .bin/stage -cJf .bin/bins.tar.xz .
rm -rf .bin/stage
ls -la .bin
