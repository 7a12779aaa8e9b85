#include "models/scripted.h"

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/python/update_graph_executor_opt.h>
#include <torch/csrc/jit/runtime/custom_operator.h>
#include <torch/script.h>

#include <filesystem>
#include <mutex>
#include <unordered_map>

#include "amp/emulate.h"
#include "amp/engine.h"
#include "amp/op_emulation.h"
#include "core/error.h"
#include "core/log.h"

namespace amptune::models {
namespace {

namespace jit = torch::jit;
using Objects = std::unordered_map<const c10::ivalue::Object*, const torch::nn::Module*>;

// ---- the state of one call into a scripted model, on this thread ---------------------------

// A submodule call open now: its ModuleCall (none for a module the mirror does not know) and
// whether its first tensor argument went to the observer.
struct OpenCall {
  std::unique_ptr<amp::ModuleCall> call;
  bool input_seen = false;
};

// The mirror modules by the scripted objects they mirror, and the submodule calls open now.
struct Frame {
  const Objects* objects = nullptr;
  std::vector<OpenCall> calls;
};
thread_local Frame* t_frame = nullptr;

// A call from C++ into the model: the frame its operators use, one forward pass's dtype tags
// (amp::ScopedValueTags), and the root module's call. Calls a failing op left open are closed.
class Entered {
 public:
  Entered(const Objects& objects, const torch::nn::Module& root)
      : previous_(t_frame), root_(root) {
    frame_.objects = &objects;
    t_frame = &frame_;
  }
  ~Entered() {
    while (!frame_.calls.empty()) frame_.calls.pop_back();  // innermost first
    t_frame = previous_;
  }
  amp::ModuleCall& root() { return root_; }
  Entered(const Entered&) = delete;
  Entered& operator=(const Entered&) = delete;

