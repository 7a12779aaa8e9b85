#!/usr/bin/python3
"""Converts a PyTorch/torchvision weights file into the plain dict that amptune loads.

amptune (C++) reads a state dict with torch::pickle_load, which accepts a plain Python dict
{name: tensor} saved by torch.save, but not an OrderedDict (what torch.save(model.state_dict())
writes) nor a training checkpoint. This script accepts

  * a state dict (OrderedDict or dict) such as torchvision's resnet50-0676ba61.pth,
  * a checkpoint dict holding the state dict under 'state_dict', 'model' or 'network'
    (--key picks another entry),

removes a DataParallel/DistributedDataParallel 'module.' prefix (--strip-prefix to change),
optionally drops keys (--drop fc.) or keeps only keys under a prefix (--select backbone.),
and writes torch.save(dict(sd)). It prints the key count, the parameter count and, with -v,
every key and shape.

Examples
  /usr/bin/python3 tools/convert_torchvision.py resnet50-0676ba61.pth resnet50.pt
      then run with `--set model.weights=resnet50.pt` (model.name resnet50, 1000 classes)
  /usr/bin/python3 tools/convert_torchvision.py checkpoint.pth.tar backbone.pt --drop fc.
  /usr/bin/python3 -c "import torchvision, torch; \\
      torch.save(torchvision.models.resnet18().state_dict(), 'r18.pth')" && \\
      /usr/bin/python3 tools/convert_torchvision.py r18.pth r18.pt

Run it with a Python that has torch (Debian: apt-get install python3-torch; /usr/bin/python3).
"""
import argparse
import collections
import os
import sys


def find_state_dict(obj, key):
    if key:
        if not isinstance(obj, dict) or key not in obj:
            sys.exit(f"error: the file has no entry '{key}'")
        return obj[key]
    if isinstance(obj, dict):
        for name in ("state_dict", "model", "network"):
            if name in obj and isinstance(obj[name], dict):
                return obj[name]
    return obj


def main(argv=None):
    import torch

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input", help="torchvision .pth / checkpoint file")
    parser.add_argument("output", help="plain-dict file for amptune (model.weights)")
    parser.add_argument("--key", default="",
                        help="entry of a checkpoint dict holding the state dict "
                             "(default: state_dict, model or network when present)")
    parser.add_argument("--strip-prefix", default="module.",
                        help="prefix removed from every key that has it (default: %(default)s)")
    parser.add_argument("--select", default="",
                        help="keep only keys starting with this prefix, and remove the prefix")
    parser.add_argument("--drop", action="append", default=[],
                        help="drop keys starting with this prefix (repeatable), e.g. fc.")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every key and shape")
    args = parser.parse_args(argv)

    obj = torch.load(args.input, map_location="cpu")
    sd = find_state_dict(obj, args.key)
    if hasattr(sd, "state_dict") and callable(sd.state_dict):  # a whole nn.Module was saved
        sd = sd.state_dict()
    if not isinstance(sd, (dict, collections.OrderedDict)):
        sys.exit(f"error: {args.input} holds a {type(sd).__name__}, not a state dict")

    out = {}
    for name, value in sd.items():
        if not isinstance(name, str) or not torch.is_tensor(value):
            sys.exit(f"error: entry {name!r} is a {type(value).__name__}, not a tensor; "
                     "use --key to pick the state dict inside a checkpoint")
        if args.strip_prefix and name.startswith(args.strip_prefix):
            name = name[len(args.strip_prefix):]
        if args.select:
            if not name.startswith(args.select):
                continue
            name = name[len(args.select):]
        if any(name.startswith(p) for p in args.drop):
            continue
        if name in out:
            sys.exit(f"error: two entries map to '{name}' after renaming")
        out[name] = value.detach().cpu().contiguous().clone()

    if not out:
        sys.exit("error: no tensors left to write (check --select/--drop)")
    tmp = args.output + ".tmp"
    torch.save(out, tmp)
    os.replace(tmp, args.output)

    params = sum(v.numel() for k, v in out.items()
                 if not k.endswith(("running_mean", "running_var", "num_batches_tracked")))
    if args.verbose:
        for name, value in out.items():
            print(f"{name} {list(value.shape)} {str(value.dtype).replace('torch.', '')}")
    print(f"wrote {args.output}: {len(out)} tensors, {params:,} parameters "
          f"(excluding BatchNorm running statistics)")


if __name__ == "__main__":
    main()
