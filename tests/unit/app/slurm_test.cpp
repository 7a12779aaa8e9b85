// app/run/slurm.h: the batch scripts of `amptune slurm`. Their text is checked, bash checks their
// syntax, and the array script is run by bash with /bin/echo in place of amptune, which prints
// the command line each array task would run. A real Slurm runs them in
// tests/integration/slurm_test.cpp (label slurm).
#include "app/run/slurm.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>

#include "app/run/program.h"
#include "app/run/shard.h"
#include "core/error.h"
#include "core/files.h"
#include "support/scratch.h"

namespace amptune::app {
namespace {

namespace fs = std::filesystem;
using testing::ScratchDir;

std::string sweep_text() {
  return "name: tiny\nbase:\n"
         "  model: {name: resnet18, num_classes: 4, in_channels: 1, width: 0.0625, "
         "small_input: true}\n"
         "  data: {format: idx, root: /nonexistent, mean: [0.3], std: [0.3]}\n"
         "grid:\n  optim.lr: [0.01, 0.02, 0.05]\n  seed: [1, 2]\n";
}

SlurmOptions options(const ScratchDir& dir, const std::string& sweep) {
  SlurmOptions o;
  o.sweep_path = sweep;
  o.into = "results/amptune.sqlite";
  o.script = "slurm/tiny.sbatch";
  o.binary = "/opt/amptune/bin/amptune";
  o.workdir = dir.path().string();
  o.command_line = "amptune slurm sweep.yaml";
  return o;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(Slurm, ScriptsOfASingleProcessRun) {
  ScratchDir dir;
  const std::string sweep = dir.write("sweep.yaml", sweep_text());
  const Plan plan = plan_sweep(sweep, {}, {}, false);
  SlurmOptions o = options(dir, "sweep.yaml");
  o.shards = 4;
  o.partition = "debug";
  o.time = "0:30:00";
  o.sbatch = {"--account=proj"};
  const SlurmJob job = slurm_job(plan, o);
  EXPECT_EQ(job.shards, 4);
  EXPECT_EQ(job.merge_path, "slurm/tiny.merge.sbatch");
  // 6 cells on 4 shards, as plan_shards places them: 2, 2, 1, 1 in some order.
  const std::vector<int> sizes = shard_sizes(plan_shards(cell_hashes(plan.cells), 4), 4);
  size_t cells = 0;
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(job.cells[k], static_cast<size_t>(sizes[k]));
    EXPECT_TRUE(job.cells[k] == 1 || job.cells[k] == 2) << job.cells[k];
    cells += job.cells[k];
  }
  EXPECT_EQ(cells, 6u);

  const std::string& a = job.array_script;
  const std::string logs = (dir.path() / "slurm").string();
  for (const std::string& line : std::vector<std::string>{
           "#SBATCH --array=0-3\n", "#SBATCH --job-name=amptune-tiny\n",
           "#SBATCH --partition=debug\n", "#SBATCH --time=0:30:00\n", "#SBATCH --account=proj\n",
           "#SBATCH --nodes=1\n", "#SBATCH --ntasks-per-node=1\n",
           "#SBATCH --chdir=" + dir.path().string() + "\n",
           "#SBATCH --output=" + logs + "/tiny-%A_%a.out\n",
           "exec '/opt/amptune/bin/amptune' run 'sweep.yaml' --shard \"$SLURM_ARRAY_TASK_ID/4\""}) {
    EXPECT_TRUE(has(a, line)) << line << " not in\n" << a;
  }
  EXPECT_FALSE(has(a, "srun")) << a;
  EXPECT_FALSE(has(a, "--gpus-per-task")) << a;
  // Directives must come before the first command, or sbatch ignores them.
  EXPECT_LT(a.rfind("#SBATCH"), a.find("\nset -euo"));

  const std::string& m = job.merge_script;
  for (const std::string line :
       {"#SBATCH --job-name=amptune-tiny-merge\n", "#SBATCH --partition=debug\n",
        "#SBATCH --account=proj\n", "for k in $(seq 0 3); do\n",
        "db=\"results/tiny.shard-$k-of-4.sqlite\"",
        "'/opt/amptune/bin/amptune' merge \"${shards[@]}\" --into 'results/amptune.sqlite'"}) {
    EXPECT_TRUE(has(m, line)) << line << " not in\n" << m;
  }
  EXPECT_FALSE(has(m, "--array")) << m;

  // Written executable, and bash accepts both.
  const fs::path cwd = fs::current_path();
  fs::current_path(dir.path());
  write_slurm_job(job);
  fs::current_path(cwd);
  for (const std::string file : {"slurm/tiny.sbatch", "slurm/tiny.merge.sbatch"}) {
    const fs::path path = dir.path() / file;
    ASSERT_TRUE(fs::exists(path)) << path;
    EXPECT_NE(fs::status(path).permissions() & fs::perms::owner_exec, fs::perms::none);
    const ProgramRun syntax = run_program({"bash", "-n", path.string()});
    EXPECT_TRUE(syntax.ok()) << path << ": " << syntax.outcome();
  }
}

// A link planted at the temp name a script is written through (a shared --out folder) is
// removed, never written through: the scripts are written by core/files.h write_file_atomic.
// Before, std::ofstream opened "<script>.tmp.<pid>" and wrote the script into the link's target.
TEST(Slurm, ALinkAtTheTempNameIsNotWrittenThrough) {
  ScratchDir dir;
  const std::string sweep = dir.write("sweep.yaml", sweep_text());
  SlurmJob job = slurm_job(plan_sweep(sweep, {}, {}, false), options(dir, "sweep.yaml"));
  job.array_path = (dir.path() / job.array_path).string();
  job.merge_path = (dir.path() / job.merge_path).string();
  const std::string victim = dir.write("victim.txt", "precious");
  fs::create_directories(dir.path() / "slurm");
  for (const std::string& path : {job.array_path, job.merge_path}) {
    fs::create_symlink(victim, atomic_temp_name(path, ::getpid()));
  }
  write_slurm_job(job);
  EXPECT_EQ(testing::read_file(victim), "precious");
  for (const std::string& path : {job.array_path, job.merge_path}) {
    EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(path))) << path;
    EXPECT_FALSE(fs::exists(fs::symlink_status(atomic_temp_name(path, ::getpid())))) << path;
    EXPECT_NE(fs::status(path).permissions() & fs::perms::owner_exec, fs::perms::none);
  }
  EXPECT_EQ(testing::read_file(job.array_path), job.array_script);
}

