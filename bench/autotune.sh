#!/usr/bin/env bash
# A short device pass after kernel changes: GPU tests with tensor cores on, the
# autotune cache across two processes, and the alignment sizes. Carry .bin and .gl.
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
[ -f .bin/bins.tar.xz ] && tar -C .bin -xJf .bin/bins.tar.xz
export WGPU_BACKEND=vulkan XDG_RUNTIME_DIR=/tmp
echo "== tests (coop on)"
for t in matmul tensor errors pad epilogue; do WGTILE_COOPERATIVE_MATRIX=1 WGTILE_AUTOTUNE=off ./.bin/test_$t --test-threads=1 2>&1 | grep -E "test result|panicked|FAILED" ; done
echo "== autotune f32 4096 and f16 3000, fresh cache, two processes"
for run in first second; do for spec in "4096 f32" "3000 f16"; do set -- $spec
WGTILE_CACHE_DIR=/tmp/wc RUST_LOG=wgtile=info ./.bin/matmul_sweep --sizes $1 --dtype $2 --no-pad --repeats 10 2>&1 | grep -E "autotune|^ +[0-9]+ " ; done; done
echo "== odd sizes after the strided-params change (autotune off)"
for dt in f32 f16; do WGTILE_AUTOTUNE=off ./.bin/matmul_sweep --sizes 1792,1793,4096,4097 --dtype $dt --repeats 10 2>&1 | grep -E "^ +[0-9]+ "; done
