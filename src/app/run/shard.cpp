#include "app/run/shard.h"

#include <algorithm>
#include <optional>

#include "core/error.h"

namespace amptune::app {
namespace {

// A non-negative decimal integer below 2^31, or nullopt.
std::optional<int> parse_count(const std::string& text) {
  if (text.empty() || text.size() > 9) return std::nullopt;
  int value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return value;
}

// An environment variable that must hold a non-negative integer; nullopt when unset or empty.
std::optional<int> env_count(const launch::GetEnv& env, const std::string& name) {
  const std::optional<std::string> value = env(name);
  if (!value || value->empty()) return std::nullopt;
  const std::optional<int> number = parse_count(*value);
  if (!number) {
    throw UsageError("--shard auto: " + name + "='" + *value +
                     "' is not a non-negative integer; pass --shard K/N explicitly");
  }
  return number;
}

const char* const kForm =
    "; --shard takes K/N (0 <= K < N, e.g. 0/4), auto (from a Slurm array job) or auto/N";

// K and N of a Slurm array task: SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN of
// SLURM_ARRAY_TASK_COUNT; nullopt outside an array job.
std::optional<Shard> slurm_array_shard(const launch::GetEnv& env) {
  const std::optional<int> id = env_count(env, "SLURM_ARRAY_TASK_ID");
  if (!id) return std::nullopt;
  const std::optional<int> count = env_count(env, "SLURM_ARRAY_TASK_COUNT");
  if (!count || *count < 1) {
    throw UsageError(
        "--shard auto: SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT is not "
        "(or is 0); pass --shard K/N explicitly");
  }
  const int min = env_count(env, "SLURM_ARRAY_TASK_MIN").value_or(0);
  const int k = *id - min;
  if (k < 0 || k >= *count) {
    throw UsageError("--shard auto: SLURM_ARRAY_TASK_ID " + std::to_string(*id) +
                     " - SLURM_ARRAY_TASK_MIN " + std::to_string(min) + " = " + std::to_string(k) +
                     " is not below SLURM_ARRAY_TASK_COUNT " + std::to_string(*count) +
                     ": the array must be one contiguous range (--array=0-" +
                     std::to_string(*count - 1) + "); or pass --shard $SLURM_ARRAY_TASK_ID/N");
  }
  return Shard{k, *count};
}

}  // namespace

std::string Shard::text() const { return std::to_string(k) + "/" + std::to_string(n); }

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The first 64 bits of a hex config hash (a sha256: uniformly distributed already).
uint64_t hash_bits(const std::string& config_hash) {
  uint64_t bits = 0;
  for (size_t i = 0; i < 16 && i < config_hash.size(); ++i) {
    const char c = config_hash[i];
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : 0;
    bits = bits << 4 | static_cast<uint64_t>(digit);
  }
  return bits;
}

}  // namespace

std::vector<int> plan_shards(const std::vector<std::string>& config_hashes, int n) {
  if (n < 1) throw UsageError("a sweep has at least 1 shard, not " + std::to_string(n));
  // Rounds of n cells in cell order; in each round every shard gets one cell, each cell the shard
  // it prefers most among those the round has not given one yet.
  std::vector<size_t> load(static_cast<size_t>(n), 0);
  std::vector<int> shard(config_hashes.size());
  for (size_t c = 0; c < config_hashes.size(); ++c) {
    const size_t round = c / static_cast<size_t>(n);
    const uint64_t bits = hash_bits(config_hashes[c]);
    int best = -1;
    uint64_t best_score = 0;
    for (int s = 0; s < n; ++s) {
      if (load[static_cast<size_t>(s)] != round) continue;  // has its cell of this round
      const uint64_t score = splitmix64(bits ^ splitmix64(static_cast<uint64_t>(s)));
      if (best < 0 || score > best_score) {
        best = s;
        best_score = score;
      }
    }
    ++load[static_cast<size_t>(best)];
    shard[c] = best;
  }
  return shard;
}

std::vector<int> shard_sizes(const std::vector<int>& shards, int n) {
  std::vector<int> sizes(static_cast<size_t>(std::max(n, 0)), 0);
  for (int s : shards) ++sizes.at(static_cast<size_t>(s));
  return sizes;
}

Shard parse_shard(const std::string& text, const launch::GetEnv& env) {
  const size_t slash = text.find('/');
  const std::string first = text.substr(0, slash);
  int n = 0;  // 0: not given ("auto")
  if (slash != std::string::npos) {
    const std::optional<int> parsed = parse_count(text.substr(slash + 1));
    if (!parsed || *parsed < 1) {
      throw UsageError("--shard '" + text + "': N must be a whole number >= 1" + kForm);
    }
    n = *parsed;
  }
  if (first == "auto") {
    if (const std::optional<Shard> slurm = slurm_array_shard(env)) {
      if (n && n != slurm->n) {
        throw UsageError("--shard " + text + ": this Slurm array has SLURM_ARRAY_TASK_COUNT " +
                         std::to_string(slurm->n) + " tasks, not " + std::to_string(n) +
                         "; submit the array with --array=0-" + std::to_string(n - 1) +
                         " or pass --shard $SLURM_ARRAY_TASK_ID/" + std::to_string(n));
      }
      return *slurm;
    }
    const std::optional<int> index = env_count(env, "JOB_COMPLETION_INDEX");
    if (index && !n) {
      throw UsageError(
          "--shard auto: JOB_COMPLETION_INDEX (Kubernetes indexed job) gives K but "
          "not N; pass --shard auto/N with N = the job's completions");
    }
    if (index) {
      if (*index >= n) {
        throw UsageError("--shard " + text + ": JOB_COMPLETION_INDEX " + std::to_string(*index) +
                         " is not below N = " + std::to_string(n));
      }
      return Shard{*index, n};
    }
    throw UsageError("--shard " + text +
                     ": neither SLURM_ARRAY_TASK_ID (Slurm array job) nor "
                     "JOB_COMPLETION_INDEX (Kubernetes indexed job) is set; pass --shard K/N");
  }
  const std::optional<int> k = parse_count(first);
  if (!k || !n) throw UsageError("--shard '" + text + "' is not K/N" + kForm);
  if (*k >= n) {
    throw UsageError("--shard " + text + ": K must be below N (shards count from 0: 0/" +
                     std::to_string(n) + " .. " + std::to_string(n - 1) + "/" + std::to_string(n) +
                     ")");
  }
  return Shard{*k, n};
}

std::string shard_db_path(const std::string& sweep_name, const Shard& shard) {
  return "results/" + sweep_name + ".shard-" + std::to_string(shard.k) + "-of-" +
         std::to_string(shard.n) + ".sqlite";
}

}  // namespace amptune::app
