// The layering of src/ (src/README.md), checked on the #include lines of every source file: each
// layer includes its own headers and those of the layers below it, nothing above, and some layers
// only named headers of a lower one (train: the plain records, never the store; app: the torch-free
// headers of amp's policy, data and dist; launch: core only, no torch; cli: nothing of store,
// launch or dist, it goes through app; web, the live view: core and app only).
// The scanner is tested on planted lines first, so the check of the real tree can fail.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace amptune {
namespace {

namespace fs = std::filesystem;

// What a layer may include besides its own headers: a whole layer ("core") or one header of it
// ("data/export.h").
const std::map<std::string, std::set<std::string>>& allowed_includes() {
  static const std::map<std::string, std::set<std::string>> allowed = {
      {"core", {}},
      {"compat", {}},
      {"pch", {}},
      {"records", {"core"}},
      {"store", {"core", "records"}},
      {"eval", {"core"}},
      {"data", {"core"}},
      {"amp", {"core", "compat"}},
      {"models", {"core", "compat", "amp"}},
      {"launch", {"core"}},
      {"dist", {"core", "compat", "launch"}},
      {"train", {"core", "compat", "records", "eval", "data", "amp", "models", "launch", "dist"}},
      {"app",
       {"core", "records", "store", "train", "amp/policy.h", "data/export.h", "data/rootnet_data.h",
        "launch", "dist/cluster.h"}},
      {"web", {"core", "app"}},
      {"cli", {"core", "app", "web"}},
  };
  return allowed;
}

// "cli/cmd_run.cpp:16: includes dist/cluster.h" for each #include "layer/..." line of `text` (the
// file `file`, relative to src/) that its layer may not include; a file of a layer not in the
// table is one problem itself.
std::vector<std::string> layering_problems(const std::string& file, const std::string& text) {
  const std::string layer = file.substr(0, file.find('/'));
  const auto rule = allowed_includes().find(layer);
  if (rule == allowed_includes().end()) return {file + ": layer " + layer + " has no rule here"};
  static const std::regex include_line(R"(^\s*#\s*include\s*"(([a-z_]+)/[^"]+)\")");
  std::vector<std::string> problems;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::smatch m;
    if (!std::regex_search(line, m, include_line)) continue;
    const std::string header = m[1], of = m[2];
    if (of == layer || rule->second.count(of) || rule->second.count(header)) continue;
    problems.push_back(file + ":" + std::to_string(number) + ": includes " + header);
  }
  return problems;
}

TEST(CoreLayering, ScannerFlagsIncludesFromAboveAndOutsideTheNamedHeaders) {
  const std::string planted = R"(#include "app/views/inspect.h"
#include <store/store.h>
  #  include "store/store.h"  // a cli file reaching the store directly
#include "dist/cluster.h"
// #include "train/trainer.h" is no include line
#include "core/log.h"
)";
  const auto cli = layering_problems("cli/cmd_x.cpp", planted);
  ASSERT_EQ(cli.size(), 2u);
  EXPECT_EQ(cli[0], "cli/cmd_x.cpp:3: includes store/store.h");
  EXPECT_EQ(cli[1], "cli/cmd_x.cpp:4: includes dist/cluster.h");
  // train may name the records, nothing of the store.
  EXPECT_TRUE(layering_problems("train/x.cpp", "#include \"records/records.h\"\n").empty());
  EXPECT_EQ(layering_problems("train/x.cpp", "#include \"store/store.h\"\n").size(), 1u);
  // Downward only: the store includes no torch-side layer, core nothing but itself.
  EXPECT_EQ(layering_problems("store/x.cpp", "#include \"train/task.h\"\n").size(), 1u);
  EXPECT_EQ(layering_problems("core/x.cpp", "#include \"records/records.h\"\n").size(), 1u);
  EXPECT_EQ(layering_problems("newlayer/x.cpp", "").size(), 1u);
  // The web view reads the database through app, like cli; cli may use it, app may not.
  EXPECT_EQ(layering_problems("web/x.cpp", "#include \"store/store.h\"\n").size(), 1u);
  EXPECT_TRUE(layering_problems("cli/x.cpp", "#include \"web/server.h\"\n").empty());
  EXPECT_EQ(layering_problems("app/x.cpp", "#include \"web/pages.h\"\n").size(), 1u);
}

TEST(CoreLayering, EveryIncludeInSrcPointsDownTheLayers) {
  const fs::path src = fs::path(AMPTUNE_SOURCE_DIR) / "src";
  ASSERT_TRUE(fs::is_directory(src)) << src;
  std::vector<std::string> problems;
  size_t files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(src)) {
    const std::string ext = entry.path().extension().string();
    if (!entry.is_regular_file() || (ext != ".cpp" && ext != ".h")) continue;
    const std::string rel = fs::relative(entry.path(), src).generic_string();
    if (rel.find('/') == std::string::npos) continue;  // src/ itself holds no source
    ++files;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    for (auto& p : layering_problems(rel, text.str())) problems.push_back(std::move(p));
  }
  EXPECT_GT(files, 100u);
  std::string list;
  for (const auto& p : problems) list += "\n  src/" + p;
  EXPECT_TRUE(problems.empty())
      << "includes against the layering of src/README.md (go through the layer between, or move "
         "the code to the layer that owns it):"
      << list;
}

}  // namespace
}  // namespace amptune