 private:
  Frame frame_;
  Frame* previous_;
  amp::ScopedValueTags tags_;
  amp::ModuleCall root_;
};

void module_enter(const c10::ivalue::Object* object) {
  if (!t_frame) return;
  const auto it = t_frame->objects->find(object);
  // A module the mirror does not know (made inside the model's code): counted as no call, but
  // kept on the stack so that module_exit pops what module_enter pushed.
  OpenCall& open = t_frame->calls.emplace_back();
  if (it != t_frame->objects->end()) open.call = std::make_unique<amp::ModuleCall>(*it->second);
}

torch::Tensor module_input(const torch::Tensor& x) {
  if (!t_frame || t_frame->calls.empty()) return x;
  OpenCall& open = t_frame->calls.back();
  if (!open.call || open.input_seen) return x;  // the observer sees the first tensor argument
  open.input_seen = true;
  return open.call->input(x);
}

torch::Tensor module_exit(const torch::Tensor& y) {
  if (!t_frame || t_frame->calls.empty()) return y;
  const OpenCall& open = t_frame->calls.back();
  torch::Tensor out = open.call ? open.call->output(y) : y;
  t_frame->calls.pop_back();
  return out;
}

// ---- amptune's operators in a rewritten graph -----------------------------------------------

torch::Tensor pop_tensor(jit::Stack& stack) { return jit::pop(stack).toTensor(); }

// Pops a Tensor[] and pushes `f` of each of its tensors.
void map_tensor_list(jit::Stack& stack, torch::Tensor (*f)(const torch::Tensor&)) {
  std::vector<torch::Tensor> ts = jit::pop(stack).toTensorVector();
  for (auto& t : ts) t = f(t);
  jit::push(stack, ts);
}

jit::RegisterOperators register_amptune_ops({
    jit::Operator(
        "amptune::module_enter(Any module) -> ()",
        [](jit::Stack& stack) { module_enter(jit::pop(stack).toObject().get()); },
        c10::AliasAnalysisKind::CONSERVATIVE),
    jit::Operator(
        "amptune::module_input(Tensor x) -> Tensor",
        [](jit::Stack& stack) { jit::push(stack, module_input(pop_tensor(stack))); },
        c10::AliasAnalysisKind::CONSERVATIVE),
    jit::Operator(
        "amptune::module_exit(Tensor y) -> Tensor",
        [](jit::Stack& stack) { jit::push(stack, module_exit(pop_tensor(stack))); },
        c10::AliasAnalysisKind::CONSERVATIVE),
    jit::Operator(
        "amptune::module_leave() -> ()", [](jit::Stack&) { module_exit(torch::Tensor()); },
        c10::AliasAnalysisKind::CONSERVATIVE),
    jit::Operator(
        "amptune::op_begin(int kind, bool in_place, bool gemm, bool conv) -> ()",
        [](jit::Stack& stack) {
          const bool conv = jit::pop(stack).toBool();
          const bool gemm = jit::pop(stack).toBool();
          const bool in_place = jit::pop(stack).toBool();
          amp::begin_op(static_cast<amp::OpKind>(jit::pop(stack).toInt()), in_place, gemm,
                        conv);
        },
        c10::AliasAnalysisKind::CONSERVATIVE),
    jit::Operator(
        "amptune::op_input(Tensor x) -> Tensor",
        [](jit::Stack& stack) { jit::push(stack, amp::op_input(pop_tensor(stack))); },
        c10::AliasAnalysisKind::CONSERVATIVE),
    jit::Operator(
        "amptune::op_input_optional(Tensor? x) -> Tensor?",
        [](jit::Stack& stack) {
          torch::IValue v = jit::pop(stack);
          if (v.isNone()) {
            jit::push(stack, v);
            return;
          }
          const torch::Tensor t = amp::op_input_optional(v.toTensor());
          jit::push(stack, t.defined() ? torch::IValue(t) : torch::IValue());
        },
        c10::AliasAnalysisKind::CONSERVATIVE),
    jit::Operator(
        "amptune::op_input_list(Tensor[] x) -> Tensor[]",
        [](jit::Stack& stack) { map_tensor_list(stack, amp::op_input); },
        c10::AliasAnalysisKind::CONSERVATIVE),
    jit::Operator(
        "amptune::op_output(Tensor y) -> Tensor",
        [](jit::Stack& stack) { jit::push(stack, amp::op_output(pop_tensor(stack))); },
        c10::AliasAnalysisKind::CONSERVATIVE),
    jit::Operator(
        "amptune::op_output_list(Tensor[] y) -> Tensor[]",
        [](jit::Stack& stack) { map_tensor_list(stack, amp::op_output); },
        c10::AliasAnalysisKind::CONSERVATIVE),
});

// ---- the rewrite ---------------------------------------------------------------------------

bool tensor_type(const c10::TypePtr& t) { return t->kind() == c10::TypeKind::TensorType; }
bool tensor_list_type(const c10::TypePtr& t) {
  const auto list = t->cast<c10::ListType>();
  return list && tensor_type(list->getElementType());
}
bool optional_tensor_type(const c10::TypePtr& t) {
  const auto opt = t->cast<c10::OptionalType>();
  return opt && tensor_type(opt->getElementType());
}

c10::Symbol amptune_op(const char* name) {
  return c10::Symbol::fromQualString(std::string("amptune::") + name);
}

void collect_nodes(jit::Block* block, std::vector<jit::Node*>& out) {
  for (jit::Node* node : block->nodes()) {
    out.push_back(node);
    for (jit::Block* inner : node->blocks()) collect_nodes(inner, out);
  }
}

// `op`(v) before `at`, given to `at` in v's place (typed `type`, v's own when null).
void wrap_input(jit::Graph& graph, jit::Node* at, size_t index, const char* op,
                c10::TypePtr type = nullptr) {
  jit::Value* v = at->input(index);
  jit::Node* n = graph.create(amptune_op(op), {v});
  n->output()->setType(type ? type : v->type());
  n->insertBefore(at);
  at->replaceInput(index, n->output());
}

// `op`(v) right after v's node, used everywhere v was.
void wrap_output(jit::Graph& graph, jit::Value* v, const char* op) {
  jit::Node* n = graph.create(amptune_op(op), {v});
  n->output()->setType(v->type());
  n->insertAfter(v->node());
  v->replaceAllUsesWith(n->output());
  n->replaceInput(0, v);
}

// A call of a submodule's method (not of the caller's own): a ModuleCall around it.
void bracket_module_call(jit::Graph& graph, jit::Node* call) {
  jit::Node* enter = graph.create(amptune_op("module_enter"), {call->input(0)}, 0);
  enter->insertBefore(call);
  for (size_t i = 1; i < call->inputs().size(); ++i) {
    if (tensor_type(call->input(i)->type())) wrap_input(graph, call, i, "module_input");
  }
  if (call->outputs().size() == 1 && tensor_type(call->output()->type())) {
    wrap_output(graph, call->output(), "module_exit");
  } else {
    graph.create(amptune_op("module_leave"), {}, 0)->insertAfter(call);
  }
}

// An aten op that returns tensors: op_begin, its tensor inputs, its tensor outputs.
void bracket_op(jit::Graph& graph, jit::Node* node) {
  const c10::FunctionSchema* schema = node->maybeSchema();
  if (!schema || schema->returns().size() != node->outputs().size()) return;
  bool returns_tensors = false;
  for (const auto& r : schema->returns()) {
    returns_tensors = returns_tensors || tensor_type(r.type()) || tensor_list_type(r.type());
  }
  if (!returns_tensors) return;  // sizes, comparisons of numbers, list and dict operations ...
  const auto& args = schema->arguments();
  const bool in_place = !args.empty() && args[0].alias_info() && args[0].alias_info()->isWrite();
  const std::string name = node->kind().toUnqualString();
  const bool gemm = amp::fp8_gemm_op(name);
  {
    jit::WithInsertPoint point(node);
    jit::Value* kind = graph.insertConstant(static_cast<int64_t>(amp::op_kind(name)));
    jit::Value* inplace = graph.insertConstant(in_place);
    jit::Value* is_gemm = graph.insertConstant(gemm);
    jit::Value* is_conv = graph.insertConstant(gemm && name != "linear");
    graph.create(amptune_op("op_begin"), {kind, inplace, is_gemm, is_conv}, 0)
        ->insertBefore(node);
  }
  for (size_t i = 0; i < node->inputs().size(); ++i) {
    const c10::TypePtr t = node->input(i)->type();
    // An FP8 GEMM's bias (a Tensor? argument, whatever the value's type) can be taken out.
    if (gemm && tensor_type(t) && i < args.size() && optional_tensor_type(args[i].type())) {
      wrap_input(graph, node, i, "op_input_optional", args[i].type());
      continue;
    }
    if (tensor_type(t)) wrap_input(graph, node, i, "op_input");
    if (optional_tensor_type(t)) wrap_input(graph, node, i, "op_input_optional");
    if (tensor_list_type(t)) wrap_input(graph, node, i, "op_input_list");
  }
  for (size_t i = 0; i < node->outputs().size(); ++i) {
    const c10::TypePtr declared = schema->returns()[i].type();
    if (tensor_type(declared)) wrap_output(graph, node->output(i), "op_output");
    if (tensor_list_type(declared)) wrap_output(graph, node->output(i), "op_output_list");
  }
}

void rewrite(jit::Graph& graph) {
  std::vector<jit::Node*> nodes;
  collect_nodes(graph.block(), nodes);
  jit::Value* self = graph.inputs().empty() ? nullptr : graph.inputs()[0];
  for (jit::Node* node : nodes) {
    if (node->kind() == c10::prim::CallMethod && node->input(0) != self) {
      const auto cls = node->input(0)->type()->cast<c10::ClassType>();
      if (cls && cls->is_module()) bracket_module_call(graph, node);
    } else if (node->kind().is_aten()) {
      bracket_op(graph, node);
    }
  }
}

// ---- loading ---------------------------------------------------------------------------------

std::string load_error(const std::string& path, const std::string& what) {
  if (what.find("maximum supported version") != std::string::npos ||
      what.find("file format version") != std::string::npos) {
    return "model.path: " + path +
           " was saved by a newer PyTorch than this build's LibTorch " + TORCH_VERSION +
           " reads (" + log::clipped(what, 300) +
           "); export it with a PyTorch no newer than the build's (docs/MODELS.md \"Your own "
           "model\")";
  }
  if (what.find("zip archive") != std::string::npos || what.find("constants.pkl") != std::string::npos ||
      what.find("data.pkl") != std::string::npos) {
    return "model.path: " + path +
           " is not a TorchScript archive (torch.jit.save writes one, from torch.jit.script or "
           "torch.jit.trace; a state dict goes in model.weights; tools/export_torchscript.py "
           "exports a model)";
  }
  return "model.path: " + path + " cannot be loaded as TorchScript: " + log::clipped(what, 600);
}

jit::Module load_script(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw ModelError("model.path: " + path + " is missing or not a file");
  }
  static std::once_flag executor_mode;
  std::call_once(executor_mode, [] { jit::setGraphExecutorOptimize(false); });
  try {
    return jit::load(path, torch::Device(torch::kCPU));
  } catch (const c10::Error& e) {
    throw ModelError(load_error(path, e.what_without_backtrace()));
  } catch (const std::exception& e) {
    throw ModelError(load_error(path, e.what()));
  }
}

// A mirror module: named by the scripted class, holding the scripted module it mirrors.
class ScriptedNode : public torch::nn::Module {
 public:
  explicit ScriptedNode(const jit::Module& script)
      : torch::nn::Module(script.type()->name()->qualifiedName()), script(script) {}
  jit::Module script;
};

// Mirrors `script` (and its children) into `node`: the same tensors under the same names.
void mirror(torch::nn::Module& node, const jit::Module& script, Objects& objects) {
  objects.emplace(script._ivalue().get(), &node);
  for (const auto& p : script.named_parameters(/*recurse=*/false)) {
    node.register_parameter(p.name, p.value, p.value.requires_grad());
  }
  for (const auto& b : script.named_buffers(/*recurse=*/false)) node.register_buffer(b.name, b.value);
  for (const auto& child : script.named_children()) {
    auto sub = std::make_shared<ScriptedNode>(child.value);
    mirror(*sub, child.value, objects);
    node.register_module(child.name, sub);
  }
}

c10::Dict<std::string, torch::Tensor> batch_dict(const std::map<std::string, torch::Tensor>& batch) {
  c10::Dict<std::string, torch::Tensor> dict;
  for (const auto& [name, t] : batch) dict.insert(name, t.is_floating_point() ? amp::model_input(t) : t);
  return dict;
}

}  // namespace

