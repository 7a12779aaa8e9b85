// The run configuration: a flat map of dotted keys ("optim.lr") to JSON values. Every key, its
// type, default, range and meaning is declared once in schemas/config.yaml, which is compiled
// into the binary; this file is the only reader of that schema.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace YAML {
class Node;
}

namespace amptune {

// Where a value came from, for error messages: "experiments/x.yaml:12:5" (1-based).
struct SourceLoc {
  std::string file;
  int line = 0;    // 0 = unknown
  int column = 0;  // 0 = unknown
  std::string str() const;     // "file:line:column", "file:line" or "file" ("" when all unknown)
  std::string prefix() const;  // str() + ": ", or "" when str() is empty
  // From a yaml-cpp 0-based mark (negative = unknown, e.g. a node not read from text).
  static SourceLoc from_mark(const std::string& file, int line0, int column0);
};

// One documented key of schemas/config.yaml.
struct KeySpec {
  std::string key;   // dotted
  std::string type;  // int | float | bool | string | int_list | float_list | string_list | loss_scale
  std::string doc;
  nlohmann::json default_value;
  // Allowed strings (string, string_list) when not empty; for loss_scale extra words accepted
  // besides "dynamic" and numbers (amp.loss_scale: auto).
  std::vector<std::string> choices;
  std::optional<double> min, max;    // inclusive bounds for numbers (each element of lists)
  // Lists: `unique` - no element twice (schema `unique: true`: a repeated module or cast point
  // means nothing and multiplies work); `max_items` - the most elements (schema `max_items`).
  // Checked where a value is read from YAML (sweep files, --set), naming the element's
  // line:column; configs read back from a database are taken as stored.
  bool unique = false;
  std::optional<size_t> max_items = std::nullopt;
  // Whether the key is part of a run's identity (Config::hash): kAlways; kNonDefault = only
  // when set to something other than its default (keys added later that change results, so
  // existing runs keep their hash); kNever = how or where a run executes, not what it computes
  // (threads, checkpoint.dir, data.workers); kContent = the key names a file or folder whose
  // contents the run reads (data.root, model.weights): the path stays out of Config::hash and
  // the contents enter the run's identity as a fingerprint (run_identity, data_fingerprint in
  // train/plan.h). Schema field `identity: always | non_default | never | content`.
  enum class Identity { kAlways, kNonDefault, kNever, kContent } identity = Identity::kAlways;
};

class Schema {
 public:
  // The schema compiled into the binary (schemas/config.yaml).
  static const Schema& builtin();
  // The keys of a sweep file's own blocks (prune:), compiled in (schemas/sweep.yaml).
  static const Schema& sweep_blocks();
  // Parses a schema document; throws ConfigError naming `origin` on a malformed entry.
  // Each top-level key is a dotted config key mapping to {type, default, doc[, choices, min, max,
  // unique, max_items, identity]} (unique and max_items: list keys only); every default must
  // satisfy its own type and bounds; no key may be a prefix group of another.
  static Schema parse(std::string_view yaml_text, const std::string& origin);

  const KeySpec* find(const std::string& key) const;  // nullptr when unknown
  const std::vector<KeySpec>& keys() const { return keys_; }
  // The closest documented key to `unknown` (edit distance), or "" when nothing is close.
  // A key whose last component equals the last component of `unknown` also counts as close
  // ("epochs" -> "schedule.epochs").
  std::string suggest(const std::string& unknown) const;
  // True when `prefix` is a group of documented keys ("optim" for optim.lr, optim.name, ...).
  bool is_group(const std::string& prefix) const;
  // "unknown config key K (context); did you mean S? ..." (context and suggestion when given).
  std::string unknown_key_message(const std::string& key, const std::string& context = "") const;

  // YAML typing of values (YAML 1.2 core schema, "dynamic" for loss_scale):
  //  int: plain decimal integers; float: ints or floats ("0.1", "1e-8", not inf/nan);
  //  bool: true/false only; string: quoted, or a plain scalar taken as written (not null);
  //  loss_scale: "dynamic", -1 (stored as "dynamic"), a positive number (stored as a float) or
  //  one of the key's `choices` words (stored as written);
  //  *_list: a YAML sequence of such elements (a scalar is an error). Floats are stored as JSON
  //  doubles even when written as integers, so "1" and "1.0" give the same config hash.
  //
  // Checks and converts a YAML value for `spec`; throws ConfigError naming key and `where`.
  nlohmann::json coerce(const KeySpec& spec, const YAML::Node& value, const SourceLoc& where) const;
  // Same for a JSON value (configs read back from the database).
  nlohmann::json coerce(const KeySpec& spec, const nlohmann::json& value,
                        const SourceLoc& where) const;

