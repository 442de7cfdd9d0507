# Sourced by the device scripts (scripts/h200-*.sh) on the GPU machine: the
# Vulkan loader from the carried .gl packages, the release binaries from
# .bin/bins.tar.xz (scripts/build-device.sh), the environment, $OUT, $B and
# `run NAME CMD...` (runs CMD under `timeout $LIMIT`, appends its output to
# $OUT/all.log without wgpu's warnings and prints the last $TAIL lines).
OUT=${OUT:-/tmp/wgtile-out}; mkdir -p "$OUT"
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
tar -C .bin -xJf .bin/bins.tar.xz
export WGPU_BACKEND=vulkan XDG_RUNTIME_DIR=/tmp WGTILE_COOPERATIVE_MATRIX=1 WGTILE_AUTOTUNE=off
B=./.bin
run() {
  local name=$1; shift
  echo "== $name" | tee -a "$OUT/all.log"
  ( timeout "${LIMIT:-120}" "$@" ) 2>&1 | grep -v WARN | tee -a "$OUT/all.log" | tail -n "${TAIL:-40}"
}
