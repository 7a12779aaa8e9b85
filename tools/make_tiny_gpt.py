#!/usr/bin/python3
"""Writes the tiny GPT example (docs/MODELS.md "A small transformer"): a decoder-only transformer
written in Python and scripted as a custom task, and byte-level token shards of real English
text, in the formats amptune reads (model: {name: torchscript, task: custom}, data.format:
tensors).

    /usr/bin/python3 tools/make_tiny_gpt.py --out DIR [--from FILE ...] [--seq-len 64]
            [--dim 64] [--heads 4] [--layers 2] [--val-every 10] [--seed 0]

writes DIR/gpt_tiny.pt (the scripted model) and DIR/tokens/train, DIR/tokens/val (shards). Any
Python with torch works; Debian's python3-torch (1.13) writes a file both LibTorch builds load.
About 3 s. Seeded, and the same bytes on every run and in every checkout (it runs itself again
from the repository root with PYTHONHASHSEED=0, as make_torchscript_fixtures.py does).

Text: the --from files (default: the licence texts Debian installs in /usr/share/common-licenses,
14 files, 237,320 bytes of English once the copies are left out), read as bytes; a file whose
bytes equal an earlier one's is left out. Tokens are the bytes themselves (vocabulary 256, no
tokenizer to ship). Each file is cut into windows of seq_len + 1 bytes, window i starting at
byte i * seq_len (a window's last byte is the next one's first: every byte but a file's first is
a prediction target exactly once); a file's tail shorter than a window is dropped. Windows are
numbered over all files in order; every val_every-th (index % val_every == val_every - 1) is the
validation split, the others the training split: a fixed, interleaved split of the same texts.
Each split is one shard with one tensor, "tokens": U8 [windows, seq_len + 1].

The model (TinyGPT below): token and position embeddings, `layers` pre-LayerNorm blocks of causal
self-attention (qkv and proj Linears, the softmax in the graph) and an MLP (fc, GELU, proj), a final
LayerNorm and an output head Linear. Module paths: tok, pos, blocks.0.ln1, blocks.0.attn.qkv,
blocks.0.attn.proj, blocks.0.ln2, blocks.0.mlp.fc, blocks.0.mlp.act, blocks.0.mlp.proj, ...,
ln_f, head. The custom task: training_loss = the mean next-byte cross-entropy (nats); eval_batch
sums over the batch each window's bits per byte (`bpb`, lower is better, the primary metric)
and its share of next bytes predicted right (`next_byte_acc`).
"""
import argparse
import hashlib
import math
import os
import sys
from typing import Dict, List

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from generator_boot import (export_custom_task, import_from_root,  # noqa: E402
                            rerun_from_root)

DEFAULT_TEXT = "/usr/share/common-licenses"
VOCAB = 256