 private:
  std::vector<KeySpec> keys_;
  std::map<std::string, size_t> index_;
};

// Config::hash of configs that differ only in the values of a fixed set of keys (the cells of a
// sweep), without building and printing each one's JSON: the canonical identity text with the
// keys' values cut out, and the values spliced back in per config (Config::hash_template).
class HashTemplate {
 public:
  // The hash of the config whose values of the template's keys are `values`, in the keys'
  // order; equal to that config's hash().
  std::string hash(const std::vector<const nlohmann::json*>& values) const;

 private:
  friend class Config;
  std::vector<std::string> pieces_;  // text around the values: pieces_.size() = slots_ + 1
  std::vector<size_t> slots_;        // which key's value goes after pieces_[i]
};

class Config {
 public:
  Config();  // every key of Schema::builtin() at its default
  // Every key of `schema` at its default; `schema` must outlive the config (tests, tools).
  explicit Config(const Schema& schema);
  const Schema& schema() const { return *schema_; }

  // Sets a documented key; the value is checked and normalised with Schema::coerce (so an int
  // given for a float key is stored as a double); throws ConfigError for an unknown key or a bad
  // value.
  void set(const std::string& key, nlohmann::json value);
  // Parses `value_yaml` as YAML, coerces it for `key` and sets it ("--set optim.lr=0.05").
  void set_yaml(const std::string& key, const std::string& value_yaml, const SourceLoc& where);

  // Typed getters throw ConfigError for an unknown key or when the key's schema type differs
  // (get_double on an int key is an error). A loss_scale key reads with get_string when it is
  // "dynamic" and with get_double when it is a number.
  const nlohmann::json& at(const std::string& key) const;  // throws ConfigError when unknown
  int64_t get_int(const std::string& key) const;
  double get_double(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  std::string get_string(const std::string& key) const;
  std::vector<int64_t> get_int_list(const std::string& key) const;
  std::vector<double> get_double_list(const std::string& key) const;
  std::vector<std::string> get_string_list(const std::string& key) const;

  const std::map<std::string, nlohmann::json>& values() const { return values_; }
  nlohmann::json nested() const;       // {"optim": {"lr": 0.1}, ...}
  std::string canonical_json() const;  // nested(), sorted keys, compact: every key (stored)
  // The identity of the config: sha256 hex of canonical_json() without the keys whose schema
  // `identity` leaves them out (never and content; non_default while at the default). Where
  // files go, how often things are logged and the paths of the data do not enter it; the data
  // itself enters a run's identity through run_identity.
  std::string hash() const;
  // A template for hash() of this config with other values of `keys`; nullopt when one of them
  // is `identity: non_default` (whether it enters the hash depends on its value).
  std::optional<HashTemplate> hash_template(const std::vector<std::string>& keys) const;
  // Reads a config stored as JSON (nested or flat); keys missing take their defaults.
  static Config from_json(const std::string& json_text, const std::string& origin);
  static Config from_json(const std::string& json_text, const std::string& origin,
                          const Schema& schema);

 private:
  const KeySpec& spec(const std::string& key) const;  // throws ConfigError when unknown
  const nlohmann::json& typed(const std::string& key, const char* getter,
                              const char* type) const;

  const Schema* schema_;
  std::map<std::string, nlohmann::json> values_;
};

// A run's identity, runs.config_hash (docs/CONFIG.md "Identity"). A cell: its config hash with
// the fingerprint of the data it reads ("" = no fingerprint: the config hash alone, as runs
// recorded before fingerprints). A fork: the fork's config hash, its parent's identity, the
// epoch it starts from and whether the optimizer restarts, plus its data fingerprint when the
// fork reads other data than its parent (`data_changed`).
std::string run_identity(const std::string& config_hash, const std::string& data_fingerprint);
std::string fork_identity(const std::string& config_hash, const std::string& parent_identity,
                          int parent_epoch, bool reset_optimizer,
                          const std::string& changed_data_fingerprint = "");

// The items with `separator` between them ("a, b, c").
std::string join(const std::vector<std::string>& items, const std::string& separator);

// "a.b=value" -> {"a.b", "value"} (split at the first '=', key trimmed); throws UsageError when
// there is no '=' or the key is empty.
std::pair<std::string, std::string> split_assignment(const std::string& text);

// The candidate closest to `unknown` (edit distance, or the same last dotted component), or ""
// when none is close. Schema::suggest uses it for config keys.
std::string suggest_among(const std::string& unknown, const std::vector<std::string>& candidates);

// A short one-line rendering of a YAML value for error messages ("0.1", "\"adamw\"", "[1, 2]").
std::string yaml_brief(const YAML::Node& node);

}  // namespace amptune
