// `amptune export-setting` and `amptune tune --emit` with the real binary, and the modules they
// write run by plain PyTorch (Debian's python3-torch 1.13, tests/integration/setting_train.py):
// runs of the tiny sweep exported and trained 20 steps under bf16 CPU autocast with their fp32
// modules in float32 (a Sequential of named modules; the narrow ResNet-18 and its TorchScript
// file where the CPU has bf16 convolutions); the planted overflow's tune answer keeping a plain
// PyTorch run finite where the same file without its fp32 module overflows; text from a database
// that cannot leave its literals; the refusals.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "integration/harness.h"
#include "store/store.h"

namespace amptune::testing {
namespace {
namespace fs = std::filesystem;

bool python_with_torch() {
  static const bool ok =
      std::system("/usr/bin/python3 -c 'import torch, torchvision' >/dev/null 2>&1") == 0;
  return ok;
}

// setting_train.py CASE in `dir`: its exit code (77: skipped), output in dir/py_CASE.{out,err}.
// oneDNN is not held to AVX2 here (as amptune is in every test): its bf16 convolutions need more.
int run_python(const std::string& case_name, const std::string& dir) {
  const std::string script =
      std::string(AMPTUNE_SOURCE_DIR) + "/tests/integration/setting_train.py";
  const pid_t pid =
      spawn_program({"/usr/bin/python3", script, case_name, dir, AMPTUNE_SOURCE_DIR}, dir,
                    SpawnOptions({{"ONEDNN_MAX_CPU_ISA", "ALL"}}, "py_" + case_name));
  return wait_exit_code(pid, 600);
}

std::string python_output(const std::string& case_name, const std::string& dir) {
  return read_file(dir + "/py_" + case_name + ".out") +
         read_file(dir + "/py_" + case_name + ".err");
}

// The runs of sweep `sweep` by their amp.opt_level and amp.fp32_modules ("O1 []").
std::map<std::string, int64_t> runs_by_setting(const std::string& db, const std::string& sweep) {
  store::Store store(db);
  std::map<std::string, int64_t> out;
  for (const auto& run : store.runs(sweep)) {
    const auto amp = nlohmann::json::parse(run.config_json).at("amp");
    out[amp.at("opt_level").get<std::string>() + " " + amp.at("fp32_modules").dump()] = run.id;
  }
  return out;
}

TEST(SettingCli, EmittedModulesTrainInPlainPyTorchWithTheirFp32ModulesInFloat32) {
  if (!python_with_torch()) GTEST_SKIP() << "/usr/bin/python3 with torch and torchvision missing";
  TinyOptions o = quick_tiny(
      "grid:\n  amp.opt_level: [O1, O2]\n  amp.fp32_modules: [[], [conv1, \"layer2.*\"]]\n", 1);
  o.base = "  amp: {dtype: bf16, loss_scale: dynamic, max_loss_scale: 1024}\n";
  const TinySweep f = make_tiny_sweep(o);
  const Result r = run_amptune({"run", f.yaml, "--db", f.db, "--no-progress"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto runs = runs_by_setting(f.db, "tiny");
  ASSERT_EQ(runs.size(), 4u);
  const std::map<std::string, std::string> files = {{"O1 []", "o1_plain.py"},
                                                    {R"(O1 ["conv1","layer2.*"])", "o1_fp32.py"},
                                                    {R"(O2 ["conv1","layer2.*"])", "o2_fp32.py"}};
  for (const auto& [key, file] : files) {
    const Result e = run_amptune(
        {"export-setting", std::to_string(runs.at(key)), "--db", f.db, "--out", f.dir + "/" + file},
        f.dir);
    ASSERT_EQ(e.exit_code, 0) << key << ": " << e.err;
  }
  // JSON on standard output: the same setting (the Python side compares it with SETTING).
  const Result json =
      run_amptune({"export-setting", std::to_string(runs.at(R"(O1 ["conv1","layer2.*"])")), "--db",
                   f.db, "--format", "json"},
                  f.dir);
  ASSERT_EQ(json.exit_code, 0) << json.err;
  write_file(f.dir + "/setting.json", json.out);
  EXPECT_EQ(nlohmann::json::parse(json.out).at("source").at("database"), f.db);

  EXPECT_EQ(run_python("sequential", f.dir), 0) << python_output("sequential", f.dir);
  const int resnet = run_python("resnet", f.dir);
  if (resnet == 77) GTEST_SKIP() << python_output("resnet", f.dir);
  EXPECT_EQ(resnet, 0) << python_output("resnet", f.dir);
}

// An FP8 run's setting: the recipe as data and as a Transformer Engine recipe, the Linear modules
// it covers, the base precision applied (setting_train.py case fp8).
TEST(SettingCli, AnFp8RunExportsItsRecipeForTransformerEngine) {
  if (!python_with_torch()) GTEST_SKIP() << "/usr/bin/python3 with torch and torchvision missing";
  TinyOptions o = quick_tiny("grid:\n  amp.fp8.enabled: [false, true]\n", 1);
  o.base =
      "  amp: {opt_level: O1, dtype: bf16, fp8: {margin: 1, amax_history_len: 16, "
      "amax_compute: most_recent, skip_modules: [fc]}}\n";
  const TinySweep f = make_tiny_sweep(o);
  const Result r = run_amptune({"run", f.yaml, "--db", f.db, "--no-progress"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  store::Store store(f.db);
  for (const auto& run : store.runs("tiny")) {
    const bool fp8 = nlohmann::json::parse(run.config_json).at("amp").at("fp8").at("enabled");
    const std::string file = f.dir + (fp8 ? "/fp8.py" : "/plain.py");
    const Result e =
        run_amptune({"export-setting", std::to_string(run.id), "--db", f.db, "--out", file}, f.dir);
    ASSERT_EQ(e.exit_code, 0) << e.err;
    if (fp8) {
      EXPECT_NE(read_file(file).find("# FP8 (amp.fp8.*): format hybrid"), std::string::npos);
    }
  }
  EXPECT_EQ(run_python("fp8", f.dir), 0) << python_output("fp8", f.dir);
}

// The planted problem of tune_test (tiny images left unnormalised: 62500 to 125000, beyond
// fp16's 65504 once conv1 casts them under O1): amptune tune keeps conv1 in fp32, --emit writes
// the answer, and plain PyTorch with that file stays finite where it overflows without conv1.
TEST(SettingCli, TheTuneAnswerKeepsAPlainPyTorchRunFiniteWhereAutocastOverflows) {
  if (!python_with_torch()) GTEST_SKIP() << "/usr/bin/python3 with torch and torchvision missing";
  TinyOptions o = quick_tiny(
      "tune:\n  metric: train_loss\n  tolerance: {abs: 0.1}\n  reference: {amp.opt_level: O0}\n"
      "  start: {amp.opt_level: O1, amp.loss_scale: 128}\n",
      3);
  o.name = "tuned";
  o.base = "  amp: {loss_scale: dynamic, max_loss_scale: 1024}\n";
  const TinySweep f = make_tiny_sweep(o);
  const std::vector<std::string> tune = {
      "tune", f.yaml, "--db", f.db, "--set", "data.mean=[-1.0]", "--set", "data.std=[0.000016]"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = tune;
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  // Refused before anything trains.
  for (const auto& bad :
       std::vector<std::vector<std::string>>{{"--emit", "python"},
                                             {"--emit", "yaml", "x.py"},
                                             {"--dry-run", "--emit", "json", "x"}}) {
    EXPECT_EQ(run_amptune(with(bad), f.dir).exit_code, 2) << bad[1];
  }
  const Result r =
      run_amptune(with({"--no-progress", "--emit", "python", f.dir + "/planted.py"}), f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("  amp.fp32_modules: [conv1]\n"), std::string::npos) << r.out;
  ASSERT_TRUE(fs::exists(f.dir + "/planted.py")) << r.err;
  // A sweep without a search: nothing to write, exit code 8.
  std::string other = read_file(f.yaml);
  ASSERT_EQ(other.rfind("name: tuned\n", 0), 0u) << other;
  write_file(f.dir + "/other.yaml", "name: other\n" + other.substr(12));
  const Result none = run_amptune({"tune", f.dir + "/other.yaml", "--db", f.db, "--status",
                                   "--emit", "python", f.dir + "/none.py"},
                                  f.dir);
  EXPECT_EQ(none.exit_code, 8) << none.err;
  EXPECT_FALSE(fs::exists(f.dir + "/none.py"));
  const Result status =
      run_amptune(with({"--status", "--emit", "json", f.dir + "/planted.json"}), f.dir);
  ASSERT_EQ(status.exit_code, 0) << status.err;
  const auto doc = nlohmann::json::parse(read_file(f.dir + "/planted.json"));
  EXPECT_EQ(doc.at("tune").at("tolerance"), (nlohmann::json{{"abs", 0.1}}));
  EXPECT_EQ(doc.at("tune").at("metric"), "train_loss");
  EXPECT_EQ(doc.at("setting").at("fp32_modules"), (nlohmann::json{"conv1"}));
  EXPECT_EQ(doc.at("command"), "tune --emit");

  EXPECT_EQ(run_python("planted", f.dir), 0) << python_output("planted", f.dir);
}

void sql(const std::string& db, const std::string& statement,
         const std::vector<std::string>& values) {
  sqlite3* handle = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &handle), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(handle, statement.c_str(), -1, &stmt, nullptr), SQLITE_OK)
      << sqlite3_errmsg(handle);
  for (size_t i = 0; i < values.size(); ++i) {
    sqlite3_bind_text(stmt, static_cast<int>(i + 1), values[i].c_str(),
                      static_cast<int>(values[i].size()), SQLITE_TRANSIENT);
  }
  EXPECT_EQ(sqlite3_step(stmt), SQLITE_DONE) << sqlite3_errmsg(handle);
  sqlite3_finalize(stmt);
  sqlite3_close(handle);
}

// A database someone else wrote: a run name, a glob and the database's own path holding quotes,
// line breaks and Python code. The module holds them as data; importing it runs none of it.
TEST(SettingCli, TextFromTheDatabaseCannotLeaveItsLiteral) {
  if (!python_with_torch()) GTEST_SKIP() << "/usr/bin/python3 with torch and torchvision missing";
  const TinySweep f = make_tiny_sweep(quick_tiny("", 1));
  ASSERT_EQ(run_amptune({"run", f.yaml, "--db", f.db, "--no-progress"}, f.dir).exit_code, 0);
  const std::string pwned = f.dir + "/PWNED";
  const std::string name = "tiny/0\n\"\"\"\nopen('" + pwned + "', 'w')\n#";
  const nlohmann::json globs = {"conv1\"]; open(\"" + pwned + "\", \"w\") #",
                                "a'b\xe2\x80\xa8'''c"};
  sql(f.db,
      "UPDATE runs SET name = ?1, config_json = json_set(config_json, "
      "'$.amp.opt_level', 'O1', '$.amp.fp32_modules', json(?2))",
      {name, globs.dump()});
  const std::string hostile_db = f.dir + "/we\"ird\n# x'.sqlite";
  fs::rename(f.db, hostile_db);
  const Result e = run_amptune(
      {"export-setting", "1", "--db", hostile_db, "--out", f.dir + "/hostile.py"}, f.dir);
  ASSERT_EQ(e.exit_code, 0) << e.err;
  write_file(
      f.dir + "/expected.json",
      nlohmann::json{{"run_name", name}, {"database", hostile_db}, {"fp32_modules", globs}}.dump());
  EXPECT_EQ(run_python("hostile", f.dir), 0) << python_output("hostile", f.dir);
  EXPECT_FALSE(fs::exists(pwned));

  // A line break in a glob: no module is named so; refused, nothing written.
  sql(hostile_db,
      "UPDATE runs SET config_json = json_set(config_json, '$.amp.fp32_modules', "
      "json(?1))",
      {nlohmann::json{"conv1\nx"}.dump()});
  const Result refused = run_amptune(
      {"export-setting", "1", "--db", hostile_db, "--out", f.dir + "/refused.py"}, f.dir);
  EXPECT_EQ(refused.exit_code, 3) << refused.err;
  EXPECT_NE(refused.err.find("amp.fp32_modules entry \"conv1\\x0ax\" holds a control character"),
            std::string::npos)
      << refused.err;
  EXPECT_FALSE(fs::exists(f.dir + "/refused.py"));
  EXPECT_EQ(
      run_amptune({"export-setting", "1", "--db", hostile_db, "--format", "yaml"}, f.dir).exit_code,
      2);
}

}  // namespace
}  // namespace amptune::testing
