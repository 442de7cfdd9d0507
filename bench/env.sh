# Sourced by the bench/ scripts, from the repository root on the GPU machine:
#
#   source bench/env.sh
#
# It sets up:
# - a Vulkan loader. The system's is used when `ldconfig -p` lists
#   libvulkan.so.1. On a machine without one, point VULKAN_LOADER_DEBS at a
#   directory of .deb packages (libvulkan1 and what it needs; `.gl/` in the
#   checkout when that exists): they are unpacked into / (root needed) and
#   ldconfig runs. Without either it stops with a message.
# - the binaries: .bin/bins.tar.xz (bench/build.sh) unpacked into .bin/ ($B).
# - the environment: the Vulkan backend, tensor cores on
#   (WGTILE_COOPERATIVE_MATRIX=1), autotune off (the dispatcher's rules).
# - $OUT (default ./bench-out), where every script writes all.log.
# - `run NAME CMD...`: runs CMD under `timeout $LIMIT` (default 120 s),
#   appends its output to $OUT/all.log without wgpu's warnings, prints the
#   last $TAIL lines (default 40) and records the step (name, exit status,
#   seconds, last line) for `summary`, which prints them as a table.
OUT=${OUT:-./bench-out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
: > "$OUT/steps.tsv"
B=./.bin

bench_err() { echo "bench/env.sh: $*" >&2; }

VULKAN_LOADER_DEBS=${VULKAN_LOADER_DEBS:-}
if [ -z "$VULKAN_LOADER_DEBS" ] && [ -d .gl ]; then VULKAN_LOADER_DEBS=.gl; fi
if [ -n "$VULKAN_LOADER_DEBS" ]; then
  if ! ls "$VULKAN_LOADER_DEBS"/*.deb >/dev/null 2>&1; then
    bench_err "VULKAN_LOADER_DEBS=$VULKAN_LOADER_DEBS holds no .deb packages"
    return 1 2>/dev/null || exit 1
  fi
  for f in "$VULKAN_LOADER_DEBS"/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
if ! ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1' \
  && ! python3 -c 'import ctypes.util, sys; sys.exit(0 if ctypes.util.find_library("vulkan") else 1)' 2>/dev/null; then
  bench_err "no Vulkan loader (libvulkan.so.1). Install libvulkan1, or set
  VULKAN_LOADER_DEBS to a directory of its .deb packages to unpack. If the
  driver's ICD file is not where the loader looks, set VK_DRIVER_FILES."
  return 1 2>/dev/null || exit 1
fi

if [ -f "$B/bins.tar.xz" ]; then
  tar -C "$B" -xJf "$B/bins.tar.xz"
elif [ ! -d "$B" ]; then
  bench_err "no binaries: run bench/build.sh first (it writes .bin/bins.tar.xz)"
  return 1 2>/dev/null || exit 1
fi

export WGPU_BACKEND=vulkan WGTILE_COOPERATIVE_MATRIX=1 WGTILE_AUTOTUNE=off
if [ -z "${XDG_RUNTIME_DIR:-}" ]; then
  export XDG_RUNTIME_DIR="$OUT/xdg"
  mkdir -p -m 700 "$XDG_RUNTIME_DIR"
fi

# PyTorch baselines run only where torch imports and sees a GPU.
have_torch() {
  python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null
}

run() {
  local name=$1; shift
  local start=$SECONDS step="$OUT/.step.log" rc status last
  echo "== $name" | tee -a "$OUT/all.log"
  ( timeout "${LIMIT:-120}" "$@" ) 2>&1 | grep -v WARN > "$step"
  rc=${PIPESTATUS[0]}
  cat "$step" >> "$OUT/all.log"
  tail -n "${TAIL:-40}" "$step"
  case $rc in
    0) status=ok ;;
    124) status=timeout ;;
    *) status="rc $rc" ;;
  esac
  last=$(grep -v '^[[:space:]]*$' "$step" | tail -n 1 | tr '\t' ' ' | cut -c1-72)
  printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$((SECONDS - start))" "$last" >> "$OUT/steps.tsv"
  rm -f "$step"
  return "$rc"
}

# Records a step that did not run.
skip() {
  printf '%s\t%s\t%s\t%s\n' "$1" skipped 0 "$2" >> "$OUT/steps.tsv"
}

summary() {
  echo
  echo "== summary (full log: $OUT/all.log)"
  printf '%-22s %-8s %5s  %s\n' step status s "last line"
  while IFS=$'\t' read -r name status secs last; do
    printf '%-22s %-8s %5s  %s\n' "$name" "$status" "$secs" "$last"
  done < "$OUT/steps.tsv"
}
