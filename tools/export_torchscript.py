#!/usr/bin/python3
"""Exports your own PyTorch model to the TorchScript file amptune trains, and writes the data of a
custom task in the format amptune reads.

Command line (any Python with torch; Debian: /usr/bin/python3 after apt-get install python3-torch):

  python3 tools/export_torchscript.py model --module net.py:Net [--kwargs '{"classes": 10}']
          [--task classification|custom] [--state-dict weights.pt]
          [--trace --input-shape 2,3,224,224] [--input-shape 2,3,224,224] --out model.pt
  python3 tools/export_torchscript.py data --npz train.npz --out data/train [--rows-per-shard N]
          [--force]

then in a sweep:  model: {name: torchscript, path: model.pt, task: classification}

As a module (put tools/ on sys.path):

  from export_torchscript import export_model, save_shards
  export_model(Net(), "model.pt")                                   # classification, scripted
  export_model(Net(), "model.pt", trace=True, example_input=torch.randn(2, 3, 32, 32))
  export_model(Reg(), "reg.pt", task="custom", example_input={"x": x[:4], "y": y[:4]})
  save_shards({"x": x, "y": y}, "data/train", rows_per_shard=50000)

The module is exported in train mode, on the CPU, with float32 parameters and buffers.
torch.jit.script (the default) compiles the Python code, so `if self.training`, loops and other
control flow stay as written. torch.jit.trace (trace=True) records the operations one call with
example_input performs: control flow is frozen to the path taken, and every train/eval choice is
taken in train mode for good (BatchNorm keeps normalising with batch statistics and updating its
running statistics, Dropout keeps dropping, also when amptune evaluates). Trace only modules
without such branches, or script the outer module and trace only submodules inside it.

Contracts, checked on the saved file after loading it back (torch.jit.load):

  classification  forward(x: Tensor[B, C, H, W]) -> Tensor[B, num_classes] logits.
  custom          higher_is_better: Dict[str, bool], set in __init__: metric name -> whether
                    larger is better; the first key is the primary metric (prune, tune, report).
                  @torch.jit.export
                  def training_loss(self, batch: Dict[str, Tensor]) -> Tensor: the mean loss of
                    the batch, a 0-dim tensor.
                  @torch.jit.export
                  def eval_batch(self, batch: Dict[str, Tensor]) -> Dict[str, Tensor]: for each
                    key of higher_is_better, the SUM over the batch's samples as a 0-dim tensor;
                    amptune adds them over all batches and divides by the number of samples
                    (dim 0 of the batch's tensors).
                  The batch holds the tensors of the data shards (save_shards), sample dim first.

With an example input (example_input=, --input-shape, or --data FOLDER for a custom task) the
loaded module is also run once: forward's output shape, or training_loss and eval_batch on it.
The module paths that amp.fp32_modules can name (globs over these names) are printed.

Data of a custom task: a folder of shard-00000.safetensors, shard-00001.safetensors, ...; every
shard holds the same tensor names, each with the samples along dim 0, rows split in order across
the shards. The safetensors layout: 8-byte little-endian header length, a JSON header
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}} padded with spaces
to a multiple of 8, then the data area (C-contiguous, little-endian). Dtypes: F32 F64 F16 BF16
I64 I32 U8 BOOL.
"""
import argparse
import copy
import importlib.util
import io
import json
import os
import struct
import sys
import tempfile
from typing import Dict, List, Optional

import numpy as np
import torch

TASKS = ("classification", "custom")

# torch dtype -> (safetensors name, bytes per element)
_DTYPES = {
    torch.float32: ("F32", 4),
    torch.float64: ("F64", 8),
    torch.float16: ("F16", 2),
    torch.bfloat16: ("BF16", 2),
    torch.int64: ("I64", 8),
    torch.int32: ("I32", 4),
    torch.uint8: ("U8", 1),
    torch.bool: ("BOOL", 1),
}
# safetensors name -> numpy dtype of the stored bytes (BF16 read as its int16 bits)
_NUMPY = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "BF16": "<i2", "I64": "<i8", "I32": "<i4",
          "U8": "u1", "BOOL": "?"}

# Metric names amptune records for every run; a custom task's metric may not take one.
RESERVED_METRICS = ("train_loss", "lr", "train_fps_mean", "train_fps_min", "train_fps_max",
                    "epoch_seconds", "loss_scale", "overflow_steps", "skipped_steps")

