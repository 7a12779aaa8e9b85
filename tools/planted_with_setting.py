#!/usr/bin/python3
"""The plain-PyTorch run of docs/TUNE.md's worked example: the narrow ResNet-18 of
experiments/tune_planted.yaml (torchvision's code, tools/make_model_fixtures.py) on Fashion-MNIST
left unnormalised as that sweep has it (mean -1, std 0.000032), 20 steps of batch 64 with
the module `amptune tune experiments/tune_planted.yaml --emit python FILE` wrote, then with the
same module without its fp32 modules. Run with Debian's Python (torch 1.13) from the repository:

    /usr/bin/python3 tools/planted_with_setting.py amp_setting.py [--device cuda]

On the CPU, float16 autocast is emulated as tests/integration/setting_train.py does (PyTorch
1.13's CPU autocast takes bfloat16 only): conv / linear / matmul take and give values on
float16's grid, beyond 65504 is inf. With --device cuda it is CUDA's own autocast.
"""
import argparse
import gzip
import math
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
from make_model_fixtures import NarrowResNet  # noqa: E402
from torchvision.models.resnet import BasicBlock  # noqa: E402
import setting_train  # noqa: E402


def idx(path, offset):
    with gzip.open(path) as f:
        return np.frombuffer(f.read(), np.uint8, offset=offset)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("setting")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    args = parser.parse_args()
    n = 64 * setting_train.STEPS
    images = idx(os.path.join(args.data, "train-images-idx3-ubyte.gz"), 16)[:n * 784]
    labels = idx(os.path.join(args.data, "train-labels-idx1-ubyte.gz"), 8)[:n]
    x = (torch.tensor(images.reshape(n, 1, 28, 28).copy()).float() / 255 + 1.0) / 0.000032
    y = torch.tensor(labels.astype(np.int64))
    batches = [(x[i:i + 64].to(args.device), y[i:i + 64].to(args.device)) for i in range(0, n, 64)]
    emulate = args.device == "cpu"
    if emulate:
        torch.autocast = setting_train.EmulatedFloat16Autocast
    for label, keep in (("with the file", True), ("without its fp32 modules", False)):
        module = setting_train.load(args.setting, "setting_" + str(keep))
        if not keep:
            module.SETTING["fp32_modules"] = []
        torch.manual_seed(0)
        model = NarrowResNet(BasicBlock, [2, 2, 2, 2], 0.25, 10, 1, True).to(args.device)
        setting = module.apply(model, device_type=args.device)
        if emulate:
            with setting_train.LowPrecisionOps():
                losses = setting_train.train(model, setting, batches)
        else:
            losses = setting_train.train(model, setting, batches)
        scaler = setting.scaler
        print("%-25s losses %s ... %s: %d of %d finite; loss scale %g" % (
            label, ", ".join("%.3f" % v for v in losses[:3]),
            ", ".join("%.3f" % v for v in losses[-2:]), sum(math.isfinite(v) for v in losses),
            len(losses), scaler.get_scale() if scaler is not None else 1.0))


if __name__ == "__main__":
    main()
