// State dicts and PyTorch itself (Debian's python3-torch / torchvision): Python reads what amptune
// writes, torchvision's resnet18 reproduces amptune's logits from its weights, and a file Python
// wrote in the wrong shape gets a helpful error. Label `slow` (each test starts a Python
// interpreter that imports torch: seconds).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "core/error.h"
#include "models/resnet.h"
#include "models/weights.h"
#include "unit/models/weights_util.h"

namespace amptune::models {
namespace {

bool python_torch_available() {
  static const bool available =
      std::system("/usr/bin/python3 -c 'import torch, torchvision' >/dev/null 2>&1") == 0;
  return available;
}

TEST_F(ModelsWeights, PythonTorchLoadReadsExportedFile) {
  if (!python_torch_available()) {
    GTEST_SKIP() << "/usr/bin/python3 with torch and torchvision not installed";
  }
  torch::manual_seed(3);
  ResNet model(tiny(50));
  const std::string file = path("export.pt");
  save_state_dict(*model, file);
  const auto sd = state_dict(*model);

  // A full-size resnet18 with its eval-mode logits, for torchvision to reproduce.
  ResNetOptions r18;
  r18.depth = 18;
  ResNet full(r18);
  const std::string full_file = path("resnet18.pt"), io_file = path("resnet18_io.pt");
  save_state_dict(*full, full_file);
  {
    torch::NoGradGuard no_grad;
    full->eval();
    const torch::Tensor x = torch::randn({2, 3, 64, 64});
    save_state_dict({{"input", x}, {"logits", full->forward(x)}}, io_file);
  }

  const std::string script = path("check.py"), report = path("report.txt");
  {
    std::ofstream py(script);
    py << "import sys, torch\n"
          "sd = torch.load(sys.argv[1])\n"
          "assert type(sd) is dict, type(sd)\n"
          "with open(sys.argv[2], 'w') as f:\n"
          "    f.write('%d\\n' % len(sd))\n"
          "    f.write(','.join(map(str, sd['layer3.1.conv2.weight'].shape)) + '\\n')\n"
          "    f.write(str(sd['layer3.1.bn2.num_batches_tracked'].dtype) + '\\n')\n"
          "    f.write('%.9g\\n' % sd['layer3.1.conv2.weight'].double().sum().item())\n"
          "    f.write(list(sd)[0] + ' ' + list(sd)[-1] + '\\n')\n"
          "import torchvision\n"
          "m = torchvision.models.resnet18()\n"
          "m.load_state_dict(torch.load(sys.argv[3]))\n"
          "m.eval()\n"
          "io = torch.load(sys.argv[4])\n"
          "with torch.no_grad():\n"
          "    diff = (m(io['input']) - io['logits']).abs().max().item()\n"
          "with open(sys.argv[2], 'a') as f:\n"
          "    f.write('%.9g\\n' % diff)\n";
  }
  const std::string cmd =
      "/usr/bin/python3 " + script + " " + file + " " + report + " " + full_file + " " + io_file;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(report);
  std::string count, shape, dtype, sum, order, diff;
  std::getline(in, count);
  std::getline(in, shape);
  std::getline(in, dtype);
  std::getline(in, sum);
  std::getline(in, order);
  std::getline(in, diff);
  EXPECT_EQ(count, std::to_string(sd.size()));
  EXPECT_EQ(shape, "16,16,3,3");
  EXPECT_EQ(dtype, "torch.int64");
  EXPECT_NEAR(std::stod(sum),
              sd.at("layer3.1.conv2.weight").to(torch::kFloat64).sum().item<double>(), 1e-6);
  EXPECT_EQ(order, "conv1.weight fc.bias");  // PyTorch's state_dict order
  // torchvision's resnet18 with our weights gives our logits.
  ASSERT_FALSE(diff.empty());
  EXPECT_LE(std::stod(diff), 1e-4);
}

TEST_F(ModelsWeights, PythonSavedOrderedDictGetsAHelpfulError) {
  if (!python_torch_available()) {
    GTEST_SKIP() << "/usr/bin/python3 with torch and torchvision not installed";
  }
  const std::string file = path("ordered.pt");
  const std::string cmd =
      "/usr/bin/python3 -c \"import collections, sys, torch; "
      "torch.save(collections.OrderedDict(w=torch.ones(2)), sys.argv[1])\" " +
      file;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  ResNet model(tiny());
  const std::string msg = model_error([&] { load_state_dict(*model, file); });
  EXPECT_NE(msg.find("ordered.pt"), std::string::npos) << msg;
  EXPECT_NE(msg.find("torch.save(dict("), std::string::npos) << msg;
}

}  // namespace
}  // namespace amptune::models
