#!/usr/bin/python3
"""Trains models in plain PyTorch (Debian's 1.13, on the CPU) with modules amptune generated
(`amptune export-setting`, `amptune tune --emit`); run by tests/integration/setting_test.cpp.

    setting_train.py CASE DIR SOURCE_DIR

CASE (the generated modules and files it reads are in DIR):
  sequential  o1_fp32.py and o2_fp32.py (amp.fp32_modules [conv1, "layer2.*"], bf16) on a model
              of named submodules in an nn.Sequential: 20 steps under bf16 CPU autocast (O1) and
              with a bf16 model, fp32 BatchNorm and fp32 masters (O2); forward hooks check that
              the fp32 modules compute in float32 and the rest in bfloat16. setting.json is the
              same setting as o1_fp32.py's SETTING.
  resnet      o1_fp32.py on the fixtures' narrow ResNet-18 (torchvision's code, the weights of
              tests/fixtures/torchscript/resnet18_tiny_script.pt) and o1_plain.py on that
              TorchScript file itself: 20 steps each under bf16 autocast; needs bf16
              convolutions in oneDNN (exit 77 where the CPU has none).
  planted     planted.py, amptune tune's answer for the planted overflow (inputs of 62500 to
              125000: finite in fp32, beyond float16's 65504): 20 steps with it stay finite,
              without its fp32 module every step overflows. PyTorch 1.13's CPU autocast takes
              bfloat16 only, which cannot overflow where float32 does not, so float16 autocast
              is emulated: torch.autocast replaced by a context whose low-precision ops (conv,
              linear, matmul: autocast's float16 list) take and give values rounded onto
              float16's grid (beyond 65504: inf).
  fp8         fp8.py (amp.fp8 hybrid, delayed, margin 1, history 16, most_recent, fc kept out) and
              plain.py (no FP8): SETTING["fp8"], the Linear modules fp8_linears() names, the
              Transformer Engine recipe refused with a clear ImportError where it is missing,
              and apply() training the base precision.
  hostile     hostile.py, exported from a database holding quotes, line breaks and code in a run
              name, a glob and the database's path: importing it runs none of that, and its
              SOURCE / SETTING equal expected.json.
Exit 0: passed; 77: skipped (the reason on stderr); anything else: failed.
"""
import collections
import importlib.util
import json
import math
import os
import sys
import threading

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

STEPS = 20


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check(cond, message):
    if not cond:
        raise AssertionError(message)


