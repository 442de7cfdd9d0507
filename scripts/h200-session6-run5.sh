#!/usr/bin/env bash
# Session 6, fifth device call: the decode kernel computing each
# probability once per (row, key) (was: once per value word), the leaner
# epilogue; decode table, the grid at 32k and 128k, probes.
set -u
source scripts/device-env.sh
LIMIT=120 TAIL=20 run decode $B/attention --decode-only
LIMIT=60 TAIL=8 run probe_2 env WGTILE_DECODE_PROBE=2 $B/attention --decode-only --decode-lens 32768,131072
LIMIT=240 TAIL=5 run decode_grid $B/attention --decode-grid --decode-lens 32768,131072
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
    for r in rows[:6]:
        print("   ", r[0], r[2][-60:])
PY