struct ScriptedModelImpl::State {
  std::string path;
  jit::Module script;
  Objects objects;
};

ScriptedModelImpl::ScriptedModelImpl(const std::string& path)
    : torch::nn::Module("amptune::models::ScriptedModel"), state_(std::make_unique<State>()) {
  state_->path = path;
  state_->script = load_script(path);
  for (jit::Function* fn : state_->script._ivalue()->compilation_unit()->get_functions()) {
    if (jit::GraphFunction* graph_fn = jit::tryToGraphFunction(*fn)) rewrite(*graph_fn->graph());
  }
  mirror(*this, state_->script, state_->objects);
  train(true);
}

ScriptedModelImpl::~ScriptedModelImpl() = default;

const std::string& ScriptedModelImpl::path() const { return state_->path; }

bool ScriptedModelImpl::has_method(const std::string& name) const {
  return state_->script.find_method(name).has_value();
}

void ScriptedModelImpl::train(bool on) {
  state_->script.train(on);
  torch::nn::Module::train(on);
}

torch::Tensor ScriptedModelImpl::forward(const torch::Tensor& x) {
  Entered entered(state_->objects, *this);
  const torch::Tensor in = amp::model_input(entered.root().input(x));
  const torch::IValue out = state_->script.forward({in});
  if (!out.isTensor()) {
    throw ModelError("model.path: " + state_->path + ": forward returned a " +
                     out.tagKind() + ", not a tensor");
  }
  const torch::Tensor& y = out.toTensor();
  if (expect_logits_ && (y.dim() != 2 || y.size(0) != x.size(0))) {
    throw ModelError("model.path: " + state_->path + ": forward returned a tensor of shape " +
                     c10::str(y.sizes()) + " for input of shape " + c10::str(x.sizes()) +
                     "; a model of model.task classification returns [batch, classes] logits");
  }
  return entered.root().output(amp::model_output(y));
}

