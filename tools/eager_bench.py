#!/usr/bin/python3
"""PyTorch eager baseline for amptune's side-by-side benchmark (docs/PERFORMANCE.md).

Trains what an amptune cell trains, in plain PyTorch (Debian's python3-torch / torchvision), and
prints one JSON line (--json) or a short text line with training and evaluation img/s.

Workloads (the same model, data, batch, optimizer and threads as tools/bench-vs-eager.sh's cells):
  quickstart  experiments/quickstart.yaml: ResNet-18 width 0.25, 3x3 stem, no max-pool, 1 input
              channel, Fashion-MNIST IDX (--data, default /usr/share/datasets/fashion-mnist)
              held in memory, random horizontal flip, normalised (0.286, 0.353), batch 128,
              SGD lr 0.1 momentum 0.9 Nesterov weight decay 5e-4, cosine LR set every step,
              evaluation batches of 500.
  resnet50    torchvision ResNet-50 (10 classes) at 224 px on an ImageFolder of JPEGs (--data,
              default data/fashion-imagefolder: `amptune data export-imagefolder`), torchvision's
              RandomResizedCrop(224) + flip for training, Resize(256) + CenterCrop(224) for
              evaluation, ImageNet mean/std, batch 8, same SGD.

  matched     the like-for-like recipe of tools/gpu-bench.sh (docs/PERFORMANCE.md "GPU benchmark
              (like for like)"): torchvision ResNet-50 v1.5 (--classes, default 1000) at
              --image-size (224), batch --batch (256), SGD momentum 0.9, weight decay 1e-4, no
              Nesterov, constant --lr (0.1, amptune's cell), precision --precision: O0 fp32,
              O1-fp16 = autocast + GradScaler(init_scale 65536), O1-bf16 = autocast alone, O2-fp16
              (O2-bf16) = written by hand as apex's O2 (an fp16 model with fp32 BatchNorm, fp32
              master weights stepped by the optimizer and copied back, inputs cast to fp16 on
              entry, the output to fp32, dynamic loss scale from 65536: skip and halve on inf/NaN,
              double after 2000 clean steps, at most 2^24); --channels-last, --cudnn-benchmark.
              Data: --synthetic (one batch of random images and labels made once on the device
              and reused by every step, no loader) or the ImageFolder of JPEGs at --data
              (torchvision's RandomResizedCrop + flip, a DataLoader of --workers processes with
              pinned memory and persistent workers, batches copied non_blocking). Timing: --warmup
              steps, a device synchronisation, --steps steps, another synchronisation: img_per_s
              = images / elapsed; peak_mem_bytes = torch.cuda.max_memory_allocated of the steps
              (peak_reserved_bytes the caching allocator's). --loader-only: the DataLoader alone
              over the same window (the loader's ceiling), no model.

img_per_s (quickstart, resnet50) is the mean over the timed steps of batch / step time, a step
being: next batch, forward, loss, loss.item(), backward, optimizer step (amptune's
train_fps_mean). eval_img_per_s is the evaluated images / the evaluation's wall time (model.eval()
+ torch.no_grad()). startup_s is the age of this process when its first training step starts
(interpreter, imports, data, model).

  /usr/bin/python3 tools/eager_bench.py --workload quickstart --steps 40 --warmup 5 --json
  python3 tools/eager_bench.py --workload matched --device cuda --precision O2-fp16 \
      --channels-last --cudnn-benchmark --synthetic --steps 30 --warmup 10 --json
"""
import argparse
import gzip
import json
import math
import os
import struct
import sys
import time

T0 = time.monotonic()


