// The setting as a self-contained Python module for plain PyTorch >= 1.13 (setting_export.h):
// a header of comments that says where it comes from and what it does, the data (SOURCE, TUNE,
// SETTING: the fields of the JSON form) as literals of python_literal.h, then the fixed code
// that applies it (kRuntime). Values from the database reach the file only through
// python_string / python_float / python_int / python_bool, in the comments too; line 1 fixes the
// file's encoding so that no text of line 2 can declare another.
#include <cmath>
#include <string>
#include <vector>

#include "app/artifacts/python_literal.h"
#include "app/artifacts/setting_export.h"
#include "core/error.h"
#include "core/words.h"
#include "train/cast_points.h"

namespace amptune::app {
namespace {

// The code every generated module shares: the casts around modules kept in fp32 and around an
// O2/O3 model, apex's loss scaler with GradScaler's methods, the Setting and apply().
constexpr const char* kImports = R"py(
import contextlib
import fnmatch
import functools

import torch
)py";

constexpr const char* kRuntime = R"py(
_LOW_TYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
_HALF_TYPES = (torch.float16, torch.bfloat16)


def _cast(value, to, only=None):
    """The floating tensors in `value` (nested tuples, lists, dicts) cast to `to`; with `only`,
    those of these dtypes only."""
    if isinstance(value, torch.Tensor):
        wanted = only is None or value.dtype in only
        return value.to(to) if value.is_floating_point() and value.dtype != to and wanted else value
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple
        return type(value)(*(_cast(v, to, only) for v in value))
    if isinstance(value, (tuple, list)):
        return type(value)(_cast(v, to, only) for v in value)
    if isinstance(value, dict):
        return type(value)((k, _cast(v, to, only)) for k, v in value.items())
    return value


def _in_float32(forward, device_type, out_type):
    """`forward` as amptune runs a module kept in fp32: autocast off, floating inputs in a low
    type cast to float32, the output cast to `out_type` (the model's type under O2/O3; None
    under O1, where it stays float32 as autocast leaves an fp32 op's result)."""

    @functools.wraps(forward)
    def run(*args, **kwargs):
        with torch.autocast(device_type, enabled=False):
            out = forward(*_cast(args, torch.float32, _HALF_TYPES),
                          **_cast(kwargs, torch.float32, _HALF_TYPES))
        return out if out_type is None else _cast(out, out_type, (torch.float32,))

    return run


def _model_entry(forward, low):
    """O2/O3: floating inputs cast to the model's type on entry, the outputs back to float32."""

    @functools.wraps(forward)
    def run(*args, **kwargs):
        out = forward(*_cast(args, low, (torch.float32, torch.float64)),
                      **_cast(kwargs, low, (torch.float32, torch.float64)))
        return _cast(out, torch.float32, _HALF_TYPES)

    return run


def _fp32_modules(model, globs):
    """(name, module) of each outermost module whose name matches one of `globs` (shell patterns,
    '*' also crosses dots, as amptune matches amp.fp32_modules); a glob that matches no module
    is an error, as it is in amptune."""
    named = list(model.named_modules())
    for glob in globs:
        if not any(fnmatch.fnmatchcase(name, glob) for name, _ in named):
            examples = ", ".join(repr(name) for name, _ in named[1:9])
            raise ValueError("amp.fp32_modules: %r matches no module of the model (its modules "
                             "include %s)" % (glob, examples))
    marked = []
    for name, module in named:
        if any(name == m or m == "" or name.startswith(m + ".") for m, _ in marked):
            continue  # inside a module already kept in fp32
        if any(fnmatch.fnmatchcase(name, glob) for glob in globs):
            marked.append((name, module))
    return marked


def _cast_model(model, low, keep):
    """O2/O3: floating parameters and buffers of every module but those in `keep` cast to `low`
    (integer buffers such as BatchNorm's num_batches_tracked stay as they are)."""
    with torch.no_grad():
        for module in model.modules():
            if id(module) in keep:
                continue
            for param in module._parameters.values():
                if param is not None and param.is_floating_point():
                    param.data = param.data.to(low)
            for key, buf in module._buffers.items():
                if buf is not None and buf.is_floating_point():
                    module._buffers[key] = buf.to(low)


class LossScaler:
    """apex's loss scaler with GradScaler's methods (scale, unscale_, step, update, get_scale,
    state_dict, load_state_dict). Dynamic: gradients unscaled and checked for inf/NaN after each
    backward; on one the step is skipped and the scale multiplied by backoff_factor (not below
    min_scale), after growth_interval clean steps multiplied by growth_factor (not above
    max_scale). Static: a fixed scale; a step whose gradients hold inf/NaN is skipped (apex would
    take it). Works on any device and for float16 / bfloat16 gradients."""