SHARD_FORMAT = "amptune-shards"
DEFAULT_SHARD_BYTES = 256 << 20


# Modules whose forward depends on self.training: a trace keeps the mode it was taken in.
_MODE_DEPENDENT = (torch.nn.modules.batchnorm._BatchNorm, torch.nn.modules.dropout._DropoutNd,
                   torch.nn.modules.instancenorm._InstanceNorm)


class ExportError(Exception):
    """A module, file or data set that does not meet amptune's contract; the message says why."""


# ---------------------------------------------------------------------------------------------
# Models


def export_model(module: torch.nn.Module, path: str, task: str = "classification",
                 example_input=None, trace: bool = False, verbose: bool = True):
    """Scripts (or, with trace=True, traces with example_input) a copy of `module` in train mode,
    checks the task's contract on the archive loaded back and saves it to `path` (atomically;
    nothing is written when a check fails). Returns the saved file loaded; `module` is left as it
    was. example_input: a Tensor [B, C, H, W] for classification, a Dict[str, Tensor] batch for
    custom. Raises ExportError."""
    if task not in TASKS:
        raise ExportError(f"task must be one of {', '.join(TASKS)}, got {task!r}")
    if isinstance(module, torch.jit.ScriptModule):
        raise ExportError("the module is already TorchScript; save it with torch.jit.save, or "
                          "pass the Python module to export it here")
    if trace and task == "custom":
        raise ExportError(
            "a custom task cannot be traced: tracing records forward only and keeps neither "
            "training_loss, eval_batch nor higher_is_better; script it (drop --trace), tracing "
            "submodules inside it with torch.jit.trace if they do not script")
    if trace and example_input is None:
        raise ExportError("tracing needs an example input (--input-shape 2,3,224,224)")
    model = copy.deepcopy(module).cpu().train()
    _check_float32(model)
    if trace:
        scripted = _trace(model, example_input)
    else:
        scripted = _script(model)
    # Saved through a buffer, the archive's inner folder is "archive" whatever the file is called,
    # so the same module gives the same bytes (amptune hashes the file) at any path. The check runs
    # on what loading those bytes gives, and only a module that passes is written.
    buffer = io.BytesIO()
    torch.jit.save(scripted, buffer)
    loaded = torch.jit.load(io.BytesIO(buffer.getvalue()))
    if task == "classification":
        check_classification(loaded, example_input, path)
    else:
        check_custom(loaded, example_input, path)
    _write_atomic(path, buffer.getvalue())
    loaded = torch.jit.load(path)  # the checks ran the other copy, which moved BatchNorm's stats
    if verbose:
        print(f"wrote {path}: {'traced' if trace else 'scripted'}, task {task}, "
              f"{sum(p.numel() for p in loaded.parameters())} parameters")
        frozen = [name for name, m in model.named_modules() if isinstance(m, _MODE_DEPENDENT)]
        if trace and frozen:
            print(f"note: traced in train mode, {len(frozen)} module(s) keep their training "
                  "behaviour when amptune evaluates (BatchNorm: batch statistics, running "
                  "statistics updated; Dropout: active): " + ", ".join(frozen[:8]) +
                  (", ..." if len(frozen) > 8 else "") + "; script the module to avoid it")
        print("module paths (amp.fp32_modules takes globs over these):")
        for name, kind in module_paths(loaded):
            print(f"  {name}  {kind}")
    return loaded


def module_paths(module) -> List[tuple]:
    """(path, type name) of every submodule, in named_modules order, the root left out."""
    out = []
    for name, sub in module.named_modules():
        if not name:
            continue
        kind = getattr(sub, "original_name", None) or type(sub).__name__
        out.append((name, kind))
    return out


def _check_float32(model):
    for kind, items in (("parameter", model.named_parameters()), ("buffer", model.named_buffers())):
        for name, t in items:
            if t.is_floating_point() and t.dtype != torch.float32:
                raise ExportError(
                    f"{kind} {name} is {t.dtype}; amptune keeps float32 weights and applies the "
                    f"precision of each run itself: export the module after module.float()")


