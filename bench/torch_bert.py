"""PyTorch baseline for `bert_embed --bench`: the same BERT encoder (random
weights, post-norm layers, exact GELU, SDPA with the padding mask, masked
mean pooling, L2 normalisation), eager and torch.compile, timed the same
way (wall clock of a forward pass plus a device synchronisation, median
after three warm-up runs).

    python3 bench/torch_bert.py [--shape minilm|base] [--batch 1,32,128] [--seq 128] [--dtype f32,f16]
"""

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

SHAPES = {
    "minilm": dict(layers=6, hidden=384, heads=12, ffn=1536),
    "base": dict(layers=12, hidden=768, heads=12, ffn=3072),
}


class Encoder(torch.nn.Module):
    def __init__(self, layers, hidden, heads, ffn, vocab=30522, positions=512):
        super().__init__()
        self.heads = heads
        self.word = torch.nn.Embedding(vocab, hidden)
        self.pos = torch.nn.Embedding(positions, hidden)
        self.ln = torch.nn.LayerNorm(hidden, eps=1e-12)
        self.layers = torch.nn.ModuleList()
        for _ in range(layers):
            self.layers.append(
                torch.nn.ModuleDict(
                    dict(
                        qkv=torch.nn.Linear(hidden, 3 * hidden),
                        o=torch.nn.Linear(hidden, hidden),
                        ln1=torch.nn.LayerNorm(hidden, eps=1e-12),
                        i=torch.nn.Linear(hidden, ffn),
                        f=torch.nn.Linear(ffn, hidden),
                        ln2=torch.nn.LayerNorm(hidden, eps=1e-12),
                    )
                )
            )

    def forward(self, ids, mask):
        b, s = ids.shape
        x = self.ln(self.word(ids) + self.pos.weight[:s])
        keep = mask[:, None, None, :].bool()
        for l in self.layers:
            q, k, v = l["qkv"](x).view(b, s, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
            a = a.transpose(1, 2).reshape(b, s, -1)
            x = l["ln1"](l["o"](a) + x)
            x = l["ln2"](l["f"](F.gelu(l["i"](x))) + x)
        pooled = (mask[:, :, None] * x).sum(1) / mask.sum(1, keepdim=True).clamp(min=1e-9)
        return F.normalize(pooled, dim=-1)


def median_time(f, seconds):
    for _ in range(3):
        f()
        torch.cuda.synchronize()
    times = []
    start = time.perf_counter()
    while len(times) < 5 or (time.perf_counter() - start < seconds and len(times) < 200):
        t = time.perf_counter()
        f()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="minilm")
    p.add_argument("--batch", default="1,32,128")
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--dtype", default="f32,f16")
    p.add_argument("--seconds", type=float, default=1.0)
    args = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    shape = SHAPES[args.shape]
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, encoder {args.shape} {shape}")
    rows = []
    for name in args.dtype.split(","):
        dtype = {"f32": torch.float32, "f16": torch.float16}[name]
        torch.manual_seed(0)
        model = Encoder(**shape).cuda().to(dtype).eval()
        compiled = torch.compile(model)
        for b in [int(v) for v in args.batch.split(",")]:
            ids = torch.randint(1000, 30000, (b, args.seq), device="cuda")
            mask = torch.ones(b, args.seq, device="cuda", dtype=dtype)
            with torch.inference_mode():
                eager = median_time(lambda: model(ids, mask), args.seconds)
                comp = median_time(lambda: compiled(ids, mask), args.seconds)
            print(f"  {name} batch {b:>3}: eager {eager * 1e3:8.3f} ms, compile {comp * 1e3:8.3f} ms")
            rows.append((name, b, eager, comp))
    print()
    print("| dtype | batch | eager (sent/s) | torch.compile (sent/s) | eager ms | compile ms |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, b, eager, comp in rows:
        print(f"| {name} | {b} | {b / eager:.0f} | {b / comp:.0f} | {eager * 1e3:.3f} | {comp * 1e3:.3f} |")


if __name__ == "__main__":
    main()
