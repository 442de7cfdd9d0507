#!/usr/bin/env bash
# Builds the release binaries the device machine runs into .bin/ (git-ignored).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo build --release --example tour --example matmul_kernels --example matmul_sweep
mkdir -p .bin
cp target/release/examples/tour target/release/examples/matmul_kernels target/release/examples/matmul_sweep .bin/
# The GPU test suites, to run the edge-shape tests on kernels lavapipe cannot run
# (cooperative matrices) with WGTILE_COOPERATIVE_MATRIX=1.
for t in matmul tensor errors pad epilogue; do
    exe=$(cargo test --release --no-run --test "$t" --message-format=json 2>/dev/null \
        | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["executable"])' | tail -1)
    cp "$exe" ".bin/test_$t"
done
strip .bin/* 2>/dev/null || true
ls -la .bin
