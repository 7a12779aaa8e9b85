#!/usr/bin/python3
"""Regenerates tests/fixtures/models/ from torchvision's own ResNet code.

Run with Debian's Python, which has torch and torchvision (apt-get install python3-torch
python3-torchvision):

    /usr/bin/python3 tools/make_model_fixtures.py [--out tests/fixtures/models]

Writes
  resnet50_keys.txt            every state-dict key of torchvision.models.resnet50() with its
                               shape ("name d0,d1,..." per line, "name -" for a 0-dim tensor)
  <net>_weights.pt             plain dict {name: tensor} of a narrow torchvision ResNet
  <net>_io.pt                  plain dict {"input", "eval_logits", "train_logits"}
for <net> = resnet18_w0.0625 (BasicBlock, ImageNet stem, 3x64x64 input) and
resnet50_w0.03125_small (Bottleneck, small-input stem, 1 channel, 1x28x28 input).

The narrow networks are torchvision.models.resnet.ResNet with its own BasicBlock/Bottleneck
classes and _make_layer; only the stage planes are scaled by `width` (amptune's model.width:
planes = max(1, round(base * width)) for base 64/128/256/512) and, with small_input, conv1 is a
3x3 stride-1 conv and the max-pool is dropped (amptune's model.small_input). BatchNorm running
statistics and affine parameters are randomised so that eval mode is a real test.
"""
import argparse
import math
import os

import torch
import torch.nn as nn
from torchvision.models import resnet as tvr


def channels(base, width):
    return max(1, int(math.floor(base * width + 0.5)))


class NarrowResNet(tvr.ResNet):
    """torchvision's ResNet with scaled stage widths, optional small-input stem and in_channels."""

    def __init__(self, block, layers, width, num_classes, in_channels, small_input):
        super().__init__(block, layers, num_classes=num_classes)
        self.inplanes = channels(64, width)
        if small_input:
            self.conv1 = nn.Conv2d(in_channels, self.inplanes, 3, 1, 1, bias=False)
            self.maxpool = nn.Identity()
        else:
            self.conv1 = nn.Conv2d(in_channels, self.inplanes, 7, 2, 3, bias=False)
        self.bn1 = self._norm_layer(self.inplanes)
        self.layer1 = self._make_layer(block, channels(64, width), layers[0])
        self.layer2 = self._make_layer(block, channels(128, width), layers[1], stride=2)
        self.layer3 = self._make_layer(block, channels(256, width), layers[2], stride=2)
        self.layer4 = self._make_layer(block, channels(512, width), layers[3], stride=2)
        self.fc = nn.Linear(channels(512, width) * block.expansion, num_classes)


def randomise_bn(model, gen):
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                n = m.num_features
                m.weight.copy_(torch.rand(n, generator=gen) + 0.5)
                m.bias.copy_(torch.randn(n, generator=gen) * 0.1)
                m.running_mean.copy_(torch.randn(n, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(n, generator=gen) + 0.5)
                m.num_batches_tracked.fill_(7)


def make_net(out_dir, name, block, layers, width, in_channels, small_input, input_shape, seed):
    torch.manual_seed(seed)
    model = NarrowResNet(block, layers, width, 10, in_channels, small_input)
    gen = torch.Generator().manual_seed(seed + 1)
    randomise_bn(model, gen)
    x = torch.randn(*input_shape, generator=gen)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    model.eval()
    with torch.no_grad():
        eval_logits = model(x)
    model.train()  # batch statistics; updates running stats, so the weights were copied first
    with torch.no_grad():
        train_logits = model(x)
    torch.save(dict(state), os.path.join(out_dir, name + "_weights.pt"))
    torch.save({"input": x, "eval_logits": eval_logits, "train_logits": train_logits},
               os.path.join(out_dir, name + "_io.pt"))
    params = sum(p.numel() for p in model.parameters())
    print(f"{name}: {len(state)} tensors, {params} parameters, logits {tuple(eval_logits.shape)}")


def write_keys(out_dir):
    model = tvr.resnet50()
    path = os.path.join(out_dir, "resnet50_keys.txt")
    with open(path, "w") as f:
        f.write("# torchvision %s resnet50() state dict: name shape\n" % _tv_version())
        for k, v in model.state_dict().items():
            shape = ",".join(str(d) for d in v.shape) if v.dim() else "-"
            f.write(f"{k} {shape}\n")
    print(f"resnet50_keys.txt: {len(model.state_dict())} keys, "
          f"{sum(p.numel() for p in model.parameters())} parameters")


def _tv_version():
    import torchvision
    return torchvision.__version__


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(here, "..", "tests", "fixtures", "models"),
                        help="output directory (default: %(default)s)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    write_keys(args.out)
    make_net(args.out, "resnet18_w0.0625", tvr.BasicBlock, [2, 2, 2, 2], 0.0625, 3, False,
             (2, 3, 64, 64), seed=18)
    make_net(args.out, "resnet50_w0.03125_small", tvr.Bottleneck, [3, 4, 6, 3], 0.03125, 1, True,
             (2, 1, 28, 28), seed=50)


if __name__ == "__main__":
    main()
