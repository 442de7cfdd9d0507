"""Reference embeddings for `bert_embed --reference`, from sentence-transformers.

    python3 examples/bert_embed/reference.py MODEL_DIR ref.json [SENTENCE ...]

MODEL_DIR is a sentence-transformers model directory (all-MiniLM-L6-v2,
for example); the embeddings are mean-pooled and L2-normalised, in f32 on
the CPU. Without sentences it embeds the example's four default ones.
"""

import json
import sys

from sentence_transformers import SentenceTransformer

DEFAULT = [
    "The cat sits outside.",
    "A man is playing guitar.",
    "The new movie is awesome.",
    "A cat is sitting outdoors.",
]


def main() -> None:
    model_dir, out = sys.argv[1], sys.argv[2]
    sentences = sys.argv[3:] or DEFAULT
    model = SentenceTransformer(model_dir, device="cpu")
    emb = model.encode(sentences, normalize_embeddings=True, convert_to_numpy=False)
    with open(out, "w") as f:
        json.dump({"sentences": sentences, "embeddings": [e.tolist() for e in emb]}, f)
    print(f"wrote {len(sentences)} embeddings of {len(emb[0])} values to {out}")


if __name__ == "__main__":
    main()
