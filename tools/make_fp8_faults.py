#!/usr/bin/python3
"""Writes the planted FP8 fault "a layer whose amax jumps" (docs/TUNE.md "Planted FP8 faults",
experiments/tune_fp8_jump.yaml): a small MLP classifier scripted as a custom task, and tensor
shards of generated data, in the formats amptune reads (model: {name: torchscript, task:
custom}, data.format: tensors).

    /usr/bin/python3 tools/make_fp8_faults.py jump --out DIR [--gain-exponent 6]
            [--outlier-batches 0.5] [--batch-size 32] [--train 2048] [--val 512] [--seed 0]

writes DIR/jump.pt (the scripted model), DIR/jump/train, DIR/jump/val (shards with outlier
batches) and DIR/steady/train, DIR/steady/val (the same samples, every gain 1: the control).
Any Python with torch works; Debian's python3-torch (1.13) writes a file both LibTorch builds
load. About 2 s. Seeded, and the same bytes on every run and in every checkout (it runs itself
again from the repository root with PYTHONHASHSEED=0, as make_tiny_gpt.py does).

The model (JumpMlp below; module paths fc1, act1, jump, act2, head):

    h = relu(fc1(x));  g = max(batch["gain"]);  h = relu(jump(h * g) / g + jump_bias)
    logits = head(h)

jump is a bias-free Linear (its bias is added after the division). g is a power of two, and
scaling by a power of two commutes with every rounding amptune emulates (fp32, bf16, and FP8
under current scaling, whose scale follows the tensor's amax: the same FP8 values times g), so
the network computes the same losses and gradients, bit for bit, for every g. Under Transformer
Engine's delayed scaling the scale of jump's input comes from the amax of earlier steps: on a
batch whose g is 2^gain_exponent times the step before's, the input's amax lands that far beyond
E4M3's max and most of its values saturate; on the batch after it, the output gradient (divided
by g in the forward pass, multiplied back by the step's change) saturates E5M2 in the same way.
The input's amax jumps between steps as a layer's activations do on outlier batches; the
construction makes the jump the only thing that differs from a steady network.

Data: x [N, 16] standard normal, label [N] int64 = the class (of 4) a fixed random two-layer
teacher network gives x, gain [N] float32. In the jump shards each sample's gain is
2^gain_exponent with probability p, else 1, p chosen so that a batch of --batch-size holds at
least one such sample (an "outlier batch", g = 2^gain_exponent) with probability
--outlier-batches; in the steady shards every gain is 1. The custom task: training_loss = mean
cross-entropy; eval_batch sums over the batch each sample's right prediction (`acc`, higher is
better, the primary metric) and cross-entropy (`val_loss`).
"""
import argparse
import os
import sys
from typing import Dict

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from generator_boot import (export_custom_task, import_from_root,  # noqa: E402
                            rerun_from_root)

FEATURES = 16
CLASSES = 4


