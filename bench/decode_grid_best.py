"""The decode grid's fastest tiles per (dtype, cache length), from a device
log (`attention --decode-grid` lines under "== decode_grid"; the whole log
when it has no such section), with the dispatcher's own time ("decode").

    python3 bench/decode_grid_best.py bench-out/all.log   # after bench/attention.sh decode
"""
import re
import sys

best = {}
lines = open(sys.argv[1]).read().splitlines()
sectioned = "== decode_grid" in lines
inside = not sectioned
for line in lines:
    if line.startswith("== "):
        inside = not sectioned or line.strip() == "== decode_grid"
        continue
    m = re.match(r"(\d+) (f16|f32)\s+(\S+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)%\s+\[(.*)\]", line)
    if inside and m:
        key = (m.group(2), int(m.group(1)))
        best.setdefault(key, []).append((float(m.group(4)), m.group(3), m.group(7)))
for key in sorted(best):
    rows = sorted(best[key])
    auto = [r for r in rows if r[1] == "decode"]
    print(key, "auto", auto[0][0] if auto else None)
    for r in rows[:6]:
        print("   ", r[0], r[2][-60:])
