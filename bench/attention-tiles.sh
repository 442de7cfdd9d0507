#!/usr/bin/env bash
# Does the dispatcher pick the fastest attention tiles on this GPU? Times
# every tile candidate next to the dispatcher's pick: the scalar flash
# kernel (--sweep-tiles), the tensor-core forward in f16 and f32
# (--sweep-coop) and the tensor-core backward's kernel pairs
# (--sweep-backward), B4 H16 at S 1024 and 4096, D 128 and 64.
#
#   SIZES=4096 DIMS=128 bash bench/attention-tiles.sh
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/env.sh || exit 1
S=${SIZES:-1024,4096}
D=${DIMS:-128,64}
LIMIT=300 TAIL=30 run "flash tiles" "$B/attention_sweep" --sweep-tiles --sweep-only --sizes "$S" --dims "$D" --repeats 5
LIMIT=300 TAIL=40 run "coop tiles" "$B/attention_sweep" --sweep-coop --sweep-only --coop-dtypes f16,f32 --sizes "$S" --dims "$D" --repeats 5
LIMIT=300 TAIL=40 run "backward tiles" "$B/attention_sweep" --sweep-backward --sizes "$S" --dims "$D" --repeats 5
summary