def train(model, setting, batches, loss_fn=F.cross_entropy):
    """STEPS optimizer steps through the emitted Setting; the losses."""
    optimizer = torch.optim.SGD(setting.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for x, y in batches:
        optimizer.zero_grad()
        with setting.autocast():
            loss = loss_fn(model(x), y)
        setting.step(loss, optimizer)
        losses.append(loss.item())
    return losses


def batches(shape, classes, seed, scale=None):
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(STEPS):
        x = torch.rand(*shape, generator=gen)
        x = (x + 1) / scale if scale else x * 2 - 1
        out.append((x, torch.randint(0, classes, (shape[0],), generator=gen)))
    return out


def record_dtypes(model, kinds):
    """{module name: output dtype} of every module of `kinds`, filled by forward hooks."""
    seen = {}
    for name, module in model.named_modules():
        if isinstance(module, kinds):
            module.register_forward_hook(
                lambda m, i, o, name=name: seen.__setitem__(name, (i[0].dtype, o.dtype)))
    return seen


def in_fp32(name, globs_matched):
    return any(name == m or name.startswith(m + ".") for m in globs_matched)


def sequential_model():
    torch.manual_seed(5)
    return torch.nn.Sequential(collections.OrderedDict([
        ("conv1", torch.nn.Conv2d(1, 4, 3, padding=1)),
        ("relu", torch.nn.ReLU()),
        ("flatten", torch.nn.Flatten()),
        ("bn", torch.nn.BatchNorm1d(4 * 12 * 12)),
        ("layer2", torch.nn.Sequential(torch.nn.Linear(4 * 12 * 12, 32), torch.nn.BatchNorm1d(32),
                                       torch.nn.ReLU())),
        ("fc", torch.nn.Linear(32, 4)),
    ]))


def case_sequential(d):
    o1 = load(os.path.join(d, "o1_fp32.py"), "o1_fp32")
    with open(os.path.join(d, "setting.json")) as f:
        check(json.load(f)["setting"] == o1.SETTING, "setting.json differs from o1_fp32.SETTING")
    check(o1.SETTING["fp32_modules"] == ["conv1", "layer2.*"], o1.SETTING)
    check(o1.SETTING["dtype"] == "bfloat16" and o1.SETTING["autocast"], o1.SETTING)
    data = batches((16, 1, 12, 12), 4, seed=1)

    model = sequential_model()
    seen = record_dtypes(model, (torch.nn.Conv2d, torch.nn.Linear, torch.nn.BatchNorm1d))
    setting = o1.apply(model, device_type="cpu")
    check(setting.fp32_modules == ["conv1", "layer2.0", "layer2.1", "layer2.2"],
          setting.fp32_modules)
    losses = train(model, setting, data)
    check(all(math.isfinite(v) for v in losses), "O1 losses %s" % losses)
    for name, (_, out) in seen.items():
        want = torch.float32 if in_fp32(name, setting.fp32_modules) or name == "bn" else \
            torch.bfloat16
        check(out == want, "O1: %s computed in %s, not %s" % (name, out, want))
    check(seen["fc"][1] == torch.bfloat16 and seen["conv1"][1] == torch.float32, seen)
    check(all(p.dtype == torch.float32 for p in model.parameters()), "O1 keeps fp32 weights")

    o2 = load(os.path.join(d, "o2_fp32.py"), "o2_fp32")
    check(o2.SETTING["cast_model"] and o2.SETTING["master_weights"], o2.SETTING)
    model = sequential_model()
    seen = record_dtypes(model, (torch.nn.Linear, torch.nn.BatchNorm1d))
    setting = o2.apply(model, device_type="cpu")
    before = model.fc.weight.detach().float().clone()
    losses = train(model, setting, data)
    check(all(math.isfinite(v) for v in losses), "O2 losses %s" % losses)
    check(model.fc.weight.dtype == torch.bfloat16, "O2 casts fc")
    for kept in (model.conv1, model.layer2[0], model.layer2[1], model.bn):
        check(kept.weight.dtype == torch.float32, "O2 keeps %s in float32" % kept)
    # Every module's output reaches the next one in the model's type.
    check(all(out == torch.bfloat16 for _, out in seen.values()), seen)
    masters = setting.parameters()
    check(all(p.dtype == torch.float32 for p in masters), "O2 steps fp32 masters")
    fc_master = [m for m in masters if m.shape == model.fc.weight.shape][0]
    check(torch.equal(model.fc.weight, fc_master.to(torch.bfloat16)),
          "the masters are copied into the model")
    check(not torch.equal(fc_master, before), "the optimizer stepped the masters")


def bf16_convolutions():
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            F.conv2d(torch.ones(1, 1, 4, 4), torch.ones(1, 1, 3, 3))
        return True
    except RuntimeError as e:
        print("skipped: this CPU's oneDNN has no bfloat16 convolution (%s)" % e, file=sys.stderr)
        return False


def narrow_resnet(source_dir, weights):
    sys.path.insert(0, os.path.join(source_dir, "tools"))
    from make_model_fixtures import NarrowResNet
    from torchvision.models.resnet import BasicBlock
    model = NarrowResNet(BasicBlock, [2, 2, 2, 2], 0.0625, 4, 1, True)
    model.load_state_dict(weights)
    return model


def case_resnet(d, source_dir):
    if not bf16_convolutions():
        sys.exit(77)
    path = os.path.join(source_dir, "tests/fixtures/torchscript/resnet18_tiny_script.pt")
    scripted = torch.jit.load(path)
    model = narrow_resnet(source_dir, {k: v.clone() for k, v in scripted.state_dict().items()})
    o1 = load(os.path.join(d, "o1_fp32.py"), "o1_fp32")
    seen = record_dtypes(model, (torch.nn.Conv2d, torch.nn.Linear))
    setting = o1.apply(model, device_type="cpu")
    check(setting.fp32_modules == ["conv1", "layer2.0", "layer2.1"], setting.fp32_modules)
    data = batches((8, 1, 12, 12), 4, seed=2)
    losses = train(model, setting, data)
    check(all(math.isfinite(v) for v in losses), "ResNet losses %s" % losses)
    check(len(seen) == 21, sorted(seen))
    for name, (_, out) in seen.items():
        want = torch.float32 if in_fp32(name, setting.fp32_modules) else torch.bfloat16
        check(out == want, "ResNet: %s computed in %s, not %s" % (name, out, want))

    # The TorchScript file: autocast reaches its compiled code; fp32 modules cannot be wrapped.
    try:
        o1.apply(scripted, device_type="cpu")
        raise AssertionError("apply() took fp32 modules on a TorchScript module")
    except TypeError as e:
        check("TorchScript" in str(e), e)
    plain = load(os.path.join(d, "o1_plain.py"), "o1_plain")
    check(plain.SETTING["fp32_modules"] == [], plain.SETTING)
    setting = plain.apply(scripted, device_type="cpu")
    losses = train(scripted, setting, data)
    check(all(math.isfinite(v) for v in losses), "TorchScript losses %s" % losses)
    with setting.autocast():
        check(scripted(data[0][0]).dtype == torch.bfloat16, "autocast inside TorchScript")


class EmulatedFloat16Autocast:
    """torch.autocast for device "cpu" and float16, which PyTorch 1.13 lacks: a thread's stack
    of (enabled) regions that LowPrecisionOps reads."""
    state = threading.local()

    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        self.on = enabled and dtype in (None, torch.float16)

    @classmethod
    def active(cls):
        stack = getattr(cls.state, "stack", [])
        return bool(stack) and stack[-1]

    def __enter__(self):
        self.state.__dict__.setdefault("stack", []).append(self.on)

    def __exit__(self, *exc):
        self.state.stack.pop()


class LowPrecisionOps(TorchFunctionMode):
    """Inside an active EmulatedFloat16Autocast, autocast's float16 ops take and give values on
    float16's grid (x.half().float(): beyond 65504 is inf), computing in float32."""
    OPS = {F.conv2d, F.linear, torch.conv2d, torch.matmul, torch.mm, torch.bmm, torch.addmm}
    calls = collections.Counter()
    first_conv = []  # per call of a convolution of one input channel (conv1): autocast's state

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.conv2d and args[1].shape[1] == 1:
            self.first_conv.append(EmulatedFloat16Autocast.active())
        if func not in self.OPS or not EmulatedFloat16Autocast.active():
            return func(*args, **kwargs)
        self.calls[func.__name__] += 1

        def grid(v):
            return v.half().float() if isinstance(v, torch.Tensor) and v.is_floating_point() \
                else v
        out = func(*[grid(a) for a in args], **{k: grid(v) for k, v in kwargs.items()})
        return grid(out)


def case_planted(d, source_dir):
    path = os.path.join(d, "planted.py")
    emitted = load(path, "planted")
    check(emitted.TUNE is not None and emitted.SOURCE["sweep"] == "tuned", emitted.SOURCE)
    check(emitted.SETTING["fp32_modules"] == ["conv1"], emitted.SETTING)
    check(emitted.SETTING["dtype"] == "float16" and emitted.SETTING["autocast"], emitted.SETTING)
    with open(os.path.join(d, "planted.json")) as f:
        check(json.load(f)["setting"] == emitted.SETTING, "planted.json differs from SETTING")
    without = load(path, "planted_without")
    without.SETTING["fp32_modules"] = []  # the same file without amptune's fp32 module
    data = batches((16, 1, 12, 12), 4, seed=3, scale=0.000016)  # 62500 to 125000
    check(math.isinf(data[0][0].half().max().item()), "the inputs overflow float16")
    real_autocast = torch.autocast
    torch.autocast = EmulatedFloat16Autocast
    try:
        with LowPrecisionOps():
            results = {}
            for label, module in (("with", emitted), ("without", without)):
                model = planted_model(source_dir)
                LowPrecisionOps.first_conv = []
                setting = module.apply(model, device_type="cpu")
                results[label] = (train(model, setting, data), setting.scaler.skipped_steps,
                                  LowPrecisionOps.first_conv)
    finally:
        torch.autocast = real_autocast
    losses, skipped, conv1_on = results["with"]
    check(all(math.isfinite(v) for v in losses), "with the emitted file: losses %s" % losses)
    check(len(conv1_on) == STEPS and not any(conv1_on), "conv1 ran with float16 autocast on")
    check(LowPrecisionOps.calls["conv2d"] > 0, "the other convolutions ran in float16")
    losses_without, skipped_without, conv1_without = results["without"]
    check(all(conv1_without), "without: conv1 in float16")
    check(not any(math.isfinite(v) for v in losses_without),
          "without the fp32 module every step overflows: %s" % losses_without)
    check(skipped_without == STEPS, "the loss scaler skipped %d steps" % skipped_without)
    print("planted: with the emitted file %d steps, last loss %.4f, %d skipped; without: %d of "
          "%d steps skipped" % (len(losses), losses[-1], skipped, skipped_without, STEPS))


def planted_model(source_dir):
    sys.path.insert(0, os.path.join(source_dir, "tools"))
    from make_model_fixtures import NarrowResNet
    from torchvision.models.resnet import BasicBlock
    torch.manual_seed(11)
    return NarrowResNet(BasicBlock, [2, 2, 2, 2], 0.0625, 4, 1, True)


def case_hostile(d):
    sentinel = os.path.join(d, "PWNED")
    module = load(os.path.join(d, "hostile.py"), "hostile")
    check(not os.path.exists(sentinel), "code from the database ran")
    with open(os.path.join(d, "expected.json")) as f:
        expected = json.load(f)
    check(module.SOURCE["run_name"] == expected["run_name"], module.SOURCE)
    check(module.SOURCE["database"] == expected["database"], module.SOURCE)
    check(module.SETTING["fp32_modules"] == expected["fp32_modules"], module.SETTING)


def case_fp8(d):
    module = load(os.path.join(d, "fp8.py"), "fp8_setting")
    fp8 = module.SETTING["fp8"]
    check(fp8 == {"format": "hybrid", "recipe": "delayed", "margin": 1, "amax_history_len": 16,
                  "amax_compute": "most_recent", "skip_modules": ["fc"]}, fp8)
    model = sequential_model()
    # layer2.0 is the one Linear FP8 covers: fc is kept out of it.
    check(module.fp8_linears(model) == ["layer2.0"], module.fp8_linears(model))
    try:
        import transformer_engine  # noqa: F401
        have_te = True
    except ImportError:
        have_te = False
    if not have_te:
        for call in (module.fp8_recipe, module.fp8_autocast):
            try:
                call()
                check(False, call.__name__ + " ran without Transformer Engine")
            except ImportError as error:
                check("Transformer Engine" in str(error), error)
    # The base precision (O1 bf16) still trains with apply().
    setting = module.apply(model, device_type="cpu")
    losses = train(model, setting, batches((8, 1, 12, 12), 4, seed=3)[:5])
    check(all(math.isfinite(v) for v in losses), losses)
    plain = load(os.path.join(d, "plain.py"), "plain_setting")
    check(plain.SETTING["fp8"] is None and plain.fp8_linears(model) == [], plain.SETTING)
    check(plain.fp8_recipe() is None, "a run without FP8 has no recipe")


def main():
    case, d, source_dir = sys.argv[1], sys.argv[2], sys.argv[3]
    if case == "sequential":
        case_sequential(d)
    elif case == "resnet":
        case_resnet(d, source_dir)
    elif case == "planted":
        case_planted(d, source_dir)
    elif case == "hostile":
        case_hostile(d)
    elif case == "fp8":
        case_fp8(d)
    else:
        sys.exit("unknown case " + case)
    print(case + ": passed")


if __name__ == "__main__":
    main()
