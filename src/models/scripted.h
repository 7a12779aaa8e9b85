// A user's own network as a TorchScript file (torch.jit.script or torch.jit.trace in Python,
// saved with torch.jit.save; docs/MODELS.md "Your own model"), trained by amptune like its own
// models, under every precision setting, with no change to the model's code.
//
// Modules: the scripted module tree is mirrored by torch::nn::Modules of the same names that
// hold the very same parameter and buffer tensors (set_data and copy_ on either side are seen by
// the other), so everything written for nn::Module works on it as it is: the optimizer, the amp
// Engine (casts, masters, amp.fp32_modules by module path; a module is a BatchNorm by its class,
// torch.nn.modules.batchnorm.*), checkpoints with the module's own state-dict names, gradient
// averaging over ranks. Each mirror module's name() is its TorchScript class's qualified name.
//
// Precision: when loaded, every function of the file's code is rewritten once, as PyTorch's
// quantization passes insert observers: each call of a submodule is bracketed by amptune's
// operators that open and close an amp::ModuleCall for its mirror (amp.fp32_modules regions,
// diagnose's observation), and each aten op by the operators of amp/op_emulation.h (autocast's
// lists, dtype tracking, rounding under the emulate backend). The native backend needs none of
// that: autocast and the cast weights act in the dispatcher the graph's ops run through. The
// graph executor runs without its optimisations (torch::jit::setGraphExecutorOptimize(false),
// process-wide, set at the first load): no inlining, fusion or JIT autocast pass, so the graph
// runs as written and rewritten, module boundaries included, and autograd records each op.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

namespace amptune::models {

class ScriptedModelImpl : public torch::nn::Module {
 public:
  // Loads `path` onto the CPU and rewrites its code. ModelError naming the file when it is
  // missing, not a TorchScript archive (a state dict or a pickled model is not one), saved by a
  // newer PyTorch than this build reads, or its code does not compile here.
  explicit ScriptedModelImpl(const std::string& path);
  ~ScriptedModelImpl() override;

  // The module's forward on one tensor (a classifier: images to logits), with the input cast
  // to the model's type under O2/O3 and the output back to fp32 (amp::model_input/output).
  // ModelError when forward returns something other than a tensor, or, once expect_logits() was
  // called, other than [batch, classes] logits for a batch of `batch` inputs.
  torch::Tensor forward(const torch::Tensor& x);
  void expect_logits() { expect_logits_ = true; }

  bool has_method(const std::string& name) const;
  // The methods of a custom task (docs/MODELS.md): training_loss(batch) -> 0-dim tensor;
  // eval_batch(batch) -> {metric: sum over the batch}. Floating tensors of the batch are cast
  // like forward's input (apex casts every floating argument of a patched forward).
  // ModelError when the method returns another type.
  torch::Tensor training_loss(const std::map<std::string, torch::Tensor>& batch);
  std::map<std::string, torch::Tensor> eval_batch(const std::map<std::string, torch::Tensor>& batch);
  // The module's `higher_is_better: Dict[str, bool]` attribute, in its order (the first is the
  // primary metric). ModelError when it is missing, of another type or empty.
  std::vector<std::pair<std::string, bool>> metric_directions() const;

  // Switches the scripted module too.
  void train(bool on = true) override;

  const std::string& path() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
  bool expect_logits_ = false;
};
TORCH_MODULE(ScriptedModel);

// A module of a scripted model's mirror seen as the torch.nn layer its class is (Conv2d,
// ConvTranspose2d, Linear), for code that asks a model's layers by their LibTorch type: the
// channels_last check of Task::place, diagnose's multiply-accumulates. nullopt for any other
// module (and for every module that is not of a scripted model).
struct ScriptedLayer {
  std::string kind;             // "Conv2d", "ConvTranspose2d" or "Linear"
  torch::Tensor weight;
  std::vector<int64_t> stride;  // convolutions: the stride attribute; empty when unknown (traced)
  int64_t groups = 1;           // convolutions: 1 when unknown (traced)
};
std::optional<ScriptedLayer> scripted_layer(const torch::nn::Module& module);

}  // namespace amptune::models