def process_age():
    """Seconds since this process started (/proc; the script's start where /proc is missing)."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        start_ticks = int(fields[19])  # field 22, starttime, in clock ticks after boot
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.monotonic() - T0


import torch  # noqa: E402  (after process_age: the import is part of the start-up measured)
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workload", choices=["quickstart", "resnet50", "matched"], required=True)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--amp", choices=["off", "fp16", "bf16"], default="off")
    p.add_argument("--channels-last", action="store_true", help="torch.channels_last model/input")
    p.add_argument("--inference-mode", action="store_true",
                   help="evaluate under torch.inference_mode() instead of torch.no_grad()")
    p.add_argument("--fold-bn", action="store_true",
                   help="evaluate a copy with each BatchNorm folded into its convolution "
                        "(torch.fx.experimental.optimization.fuse)")
    p.add_argument("--batch", type=int, default=0, help="0 = the workload's (128 / 8)")
    p.add_argument("--steps", type=int, default=40, help="timed training steps")
    p.add_argument("--warmup", type=int, default=5, help="untimed training steps before them")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    p.add_argument("--data", default="", help="data directory (see the workloads)")
    p.add_argument("--eval-batches", type=int, default=0, help="evaluation batches; 0 = none")
    p.add_argument("--eval-batch", type=int, default=0, help="0 = the workload's (500 / 8)")
    p.add_argument("--workers", type=int, default=1,
                   help="resnet50, matched: DataLoader worker processes (0 = in this process)")
    p.add_argument("--precision", choices=["O0", "O1-fp16", "O1-bf16", "O2-fp16", "O2-bf16"],
                   default="O0", help="matched: the precision cell")
    p.add_argument("--synthetic", action="store_true",
                   help="matched: one device batch of random input reused by every step")
    p.add_argument("--cudnn-benchmark", action="store_true",
                   help="torch.backends.cudnn.benchmark = True (matched)")
    p.add_argument("--lr", type=float, default=0.1, help="matched: the constant learning rate")
    p.add_argument("--image-size", type=int, default=224, help="matched: input side in pixels")
    p.add_argument("--classes", type=int, default=1000, help="matched: classes of the model")
    p.add_argument("--arch", choices=["resnet50", "tiny"], default="resnet50",
                   help="matched: torchvision's ResNet-50, or (--cpu-dry-run of gpu-bench.sh) "
                        "the quickstart's ResNet-18 of width 0.25 with the 3x3 stem, 3 channels")
    p.add_argument("--loader-only", action="store_true",
                   help="matched: time the DataLoader alone (no model)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON line")
    a = p.parse_args(argv)
    if a.steps < 1 or a.warmup < 0 or a.threads < 1 or a.batch < 0 or a.eval_batches < 0:
        p.error("--steps and --threads must be >= 1; --warmup, --batch, --eval-batches >= 0")
    if a.workload != "matched" and (a.synthetic or a.loader_only or a.precision != "O0"):
        p.error("--synthetic, --loader-only and --precision are the matched workload's")
    if a.workload == "matched" and a.amp != "off":
        p.error("the matched workload takes --precision, not --amp")
    if a.synthetic and a.loader_only:
        p.error("--loader-only times the JPEG loader; --synthetic has none")
    return a


# ---- the quickstart model: amptune's ResNet (src/models/resnet.cpp), torchvision v1.5 layout ----

def conv(cin, cout, k, s, pad):
    return nn.Conv2d(cin, cout, k, stride=s, padding=pad, bias=False)


class BasicBlock(nn.Module):
    def __init__(self, inplanes, planes, stride):
        super().__init__()
        self.conv1, self.bn1 = conv(inplanes, planes, 3, stride, 1), nn.BatchNorm2d(planes)
        self.conv2, self.bn2 = conv(planes, planes, 3, 1, 1), nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(conv(inplanes, planes, 1, stride, 0),
                                            nn.BatchNorm2d(planes))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + identity)


class SmallResNet18(nn.Module):
    """ResNet-18 of width `width`, 3x3 stride-1 stem and no max-pool (model.small_input)."""

    def __init__(self, width, in_channels, num_classes):
        super().__init__()
        ch = [max(1, round(c * width)) for c in (64, 128, 256, 512)]
        self.conv1, self.bn1 = conv(in_channels, ch[0], 3, 1, 1), nn.BatchNorm2d(ch[0])
        layers, inplanes = [], ch[0]
        for i, planes in enumerate(ch):
            blocks = []
            for b in range(2):
                blocks.append(BasicBlock(inplanes, planes, 2 if (i > 0 and b == 0) else 1))
                inplanes = planes
            layers.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.fc = nn.Linear(inplanes, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# ---- data ----

def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    magic, = struct.unpack(">I", raw[:4])
    dims = magic & 0xFF
    shape = struct.unpack(">" + "I" * dims, raw[4:4 + 4 * dims])
    return torch.frombuffer(bytearray(raw[4 + 4 * dims:]), dtype=torch.uint8).reshape(shape)


def idx_split(root, split):
    out = []
    for kind in ("images-idx3-ubyte", "labels-idx1-ubyte"):
        base = os.path.join(root, f"{split}-{kind}")
        path = base if os.path.exists(base) else base + ".gz"
        if not os.path.exists(path):
            sys.exit(f"eager_bench: {base}[.gz] is missing (apt-get install dataset-fashion-mnist, "
                     "or --data DIR)")
        out.append(read_idx(path))
    return out[0], out[1].long()


class InMemoryBatches:
    """Shuffled batches of an IDX split held as uint8: random flip, normalise - in torch ops."""

    def __init__(self, images, labels, batch, train, mean=0.286, std=0.353, seed=0):
        self.images, self.labels, self.batch, self.train = images, labels, batch, train
        self.scale, self.bias = 1.0 / (255.0 * std), -mean / std
        self.gen = torch.Generator().manual_seed(seed)

    def __iter__(self):
        n = self.images.shape[0]
        order = torch.randperm(n, generator=self.gen) if self.train else torch.arange(n)
        for start in range(0, n - self.batch + 1 if self.train else n, self.batch):
            idx = order[start:start + self.batch]
            x = self.images.index_select(0, idx).unsqueeze(1).float()
            if self.train:
                flip = torch.rand(idx.numel(), generator=self.gen) < 0.5
                x = torch.where(flip.view(-1, 1, 1, 1), x.flip(3), x)
            yield x.mul_(self.scale).add_(self.bias), self.labels.index_select(0, idx)


def imagefolder_loader(root, split, batch, train, workers, seed):
    import torchvision.datasets as datasets
    import torchvision.transforms as T
    path = os.path.join(root, split)
    if not os.path.isdir(path):
        sys.exit(f"eager_bench: {path} is missing (build/amptune data export-imagefolder --out "
                 f"{root}, or --data DIR)")
    norm = T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    tf = (T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), norm])
          if train else T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), norm]))
    ds = datasets.ImageFolder(path, tf, loader=lambda p: datasets.folder.pil_loader(p))
    return torch.utils.data.DataLoader(
        ds, batch_size=batch, shuffle=train, drop_last=train, num_workers=workers,
        generator=torch.Generator().manual_seed(seed), persistent_workers=workers > 0)


def endless(loader):
    while True:
        yield from loader


# ---- the benchmark ----

def main(argv):
    a = parse_args(argv)
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("eager_bench: --device cuda, but torch.cuda.is_available() is false")
    if a.workload == "matched":
        import eager_matched
        return eager_matched.run(a, process_age, SmallResNet18)
    if a.device == "cpu" and a.amp == "fp16":
        sys.exit("eager_bench: --amp fp16 on the CPU: torch.autocast('cpu') takes bf16 only")
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    device = torch.device(a.device)
    quick = a.workload == "quickstart"
    batch = a.batch or (128 if quick else 8)
    eval_batch = a.eval_batch or (500 if quick else 8)

    if quick:
        root = a.data or "/usr/share/datasets/fashion-mnist"
        model = SmallResNet18(0.25, 1, 10)
        train_batches = endless(InMemoryBatches(*idx_split(root, "train"), batch, True,
                                                seed=a.seed))
        val_set = idx_split(root, "t10k") if a.eval_batches else None
        val_batches = (lambda: InMemoryBatches(*val_set, eval_batch, False)) if val_set else None
    else:
        import torchvision
        root = a.data or "data/fashion-imagefolder"
        model = torchvision.models.resnet50(num_classes=10)
        train_batches = endless(imagefolder_loader(root, "train", batch, True, a.workers, a.seed))
        val_batches = ((lambda: imagefolder_loader(root, "val", eval_batch, False, a.workers,
                                                   a.seed)) if a.eval_batches else None)

    memory_format = torch.channels_last if a.channels_last else torch.contiguous_format
    model = model.to(device, memory_format=memory_format)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True,
                                weight_decay=5e-4)
    amp_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(a.amp)
    scaler = None
    if a.amp == "fp16" and a.device == "cuda":
        scaler = torch.cuda.amp.GradScaler()

    def sync():
        if a.device == "cuda":
            torch.cuda.synchronize()

    def autocast():
        return torch.autocast(a.device, dtype=amp_dtype, enabled=amp_dtype is not None)

    total = a.warmup + a.steps
    model.train()
    startup_s = None
    fps = []
    loss_value = math.nan
    for step in range(total):
        start = time.perf_counter()
        if startup_s is None:
            startup_s = process_age()
        images, labels = next(train_batches)
        images = images.to(device, non_blocking=True, memory_format=memory_format)
        labels = labels.to(device, non_blocking=True)
        lr = 0.1 * 0.5 * (1 + math.cos(math.pi * step / total))  # cosine decay from lr 0.1
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad(set_to_none=True)
        with autocast():
            loss = F.cross_entropy(model(images), labels)
        loss_value = loss.item()
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        sync()
        if step >= a.warmup:
            fps.append(images.shape[0] / (time.perf_counter() - start))

    eval_fps = None
    if val_batches is not None:
        model.eval()
        eval_model = model
        if a.fold_bn:
            from torch.fx.experimental.optimization import fuse
            eval_model = fuse(model)  # a folded copy; the trained model is left as it is
        seen = hits = 0
        sync()
        start = time.perf_counter()
        with (torch.inference_mode() if a.inference_mode else torch.no_grad()), autocast():
            for i, (images, labels) in enumerate(val_batches()):
                if i == a.eval_batches:
                    break
                images = images.to(device, memory_format=memory_format)
                labels = labels.to(device)
                logits = eval_model(images).float()
                F.cross_entropy(logits, labels, reduction="sum").item()
                hits += int(logits.topk(min(5, logits.shape[1]), 1)[1][:, 0].eq(labels).sum())
                seen += labels.numel()
        sync()
        eval_fps = seen / (time.perf_counter() - start)

    result = {
        "workload": a.workload, "device": a.device, "amp": a.amp, "batch": batch,
        "steps": a.steps, "warmup": a.warmup, "threads": a.threads,
        "channels_last": a.channels_last, "inference_mode": a.inference_mode,
        "fold_bn": a.fold_bn, "img_per_s": sum(fps) / len(fps), "eval_img_per_s": eval_fps,
        "startup_s": startup_s, "final_loss": loss_value, "torch": torch.__version__,
    }
    if a.json:
        print(json.dumps(result))
    else:
        print(f"{a.workload} {a.device} amp {a.amp}: {result['img_per_s']:.1f} img/s training"
              + (f", {eval_fps:.1f} img/s evaluation" if eval_fps else "")
              + f", start-up {startup_s:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
