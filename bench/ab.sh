#!/usr/bin/env bash
# Did a change make one benchmark faster? The same program of an older
# build (A, a directory of binaries such as another checkout's .bin) and of
# this checkout's build (B, .bin), alternating A B A B, so each number has
# its own run-to-run spread beside the other build's.
#
#   mkdir -p .bin/a && cp OLD/target/release/examples/layout .bin/a/
#   A=.bin/a bash bench/ab.sh layout --sizes 16384x1024
#
# ROUNDS (default 2) sets how often each build runs; LIMIT and TAIL as in
# env.sh. A build without the program is skipped.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
A=${A:?set A to the older build\'s directory}
name=${1:?usage: A=DIR bench/ab.sh PROGRAM [ARGS...]}
shift
source bench/env.sh || exit 1
[ -f "$A/bins.tar.xz" ] && tar -C "$A" -xJf "$A/bins.tar.xz"
for round in $(seq "${ROUNDS:-2}"); do
  for side in A B; do
    if [ "$side" = A ]; then bin=$A/$name; else bin=$B/$name; fi
    if [ -x "$bin" ]; then
      LIMIT=${LIMIT:-120} TAIL=${TAIL:-20} run "$side$round $name" "$bin" "$@"
    else
      skip "$side$round $name" "no $bin"
    fi
  done
done
summary
