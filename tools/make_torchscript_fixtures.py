#!/usr/bin/python3
"""Regenerates tests/fixtures/torchscript/: TorchScript models and custom-task data shards for the
tests of `model: {name: torchscript, ...}` (docs/MODELS.md). README.md there lists the files.

Run from anywhere with Debian's Python (torch 1.13, so that LibTorch 1.13 and 2.x both read the
archives; apt-get install python3-torch python3-torchvision):

    /usr/bin/python3 tools/make_torchscript_fixtures.py [--out tests/fixtures/torchscript]

Seeded, and the same bytes on every run and in every checkout: the script runs itself again from
the repository root with PYTHONHASHSEED=0, so that the archives' debug records name source files
as tools/... and not by this checkout's absolute path (main says why).
Each file is loaded back and checked before the script ends (export_torchscript.py's checks,
plus the bad inputs refused for the reason they exist for).
"""
import argparse
import io
import os
import struct
import sys
import types
import zipfile
from typing import Dict

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NEWER_VERSION = 99  # LibTorch 1.13 and 2.11 read file-format versions 1 to 10


class Regressor(nn.Module):
    """A custom task: y [B, 1] from x [B, 8]; metrics mse and mae, both lower-is-better."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 32), nn.BatchNorm1d(32), nn.ReLU())
        self.head = nn.Linear(32, 1)
        self.higher_is_better = {"mse": False, "mae": False}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))

    @torch.jit.export
    def training_loss(self, batch: Dict[str, torch.Tensor]) -> torch.Tensor:
        return F.mse_loss(self.forward(batch["x"]), batch["y"])

    @torch.jit.export
    def eval_batch(self, batch: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        error = self.forward(batch["x"]) - batch["y"]
        return {"mse": (error * error).sum(), "mae": error.abs().sum()}


class NoEvalBatch(nn.Module):
    """A custom task missing eval_batch (bad input)."""

    def __init__(self):
        super().__init__()
        self.head = nn.Linear(8, 1)
        self.higher_is_better = {"mse": False}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(x)

    @torch.jit.export
    def training_loss(self, batch: Dict[str, torch.Tensor]) -> torch.Tensor:
        return F.mse_loss(self.forward(batch["x"]), batch["y"])


class WrongOutputShape(nn.Module):
    """Takes [B, 1, 12, 12] images like a classifier but returns [B] (bad input)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv1(x).mean(dim=(1, 2, 3))


class NeverReturnsInTraining(nn.Module):
    """A [B, 1, 12, 12] classifier whose forward never returns in train mode (an endless loop
    that polls nothing), and returns at once in eval mode (amptune counts the forward's work in
    eval mode). Bad input: a step that cannot be stopped from inside (issue 46 item 9)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.head = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = 0
        while self.training and n >= 0:
            n = n + 1 - 1
        return self.head(self.conv1(x).mean(dim=(2, 3)))


class CausalMaskClassifier(nn.Module):
    """A [B, 1, 12, 12] classifier with a bool buffer, as a transformer's causal mask: the conv's
    4 channel means h, then h_i = sum of h_j for j <= i (masked_fill with the lower-triangular
    mask), then a Linear head to 4 classes (issue 46 item 14)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.head = nn.Linear(4, 4)
        self.register_buffer("mask", torch.ones(4, 4).tril().bool())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(x).mean(dim=(2, 3))
        pairs = h.unsqueeze(1).expand(h.size(0), 4, 4)
        return self.head(pairs.masked_fill(~self.mask, 0.0).sum(dim=2))


def import_from_root(name, relpath):
    """Imports ROOT/relpath as module `name`, its code objects and __file__ naming `relpath`:
    TorchScript records the source file of every scripted function in the archive, and the
    relative name keeps the bytes independent of where the checkout is (the script runs with
    ROOT as the working directory, where the source is found under that name)."""
    with open(os.path.join(ROOT, relpath)) as f:
        source = f.read()
    module = types.ModuleType(name)
    module.__file__ = relpath
    sys.modules[name] = module  # the TorchScript compiler resolves globals through it
    exec(compile(source, relpath, "exec"), module.__dict__)
    return module


def archive_bytes(scripted) -> bytes:
    buffer = io.BytesIO()
    torch.jit.save(scripted, buffer)
    return buffer.getvalue()


def write(out, name, data: bytes):
    path = os.path.join(out, name)
    with open(path, "wb") as f:
        f.write(data)
    print(f"{name}: {len(data)} bytes")
    return path