class CausalSelfAttention(nn.Module):
    heads: int

    def __init__(self, dim: int, heads: int, seq_len: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.register_buffer("mask", torch.ones(seq_len, seq_len, dtype=torch.bool).tril())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.size(0), x.size(1), x.size(2)
        q, k, v = self.qkv(x).split(c, dim=2)
        d = c // self.heads
        q = q.reshape(b, t, self.heads, d).transpose(1, 2)
        k = k.reshape(b, t, self.heads, d).transpose(1, 2)
        v = v.reshape(b, t, self.heads, d).transpose(1, 2)
        att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        att = att.masked_fill(~self.mask[:t, :t], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = torch.matmul(att, v).transpose(1, 2).reshape(b, t, c)
        return self.proj(y)


class Mlp(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.fc = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.proj = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.act(self.fc(x)))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, seq_len: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads, seq_len)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    higher_is_better: Dict[str, bool]

    def __init__(self, seq_len: int = 64, dim: int = 64, heads: int = 4, layers: int = 2):
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim {dim} is not a multiple of heads {heads}")
        self.tok = nn.Embedding(VOCAB, dim)
        self.pos = nn.Embedding(seq_len, dim)
        self.blocks = nn.ModuleList([Block(dim, heads, seq_len) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, VOCAB)
        self.higher_is_better = {"bpb": False, "next_byte_acc": True}
        for name, p in self.named_parameters():  # GPT-2's initialisation
            if name.endswith("weight") and p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [B, T] byte tokens (int64) -> [B, T, 256] logits of the next byte."""
        positions = torch.arange(x.size(1), device=x.device)
        h = self.tok(x) + self.pos(positions)
        for block in self.blocks:
            h = block(h)
        return self.head(self.ln_f(h))

    def _nll(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """[B, T] next-byte cross-entropy (nats) of logits [B, T, 256] against target [B, T]."""
        nll = F.cross_entropy(logits.reshape(-1, logits.size(2)), target.reshape(-1),
                              reduction="none")
        return nll.reshape(target.size(0), target.size(1))

    @torch.jit.export
    def training_loss(self, batch: Dict[str, torch.Tensor]) -> torch.Tensor:
        t = batch["tokens"].long()
        return self._nll(self.forward(t[:, :-1]), t[:, 1:]).mean()

    @torch.jit.export
    def eval_batch(self, batch: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        t = batch["tokens"].long()
        logits = self.forward(t[:, :-1])
        target = t[:, 1:]
        per_window = self._nll(logits, target).mean(dim=1)
        right = (logits.argmax(dim=-1) == target).float().mean(dim=1)
        return {"bpb": (per_window / math.log(2.0)).sum(), "next_byte_acc": right.sum()}


def text_files(sources: List[str]) -> List[str]:
    """The files named, folders expanded to their regular files in name order."""
    out = []
    for s in sources:
        if os.path.isdir(s):
            out += sorted(os.path.join(s, f) for f in os.listdir(s)
                          if os.path.isfile(os.path.join(s, f)))
        elif os.path.isfile(s):
            out.append(s)
        else:
            raise SystemExit(f"--from {s}: no such file or folder")
    return out


def token_windows(files: List[str], seq_len: int) -> torch.Tensor:
    """U8 [windows, seq_len + 1] of the files' bytes (docstring at the top)."""
    seen, rows = set(), []
    for path in files:
        with open(path, "rb") as f:
            data = f.read()
        digest = hashlib.sha256(data).digest()
        if digest in seen:
            continue
        seen.add(digest)
        whole = torch.tensor(list(data), dtype=torch.uint8)
        for start in range(0, len(data) - seq_len, seq_len):
            rows.append(whole[start:start + seq_len + 1])
    if not rows:
        raise SystemExit(f"no window of {seq_len + 1} bytes in {', '.join(files)}")
    return torch.stack(rows)


def write_data(ets, args, out):
    files = text_files(args.sources)
    windows = token_windows(files, args.seq_len)
    is_val = torch.arange(len(windows)) % args.val_every == args.val_every - 1
    for split, rows in (("train", windows[~is_val]), ("val", windows[is_val])):
        folder = os.path.join(out, "tokens", split)
        ets.save_shards({"tokens": rows.contiguous()}, folder, overwrite=True)
        print(f"tokens/{split}: {len(rows)} windows of {args.seq_len + 1} bytes")
    return {"tokens": windows[:4]}


def write_model(ets, args, out, example):
    torch.manual_seed(args.seed)
    gpt = args.module.TinyGPT(args.seq_len, args.dim, args.heads, args.layers)
    export_custom_task(ets, gpt, os.path.join(out, "gpt_tiny.pt"), example)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="folder for gpt_tiny.pt and tokens/")
    parser.add_argument("--from", dest="sources", nargs="+", default=[DEFAULT_TEXT],
                        help="text files or folders (default: %(default)s)")
    parser.add_argument("--seq-len", type=int, default=64, help="tokens a window predicts")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--val-every", type=int, default=10, help="every Nth window is val")
    parser.add_argument("--seed", type=int, default=0, help="the model's initialisation")
    args = parser.parse_args()
    if args.seq_len < 1 or args.val_every < 2:
        raise SystemExit("--seq-len must be >= 1 and --val-every >= 2")
    out = os.path.abspath(args.out)
    sources = [os.path.abspath(s) for s in args.sources]
    rerun_from_root(__file__, sys.argv[1:] + ["--out", out, "--from"] + sources)
    os.makedirs(out, exist_ok=True)
    ets = import_from_root("export_torchscript", "tools/export_torchscript.py")
    args.module = import_from_root("make_tiny_gpt", "tools/make_tiny_gpt.py")
    example = write_data(ets, args, out)
    write_model(ets, args, out, example)


if __name__ == "__main__":
    main()
