"""The matched workload of tools/eager_bench.py: PyTorch eager's side of tools/gpu-bench.sh.

The recipe, precision cells, data modes and timing are described in eager_bench.py's docstring
(workload "matched"); run() takes its parsed arguments and prints one JSON line (--json) or a
short text line.
"""
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
INIT_SCALE, MAX_SCALE, GROWTH_INTERVAL = 65536.0, 2.0 ** 24, 2000


def jpeg_loader(a, batch):
    """Training batches of the ImageFolder at a.data: torchvision's transforms, a.workers
    processes, pinned memory, persistent workers (the recipe PyTorch's ImageNet example uses)."""
    import torchvision.datasets as datasets
    import torchvision.transforms as T
    path = os.path.join(a.data, "train")
    if not os.path.isdir(path):
        sys.exit(f"eager_bench: {path} is missing (amptune data export-imagefolder --out {a.data})")
    tf = T.Compose([T.RandomResizedCrop(a.image_size), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize(MEAN, STD)])
    ds = datasets.ImageFolder(path, tf)
    return torch.utils.data.DataLoader(
        ds, batch_size=batch, shuffle=True, drop_last=True, num_workers=a.workers,
        pin_memory=a.device == "cuda", persistent_workers=a.workers > 0,
        generator=torch.Generator().manual_seed(a.seed))


def endless(loader):
    while True:
        yield from loader


def batches(a, batch, device, memory_format):
    """An endless iterator of (images, labels) on the device: the one resident synthetic batch,
    or the JPEG loader's batches copied non_blocking."""
    if a.synthetic:
        gen = torch.Generator().manual_seed(a.seed)
        images = torch.randn(batch, 3, a.image_size, a.image_size, generator=gen)
        labels = torch.randint(0, a.classes, (batch,), generator=gen)
        images = images.to(device).contiguous(memory_format=memory_format)
        labels = labels.to(device)
        while True:
            yield images, labels
    for images, labels in endless(jpeg_loader(a, batch)):
        yield (images.to(device, non_blocking=True, memory_format=memory_format),
               labels.to(device, non_blocking=True))


def is_batchnorm(m):
    return isinstance(m, nn.modules.batchnorm._BatchNorm)


class O1:
    """torch.autocast of a.precision's dtype; fp16 with torch's GradScaler from 65536."""

    def __init__(self, model, dtype, device, lr):
        self.model, self.dtype, self.device = model, dtype, device
        self.optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9,
                                         weight_decay=1e-4, nesterov=False)
        self.scaler = None
        if dtype == torch.float16:
            args = dict(init_scale=INIT_SCALE, growth_factor=2.0, backoff_factor=0.5,
                        growth_interval=GROWTH_INTERVAL)
            new = getattr(torch.amp, "GradScaler", None)  # 2.3+; torch.cuda.amp's is deprecated
            self.scaler = new("cuda", **args) if new else torch.cuda.amp.GradScaler(**args)

    def step(self, images, labels):
        self.optimizer.zero_grad(set_to_none=True)
        with torch.autocast(self.device.type, dtype=self.dtype, enabled=self.dtype is not None):
            loss = F.cross_entropy(self.model(images), labels)
        if self.scaler is None:
            loss.backward()
            self.optimizer.step()
        else:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        return loss


class O2:
    """apex's O2 by hand: the model in `dtype` with BatchNorm in fp32, fp32 master weights
    stepped by SGD and copied back, inputs cast on entry and the output to fp32, and apex's
    dynamic loss scale (skip and halve on inf/NaN, double after 2000 clean steps, <= 2^24)."""

    def __init__(self, model, dtype, device, lr):
        model.to(dtype)
        for m in model.modules():
            if is_batchnorm(m):
                m.float()
        self.model, self.dtype, self.device = model, dtype, device
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.masters = [p.detach().float().clone() for p in self.params]
        self.optimizer = torch.optim.SGD(self.masters, lr=lr, momentum=0.9, weight_decay=1e-4,
                                         nesterov=False)
        self.scale, self.unskipped, self.skipped = INIT_SCALE, 0, 0
        self.found_inf = torch.zeros(1, device=device)
        self.fused = True  # until a PyTorch without the kernel (the CPU's before 2.x) refuses it
        self.foreach_copy = hasattr(torch, "_foreach_copy_")

    def copy_back(self):
        """The stepped masters into the model's weights: one foreach copy where this PyTorch has
        one that casts (2.1+), else a copy per parameter."""
        with torch.no_grad():
            if self.foreach_copy:
                try:
                    torch._foreach_copy_(self.params, self.masters)
                    return
                except (RuntimeError, TypeError):
                    self.foreach_copy = False
            for p, m in zip(self.params, self.masters):
                p.copy_(m)

    def unscale(self, grads):
        """Master gradients = model gradients / scale, in fp32; whether any is inf/NaN."""
        inv = torch.full((1,), 1.0 / self.scale, device=self.device)
        masters = [g.float() for g in grads]  # fp32 BatchNorm gradients: the same tensors
        if self.fused:
            self.found_inf.zero_()
            try:
                torch._amp_foreach_non_finite_check_and_unscale_(masters, self.found_inf, inv)
                return masters, bool(self.found_inf.item())  # apex decides on the host
            except (RuntimeError, NotImplementedError):
                self.fused = False
        bad = any(not bool(torch.isfinite(g).all()) for g in masters)
        for g in masters:
            g.mul_(inv)
        return masters, bad

    def step(self, images, labels):
        for p in self.params:
            p.grad = None
        logits = self.model(images.to(self.dtype)).float()
        loss = F.cross_entropy(logits, labels)
        (loss * self.scale).backward()
        masters, overflow = self.unscale([p.grad for p in self.params])
        if overflow:
            self.scale, self.unskipped = max(self.scale / 2, 1.0), 0
            self.skipped += 1
            return loss
        for m, g in zip(self.masters, masters):
            m.grad = g
        self.optimizer.step()
        self.copy_back()
        self.unskipped += 1
        if self.unskipped == GROWTH_INTERVAL:
            self.scale, self.unskipped = min(self.scale * 2, MAX_SCALE), 0
        return loss