def _script(model):
    try:
        scripted = torch.jit.script(model)
    except Exception as e:  # torch raises several types here (RuntimeError, NotSupportedError...)
        raise ExportError(
            f"torch.jit.script could not compile the module:\n{e}\n"
            "Make the code scriptable (type annotations, no unsupported Python), or trace it "
            "(--trace --input-shape ...): tracing records the operations of one call, so control "
            "flow is frozen to the path that input took and train/eval branches (BatchNorm, "
            "Dropout) stay in train mode") from e
    if not isinstance(scripted, torch.jit.ScriptModule):
        raise ExportError("torch.jit.script returned the Python module: the JIT is disabled "
                          "(PYTORCH_JIT=0 in the environment); unset it")
    return scripted


def _trace(model, example_input):
    if not isinstance(example_input, torch.Tensor):
        raise ExportError("tracing a classifier needs a Tensor example input [B, C, H, W]")
    # Tracing runs forward (twice, with its check), which in train mode moves BatchNorm's running
    # statistics; the file is to hold the module's weights as they were.
    state = {k: v.clone() for k, v in model.state_dict().items()}
    # The trace check runs the module again and compares: with dropout (random in train mode) it
    # always differs, a warning that would hide the ones about control flow.
    random = any(isinstance(m, torch.nn.modules.dropout._DropoutNd) for m in model.modules())
    try:
        traced = torch.jit.trace(model, example_input.cpu(), check_trace=not random)
    except Exception as e:
        raise ExportError(f"torch.jit.trace failed:\n{e}") from e
    with torch.no_grad():
        for name, t in traced.state_dict().items():
            t.copy_(state[name])
    return traced


def _write_atomic(path, data: bytes):
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes it 0600
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _method_schema(module, name):
    try:
        return module._c._get_method(name).schema
    except RuntimeError:
        return None


def _types(schema):
    """([argument types without self], [return types]) as strings."""
    return ([a.type.annotation_str for a in schema.arguments[1:]],
            [r.type.annotation_str for r in schema.returns])