TEST(Slurm, RanksOfARunStartThroughSrun) {
  ScratchDir dir;
  const std::string sweep = dir.write("sweep.yaml", sweep_text());
  SlurmOptions o = options(dir, "sweep.yaml");
  o.nodes_per_run = 2;
  o.tasks_per_node = 4;
  o.gpus_per_task = 1;
  o.cpus_per_task = 8;
  const SlurmJob job = slurm_job(plan_sweep(sweep, {}, {}, false), o);
  EXPECT_EQ(job.shards, 6);  // default: one per cell
  for (const std::string line :
       {"#SBATCH --array=0-5\n", "#SBATCH --nodes=2\n", "#SBATCH --ntasks-per-node=4\n",
        "#SBATCH --gpus-per-task=1\n", "#SBATCH --cpus-per-task=8\n",
        "exec srun '/opt/amptune/bin/amptune' run"}) {
    EXPECT_TRUE(has(job.array_script, line)) << line << " not in\n" << job.array_script;
  }
  EXPECT_FALSE(has(job.merge_script, "gpus")) << job.merge_script;
}

TEST(Slurm, TheArrayTaskRunsItsShardWithTheArgumentsIntact) {
  ScratchDir dir;
  dir.write("my sweep's.yaml", sweep_text());
  SlurmOptions o = options(dir, "my sweep's.yaml");
  o.binary = "/bin/echo";  // prints the arguments amptune would get, one line
  o.shards = 3;
  o.sets = {"description=it's a \"test\" $HOME"};
  o.only = {"seed=2"};
  const Plan plan = plan_sweep((dir.path() / "my sweep's.yaml").string(), {}, {}, false);
  const SlurmJob job = slurm_job(plan, o);
  const fs::path script = dir.path() / "array.sh";
  testing::write_file(script.string(), job.array_script);
  ::setenv("SLURM_ARRAY_TASK_ID", "2", 1);
  const ProgramRun run = run_program({"bash", script.string()}, dir.path().string());
  ::unsetenv("SLURM_ARRAY_TASK_ID");
  ASSERT_TRUE(run.ok()) << run.outcome();
  EXPECT_EQ(run.out,
            "run my sweep's.yaml --shard 2/3 --no-progress --set description=it's a \"test\" "
            "$HOME --only seed=2\n");
  EXPECT_TRUE(fs::is_directory(dir.path() / "results"));
}

TEST(Slurm, RefusesWhatWouldBreakTheScript) {
  ScratchDir dir;
  const Plan plan = plan_sweep(dir.write("sweep.yaml", sweep_text()), {}, {}, false);
  auto refused = [&](const std::function<void(SlurmOptions&)>& change) {
    SlurmOptions o = options(dir, "sweep.yaml");
    change(o);
    try {
      slurm_job(plan, o);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("<accepted>");
  };
  EXPECT_TRUE(has(refused([](SlurmOptions& o) { o.sbatch = {"account=x"}; }), "--sbatch"));
  EXPECT_TRUE(has(refused([](SlurmOptions& o) { o.partition = "a\nb"; }), "--partition"));
  EXPECT_TRUE(has(refused([](SlurmOptions& o) { o.sets = {"a=1\nrm -rf /"}; }), "--set"));
  EXPECT_TRUE(has(refused([](SlurmOptions& o) { o.nodes_per_run = 0; }), "--nodes-per-run"));
  EXPECT_TRUE(has(refused([](SlurmOptions& o) { o.shards = -2; }), "--array"));
  // Where the command runs from and what it was: a directory named with a line break would put a
  // command of its own into the script (#SBATCH --chdir cannot be quoted).
  const std::string workdir = refused([](SlurmOptions& o) { o.workdir = "/tmp/x\ntouch /tmp/p"; });
  EXPECT_TRUE(has(workdir, "the working directory")) << workdir;
  EXPECT_TRUE(has(workdir, "\\x0a")) << workdir;  // shown escaped
  EXPECT_TRUE(has(refused([](SlurmOptions& o) { o.binary = "/opt/a\rb/amptune"; }), "binary"));
  EXPECT_TRUE(has(refused([](SlurmOptions& o) { o.command_line = "amptune slurm \x1b[2J"; }),
                  "the command line"));
}

}  // namespace
}  // namespace amptune::app
