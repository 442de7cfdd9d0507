#!/usr/bin/env bash
# Session 6, eighth device call: the decode tile grid again with the lazy
# rescaling kernel (fewer instructions per key may change which shape and
# split count win), 32k and 128k keys.
set -u
source scripts/device-env.sh
LIMIT=240 TAIL=5 run decode_grid $B/attention --decode-grid --decode-lens 32768,131072
python3 - "$OUT/all.log" <<'PY'
import re, sys
best = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\d+) (f16|f32)\s+(\S+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)%\s+\[(.*)\]", line)
    if m:
        key = (m.group(2), int(m.group(1)))
        best.setdefault(key, []).append((float(m.group(4)), m.group(3), m.group(7)))
for key in sorted(best):
    rows = sorted(best[key])
    auto = [r for r in rows if r[1] == "decode"]
    print(key, "auto", auto[0][0] if auto else None)
    for r in rows[:6]:
        print("   ", r[0], r[2][-60:])
PY
