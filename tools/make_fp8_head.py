#!/usr/bin/python3
"""Writes the planted FP8 fault "an output head that must stay out of FP8" (docs/TUNE.md "FP8",
planted fault (c)): a small forecasting network scripted as a custom task, and its data, in the
formats amptune reads (model: {name: torchscript, task: custom}, data.format: tensors).

    /usr/bin/python3 tools/make_fp8_head.py --out DIR [--train 2048] [--val 512] [--seed 0]

writes DIR/fp8_head.pt (the scripted model) and DIR/data/train, DIR/data/val (one shard each).
Any Python with torch works; Debian's python3-torch (1.13) writes a file both LibTorch builds
load. About 2 s. Seeded, and the same bytes on every run and in every checkout (it runs itself
again from the repository root with PYTHONHASHSEED=0, as make_tiny_gpt.py does).

The task: forecast the next change of a series from its last two values and 8 side features.
Each sample has a level u ~ U[16, 32], the next value v = u + e (e ~ N(0, 1): the last change),
features z ~ N(0, 1)^8, and the target y = (v - u) + g(z): momentum plus a correction g, a fixed
random two-layer tanh network of z scaled to standard deviation 1 (the teacher, drawn from the
seed). Tensors: "x" F32 [N, 8] (z), "last" F32 [N, 2] (u, v, multiples of 1/8: readings of a
finite resolution, exact in bf16 below 32), "y" F32 [N].

The model (ForecastNet below): an MLP on z - `fc1` Linear(8, 64), ReLU, `fc2` Linear(64, 64),
ReLU - and the output `head`, a Linear(66, 1) over the MLP's features and the raw last two
values (a linear skip path, as forecasting models have): the head must compute v - u, a small
difference of two large, nearly equal inputs. Its weights on (u, v) start at (-1, +1), the
momentum forecast (from PyTorch's default initialisation that difference is ill-conditioned
against the level and even fp32 learns it slowly), the rest at PyTorch's defaults. The planted
fault: in FP8 the head's input is
quantised to E4M3 with one per-tensor scale; its 3 mantissa bits round u and v (scaled near the
format's max) to steps of 1.2 to 2.4, as large as the change itself, so the difference is lost
whatever the scaling recipe (current scaling, margin and history move the scale by powers of
two; the relative step stays 2^-3). The MLP's own FP8 errors only perturb g by a few percent.
In bf16 (8 bits) u and v are exact. Module paths: fc1, act1, fc2, act2, head.
The custom task: training_loss = the mean squared error; eval_batch sums over the batch `mse`
(lower is better, the primary metric) and `mae`.
"""
import argparse
import os
import sys
from typing import Dict

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from generator_boot import (export_custom_task, import_from_root,  # noqa: E402
                            rerun_from_root)

FEATURES = 8
HIDDEN = 64


class ForecastNet(nn.Module):
    higher_is_better: Dict[str, bool]

    def __init__(self, features: int = FEATURES, hidden: int = HIDDEN):
        super().__init__()
        self.fc1 = nn.Linear(features, hidden)
        self.act1 = nn.ReLU()
        self.fc2 = nn.Linear(hidden, hidden)
        self.act2 = nn.ReLU()
        self.head = nn.Linear(hidden + 2, 1)
        self.higher_is_better = {"mse": False, "mae": False}
        with torch.no_grad():  # the skip path starts as the momentum forecast v - u
            self.head.weight[0, hidden:] = torch.tensor([-1.0, 1.0])

    def forward(self, x: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
        """x: [B, 8] features, last: [B, 2] the last two values -> [B] the next change."""
        h = self.act2(self.fc2(self.act1(self.fc1(x))))
        return self.head(torch.cat([h, last], dim=1)).squeeze(1)

    @torch.jit.export
    def training_loss(self, batch: Dict[str, torch.Tensor]) -> torch.Tensor:
        err = self.forward(batch["x"], batch["last"]) - batch["y"]
        return (err * err).mean()

    @torch.jit.export
    def eval_batch(self, batch: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        err = self.forward(batch["x"], batch["last"]) - batch["y"]
        return {"mse": (err * err).sum(), "mae": err.abs().sum()}


def teacher(generator: torch.Generator):
    """g(z): a random tanh network of z, scaled to standard deviation 1 (over a large draw)."""
    w1 = torch.randn(FEATURES, 16, generator=generator) / FEATURES ** 0.5
    b1 = 0.5 * torch.randn(16, generator=generator)
    w2 = torch.randn(16, generator=generator)

    def raw(z):
        return torch.tanh(z @ w1 + b1) @ w2

    norm = raw(torch.randn(65536, FEATURES, generator=generator)).std()
    return lambda z: raw(z) / norm


def samples(n: int, g, generator: torch.Generator) -> Dict[str, torch.Tensor]:
    z = torch.randn(n, FEATURES, generator=generator)
    u = 16 + 16 * torch.rand(n, generator=generator)
    v = u + torch.randn(n, generator=generator)
    last = torch.round(torch.stack([u, v], dim=1) * 8) / 8  # readings in steps of 1/8
    y = (last[:, 1] - last[:, 0]) + g(z)
    return {"x": z.contiguous(), "last": last.contiguous(), "y": y.contiguous()}


def write_data(ets, args, out):
    generator = torch.Generator().manual_seed(args.seed)
    g = teacher(generator)
    example = None
    for split, n in (("train", args.train), ("val", args.val)):
        data = samples(n, g, generator)
        ets.save_shards(data, os.path.join(out, "data", split), overwrite=True)
        print(f"data/{split}: {n} samples, y std {data['y'].std().item():.3f}")
        example = example or {k: t[:4] for k, t in data.items()}
    return example


def write_model(ets, args, out, example):
    torch.manual_seed(args.seed)
    export_custom_task(ets, args.module.ForecastNet(), os.path.join(out, "fp8_head.pt"), example)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="folder for fp8_head.pt and data/")
    parser.add_argument("--train", type=int, default=2048, help="training samples")
    parser.add_argument("--val", type=int, default=512, help="validation samples")
    parser.add_argument("--seed", type=int, default=0, help="the data, teacher and initialisation")
    args = parser.parse_args()
    if args.train < 4 or args.val < 4:
        raise SystemExit("--train and --val must be at least 4")
    out = os.path.abspath(args.out)
    rerun_from_root(__file__, sys.argv[1:] + ["--out", out])
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(1)  # the same sums, so the same bytes, on any machine
    ets = import_from_root("export_torchscript", "tools/export_torchscript.py")
    args.module = import_from_root("make_fp8_head", "tools/make_fp8_head.py")
    example = write_data(ets, args, out)
    write_model(ets, args, out, example)


if __name__ == "__main__":
    main()
