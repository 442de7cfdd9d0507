#!/usr/bin/env bash
# Builds the release binaries the device machine runs, packed into
# .bin/bins.tar.xz (git-ignored; the device call carries at most 64 MiB, and
# the stripped binaries compress about 3x). scripts/h200-all.sh unpacks them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
examples=(tour matmul_kernels matmul_sweep fusion rowops pipeline_stats atomics_probe)
[ -f examples/attention.rs ] && examples+=(attention)
cargo build --release $(printf -- '--example %s ' "${examples[@]}")
rm -rf .bin/stage && mkdir -p .bin/stage
for e in "${examples[@]}"; do cp "target/release/examples/$e" .bin/stage/; done
# The GPU test suites, to run the kernels lavapipe cannot (cooperative
# matrices) with WGTILE_COOPERATIVE_MATRIX=1.
tests=(matmul padded pad)
[ -f tests/attention.rs ] && tests+=(attention)
for t in "${tests[@]}"; do
    exe=$(cargo test --release --no-run --test "$t" --message-format=json 2>/dev/null \
        | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["executable"])' | tail -1)
    cp "$exe" ".bin/stage/test_$t"
done
# Extra binaries (e.g. an older build for an A/B run) from $EXTRA_BINS. Build
# an older commit in its own worktree with its own CARGO_TARGET_DIR: sharing
# this checkout's target makes cargo take one build's artifacts for the
# other's (same package name and version; session 12's first A/B compared a
# binary with itself).
if [ -n "${EXTRA_BINS:-}" ]; then cp "$EXTRA_BINS"/* .bin/stage/; fi
strip .bin/stage/*
find .bin -maxdepth 1 -type f -delete
tar -C .bin/stage -cJf .bin/bins.tar.xz .
rm -rf .bin/stage
ls -la .bin