torch::Tensor ScriptedModelImpl::training_loss(const std::map<std::string, torch::Tensor>& batch) {
  Entered entered(state_->objects, *this);
  const torch::IValue out = state_->script.get_method("training_loss")({batch_dict(batch)});
  if (!out.isTensor() || out.toTensor().numel() != 1) {
    throw ModelError("model.path: " + state_->path +
                     ": training_loss must return a tensor of one element (the batch's mean "
                     "loss), it returned " +
                     (out.isTensor() ? "a tensor of shape " + c10::str(out.toTensor().sizes())
                                     : "a " + out.tagKind()));
  }
  return entered.root().output(amp::model_output(out.toTensor()));
}

std::map<std::string, torch::Tensor> ScriptedModelImpl::eval_batch(
    const std::map<std::string, torch::Tensor>& batch) {
  Entered entered(state_->objects, *this);
  const torch::IValue out = state_->script.get_method("eval_batch")({batch_dict(batch)});
  if (!out.isGenericDict()) {
    throw ModelError("model.path: " + state_->path +
                     ": eval_batch must return Dict[str, Tensor], it returned a " + out.tagKind());
  }
  std::map<std::string, torch::Tensor> sums;
  for (const auto& item : out.toGenericDict()) {
    if (!item.key().isString() || !item.value().isTensor()) {
      throw ModelError("model.path: " + state_->path +
                       ": eval_batch must return Dict[str, Tensor]");
    }
    sums[item.key().toStringRef()] = amp::model_output(item.value().toTensor());
  }
  return sums;
}

