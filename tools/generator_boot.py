"""The start every generator of a scripted model and its data shares (make_tiny_gpt.py,
make_fp8_faults.py, make_fp8_head.py), so each writes the same bytes on every run and machine.

A generator calls rerun_from_root(__file__, argv) first: unless it already runs so, it runs once
more from the repository root with a fixed string hash (PYTHONHASHSEED=0), in place of this
process - the TorchScript archive's debug records then name tools/... and not the checkout's
path, and its constants come in one order. Then import_from_root gives the modules whose classes
torch.jit.script compiles, under their repository-relative file names.

A generator finds this file with its own folder on sys.path:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
"""

import os
import sys
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rerun_from_root(file, argv):
    """Runs the generator `file` (its __file__) again from ROOT with PYTHONHASHSEED=0 and the
    arguments `argv` (paths in them made absolute by the caller), unless this run is that one.
    Does not return when it runs it again."""
    if os.environ.get("PYTHONHASHSEED") == "0" and not os.path.isabs(file):
        return
    relpath = os.path.relpath(os.path.abspath(file), ROOT)
    boot = (f"f = {relpath!r}; "
            "exec(compile(open(f).read(), f, 'exec'), {'__name__': '__main__', '__file__': f})")
    os.chdir(ROOT)
    os.execve(sys.executable, [sys.executable, "-c", boot] + list(argv),
              dict(os.environ, PYTHONHASHSEED="0"))


def import_from_root(name, relpath):
    """The file ROOT/`relpath` as module `name`, registered in sys.modules (torch.jit.script
    finds the classes it compiles through their module) with `relpath` as its file name."""
    module = types.ModuleType(name)
    module.__file__ = relpath
    sys.modules[name] = module
    with open(os.path.join(ROOT, relpath)) as source:
        exec(compile(source.read(), relpath, "exec"), module.__dict__)
    return module


def export_custom_task(ets, model, path, example):
    """Scripts `model` as a custom task into `path` with export_torchscript.py (`ets`), checked
    on the batch `example`, and says what it wrote."""
    ets.export_model(model, path, task="custom", example_input=example)
    count = sum(p.numel() for p in model.parameters())
    print(f"{os.path.basename(path)}: {count} parameters, {os.path.getsize(path)} bytes")