    def __init__(self, init_scale, dynamic=True, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, min_scale=None, max_scale=None):
        self.dynamic = dynamic
        self.growth_factor, self.backoff_factor = growth_factor, backoff_factor
        self.growth_interval = growth_interval
        self.min_scale, self.max_scale = min_scale, max_scale
        self._scale = float(init_scale)
        self._unskipped = 0
        self._unscaled = False
        self.found_inf = False
        self.skipped_steps = 0  # steps skipped for inf/NaN so far

    def is_enabled(self):
        return True

    def get_scale(self):
        return self._scale

    def scale(self, loss):
        return loss * self._scale

    def unscale_(self, optimizer):
        grads = [p.grad for group in optimizer.param_groups for p in group["params"]
                 if p.grad is not None]
        flags = {}
        with torch.no_grad():
            for grad in grads:
                grad.mul_(1.0 / self._scale)
                flags.setdefault(grad.device, []).append(torch.isfinite(grad).all())
        # one read per device
        self.found_inf = not all(bool(torch.stack(f).all()) for f in flags.values())
        self._unscaled = True

    def step(self, optimizer, *args, **kwargs):
        if not self._unscaled:
            self.unscale_(optimizer)
        self._unscaled = False
        if self.found_inf:
            self.skipped_steps += 1
            return None
        return optimizer.step(*args, **kwargs)

    def update(self):
        if self.dynamic and self.found_inf:
            self._scale *= self.backoff_factor
            if self.min_scale is not None:
                self._scale = max(self.min_scale, self._scale)
            self._unskipped = 0
        else:
            self._unskipped += 1
            if self.dynamic and self._unskipped == self.growth_interval:
                self._scale *= self.growth_factor
                if self.max_scale is not None:
                    self._scale = min(self.max_scale, self._scale)
                self._unskipped = 0
        self.found_inf = False

    def state_dict(self):
        return {"scale": self._scale, "unskipped": self._unskipped}

    def load_state_dict(self, state):
        self._scale, self._unskipped = float(state["scale"]), int(state["unskipped"])


class Setting:
    """SETTING applied to one model (apply() makes it)."""

    def __init__(self, model, device_type, low, cast_model, fp32_modules, masters):
        self.model = model
        self.device_type = device_type
        self.dtype = low  # the low-precision type, None at O0
        self.fp32_modules = fp32_modules  # names of the modules kept in fp32 (outermost)
        self._masters = masters  # O2: [(the model's low-precision parameter, its fp32 master)]
        self.scaler = _make_scaler(device_type, grads_fp32=bool(masters) or not cast_model)

    def autocast(self):
        """The context to run the forward pass and the loss in: torch.autocast under O1, nothing
        otherwise (O2/O3 hold the model in the low type, O0 in float32)."""
        if SETTING["autocast"]:
            return torch.autocast(self.device_type, dtype=self.dtype)
        return contextlib.nullcontext()

    def parameters(self):
        """The tensors the optimizer steps: the model's parameters, each low-precision one
        replaced by its fp32 master under O2."""
        masters = {id(p): m for p, m in self._masters}
        return [masters.get(id(p), p) for p in self.model.parameters()]

