#!/usr/bin/python3
"""Evaluates a torchvision ResNet state dict on an IDX split with PyTorch itself.

What PyTorch gives for the weights amptune evaluates in an evaluation-only run
(schedule.epochs: 0, model.weights: FILE, data.format: idx): the model is torchvision's ResNet
(torchvision.models.resnet.ResNet with its own blocks) in eval mode, narrowed and given a small
stem exactly as tools/make_model_fixtures.py builds its fixtures (amptune's model.width,
model.small_input, model.in_channels), fed (pixel / 255 - mean) / std as amptune's data.mean /
data.std. Prints one JSON object:

    {"samples": N, "top1": hits, "top5": hits, "loss_sum": S, "acc1": 100*top1/N,
     "acc5": 100*top5/N, "val_loss": S/N}

Example (the fixture of tests/integration/evalonly_test.cpp):

    /usr/bin/python3 tools/eval_torchvision_idx.py \\
        --weights tests/fixtures/models/resnet50_w0.03125_small_weights.pt \\
        --data DIR --split t10k --arch resnet50 --width 0.03125 --small-input \\
        --in-channels 1 --num-classes 10 --mean 0.5 --std 0.25

Run it with a Python that has torch and torchvision (Debian: /usr/bin/python3 with
python3-torch and python3-torchvision).
"""
import argparse
import gzip
import json
import os
import struct
import sys

import torch
import torch.nn.functional as F
from torchvision.models import resnet as tvr

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_model_fixtures import NarrowResNet  # noqa: E402

ARCHS = {
    "resnet18": (tvr.BasicBlock, [2, 2, 2, 2]),
    "resnet34": (tvr.BasicBlock, [3, 4, 6, 3]),
    "resnet50": (tvr.Bottleneck, [3, 4, 6, 3]),
    "resnet101": (tvr.Bottleneck, [3, 4, 23, 3]),
    "resnet152": (tvr.Bottleneck, [3, 8, 36, 3]),
}


def read_idx(prefix):
    """The array of an IDX file PREFIX or PREFIX.gz, as a uint8 tensor of its dimensions."""
    path = prefix if os.path.exists(prefix) else prefix + ".gz"
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    magic = struct.unpack(">I", raw[:4])[0]
    if magic >> 8 != 0x08:
        sys.exit(f"error: {path} is not an IDX file of unsigned bytes (magic {magic:#x})")
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return torch.frombuffer(bytearray(raw[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--weights", required=True, help="plain-dict state dict (model.weights)")
    parser.add_argument("--data", required=True, help="IDX directory (data.root)")
    parser.add_argument("--split", default="t10k", help="file prefix (default: %(default)s)")
    parser.add_argument("--arch", default="resnet50", choices=sorted(ARCHS))
    parser.add_argument("--width", type=float, default=1.0)
    parser.add_argument("--small-input", action="store_true")
    parser.add_argument("--in-channels", type=int, default=1)
    parser.add_argument("--num-classes", type=int, default=10)
    parser.add_argument("--mean", type=float, nargs="+", required=True)
    parser.add_argument("--std", type=float, nargs="+", required=True)
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args(argv)
    if len(args.mean) != args.in_channels or len(args.std) != args.in_channels:
        sys.exit("error: --mean and --std need one value per input channel")

    torch.set_num_threads(1)
    images = read_idx(os.path.join(args.data, args.split + "-images-idx3-ubyte"))
    labels = read_idx(os.path.join(args.data, args.split + "-labels-idx1-ubyte")).long()
    x = images.float().div(255).unsqueeze(1).expand(-1, args.in_channels, -1, -1)
    mean = torch.tensor(args.mean).view(1, -1, 1, 1)
    std = torch.tensor(args.std).view(1, -1, 1, 1)
    x = (x - mean) / std

    block, layers = ARCHS[args.arch]
    model = NarrowResNet(block, layers, args.width, args.num_classes, args.in_channels,
                         args.small_input)
    model.load_state_dict(torch.load(args.weights), strict=True)
    model.eval()
    top1 = top5 = 0
    loss_sum = 0.0
    with torch.no_grad():
        for start in range(0, len(labels), args.batch_size):
            logits = model(x[start:start + args.batch_size])
            target = labels[start:start + args.batch_size]
            loss_sum += F.cross_entropy(logits, target, reduction="sum").item()
            k = min(5, logits.size(1))
            hits = logits.topk(k, 1).indices.eq(target.unsqueeze(1))
            top1 += int(hits[:, :1].sum())
            top5 += int(hits.sum())
    n = len(labels)
    print(json.dumps({"samples": n, "top1": top1, "top5": top5, "loss_sum": loss_sum,
                      "acc1": 100.0 * top1 / n, "acc5": 100.0 * top5 / n,
                      "val_loss": loss_sum / n}))


if __name__ == "__main__":
    main()
