#!/usr/bin/env bash
# Session 11, run 4: the forward's rescale flag without workgroupUniformLoad
# (one barrier fewer per block) against the previous build, the tests on
# tensor cores first; then every backward tile pair after the vectorised
# P/dS (does the dispatcher's pair still win?).
set -u
source scripts/device-env.sh
LIMIT=200 TAIL=8 run "test_attention" sh -c "$B/test_attention --test-threads 4 2>&1 | grep -E '^test |panicked|element|test result' | grep -v ' ok$' | head -20"
LIMIT=90 TAIL=5 run "sweep old" $B/attention_old --sweep-coop --sweep-only --sizes 1024,4096 --dims 128,64
LIMIT=90 TAIL=5 run "sweep new" $B/attention --sweep-coop --sweep-only --sizes 1024,4096 --dims 128,64
LIMIT=90 TAIL=3 run "sweep old 2" sh -c "$B/attention_old --sweep-coop --sweep-only --sizes 4096 --dims 128 | grep full"
LIMIT=90 TAIL=3 run "sweep new 2" sh -c "$B/attention --sweep-coop --sweep-only --sizes 4096 --dims 128 | grep full"
LIMIT=150 TAIL=12 run "backward sweep" $B/attention --sweep-backward --sizes 1024,4096 --dims 128,64