    def step(self, loss, optimizer):
        """One optimizer step as amptune takes it: the backward pass of the scaled loss, the
        gradients moved to the fp32 masters (O2), unscaled and checked, the step (skipped on
        inf/NaN under a loss scale), the scale updated, the masters copied into the model."""
        scaler = self.scaler
        (loss if scaler is None else scaler.scale(loss)).backward()
        with torch.no_grad():
            for param, master in self._masters:
                master.grad = None if param.grad is None else param.grad.float()
                param.grad = None
        if scaler is None:
            optimizer.step()
        else:
            scaler.step(optimizer)
            scaler.update()
            if not isinstance(scaler, LossScaler):  # GradScaler
                _bound_scale(scaler, loss.device)
        with torch.no_grad():
            for param, master in self._masters:
                param.copy_(master)


def _make_scaler(device_type, grads_fp32):
    """GradScaler on CUDA for fp32 gradients, LossScaler elsewhere; None without a scale."""
    scale = SETTING["loss_scale"]
    if not scale["dynamic"]:
        if scale["scale"] == 1.0:
            return None  # no loss scaling (apex: a static scale of 1 does nothing)
        return LossScaler(scale["scale"], dynamic=False)
    factors = dict(init_scale=scale["init_scale"], growth_factor=scale["growth_factor"],
                   backoff_factor=scale["backoff_factor"],
                   growth_interval=scale["growth_interval"])
    if device_type == "cuda" and grads_fp32:
        if hasattr(torch.amp, "GradScaler"):  # PyTorch 2.3 and later
            return torch.amp.GradScaler("cuda", **factors)
        return torch.cuda.amp.GradScaler(**factors)
    return LossScaler(dynamic=True, min_scale=scale["min_scale"], max_scale=scale["max_scale"],
                      **factors)


def _bound_scale(scaler, device):
    """apex's min_scale / max_scale, which GradScaler lacks, applied after its update: the scale
    read as a tensor on the device (no host synchronisation) and clamped."""
    low, high = SETTING["loss_scale"]["min_scale"], SETTING["loss_scale"]["max_scale"]
    if low is None and high is None:
        return
    current = scaler.scale(torch.ones((), device=device))
    scaler.update(new_scale=current.clamp(min=low, max=high))


def apply(model, device_type="cuda", dtype=None):
    """Puts SETTING on `model`, an nn.Module already on its device, and returns its Setting.
    Call it once, before the optimizer is made (under O2 the optimizer steps
    Setting.parameters(), the fp32 masters). `dtype` overrides the low-precision type (e.g.
    torch.bfloat16 for an fp16 setting on a CPU, whose autocast in PyTorch 1.13 takes bfloat16
    only)."""
    low = dtype if dtype is not None else _LOW_TYPES.get(SETTING["dtype"])
    marked = _fp32_modules(model, SETTING["fp32_modules"])
    # The whole model kept in fp32 (a glob matching the root, ""): nothing to cast.
    cast_model = SETTING["cast_model"] and not any(m is model for _, m in marked)
    if isinstance(model, torch.jit.ScriptModule) and (marked or cast_model):
        raise TypeError("a TorchScript module runs its submodules inside its compiled code: "
                        "apply() this setting (amp.fp32_modules or a cast model) to the model "
                        "in Python (nn.Module) instead")
    keep = {id(sub) for _, module in marked for sub in module.modules()}
    masters = []
    if cast_model:
        if SETTING["keep_batchnorm_fp32"]:
            norms = [m for m in model.modules() if id(m) not in keep
                     and isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
            for norm in norms:  # fp32 statistics and affine parameters, low-type input and output
                norm.forward = _in_float32(norm.forward, device_type, low)
                keep.add(id(norm))
        _cast_model(model, low, keep)
        if SETTING["master_weights"]:
            masters = [(p, p.detach().float().requires_grad_(p.requires_grad))
                       for p in model.parameters() if p.dtype != torch.float32]
        model.forward = _model_entry(model.forward, low)
    for _, module in marked:
        module.forward = _in_float32(module.forward, device_type, low if cast_model else None)
    return Setting(model, device_type, low, cast_model, [name for name, _ in marked], masters)


def _transformer_engine(what):
    try:
        import transformer_engine.pytorch as te
        from transformer_engine.common import recipe
    except ImportError as error:
        raise ImportError("%s needs NVIDIA Transformer Engine (transformer_engine), which this "
                          "Python does not have: %s" % (what, error)) from error
    return te, recipe


def fp8_recipe():
    """SETTING["fp8"] as a Transformer Engine recipe: DelayedScaling(margin, fp8_format,
    amax_history_len, amax_compute_algo) or Float8CurrentScaling(fp8_format) (which has no
    margin: amptune's current scaling applies SETTING["fp8"]["margin"] too); None when the run
    did not use FP8."""
    fp8 = SETTING["fp8"]
    if fp8 is None:
        return None
    _, recipe = _transformer_engine("fp8_recipe()")
    fmt = recipe.Format.HYBRID if fp8["format"] == "hybrid" else recipe.Format.E4M3
    if fp8["recipe"] == "current":
        return recipe.Float8CurrentScaling(fp8_format=fmt)
    return recipe.DelayedScaling(margin=fp8["margin"], fp8_format=fmt,
                                 amax_history_len=fp8["amax_history_len"],
                                 amax_compute_algo=fp8["amax_compute"])


def fp8_autocast():
    """Transformer Engine's fp8_autocast with fp8_recipe() (its te.* modules compute in FP8
    inside it) when the run used FP8; nothing otherwise. Use it inside setting.autocast()."""
    if SETTING["fp8"] is None:
        return contextlib.nullcontext()
    te, _ = _transformer_engine("fp8_autocast()")
    return te.fp8_autocast(enabled=True, fp8_recipe=fp8_recipe())


def fp8_linears(model):
    """The names of the nn.Linear modules of `model` the run's FP8 covered: every Linear but
    those kept out of FP8 (amp.fp8.skip_modules) or in fp32 (amp.fp32_modules), a module or an
    ancestor matching a glob as amptune matches them. Replace each with te.Linear (same shapes,
    its weights copied) to train them in FP8. amptune's FP8 covers convolutions as well;
    Transformer Engine has no FP8 convolution, so they stay in the base precision there."""
    fp8 = SETTING["fp8"]
    if fp8 is None:
        return []
    globs = list(fp8["skip_modules"]) + list(SETTING["fp32_modules"])
    names = []
    for name, module in model.named_modules():
        parts = name.split(".") if name else []
        lineage = [""] + [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
        if not isinstance(module, torch.nn.Linear):
            continue
        if any(fnmatch.fnmatchcase(n, g) for n in lineage for g in globs):
            continue
        names.append(name)
    return names
)py";

using Json = nlohmann::ordered_json;

// A member of setting_document as a Python literal: None, True / False, an int, a float (finite
// only), a str, a list, a dict. `what` names the value in an error.
std::string python_value(const Json& value, const std::string& what) {
  switch (value.type()) {
    case Json::value_t::null:
      return "None";
    case Json::value_t::boolean:
      return python_bool(value.get<bool>());
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return python_int(value.get<int64_t>());
    case Json::value_t::number_float:
      return python_float(value.get<double>(), what);
    case Json::value_t::string:
      return python_string(value.get<std::string>(), what);
    case Json::value_t::array: {
      std::string out = "[";
      for (const Json& item : value) out += (out.size() > 1 ? ", " : "") + python_value(item, what);
      return out + "]";
    }
    case Json::value_t::object: {
      std::string out = "{";
      for (const auto& [key, item] : value.items()) {
        out += (out.size() > 1 ? ", " : "") + python_string(key, what) + ": " +
               python_value(item, what + "." + key);
      }
      return out + "}";
    }
    default:
      throw ConfigError(what + " has no Python literal");
  }
}

// `value` as a Python literal laid out for reading: a dict one member a line, a list inline when
// it fits in 72 characters, else one item a line; nested `indent` spaces deep.
std::string python_layout(const Json& value, const std::string& what, size_t indent) {
  const std::string inner(indent + 4, ' ');
  if (value.is_object() && !value.empty()) {
    std::string out = "{\n";
    for (const auto& [key, item] : value.items()) {
      out += inner + python_string(key, what) + ": " +
             python_layout(item, what + "." + key, indent + 4) + ",\n";
    }
    return out + std::string(indent, ' ') + "}";
  }
  const std::string flat = python_value(value, what);
  if (!value.is_array() || flat.size() <= 72) return flat;
  std::string out = "[\n";
  for (const Json& item : value) out += inner + python_layout(item, what, indent + 4) + ",\n";
  return out + std::string(indent, ' ') + "]";
}

// Comment lines: "# " before each line of `text` ("#" for an empty one). `text` is made here,
// its values as literals, which hold no line break.
std::string comment(const std::string& text) {
  std::string out;
  size_t at = 0;
  while (at <= text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    if (at == text.size() && at > 0) break;  // the text's last line break ends no empty line
    const std::string line = text.substr(at, end - at);
    out += line.empty() ? "#\n" : "# " + line + "\n";
    at = end + 1;
  }
  return out;
}

std::string joined_literals(const std::vector<std::string>& items, const std::string& what) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + python_string(item, what);
  return out;
}

// Where the setting comes from.
std::string origin_text(const ExportedSetting& s, const std::string& what) {
  std::string out = "The precision setting of amptune run " + python_int(s.run_id) + ", " +
                    python_string(s.run_name, what + " name") + " (status " +
                    python_string(s.run_status, what + " status") + "),\nof sweep " +
                    python_string(s.sweep, what + " sweep") + ", model " +
                    python_string(s.model, what) + ", in the results database\n" +
                    python_string(s.source.database, "the database path") + ";\nconfig hash " +
                    python_string(s.config_hash, what + " config hash") + ".\n";
  if (!s.tune) return out;
  const TuneAnswerInfo& t = *s.tune;
  auto number = [&](double v) { return std::isfinite(v) ? python_float(v, what) : "none"; };
  out += "It is the answer of `amptune tune` for that sweep: " +
         python_string(t.metric, what + " metric") + " " + number(t.answer_value) +
         "\nagainst the fp32 reference's " + number(t.reference_value) + " (run " +
         python_string(t.reference_run, what) + "; " + (t.higher_is_better ? "higher" : "lower") +
         " is better),\ntolerance " +
         (t.tolerance_abs > 0   ? "abs " + python_float(t.tolerance_abs, what)
          : t.tolerance_rel > 0 ? "rel " + python_float(t.tolerance_rel, what)
                                : std::string("not recorded")) +
         "; the search: " + python_string(t.note, what + " note") + ".\n";
  return out;
}

// What the opt level does, in the module's terms.
std::string level_text(const ExportedSetting& s) {
  const std::string low = s.dtype ? (*s.dtype == Dtype::kBf16 ? "bfloat16" : "float16") : "";
  std::string out = to_string(s.opt_level) + (low.empty() ? "" : ", " + low) + ": ";
  if (!s.dtype) return out + "float32 throughout; apply() changes nothing.\n";
  if (s.autocast) {
    out += "the forward pass and the loss under torch.autocast(device_type, torch." + low +
           ")\n(Setting.autocast()); PyTorch's per-op lists, which amptune's O1 follows (apex's "
           "own lists\ndiffer in details); the weights stay float32.\n";
  }
  if (s.cast_model) {
    out += "the model's weights in " + low +
           (s.keep_batchnorm_fp32 ? ", BatchNorm kept in float32 (its input cast up, its output "
                                    "back)"
                                  : ", BatchNorm too") +
           ";\nfloating inputs cast to " + low + " on entry, outputs back to float32" +
           (s.master_weights
                ? "; fp32 master weights\n(Setting.parameters()) stepped by the "
                  "optimizer and copied into the model after each\nstep (torch.amp "
                  "has no O2: written out below).\n"
                : "; no fp32 master weights: the optimizer steps the " + low + " weights.\n");
  }
  return out;
}

// The loss scale, and which scaler carries it.
std::string scale_text(const ExportedSetting& s, const std::string& what) {
  if (!s.dynamic_scale && s.static_scale == 1.0) {
    return "Loss scale: none (a static scale of 1.0): Setting.scaler is None.\n";
  }
  if (!s.dynamic_scale) {
    return "Loss scale: static " + python_float(s.static_scale, what) +
           ": the loss multiplied, the gradients divided, and a step\nwhose gradients hold "
           "inf/NaN skipped (apex would take it and the inf would reach the\nweights): "
           "LossScaler(dynamic=False) below.\n";
  }
  std::string out = "Loss scale: dynamic (apex's rule), from " + python_float(s.init_scale, what) +
                    ": on inf/NaN gradients the step is skipped and\nthe scale halved";
  if (s.min_scale > 0) out += " (not below " + python_float(s.min_scale, what) + ")";
  out += ", after " + python_int(s.growth_interval) + " steps without one doubled";
  if (s.max_scale > 0) out += " (not above " + python_float(s.max_scale, what) + ")";
  return out + ".\nOn CUDA with float32 gradients Setting.scaler is torch's GradScaler " +
         "(init_scale,\ngrowth_factor=" + python_float(kScaleGrowthFactor, what) +
         ", backoff_factor=" + python_float(kScaleBackoffFactor, what) +
         ", growth_interval), which has no bounds:\nSetting.step clamps its scale after each "
         "update, on the device "
         "(no host read).\nElsewhere, and for float16 gradients, which GradScaler "
         "refuses: LossScaler below,\nthe same rule.\n";
}

std::string fp32_text(const ExportedSetting& s, const std::string& what) {
  if (s.fp32_modules.empty()) return "";
  return "Kept in fp32 (amp.fp32_modules): " + joined_literals(s.fp32_modules, what) +
         ",\nmatched against model.named_modules() as amptune matches them (fnmatch; '*' also "
         "crosses\ndots; a glob that matches nothing is an error). Each matching module runs "
         "with autocast\noff and its floating inputs cast to float32" +
         (s.cast_model ? "; its weights stay float32 and its\noutput is cast back to the "
                         "model's type.\n"
                       : ".\n");
}

std::string fp8_text(const ExportedSetting& s, const std::string& what) {
  if (!s.fp8) return "";
  const Fp8Export& f = *s.fp8;
  const bool delayed = f.recipe == to_string(Fp8Recipe::kDelayed);
  std::string out = "FP8 (amp.fp8.*): format " + f.format + ", " + f.recipe + " scaling (margin " +
                    std::to_string(f.margin) +
                    (delayed ? ", amax history " + std::to_string(f.amax_history_len) + ", " +
                                   f.amax_compute
                             : "") +
                    ")";
  if (!f.skip_modules.empty()) {
    out += ", kept out of FP8: " + joined_literals(f.skip_modules, what);
  }
  return out +
         ".\nPlain PyTorch trains no FP8: apply() sets the base precision above. With NVIDIA "
         "Transformer\nEngine, replace the modules fp8_linears(model) names with te.Linear and "
         "run the forward\npass inside fp8_autocast() (fp8_recipe() is the recipe).\n";
}

std::string casts_text(const ExportedSetting& s) {
  std::string out;
  if (s.combine_grad) {
    out +=
        "amp.combine_grad was on: a speed setting (one flat gradient buffer per dtype) with "
        "the\nsame numbers; not reproduced here.\n";
  }
  if (s.int32_casts.empty()) return out;
  out +=
      "int32 cast points (casts.int32) of amptune's built-in RootNet, which this module does "
      "not\napply: the ported code truncated these through int32 (t.to(torch.int32)"
      ".to(t.dtype)):\n";
  for (const std::string& name : s.int32_casts) {
    for (const auto& p : train::kCastPoints) {
      if (name != p.name) continue;
      out += "  " + std::string(p.name) + " (batch field " + p.field + ", " +
             (p.train ? "training" : "test") + "): " + p.where + "\n";
    }
  }
  return out;
}

constexpr const char* kUsage =
    "Use it in a training script (plain PyTorch >= 1.13; no amptune, no apex):\n"
    "\n"
    "    import amp_setting  # this file\n"
    "    model = MyModel().to(\"cuda\")\n"
    "    setting = amp_setting.apply(model, device_type=\"cuda\")  # before the optimizer\n"
    "    optimizer = torch.optim.SGD(setting.parameters(), lr=0.1)\n"
    "    for x, y in loader:\n"
    "        optimizer.zero_grad()\n"
    "        with setting.autocast():\n"
    "            loss = loss_fn(model(x), y)\n"
    "        setting.step(loss, optimizer)  # backward, unscale, skip on inf/NaN, update\n"
    "\n"
    "apply() wants the model in Python (an nn.Module, before DistributedDataParallel wraps\n"
    "it); a TorchScript module takes only a setting without fp32 modules and cast weights.\n"
    "Evaluate under setting.autocast() too. Not exported: amp.backend (how amptune computed\n"
    "the low precision: natively or emulated on fp32 kernels).";

}  // namespace