std::vector<std::pair<std::string, bool>> ScriptedModelImpl::metric_directions() const {
  const std::string what =
      "model.path: " + state_->path +
      ": a custom task's module needs the attribute higher_is_better: Dict[str, bool] (metric "
      "name -> whether higher is better, the primary metric first; docs/MODELS.md)";
  if (!state_->script.hasattr("higher_is_better")) throw ModelError(what + "; it has none");
  const torch::IValue v = state_->script.attr("higher_is_better");
  if (!v.isGenericDict()) throw ModelError(what + "; it is a " + v.tagKind());
  std::vector<std::pair<std::string, bool>> out;
  for (const auto& item : v.toGenericDict()) {
    if (!item.key().isString() || !item.value().isBool()) throw ModelError(what);
    out.emplace_back(item.key().toStringRef(), item.value().toBool());
  }
  if (out.empty()) throw ModelError(what + "; it is empty");
  return out;
}

std::optional<ScriptedLayer> scripted_layer(const torch::nn::Module& module) {
  const auto* node = dynamic_cast<const ScriptedNode*>(&module);
  if (!node) return std::nullopt;
  const std::string cls = amp::torch_nn_class(*node);
  if ((cls != "Conv2d" && cls != "ConvTranspose2d" && cls != "Linear") ||
      !node->script.hasattr("weight") || !node->script.attr("weight").isTensor()) {
    return std::nullopt;
  }
  ScriptedLayer layer;
  layer.kind = cls;
  layer.weight = node->script.attr("weight").toTensor();
  // A traced module keeps its tensors only: no stride, no groups (weights say groups = 1 then).
  if (cls != "Linear" && node->script.hasattr("stride") && node->script.attr("stride").isTuple()) {
    for (const auto& s : node->script.attr("stride").toTupleRef().elements()) {
      layer.stride.push_back(s.toInt());
    }
  }
  if (cls != "Linear" && node->script.hasattr("groups") && node->script.attr("groups").isInt()) {
    layer.groups = node->script.attr("groups").toInt();
  }
  return layer;
}

}  // namespace amptune::models
