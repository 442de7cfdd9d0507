#!/usr/bin/env bash
# The attention benchmark pass on the H200 device machine (see ../shared/GPU.md
# and scripts/h200.sh, whose loader set-up this repeats).
#
#   scripts/attention_device.sh build   # here: release example + test binary into .bin/
#   bash scripts/attention_device.sh run   # there, through the device tool, carry [".bin", ".gl"]
#   bash scripts/attention_device.sh decode   # there: only the decode tests, the
#                                             # decode tile sweep and the decode tables
#
# `run` executes the attention tests on the GPU (edge shapes, the 128-row tile
# lavapipe cannot fit), the benchmark with the tile sweep, and PyTorch SDPA on
# the same cases; logs to $OUT.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
case "${1:-}" in
build)
    set -e
    cargo build --release --example attention
    mkdir -p .bin
    cp target/release/examples/attention .bin/attention
    exe=$(cargo test --release --no-run --test attention --message-format=json 2>/dev/null \
        | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["executable"])' | tail -1)
    cp "$exe" .bin/test_attention
    strip .bin/attention .bin/test_attention 2>/dev/null || true
    ls -la .bin/attention .bin/test_attention
    ;;
run|decode)
    OUT=${OUT:-/tmp/wgtile-out}
    mkdir -p "$OUT"
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
    export WGPU_BACKEND=vulkan XDG_RUNTIME_DIR=/tmp RUST_LOG=${RUST_LOG:-warn}
    if [ ! -e /usr/share/vulkan/icd.d/nvidia_icd.json ] && [ -e /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
        export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
    fi
    if [ "$1" = decode ]; then
        echo "== decode tests on the GPU"
        ./.bin/test_attention --test-threads=1 decode kv_cache nan_ all_masked 2>&1 | tail -n 12 | tee "$OUT/decode_tests.log"
        echo "== wgtile decode tile sweep (4k, 32k; f16, f32)"
        ./.bin/attention --decode-sweep 2>&1 | tee "$OUT/decode_sweep.log"
        echo "== wgtile decode"
        ./.bin/attention --decode-only 2>&1 | tee "$OUT/decode.log"
        echo "== PyTorch SDPA decode"
        python3 scripts/torch_attention.py --decode-only 2>&1 | tee "$OUT/torch_decode.log"
        exit 0
    fi
    echo "== attention tests on the GPU"
    ./.bin/test_attention --test-threads=1 2>&1 | tail -n 25 | tee "$OUT/attention_tests.log"
    echo "== wgtile attention"
    ./.bin/attention --sweep-tiles 2>&1 | tee "$OUT/attention.log"
    echo "== PyTorch SDPA"
    python3 scripts/torch_attention.py 2>&1 | tee "$OUT/torch_attention.log"
    ;;
*)
    echo "usage: $0 build|run|decode" >&2
    exit 2
    ;;
esac
