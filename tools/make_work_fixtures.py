#!/usr/bin/python3
"""Regenerates tests/fixtures/work/: scripted classifiers whose forward multiply-accumulates are
counted by hand (README.md there), for the test of train::forward_work (docs/PERFORMANCE.md
"MFU": every matmul-class op of a graph is counted, not only convolutions and nn.Linear).

Run from anywhere with Debian's Python (torch 1.13, so that LibTorch 1.13 and 2.x both read the
archives; apt-get install python3-torch):

    /usr/bin/python3 tools/make_work_fixtures.py [--out tests/fixtures/work]

Seeded, and the same bytes on every run and in every checkout (the script runs itself again from
the repository root with PYTHONHASHSEED=0, as tools/make_torchscript_fixtures.py does and says why).
Each model is loaded back and run on a batch of the tests' tiny images before the script ends.
"""
import argparse
import io
import os
import sys

import torch
import torch.nn as nn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIDE = 12     # the tests' tiny images: [B, 1, 12, 12], 4 classes
CLASSES = 4


class LstmClassifier(nn.Module):
    """The image's 12 rows as a sequence of 12 steps of 12 features through a two-layer LSTM of
    hidden size 16 (batch_first), the last step's output to 4 classes. Multiply-accumulates of one
    sample: layer 1, 12 steps x 4 gates x 16 x (12 + 16) = 21504; layer 2, 12 x 64 x (16 + 16) =
    24576; the head 16 x 4 = 64. In all 46144."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(SIDE, 16, num_layers=2, batch_first=True)
        self.head = nn.Linear(16, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x.flatten(1, 2))  # [B, 1, 12, 12] -> [B, 12, 12]
        return self.head(out[:, -1])


class CausalAttention(nn.Module):
    """A GPT block's attention written out as users write it: one qkv projection, scores and
    values by the @ operator (aten::matmul), a causal mask made in forward."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q = q.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
        k = k.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
        v = v.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) / float(d // self.heads) ** 0.5
        mask = torch.ones(t, t, device=x.device).triu(1) * -1e9
        y = torch.softmax(scores + mask, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class TinyTransformer(nn.Module):
    """The image's 12 rows as 12 tokens: embedded (Linear 12 -> 16), one nn.TransformerEncoderLayer
    (d 16, 2 heads, feed-forward 32, batch_first, no dropout), one CausalAttention (2 heads), the
    tokens' mean to 4 classes. Multiply-accumulates of one sample (T = 12 tokens, d = 16):
      embedding                          12 x 12 x 16              =  2304
      encoder layer: in-projection       12 x 16 x 48              =  9216
                     scores q k^T        2 heads x 12 x 12 x 8     =  2304
                     values              2 heads x 12 x 12 x 8     =  2304
                     out-projection      12 x 16 x 16              =  3072
                     feed-forward        12 x 16 x 32 x 2          = 12288
      causal attention: qkv, scores, values, proj: 9216 + 2304 + 2304 + 3072 = 16896
      head                               16 x 4                    =    64
    In all 48448."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(SIDE, 16)
        self.encoder = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0,
                                                  batch_first=True)
        self.attn = CausalAttention(16, 2)
        self.head = nn.Linear(16, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.encoder(self.embed(x.flatten(1, 2)))
        h = h + self.attn(h)
        return self.head(h.mean(dim=1))


class FusedAttention(nn.Module):
    """An attention computed by one fused kernel, torch._native_multi_head_attention (the inference
    fast path of nn.MultiheadAttention, called directly; it has no backward, so it only runs
    forward). LibTorch 1.13's CPU kernel computes through addmm and bmm, so its products are
    counted through them: embedding 2304, in-projection 9216, scores 2304, values 2304,
    out-projection 3072, head 64: 19264."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(SIDE, 16)
        self.attn = nn.MultiheadAttention(16, 2, batch_first=True)
        self.head = nn.Linear(16, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x.flatten(1, 2))
        y, _ = torch._native_multi_head_attention(
            h, h, h, 16, 2, self.attn.in_proj_weight, self.attn.in_proj_bias,
            self.attn.out_proj.weight, self.attn.out_proj.bias, None, False)
        return self.head(y.mean(dim=1))


# file: (class, MACs of one sample, seed)
MODELS = {"lstm_classifier.pt": (LstmClassifier, 46144, 0),
          "tiny_transformer.pt": (TinyTransformer, 48448, 1),
          "fused_attention.pt": (FusedAttention, 19264, 2)}  # forward only


def make(out, classes):
    for name, (cls, _, seed) in MODELS.items():
        torch.manual_seed(seed)
        scripted = torch.jit.script(getattr(classes, cls.__name__)().train())
        buffer = io.BytesIO()  # through a buffer: the bytes do not depend on the file name
        torch.jit.save(scripted, buffer)
        with open(os.path.join(out, name), "wb") as f:
            f.write(buffer.getvalue())
        print(f"{name}: {len(buffer.getvalue())} bytes")


def verify(out):
    image = torch.randn(5, 1, SIDE, SIDE, generator=torch.Generator().manual_seed(12))
    for name in MODELS:
        m = torch.jit.load(os.path.join(out, name))
        y = m(image)
        assert y.shape == (5, CLASSES), f"{name}: {tuple(y.shape)}"
        if name != "fused_attention.pt":
            y.sum().backward()
    print("verified: every model loads and runs [5, 1, 12, 12] (and trains a step, but the "
          "fused attention)")


_BOOT = ("f = 'tools/make_work_fixtures.py'; "
         "exec(compile(open(f).read(), f, 'exec'), {'__name__': '__main__', '__file__': f})")


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "work"),
                        help="output directory (default: %(default)s)")
    args = parser.parse_args()
    out = os.path.abspath(args.out)
    if os.environ.get("PYTHONHASHSEED") != "0" or os.path.isabs(__file__):
        os.chdir(ROOT)
        os.execve(sys.executable, [sys.executable, "-c", _BOOT, "--out", out],
                  dict(os.environ, PYTHONHASHSEED="0"))
    os.makedirs(out, exist_ok=True)
    # The classes again from this file under a module name of its own, so that TorchScript
    # resolves their globals through sys.modules and records the relative source path.
    import types
    classes = types.ModuleType("make_work_fixtures")
    classes.__file__ = "tools/make_work_fixtures.py"
    sys.modules["make_work_fixtures"] = classes
    with open(classes.__file__) as f:
        exec(compile(f.read(), classes.__file__, "exec"), classes.__dict__)
    make(out, classes)
    verify(out)


if __name__ == "__main__":
    main()