def check_classification(module, example_input=None, origin="module"):
    """forward(Tensor) -> Tensor; with example_input [B, C, H, W], the output is [B, K]."""
    schema = _method_schema(module, "forward")
    if schema is None:
        raise ExportError(f"{origin}: has no forward method")
    args, returns = _types(schema)
    if args != ["Tensor"] or returns != ["Tensor"]:
        raise ExportError(f"{origin}: forward must take one Tensor [B, C, H, W] and return one "
                          f"Tensor [B, num_classes]; it is {schema}")
    if example_input is None:
        return
    if not isinstance(example_input, torch.Tensor) or example_input.dim() != 4:
        raise ExportError("a classifier's example input must be a Tensor [B, C, H, W]")
    with torch.no_grad():
        out = module(example_input.cpu())
    b = example_input.shape[0]
    if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.shape[0] != b:
        shape = list(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ExportError(f"{origin}: forward returns the wrong shape for the data: input "
                          f"{list(example_input.shape)} gave {shape}, expected [{b}, num_classes]")
    if not out.is_floating_point():
        raise ExportError(f"{origin}: forward returns {out.dtype}; logits must be floating point")


def check_custom(module, example_batch=None, origin="module"):
    """higher_is_better, training_loss and eval_batch as the custom-task contract says; with an
    example batch, runs training_loss (train mode) and eval_batch (eval mode) on it."""
    if not hasattr(module, "higher_is_better"):
        raise ExportError(f"{origin}: a custom task needs the attribute higher_is_better: "
                          "Dict[str, bool] (metric name -> larger is better; the first key is "
                          "the primary metric), set in __init__")
    hib = module.higher_is_better
    if (not isinstance(hib, dict) or not hib
            or not all(isinstance(k, str) and isinstance(v, bool) for k, v in hib.items())):
        raise ExportError(f"{origin}: higher_is_better must be a non-empty Dict[str, bool], "
                          f"got {hib!r}")
    for name in hib:
        if name in RESERVED_METRICS or not name or not all(c.isalnum() or c == "_" for c in name):
            raise ExportError(f"{origin}: metric name {name!r} in higher_is_better is not "
                              "allowed: letters, digits and _ only, and none of amptune's own "
                              f"({', '.join(RESERVED_METRICS)})")
    wanted = {
        "training_loss": (["Dict[str, Tensor]"], ["Tensor"],
                          "def training_loss(self, batch: Dict[str, Tensor]) -> Tensor"),
        "eval_batch": (["Dict[str, Tensor]"], ["Dict[str, Tensor]"],
                       "def eval_batch(self, batch: Dict[str, Tensor]) -> Dict[str, Tensor]"),
    }
    for name, (args, returns, signature) in wanted.items():
        schema = _method_schema(module, name)
        if schema is None:
            raise ExportError(f"{origin}: a custom task needs the method\n  @torch.jit.export\n"
                              f"  {signature}\n(a method only scripts with @torch.jit.export)")
        if _types(schema) != (args, returns):
            raise ExportError(f"{origin}: {name} must be `{signature}`; it is {schema}")
    if example_batch is None:
        return
    batch = _check_batch(example_batch)
    was_training = module.training
    try:
        module.train()
        loss = module.training_loss(batch)
        if loss.dim() != 0 or not loss.is_floating_point():
            raise ExportError(f"{origin}: training_loss must return a 0-dim floating tensor (the "
                              f"mean over the batch), got {loss.dtype} {list(loss.shape)}")
        module.eval()
        with torch.no_grad():
            sums = module.eval_batch(batch)
    finally:
        module.train(was_training)
    if set(sums) != set(hib):
        raise ExportError(f"{origin}: eval_batch must return exactly the metrics of "
                          f"higher_is_better {sorted(hib)}, got {sorted(sums)}")
    for name, value in sums.items():
        if value.dim() != 0:
            raise ExportError(f"{origin}: eval_batch[{name!r}] must be a 0-dim tensor (the sum "
                              f"over the batch's samples), got shape {list(value.shape)}")


def _check_batch(batch):
    if not isinstance(batch, dict) or not batch:
        raise ExportError("a custom task's example input must be a non-empty Dict[str, Tensor]")
    rows = {name: t.shape[0] if t.dim() else None for name, t in batch.items()}
    if len(set(rows.values())) != 1 or None in rows.values():
        raise ExportError(f"every tensor of a batch needs the same first (sample) dimension: "
                          f"{rows}")
    return {name: t.cpu() for name, t in batch.items()}


# ---------------------------------------------------------------------------------------------
# Data shards


def shard_bytes(tensors: Dict[str, torch.Tensor], metadata: Optional[Dict[str, str]] = None):
    """One safetensors file's bytes. Tensors are laid out by element size, largest first, then by
    name (each starts aligned to its element size); the header is padded with spaces to a
    multiple of 8, as amptune's own writer does (src/train/safetensors.h)."""
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    order = sorted(tensors, key=lambda n: (-_dtype_info(n, tensors[n])[1], n))
    chunks, offset = [], 0
    for name in order:
        t = tensors[name]
        dtype_name, _ = _dtype_info(name, t)
        data = _le_bytes(t)
        header[name] = {"dtype": dtype_name, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def _dtype_info(name, t):
    if not isinstance(t, torch.Tensor):
        raise ExportError(f"tensor {name!r} is a {type(t).__name__}, not a torch.Tensor")
    if t.dtype not in _DTYPES:
        raise ExportError(f"tensor {name!r} is {t.dtype}; the shards hold "
                          f"{', '.join(n for n, _ in _DTYPES.values())}")
    return _DTYPES[t.dtype]


def _le_bytes(t):
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16: its bits as int16
        t = t.view(torch.int16)
    a = t.numpy()
    if a.dtype.itemsize > 1:
        a = a.astype(a.dtype.newbyteorder("<"), copy=False)
    return a.tobytes(order="C")


def save_shards(tensors: Dict[str, torch.Tensor], folder: str,
                rows_per_shard: Optional[int] = None, overwrite: bool = False) -> List[str]:
    """Writes `tensors` (name -> [N, ...], the same N for all) as folder/shard-00000.safetensors,
    ... with rows_per_shard rows each (the last may hold fewer; default: about 256 MiB a shard).
    Refuses a folder that already holds shards unless overwrite, which replaces them (and removes
    those beyond the new count). Each shard's __metadata__ holds format "amptune-shards", its
    index "shard" and the count "shards". Returns the paths written."""
    if not tensors:
        raise ExportError("no tensors to write")
    rows = {}
    for name, t in tensors.items():
        _dtype_info(name, t)
        if not name or name == "__metadata__":
            raise ExportError(f"tensor name {name!r} is not allowed")
        if t.dim() == 0:
            raise ExportError(f"tensor {name!r} is 0-dim; every tensor needs the samples along "
                              "dim 0")
        rows[name] = t.shape[0]
    if len(set(rows.values())) != 1:
        raise ExportError(f"every tensor needs the same first (sample) dimension, got {rows}")
    n = next(iter(rows.values()))
    if n == 0:
        raise ExportError("the tensors hold no samples (dim 0 is 0)")
    if rows_per_shard is None:
        row_bytes = sum(t[0].numel() * _DTYPES[t.dtype][1] for t in tensors.values())
        rows_per_shard = max(1, DEFAULT_SHARD_BYTES // max(1, row_bytes))
    if rows_per_shard < 1:
        raise ExportError(f"rows_per_shard must be >= 1, got {rows_per_shard}")
    os.makedirs(folder, exist_ok=True)
    old = sorted(f for f in os.listdir(folder)
                 if f.startswith("shard-") and f.endswith(".safetensors"))
    if old and not overwrite:
        raise ExportError(f"{folder} already holds {len(old)} shard file(s) ({old[0]}, ...); "
                          "remove them or pass --force (overwrite=True)")
    count = (n + rows_per_shard - 1) // rows_per_shard
    paths = []
    for i in range(count):
        part = {name: t[i * rows_per_shard:(i + 1) * rows_per_shard] for name, t in tensors.items()}
        meta = {"format": SHARD_FORMAT, "shard": str(i), "shards": str(count)}
        path = os.path.join(folder, f"shard-{i:05d}.safetensors")
        _write_atomic(path, shard_bytes(part, meta))
        paths.append(path)
    for f in set(old) - {os.path.basename(p) for p in paths}:  # shards of a longer old set
        os.unlink(os.path.join(folder, f))
    return paths


def load_shard(path: str) -> Dict[str, torch.Tensor]:
    """Reads one shard (any safetensors file of the dtypes above) into CPU tensors."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ExportError(f"{path}: too short for a safetensors file")
    (size,) = struct.unpack("<Q", data[:8])
    if 8 + size > len(data):
        raise ExportError(f"{path}: header length {size} runs past the end of the file")
    header = json.loads(data[8:8 + size].decode("utf-8"))
    body = data[8 + size:]
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if entry.get("dtype") not in _NUMPY:
            raise ExportError(f"{path}: tensor {name!r} has dtype {entry.get('dtype')}")
        begin, end = entry["data_offsets"]
        a = np.frombuffer(body[begin:end], dtype=_NUMPY[entry["dtype"]])
        t = torch.from_numpy(a.astype(a.dtype.newbyteorder("="), copy=True))
        if entry["dtype"] == "BF16":
            t = t.view(torch.bfloat16)
        out[name] = t.reshape(entry["shape"])
    return out


def load_shards(folder: str) -> Dict[str, torch.Tensor]:
    """All shards of a folder, concatenated along dim 0."""
    names = sorted(f for f in os.listdir(folder)
                   if f.startswith("shard-") and f.endswith(".safetensors"))
    if not names:
        raise ExportError(f"{folder} holds no shard-*.safetensors")
    parts = [load_shard(os.path.join(folder, f)) for f in names]
    return {k: torch.cat([p[k] for p in parts]) for k in parts[0]}


# ---------------------------------------------------------------------------------------------
# Command line


def _load_class(spec, kwargs_json):
    path, sep, cls = spec.rpartition(":")
    if not sep or not path or not cls:
        raise ExportError(f"--module must be FILE.py:CLASS, got {spec!r}")
    if not os.path.isfile(path):
        raise ExportError(f"--module: no file {path}")
    # The file's folder on sys.path, so that it can import its neighbours.
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    name = os.path.splitext(os.path.basename(path))[0]
    spec_obj = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec_obj)
    sys.modules[name] = mod  # torch.jit.script looks classes up through their module
    spec_obj.loader.exec_module(mod)
    if not hasattr(mod, cls):
        raise ExportError(f"--module: {path} defines no {cls}")
    try:
        kwargs = json.loads(kwargs_json) if kwargs_json else {}
    except json.JSONDecodeError as e:
        raise ExportError(f"--kwargs is not JSON: {e}") from e
    if not isinstance(kwargs, dict):
        raise ExportError("--kwargs must be a JSON object")
    return getattr(mod, cls)(**kwargs)


def _load_weights(module, path):
    obj = torch.load(path, map_location="cpu")
    if isinstance(obj, dict) and "state_dict" in obj and isinstance(obj["state_dict"], dict):
        obj = obj["state_dict"]
    if not isinstance(obj, dict):
        raise ExportError(f"--state-dict {path} holds a {type(obj).__name__}, not a state dict")
    try:
        module.load_state_dict(obj)
    except RuntimeError as e:
        raise ExportError(f"--state-dict {path} does not fit the module:\n{e}") from e


def _shape(text):
    try:
        dims = [int(d) for d in text.split(",")]
    except ValueError:
        dims = []
    if not dims or any(d < 1 for d in dims):
        raise ExportError(f"--input-shape must be positive integers like 2,3,224,224, got {text!r}")
    return dims


def _cmd_model(args):
    module = _load_class(args.module, args.kwargs)
    if args.state_dict:
        _load_weights(module, args.state_dict)
    example = None
    if args.input_shape:
        if args.task != "classification":
            raise ExportError("--input-shape is for a classifier; check a custom task with "
                              "--data FOLDER (shards)")
        example = torch.randn(*_shape(args.input_shape), generator=torch.Generator().manual_seed(0))
    if args.data:
        if args.task != "custom":
            raise ExportError("--data is for a custom task; a classifier takes --input-shape")
        first = load_shard(os.path.join(args.data, "shard-00000.safetensors"))
        example = {k: v[:args.data_rows] for k, v in first.items()}
    export_model(module, args.out, task=args.task, example_input=example, trace=args.trace)


def _cmd_data(args):
    with np.load(args.npz, allow_pickle=False) as z:
        arrays = {name: z[name] for name in z.files}
    tensors = {}
    for name, a in arrays.items():
        try:
            tensors[name] = torch.from_numpy(np.ascontiguousarray(a))
        except TypeError as e:
            raise ExportError(f"{args.npz}: array {name!r} has dtype {a.dtype}, which torch "
                              "cannot hold") from e
    paths = save_shards(tensors, args.out, args.rows_per_shard, overwrite=args.force)
    n = next(iter(tensors.values())).shape[0]
    print(f"wrote {len(paths)} shard(s), {n} rows, to {args.out}: " +
          ", ".join(f"{k} {str(v.dtype).replace('torch.', '')} {list(v.shape[1:])}"
                    for k, v in tensors.items()))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("model", help="export a module to TorchScript")
    m.add_argument("--module", required=True, help="FILE.py:CLASS (the class is constructed)")
    m.add_argument("--kwargs", help="JSON object of constructor arguments")
    m.add_argument("--task", choices=TASKS, default="classification",
                   help="the contract to check (default: %(default)s)")
    m.add_argument("--state-dict", help="weights to load first (torch.save of a state dict)")
    m.add_argument("--trace", action="store_true",
                   help="torch.jit.trace instead of torch.jit.script (classification only)")
    m.add_argument("--input-shape", help="B,C,H,W of an example input (random): traces with it "
                   "and checks forward's output shape")
    m.add_argument("--data", help="custom task: a shard folder whose first rows check "
                   "training_loss and eval_batch")
    m.add_argument("--data-rows", type=int, default=8, help="rows of --data (default: %(default)s)")
    m.add_argument("--out", required=True, help="the .pt file to write")
    d = sub.add_parser("data", help="numpy .npz arrays -> safetensors shards")
    d.add_argument("--npz", required=True, help="arrays with the samples along dim 0")
    d.add_argument("--out", required=True, help="folder for shard-NNNNN.safetensors")
    d.add_argument("--rows-per-shard", type=int, help="default: about 256 MiB a shard")
    d.add_argument("--force", action="store_true", help="replace shards already in --out")
    args = parser.parse_args(argv)
    try:
        if args.command == "model":
            if args.trace and not args.input_shape:
                raise ExportError("--trace needs --input-shape B,C,H,W")
            _cmd_model(args)
        else:
            _cmd_data(args)
    except ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
