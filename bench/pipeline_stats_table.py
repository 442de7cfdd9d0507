#!/usr/bin/env python3
"""One line per kernel from `pipeline_stats` output (a file or stdin).

Each line gives the registers per invocation, the bytes of local memory
and the shared memory. The last column is the warps of 32 that one SM
can hold at that register count, where the SM has 65536 registers and
allocates 8 registers per thread at a time (NVIDIA). A workgroup of W
warps then runs floor(warps / W) to an SM.

NVIDIA's "Local Memory Size" reads 2^36 plus the local memory in bytes
(2^36 alone when nothing spills; docs/perf/log-2026-11.md, runs 53 and 96); the
column shows what is over 2^36.

    python3 bench/pipeline_stats_table.py all.log
    .bin/pipeline_stats --attention | python3 bench/pipeline_stats_table.py
"""

import re
import sys

REGISTERS_PER_SM = 65536
LOCAL_MEMORY_BASE = 1 << 36


def warps_per_sm(registers):
    per_thread = -(-registers // 8) * 8
    return REGISTERS_PER_SM // (per_thread * 32)


def kernels(lines):
    """(label, registers, local bytes, shared bytes) per kernel, in order."""
    current = None
    for line in lines:
        if re.match(r"^(Matmul|Attention|Gemv|Fill|Rows|Reduce|Norm|Softmax|Pad)\w* ", line):
            if current:
                yield current
            current = [line.strip(), None, None, None]
            continue
        if current is None:
            continue
        for i, name in ((1, "Register Count"), (2, "Local Memory Size"), (3, "Shared Memory Size")):
            m = re.search(name + r": (\d+)", line)
            if m:
                current[i] = int(m.group(1))
    if current:
        yield current


def main():
    source = open(sys.argv[1]) if len(sys.argv) > 1 else sys.stdin
    rows = list(kernels(source))
    width = max((len(r[0]) for r in rows), default=6)
    print(f"{'kernel':<{width}}  registers  local B  shared B  warps/SM")
    for label, registers, local, shared in rows:
        if registers is None:
            print(f"{label:<{width}}  (no statistics)")
            continue
        if local is None:
            spill = "-"
        elif local >= LOCAL_MEMORY_BASE:
            spill = local - LOCAL_MEMORY_BASE
        else:
            spill = local
        shared = "-" if shared is None else shared
        print(f"{label:<{width}}  {registers:>9}  {spill:>7}  {shared:>8}  {warps_per_sm(registers):>8}")


if __name__ == "__main__":
    main()
