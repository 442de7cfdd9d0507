#!/usr/bin/env bash
# Session 15, run 10: the f32 split kernel's max pass with the 8 rows of a
# whole group loaded together through 8 named row starts (run 101 held them
# in a `var` array and lost: 14.4 -> 18.0 us at 1792). Before, one row's
# quads after another's: 14 us at 1792, 1.8 TB/s). Prediction: the pass
# ~8 us at 1792 (the plan 244 -> ~238 us, +2.5%), 1024 a few us less
# (+4-5%), 4096 unchanged (39.5 us, 3.4 TB/s already). The previous build
# (matmul_sweep_old, ae2d40d: the same f32 path) alongside, two rounds.
# The same A/B as run 9 (its script), on the build with the named row starts.
exec bash "$(dirname "$0")/h200-session15-run9.sh"