def timed_loader(a, batch, device):
    """The DataLoader alone over the window (its ceiling): img/s of warm-up then timed batches."""
    it = batches(a, batch, device, torch.contiguous_format)
    for _ in range(a.warmup):
        next(it)
    sync(device)
    start = time.perf_counter()
    for _ in range(a.steps):
        next(it)
    sync(device)
    return a.steps * batch / (time.perf_counter() - start)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def make_trainer(a, device, memory_format, tiny_model):
    if a.arch == "resnet50":
        import torchvision
        model = torchvision.models.resnet50(num_classes=a.classes)  # v1.5: stride on the 3x3
    else:  # the dry run's: amptune's resnet18 width 0.25, small_input, 3 channels
        model = tiny_model(0.25, 3, a.classes)
    model = model.to(device, memory_format=memory_format)
    model.train()
    level, _, name = a.precision.partition("-")
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(name)
    if device.type == "cpu" and dtype == torch.float16:
        sys.exit("eager_bench: fp16 cells need CUDA (the CPU has no fp16 convolutions)")
    cls = O2 if level == "O2" else O1
    return cls(model, dtype, device, a.lr)


def run(a, process_age, tiny_model):
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    device = torch.device(a.device)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = a.cudnn_benchmark
    if not a.synthetic and not a.data:
        sys.exit("eager_bench: the matched workload reads --data DIR (JPEGs) or --synthetic")
    batch = a.batch or 256
    memory_format = torch.channels_last if a.channels_last else torch.contiguous_format
    result = {"workload": "matched", "arch": a.arch, "device": a.device, "precision": a.precision,
              "batch": batch, "image_size": a.image_size, "steps": a.steps, "warmup": a.warmup,
              "channels_last": a.channels_last, "cudnn_benchmark": a.cudnn_benchmark,
              "data": "synthetic" if a.synthetic else "jpeg", "workers": a.workers,
              "torch": torch.__version__}
    if a.loader_only:
        result["loader_img_per_s"] = timed_loader(a, batch, device)
        print(json.dumps(result) if a.json else f"loader alone: {result['loader_img_per_s']:.1f}"
              " img/s")
        return 0
    trainer = make_trainer(a, device, memory_format, tiny_model)
    data = batches(a, batch, device, memory_format)
    startup_s = process_age()
    loss = None
    for _ in range(a.warmup):
        loss = trainer.step(*next(data))
    sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    for _ in range(a.steps):
        loss = trainer.step(*next(data))
    sync(device)
    elapsed = time.perf_counter() - start
    result.update({
        "img_per_s": a.steps * batch / elapsed, "elapsed_s": elapsed, "startup_s": startup_s,
        "final_loss": float(loss.detach()) if loss is not None else math.nan,
        "loss_scale": getattr(trainer, "scale", None) or (
            trainer.scaler.get_scale() if getattr(trainer, "scaler", None) else None),
        "peak_mem_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda"
        else None,
        "peak_reserved_bytes": torch.cuda.max_memory_reserved(device) if device.type == "cuda"
        else None,
    })
    if a.json:
        print(json.dumps(result))
    else:
        print(f"matched {a.precision} {a.device}: {result['img_per_s']:.1f} img/s "
              f"({a.steps} steps of {batch} in {elapsed:.2f} s)")
    return 0
