#!/usr/bin/env bash
# Builds the release binaries the device machine runs into .bin/ (git-ignored).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo build --release --example tour
mkdir -p .bin
cp target/release/examples/tour .bin/
strip .bin/* 2>/dev/null || true
ls -la .bin