std::string setting_python(const ExportedSetting& s) {
  const std::string what = "run " + std::to_string(s.run_id) + "'s";
  for (const char c : s.source.generator + s.source.command) {
    if (c < 0x20 || c > 0x7e) throw ConfigError("the generator's name is not printable ASCII");
  }
  std::string out = "# -*- coding: utf-8 -*-\n";
  out += "# Generated code: " + s.source.generator + " wrote it (amptune " + s.source.command +
         ").\n# Do not edit it; export the setting again instead.\n#\n";
  out += comment(origin_text(s, what));
  out += "#\n" + comment(level_text(s) + scale_text(s, what) + fp32_text(s, what) +
                         fp8_text(s, what) + casts_text(s));
  out += "#\n" + comment(kUsage);
  out += kImports;
  const Json doc = setting_document(s);
  for (const char* name : {"generator", "source", "tune", "setting"}) {
    std::string upper(name);
    for (char& c : upper) c = static_cast<char>(c - 'a' + 'A');
    out += "\n" + upper + " = " + python_layout(doc.at(name), what + " " + name, 0) + "\n";
  }
  out +=
      "\n__all__ = [\"GENERATOR\", \"SOURCE\", \"TUNE\", \"SETTING\", \"apply\", \"Setting\", "
      "\"LossScaler\",\n           \"fp8_recipe\", \"fp8_autocast\", \"fp8_linears\"]\n";
  return out + kRuntime;
}

}  // namespace amptune::app
