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
  std::string str() const;
};

// One documented key of schemas/config.yaml.
struct KeySpec {
  std::string key;   // dotted
  std::string type;  // int | float | bool | string | int_list | float_list | string_list | loss_scale
  std::string doc;
  nlohmann::json default_value;
  std::vector<std::string> choices;  // allowed strings (string, string_list) when not empty
  std::optional<double> min, max;    // inclusive bounds for numbers (each element of lists)
};

class Schema {
 public:
  // The schema compiled into the binary (schemas/config.yaml).
  static const Schema& builtin();
  // Parses a schema document; throws ConfigError naming `origin` on a malformed entry.
  static Schema parse(std::string_view yaml_text, const std::string& origin);

  const KeySpec* find(const std::string& key) const;  // nullptr when unknown
  const std::vector<KeySpec>& keys() const { return keys_; }
  // The closest documented key to `unknown` (edit distance), or "" when nothing is close.
  std::string suggest(const std::string& unknown) const;

  // Checks and converts a YAML value for `spec`; throws ConfigError naming key and `where`.
  nlohmann::json coerce(const KeySpec& spec, const YAML::Node& value, const SourceLoc& where) const;
  // Same for a JSON value (configs read back from the database).
  nlohmann::json coerce(const KeySpec& spec, const nlohmann::json& value,
                        const SourceLoc& where) const;

 private:
  std::vector<KeySpec> keys_;
  std::map<std::string, size_t> index_;
};

class Config {
 public:
  Config();  // every key of Schema::builtin() at its default

  // Sets a documented key (value already coerced); throws ConfigError for an unknown key.
  void set(const std::string& key, nlohmann::json value);
  // Parses `value_yaml` as YAML, coerces it for `key` and sets it ("--set optim.lr=0.05").
  void set_yaml(const std::string& key, const std::string& value_yaml, const SourceLoc& where);

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
  std::string canonical_json() const;  // nested(), sorted keys, compact: the identity of a run
  std::string hash() const;            // sha256 hex of canonical_json()
  // Reads a config stored as JSON (nested or flat); keys missing take their defaults.
  static Config from_json(const std::string& json_text, const std::string& origin);

 private:
  std::map<std::string, nlohmann::json> values_;
};

// "a.b=value" -> {"a.b", "value"}; throws UsageError when there is no '='.
std::pair<std::string, std::string> split_assignment(const std::string& text);

}  // namespace amptune
