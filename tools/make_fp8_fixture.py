#!/usr/bin/env python3
"""Writes tests/fixtures/torchscript/fp8_gemms.pt: a small scripted classifier whose graph holds
every kind of GEMM the FP8 recipe tells apart (docs/MODELS.md, amp/op_emulation.h):

  conv   Conv2d(1, 3, 3, padding=1)       aten::conv2d with a bias       -> an FP8 GEMM
  fc     Linear(12, 6)                    aten::linear with a bias       -> an FP8 GEMM
  twice  two F.linear calls in one forward (w1 with bias b, then w2 without one)
                                          -> FP8 GEMMs "twice" and "twice#1"
  h h^T  torch.bmm of two activations     -> stays in the base precision
  head   Linear(6, 4)                     -> an FP8 GEMM

forward(x [B, 1, 8, 8]) = head(sum_j (g g^T)_ij / 6 + g),
g = twice(fc(flatten(pool2(relu(conv(x)))))), pool2 = adaptive_avg_pool2d to 2 x 2. Seed 5. Run with Debian's Python (torch 1.13.1) so that
LibTorch 1.13 and 2.x both read it:

    /usr/bin/python3 tools/make_fp8_fixture.py
"""
import io
import os
import sys

import torch
import torch.nn.functional as F
from torch import nn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Twice(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(6, 6) * 0.4)
        self.b = nn.Parameter(torch.randn(6) * 0.1)
        self.w2 = nn.Parameter(torch.randn(6, 6) * 0.4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(torch.relu(F.linear(x, self.w1, self.b)), self.w2)


class Fp8Gemms(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 3, 3, padding=1)
        self.fc = nn.Linear(12, 6)
        self.twice = Twice()
        self.head = nn.Linear(6, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.adaptive_avg_pool2d(torch.relu(self.conv(x)), 2).flatten(1)
        g = self.twice(self.fc(h))
        attn = torch.bmm(g.unsqueeze(2), g.unsqueeze(1)).sum(dim=2) / 6.0
        return self.head(attn + g)


def main():
    if os.environ.get("PYTHONHASHSEED") != "0" or os.path.isabs(sys.argv[0]):
        # Once more from ROOT with a fixed string hash, so that the archive holds the same bytes in
        # every checkout (Conv2d's constants are listed in the order of a Python set; the debug
        # records name this file).
        os.chdir(ROOT)
        os.execve(sys.executable, [sys.executable, "tools/make_fp8_fixture.py"],
                  dict(os.environ, PYTHONHASHSEED="0"))
    torch.manual_seed(5)
    model = torch.jit.script(Fp8Gemms().train())
    buffer = io.BytesIO()
    torch.jit.save(model, buffer)
    path = os.path.join(ROOT, "tests", "fixtures", "torchscript", "fp8_gemms.pt")
    with open(path, "wb") as f:
        f.write(buffer.getvalue())
    back = torch.jit.load(path)
    assert back(torch.randn(3, 1, 8, 8)).shape == (3, 4)
    print(f"{path}: {len(buffer.getvalue())} bytes")


if __name__ == "__main__":
    main()