class JumpMlp(nn.Module):
    higher_is_better: Dict[str, bool]

    def __init__(self, hidden: int = 64):
        super().__init__()
        self.fc1 = nn.Linear(FEATURES, hidden)
        self.act1 = nn.ReLU()
        self.jump = nn.Linear(hidden, hidden, bias=False)
        self.jump_bias = nn.Parameter(torch.zeros(hidden))
        self.act2 = nn.ReLU()
        self.head = nn.Linear(hidden, CLASSES)
        self.higher_is_better = {"acc": True, "val_loss": False}

    def logits(self, x: torch.Tensor, gain: torch.Tensor) -> torch.Tensor:
        """x: [B, 16], gain: [B] powers of two -> [B, 4] logits, the same for every gain."""
        h = self.act1(self.fc1(x))
        g = gain.max()
        h = self.act2(self.jump(h * g) / g + self.jump_bias)
        return self.head(h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The classifier at gain 1."""
        return self.logits(x, torch.ones(1, dtype=x.dtype, device=x.device))

    @torch.jit.export
    def training_loss(self, batch: Dict[str, torch.Tensor]) -> torch.Tensor:
        return F.cross_entropy(self.logits(batch["x"], batch["gain"]), batch["label"])

    @torch.jit.export
    def eval_batch(self, batch: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        logits = self.logits(batch["x"], batch["gain"])
        label = batch["label"]
        right = (logits.argmax(dim=1) == label).float().sum()
        return {"acc": right, "val_loss": F.cross_entropy(logits, label, reduction="sum")}


def make_split(count: int, teacher, generator: torch.Generator):
    """x and label of `count` samples."""
    x = torch.randn(count, FEATURES, generator=generator)
    with torch.no_grad():
        label = teacher(x).argmax(dim=1)
    return {"x": x.contiguous(), "label": label.contiguous()}


def gains(count: int, p: float, exponent: int, generator: torch.Generator) -> torch.Tensor:
    outlier = torch.rand(count, generator=generator) < p
    return torch.where(outlier, torch.tensor(2.0 ** exponent), torch.tensor(1.0))


def write_jump(ets, args, out):
    generator = torch.Generator().manual_seed(args.seed)
    teacher = nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, CLASSES))
    with torch.no_grad():
        for p in teacher.parameters():
            p.copy_(torch.randn(p.shape, generator=generator))
    # A batch holds no outlier with probability (1 - p)^B = 1 - outlier_batches.
    p = 1.0 - (1.0 - args.outlier_batches) ** (1.0 / args.batch_size)
    example = None
    for split, count in (("train", args.train), ("val", args.val)):
        data = make_split(count, teacher, generator)
        gain = gains(count, p, args.gain_exponent, generator)
        ets.save_shards(dict(data, gain=gain), os.path.join(out, "jump", split), overwrite=True)
        ets.save_shards(dict(data, gain=torch.ones(count)), os.path.join(out, "steady", split),
                        overwrite=True)
        share = (gain > 1).float().mean().item()
        print(f"jump/{split}, steady/{split}: {count} samples; {share:.1%} with gain "
              f"2^{args.gain_exponent} in jump/{split}")
        if example is None:
            example = {"x": data["x"][:8], "label": data["label"][:8], "gain": gain[:8]}
    torch.manual_seed(args.seed)
    export_custom_task(ets, args.module.JumpMlp(args.hidden), os.path.join(out, "jump.pt"),
                       example)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    faults = parser.add_subparsers(dest="fault", required=True)
    jump = faults.add_parser("jump", help="a layer whose amax jumps between batches")
    jump.add_argument("--out", required=True, help="folder for jump.pt, jump/ and steady/")
    jump.add_argument("--gain-exponent", type=int, default=6,
                      help="an outlier batch's gain is 2^this (default %(default)s)")
    jump.add_argument("--outlier-batches", type=float, default=0.5,
                      help="share of batches with an outlier (default %(default)s)")
    jump.add_argument("--batch-size", type=int, default=32,
                      help="the training batch size the share is for (default %(default)s)")
    jump.add_argument("--train", type=int, default=2048, help="training samples")
    jump.add_argument("--val", type=int, default=512, help="validation samples")
    jump.add_argument("--hidden", type=int, default=64, help="width of fc1 and jump")
    jump.add_argument("--seed", type=int, default=0, help="data, teacher and initialisation")
    args = parser.parse_args()
    if not 0 < args.outlier_batches < 1 or args.batch_size < 1 or args.train < 1 or args.val < 1:
        raise SystemExit("--outlier-batches must be in (0, 1), --batch-size, --train and --val "
                         ">= 1")
    if not 0 <= args.gain_exponent <= 64:
        raise SystemExit("--gain-exponent must be in 0..64")
    out = os.path.abspath(args.out)
    rerun_from_root(__file__, sys.argv[1:] + ["--out", out])
    os.makedirs(out, exist_ok=True)
    ets = import_from_root("export_torchscript", "tools/export_torchscript.py")
    args.module = import_from_root("make_fp8_faults", "tools/make_fp8_faults.py")
    write_jump(ets, args, out)


if __name__ == "__main__":
    main()
