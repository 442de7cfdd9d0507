#!/usr/bin/env bash
# Session 6, third device call: the decode table with the one-pass merge
# (stage times: split pass + merge), then the decode tile grid (workgroup
# shapes x workgroups per compute unit) at 4k, 32k and 128k keys.
# Build: scripts/build-device.sh; carry .bin and .gl. Logs under $OUT.
set -u
source scripts/device-env.sh
LIMIT=120 TAIL=20 run decode $B/attention --decode-only
LIMIT=300 TAIL=5 run decode_grid $B/attention --decode-grid --decode-lens 4096,32768,131072
# The grid's best per (dtype, cache length), to pick the defaults.
python3 - "$OUT/all.log" <<'PY'
import re, sys
best = {}
sec = False
for line in open(sys.argv[1]):
    if line.startswith("== "):
        sec = line.strip() == "== decode_grid"
        continue
    m = re.match(r"(\d+) (f16|f32)\s+(\S+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)%\s+\[(.*)\]", line)
    if sec and m:
        key = (m.group(2), int(m.group(1)))
        best.setdefault(key, []).append((float(m.group(4)), m.group(3), m.group(7)))
for key in sorted(best):
    rows = sorted(best[key])
    auto = [r for r in rows if r[1] == "decode"]
    print(key, "auto", auto[0][0] if auto else None)
    for r in rows[:5]:
        print("   ", r[0], r[2][-60:])
PY
