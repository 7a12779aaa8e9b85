// Benchmark (not a test): wall and CPU time of Store::merge (amptune merge) of SHARDS shard
// databases of RUNS runs x EPOCHS epochs each into a new database, then of merging them all again
// (every run already there). docs/PERFORMANCE.md "Merging shard databases".
//
//   store_merge_bench DIR [SHARDS [RUNS [EPOCHS]]]     (defaults 100 100 100)
//
// DIR must not exist. Shard 0 is written through the Store API as training writes it (per epoch:
// one record_epoch with 6 metrics, a checkpoint reference and a loss-scale event; runs claimed and
// finished); shards 1.. are copies of it whose runs are renamed to other cells (config hash and
// name), so every shard holds cells of its own, as shards of one sweep do.
#include <sqlite3.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "store/store.h"
#include "unit/store/typical_epoch.h"
#include "train/checkpoint_layout.h"

namespace {

namespace fs = std::filesystem;
using namespace amptune::store;
using namespace amptune::records;

double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
         (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

void write_first_shard(const std::string& path, int runs, int epochs) {
  Store store(path);
  const int64_t sweep = store.ensure_sweep("bench", "store_merge_bench", "name: bench\n", "");
  for (int r = 0; r < runs; ++r) {
    RunSpec spec;
    spec.sweep_name = "bench";
    spec.cell_index = r;
    spec.label = "optim.lr=" + std::to_string(r);
    spec.config_json = "{\"cell\":" + std::to_string(r) + "}";
    spec.config_hash = "cell" + std::to_string(100000 + r) + "-s0000000000";
    spec.axes_json = "{\"optim.lr\":" + std::to_string(r) + ",\"seed\":1}";
    spec.columns = {{"opt_level", "\"O1\""}, {"lr", "0.1"}, {"epochs", std::to_string(epochs)}};
    const int64_t id = store.ensure_run(sweep, spec).id;
    store.mark_running(id, Provenance{});
    for (int e = 0; e < epochs; ++e) {
      const EpochRecord record =
          typical_epoch(id, e,
                        "results/checkpoints/bench.shard-0/" + std::to_string(id) + "/epoch_" +
                            std::to_string(e) + ".pt");
      store.record_epoch(record);
    }
    store.finish_run(id, RunStatus::kDone, "", "{}");
  }
}

// A copy of shard 0 whose runs are other cells of the sweep.
void copy_shard(const std::string& first, const std::string& path, int shard) {
  fs::copy_file(first, path);
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

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 5) {
    std::fprintf(stderr, "usage: %s DIR [SHARDS [RUNS [EPOCHS]]]\n", argv[0]);
    return 2;
  }
  const fs::path dir = argv[1];
  const int shards = argc > 2 ? std::atoi(argv[2]) : 100;
  const int runs = argc > 3 ? std::atoi(argv[3]) : 100;
  const int epochs = argc > 4 ? std::atoi(argv[4]) : 100;
  if (shards < 1 || runs < 1 || epochs < 1) {
    std::fprintf(stderr, "SHARDS, RUNS and EPOCHS must be >= 1\n");
    return 2;
  }
  if (fs::exists(dir)) {
    std::fprintf(stderr, "%s exists; pass a new directory\n", dir.c_str());
    return 2;
  }
  try {
    fs::create_directories(dir);
    auto start = std::chrono::steady_clock::now();
    std::vector<std::string> inputs;
    for (int k = 0; k < shards; ++k) {
      inputs.push_back((dir / ("bench.shard-" + std::to_string(k) + ".sqlite")).string());
      if (k == 0) {
        write_first_shard(inputs[0], runs, epochs);
      } else {
        copy_shard(inputs[0], inputs[k], k);
      }
    }
    const double made =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%d shards of %d runs x %d epochs written in %.1f s (%.1f MB each)\n", shards, runs,
                epochs, made, fs::file_size(inputs[0]) / 1e6);

    const std::string into = (dir / "merged.sqlite").string();
    for (const char* pass : {"merge into a new database", "merge again (all there)"}) {
      const double cpu = cpu_seconds();
      start = std::chrono::steady_clock::now();
      MergeReport report = Store(into).merge(inputs, amptune::train::checkpoint_layout());
      const double wall =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      int64_t added = 0, unchanged = 0, copied = 0;
      for (const auto& in : report.inputs) {
        added += in.runs_added;
        unchanged += in.runs_unchanged;
        copied += in.epochs;
      }
      std::printf(
          "%s: %.1f s wall, %.1f s CPU; %lld runs added, %lld already there, %lld epochs "
          "copied, %lld checkpoint references (%lld files not found here)\n",
          pass, wall, cpu_seconds() - cpu, static_cast<long long>(added),
          static_cast<long long>(unchanged), static_cast<long long>(copied),
          static_cast<long long>(report.checkpoints),
          static_cast<long long>(report.missing_checkpoints));
    }
    std::printf("merged database: %.1f MB\n", fs::file_size(into) / 1e6);
    return 0;
  } catch (const amptune::Error& error) {
    std::fprintf(stderr, "error: %s\n", error.what());
    return static_cast<int>(error.code());
  } catch (const std::exception& error) {
    std::fprintf(stderr, "error: %s\n", error.what());
    return 1;
  }
}
