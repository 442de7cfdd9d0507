#!/usr/bin/env bash
# A BERT sentence encoder end to end (examples/bert_embed): MiniLM-L6 and
# BERT-base shapes, random weights, batch 1/32/128 x 128 tokens, f32 and
# f16, each run op by op, in one `Context::batch` and as a plan built once,
# next to PyTorch eager and torch.compile running the same architecture
# (bench/torch_bert.py) in the same call. Then the layout ops and the
# any-axis reductions against a copy (examples/layout) and the batch
# example's small MLP stack at one row.
#
#   bench/build.sh && bash bench/bert.sh
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/env.sh || exit 1
for shape in minilm base; do
  LIMIT=300 TAIL=8 run "bert $shape" "$B/bert_embed" --bench --shape $shape --dtype f32,f16 --batch 1,32,128 --seq 128 --profile
  if have_torch; then
    LIMIT=400 TAIL=8 run "torch bert $shape" python3 bench/torch_bert.py --shape $shape --dtype f32,f16 --batch 1,32,128 --seq 128
  else
    skip "torch bert $shape" "no PyTorch with a GPU here"
  fi
done
# The same without the buffer pool: what reusing allocations buys.
LIMIT=300 TAIL=8 run "bert minilm no pool" "$B/bert_embed" --bench --shape minilm --dtype f32,f16 --batch 1,32,128 --seq 128 --pool-mib 0
LIMIT=200 TAIL=30 run "layout" "$B/layout"
LIMIT=120 TAIL=8 run "batch" "$B/batch" --rows 1
summary