def rewrite_archive(data: bytes, replace: Dict[str, bytes]) -> bytes:
    """The zip archive again, entry for entry in the same order, stored (uncompressed) with each
    entry's data at a multiple of 64 bytes as torch writes them (an extra field "FB" of padding,
    as torch's writer pads), the entries named in `replace` (full names) with new contents."""
    src = zipfile.ZipFile(io.BytesIO(data))
    missing = set(replace) - set(src.namelist())
    if missing:
        raise KeyError(f"no such records: {sorted(missing)}")
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            content = replace.get(info.filename, src.read(info))
            new = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            new.compress_type = zipfile.ZIP_STORED
            start = out.tell() + 30 + len(info.filename.encode("utf-8")) + 4
            pad = (-start) % 64
            new.extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
            dst.writestr(new, content)
    return out.getvalue()


def check_aligned(data: bytes, name: str):
    for info in zipfile.ZipFile(io.BytesIO(data)).infolist():
        header = data[info.header_offset:info.header_offset + 30]
        name_len, extra_len = struct.unpack("<HH", header[26:30])
        begin = info.header_offset + 30 + name_len + extra_len
        assert begin % 64 == 0, f"{name}: {info.filename} data at {begin}"


def version_record(data: bytes):
    """(name, contents) of the record the reader takes the version from: .data/version when
    present, else version (caffe2/serialize/inline_container.cc)."""
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    prefix = names[0].split("/")[0] + "/"
    for record in (".data/version", "version"):
        if prefix + record in names:
            return prefix + record, zipfile.ZipFile(io.BytesIO(data)).read(prefix + record)
    raise KeyError("no version record")


def resnet18_tiny(mmf):
    torch.manual_seed(18)
    model = mmf.NarrowResNet(mmf.tvr.BasicBlock, [2, 2, 2, 2], width=0.0625, num_classes=4,
                             in_channels=1, small_input=True)
    mmf.randomise_bn(model, torch.Generator().manual_seed(19))
    reference = torch.load(os.path.join(ROOT, "tests/fixtures/models/resnet18_w0.0625_weights.pt"))
    keys = list(model.state_dict())
    assert keys == list(reference), "state-dict names differ from amptune's resnet18"
    return model.train()


def make(out, ets, mmf, fixtures):
    image = torch.randn(2, 1, 12, 12, generator=torch.Generator().manual_seed(12))

    net = resnet18_tiny(mmf)
    state = {k: v.clone() for k, v in net.state_dict().items()}
    scripted = ets.export_model(net, os.path.join(out, "resnet18_tiny_script.pt"),
                                example_input=image, verbose=False)
    traced = ets.export_model(net, os.path.join(out, "resnet18_tiny_trace.pt"),
                              example_input=image, trace=True, verbose=False)
    for m in (scripted, traced):
        assert all(torch.equal(v, state[k]) for k, v in m.state_dict().items())
        assert list(m.state_dict()) == list(state)
    for name in ("resnet18_tiny_script.pt", "resnet18_tiny_trace.pt"):
        print(f"{name}: {os.path.getsize(os.path.join(out, name))} bytes")

    torch.manual_seed(8)
    regressor = fixtures.Regressor()
    data = regression_data()
    reg_path = os.path.join(out, "regressor_custom.pt")
    ets.export_model(regressor, reg_path, task="custom",
                     example_input={k: v[:8] for k, v in data["train"].items()}, verbose=False)
    print(f"regressor_custom.pt: {os.path.getsize(reg_path)} bytes")
    for split, rows in (("train", 128), ("val", 64)):
        folder = os.path.join(out, "tensors", split)
        for path in ets.save_shards(data[split], folder, rows_per_shard=rows, overwrite=True):
            print(f"{os.path.relpath(path, out)}: {os.path.getsize(path)} bytes")

    torch.manual_seed(1)
    write(out, "custom_no_eval_batch.pt", archive_bytes(torch.jit.script(fixtures.NoEvalBatch())))
    torch.manual_seed(2)
    write(out, "wrong_output_shape.pt",
          archive_bytes(torch.jit.script(fixtures.WrongOutputShape().train())))

    torch.manual_seed(3)
    write(out, "never_returns_in_training.pt",
          archive_bytes(torch.jit.script(fixtures.NeverReturnsInTraining().train())))
    torch.manual_seed(4)
    write(out, "causal_mask_classifier.pt",
          archive_bytes(torch.jit.script(fixtures.CausalMaskClassifier().train())))

    with open(reg_path, "rb") as f:
        original = f.read()
    record, _ = version_record(original)
    write(out, "newer_version.pt",
          rewrite_archive(original, {record: f"{NEWER_VERSION}\n".encode()}))


def regression_data():
    """320 rows: y = x . w + 0.5 + noise(0.01); the first 256 train, the last 64 val."""
    gen = torch.Generator().manual_seed(320)
    x = torch.randn(320, 8, generator=gen)
    w = torch.linspace(-1.0, 1.0, 8).reshape(8, 1)
    y = x @ w + 0.5 + 0.01 * torch.randn(320, 1, generator=gen)
    return {"train": {"x": x[:256], "y": y[:256]}, "val": {"x": x[256:], "y": y[256:]}}


