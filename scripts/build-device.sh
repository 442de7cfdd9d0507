#!/usr/bin/env bash
# Builds the release binaries the device machine runs into .bin/ (git-ignored).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo build --release --example tour --example matmul_kernels
mkdir -p .bin
cp target/release/examples/tour target/release/examples/matmul_kernels .bin/
strip .bin/* 2>/dev/null || true
ls -la .bin
