#!/usr/bin/env bash
# What does each of the lecture's techniques buy on this GPU? The tour as
# `cargo xtask tour` runs it (ceilings, every lesson, the roofline), its
# report written to $OUT/tour (report.html with inline figures, and
# report.json); take a screenshot of the page where a browser is
# (`chromium --headless=new --no-sandbox --screenshot=... report.html`).
#
#   bench/build.sh && bash bench/tour.sh
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/env.sh || exit 1
# The tour autotunes large shapes on GPUs unless told otherwise, as a
# user's run would; env.sh turns autotune off for the published numbers.
LIMIT=300 TAIL=60 run "tour" "$B/tour" --html "$OUT/tour"
summary