def check_shards_with_reference(out, ets):
    """The shards as the safetensors package (the format's reference) reads them, when present."""
    try:
        from safetensors import safe_open
    except ImportError:
        print("safetensors not installed (pip install safetensors): shards not cross-checked")
        return
    for split in ("train", "val"):
        folder = os.path.join(out, "tensors", split)
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            ours = ets.load_shard(path)
            with safe_open(path, framework="pt") as f:
                assert sorted(f.keys()) == sorted(ours)
                assert all(torch.equal(f.get_tensor(k), ours[k]) for k in ours)
                assert f.metadata()["format"] == ets.SHARD_FORMAT


def verify(out, ets):
    """Each file loads (or is refused) as its README entry says, here in torch 1.13."""
    def load(name):
        return torch.jit.load(os.path.join(out, name))

    image = torch.randn(5, 1, 12, 12)
    for name in ("resnet18_tiny_script.pt", "resnet18_tiny_trace.pt"):
        m = load(name)
        ets.check_classification(m, image, name)  # a batch size other than the trace's
        check_aligned(open(os.path.join(out, name), "rb").read(), name)

    check_shards_with_reference(out, ets)
    m = load("regressor_custom.pt")
    train = ets.load_shards(os.path.join(out, "tensors", "train"))
    val = ets.load_shards(os.path.join(out, "tensors", "val"))
    assert list(m.higher_is_better) == ["mse", "mae"]
    ets.check_custom(m, train, "regressor_custom.pt")
    m.eval()
    sums = m.eval_batch(val)
    assert torch.allclose(sums["mse"] / 64, F.mse_loss(m(val["x"]), val["y"]))

    for name, why in (("custom_no_eval_batch.pt", "eval_batch"),
                      ("wrong_output_shape.pt", "wrong shape")):
        try:
            (ets.check_custom(load(name), train, name) if "custom" in name
             else ets.check_classification(load(name), image, name))
        except ets.ExportError as e:
            assert why in str(e), str(e)
        else:
            raise AssertionError(f"{name} passed the checks")

    m = load("never_returns_in_training.pt").eval()
    assert m(image).shape == (5, 4)
    m = load("causal_mask_classifier.pt")
    assert m.mask.dtype == torch.bool and m(image).shape == (5, 4)

    newer = open(os.path.join(out, "newer_version.pt"), "rb").read()
    check_aligned(newer, "newer_version.pt")
    try:
        torch.jit.load(io.BytesIO(newer))
    except RuntimeError as e:
        assert f"version {NEWER_VERSION}" in str(e), str(e)
    else:
        raise AssertionError("newer_version.pt loaded")
    # With the version put back it is the regressor again: only the version differs.
    original = open(os.path.join(out, "regressor_custom.pt"), "rb").read()
    record, value = version_record(original)
    back = rewrite_archive(newer, {record: value})
    a, b = zipfile.ZipFile(io.BytesIO(original)), zipfile.ZipFile(io.BytesIO(back))
    assert a.namelist() == b.namelist()
    assert all(a.read(n) == b.read(n) for n in a.namelist())
    restored = torch.jit.load(io.BytesIO(back)).state_dict()
    saved = load("regressor_custom.pt").state_dict()
    assert all(torch.equal(v, restored[k]) for k, v in saved.items())
    print("verified: every file loads or is refused as README.md says")


# Runs this file again as tools/make_torchscript_fixtures.py from ROOT (see main).
_BOOT = ("f = 'tools/make_torchscript_fixtures.py'; "
         "exec(compile(open(f).read(), f, 'exec'), {'__name__': '__main__', '__file__': f})")


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "torchscript"),
                        help="output directory (default: %(default)s)")
    args = parser.parse_args()
    out = os.path.abspath(args.out)
    if os.environ.get("PYTHONHASHSEED") != "0" or os.path.isabs(__file__):
        # Once more, so that the archives hold the same bytes in every checkout: TorchScript code
        # lists a module's constants in the order of a Python set (Conv2d's __constants__), which
        # string hashing randomises per process, and a trace records the Python stack of the
        # tracing call (file names and lines), here relative to ROOT.
        os.chdir(ROOT)
        os.execve(sys.executable, [sys.executable, "-c", _BOOT, "--out", out],
                  dict(os.environ, PYTHONHASHSEED="0"))
    os.makedirs(out, exist_ok=True)
    mmf = import_from_root("make_model_fixtures", "tools/make_model_fixtures.py")
    fixtures = import_from_root("make_torchscript_fixtures", "tools/make_torchscript_fixtures.py")
    ets = import_from_root("export_torchscript", "tools/export_torchscript.py")
    make(out, ets, mmf, fixtures)
    verify(out, ets)


if __name__ == "__main__":
    main()
