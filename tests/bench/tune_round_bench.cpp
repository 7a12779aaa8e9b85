// Benchmark (not a test): what one step of `amptune tune --slurm` costs the results database
// (docs/TUNE.md "On a cluster", the paper plan): a database of RUNS runs x EPOCHS epochs (built
// as store_merge_bench builds its shards: 100-run databases written through the Store API, then
// merged), then TASKS new candidate runs, each copied into a task database of its own
// (Store::copy_runs, as the executor does before sbatch), RUNG epochs recorded in each (what a
// task trains), and the TASKS task databases merged back in one Store::merge.
//
//   tune_round_bench DIR [RUNS [EPOCHS [TASKS [RUNG]]]]     (defaults 10000 90 64 30)
//
// DIR must not exist.
#include <sqlite3.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "store/store.h"
#include "train/checkpoint_layout.h"
#include "unit/store/typical_epoch.h"

namespace {

namespace fs = std::filesystem;
using namespace amptune::store;
using namespace amptune::records;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Cell `index`; `prefix` starts its config hash (and so its name: the results database's runs and
// the candidates differ there), `tag` ends it (-s<K>: the copy of part K).
RunSpec cell(int index, const std::string& prefix, const std::string& tag) {
  RunSpec spec;
  spec.sweep_name = "bench";
  spec.cell_index = index;
  spec.label = "candidate " + std::to_string(index);
  spec.config_json = "{\"cell\":" + std::to_string(index) + "}";
  spec.config_hash = prefix + std::to_string(100000 + index) + "-" + tag + "00000000";
  spec.axes_json = "{\"seed\":1}";
  spec.columns = {{"opt_level", "\"O1\""}, {"lr", "0.1"}};
  return spec;
}

// `epochs` epochs of run `id` as training records them, checkpoints in the database's folder.
void train(Store& store, int64_t id, int from, int epochs) {
  const std::string dir = amptune::train::checkpoint_dir("", store.path(), id);
  for (int e = from; e < from + epochs; ++e) {
    store.record_epoch(typical_epoch(id, e, dir + "/" + amptune::train::checkpoint_file_name(e)));
  }
}

void rename_runs(const std::string& path, int shard) {
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) throw amptune::StoreError("open " + path);
  const std::string k = std::to_string(shard);
  const std::string sql = "UPDATE runs SET config_hash = replace(config_hash, '-s0', '-s" + k +
                          "'), name = name || '-s" + k + "'";
  char* error = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
  const std::string message = error ? error : "";
  sqlite3_free(error);
  sqlite3_close(db);
  if (rc != SQLITE_OK) throw amptune::StoreError(path + ": " + message);
}

// The results database: runs / 100 databases of 100 finished runs, merged.
void build_database(const fs::path& dir, const std::string& into, int runs, int epochs) {
  const int per = std::min(runs, 100);
  const std::string first = (dir / "part-0.sqlite").string();
  {
    Store store(first);
    const int64_t sweep = store.ensure_sweep("bench", "", "name: bench\n", "");
    for (int r = 0; r < per; ++r) {
      const int64_t id = store.ensure_run(sweep, cell(r, "cell", "s0")).id;
      store.mark_running(id, Provenance{});
      train(store, id, 0, epochs);
      store.finish_run(id, RunStatus::kDone, "", "{}");
    }
  }
  std::vector<std::string> parts = {first};
  for (int k = 1; k * per < runs; ++k) {
    parts.push_back((dir / ("part-" + std::to_string(k) + ".sqlite")).string());
    fs::copy_file(first, parts.back());
    rename_runs(parts.back(), k);
  }
  Store(into).merge(parts, amptune::train::checkpoint_layout());
  for (const std::string& part : parts) fs::remove(part);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 6) {
    std::fprintf(stderr, "usage: %s DIR [RUNS [EPOCHS [TASKS [RUNG]]]]\n", argv[0]);
    return 2;
  }
  const fs::path dir = argv[1];
  const int runs = argc > 2 ? std::atoi(argv[2]) : 10000;
  const int epochs = argc > 3 ? std::atoi(argv[3]) : 90;
  const int tasks = argc > 4 ? std::atoi(argv[4]) : 64;
  const int rung = argc > 5 ? std::atoi(argv[5]) : 30;
  if (runs < 1 || epochs < 1 || tasks < 1 || rung < 1 || fs::exists(dir)) {
    std::fprintf(stderr, "counts must be >= 1 and DIR must not exist\n");
    return 2;
  }
  try {
    fs::create_directories(dir);
    const std::string results = (dir / "amptune.sqlite").string();
    auto start = std::chrono::steady_clock::now();
    build_database(dir, results, runs, epochs);
    std::printf("results database: %d runs x %d epochs, %.1f MB, built in %.1f s\n", runs, epochs,
                fs::file_size(results) / 1e6, seconds_since(start));

    Store store(results);
    const int64_t sweep = store.ensure_sweep("bench", "", "name: bench\n", "");
    std::vector<int64_t> candidates;
    for (int t = 0; t < tasks; ++t) {
      candidates.push_back(store.ensure_run(sweep, cell(t, "cand", "c")).id);
    }
    start = std::chrono::steady_clock::now();
    std::vector<std::string> task_dbs;
    for (int t = 0; t < tasks; ++t) {
      task_dbs.push_back((dir / ("task-" + std::to_string(t) + ".sqlite")).string());
      Store(task_dbs.back()).copy_runs(results, {candidates[t]}, nullptr);
    }
    std::printf("%d task databases made (Store::copy_runs): %.2f s, %.2f MB each\n", tasks,
                seconds_since(start), fs::file_size(task_dbs[0]) / 1e6);
    for (int t = 0; t < tasks; ++t) {
      Store task(task_dbs[t]);
      train(task, task.runs("bench").front().id, 0, rung);
    }
    start = std::chrono::steady_clock::now();
    const MergeReport report = store.merge(task_dbs, amptune::train::checkpoint_layout());
    int64_t copied = 0;
    for (const auto& in : report.inputs) copied += in.epochs;
    std::printf(
        "merge of the %d task databases (%d epochs each) into it: %.2f s, %lld epochs "
        "copied; results database now %.1f MB\n",
        tasks, rung, seconds_since(start), static_cast<long long>(copied),
        fs::file_size(results) / 1e6);
    return 0;
  } catch (const amptune::Error& error) {
    std::fprintf(stderr, "error: %s\n", error.what());
    return static_cast<int>(error.code());
  }
}
