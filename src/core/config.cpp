#include "core/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <regex>
#include <set>

#include "core/embedded.h"
#include "core/error.h"
#include "core/hash.h"

namespace amptune {
namespace {

const std::set<std::string> kTypes = {"int",      "float",      "bool",        "string",
                                      "int_list", "float_list", "string_list", "loss_scale"};

[[noreturn]] void fail(const SourceLoc& where, const std::string& message) {
  throw ConfigError(where.prefix() + message);
}

bool is_list_type(const std::string& type) {
  return type.size() > 5 && type.compare(type.size() - 5, 5, "_list") == 0;
}
std::string element_type(const std::string& type) {
  return is_list_type(type) ? type.substr(0, type.size() - 5) : type;
}

// A scalar value read from YAML or JSON, classified by YAML 1.2 core-schema rules.
struct Scalar {
  enum class Kind { kNull, kBool, kInt, kFloat, kString };
  Kind kind = Kind::kNull;
  bool plain = false;  // an unquoted YAML scalar (may be taken as text for string keys)
  std::string text;    // as written (YAML) or as dumped (JSON)
  bool b = false;
  int64_t i = 0;
  double d = 0;
  bool out_of_range = false;  // an integer too large for int64
};

// How a value is shown after "got": strings quoted, numbers/bools as written.
std::string shown(const Scalar& s) {
  if (s.kind == Scalar::Kind::kString) return nlohmann::json(s.text).dump();
  if (s.kind == Scalar::Kind::kNull) return "nothing (null)";
  return s.text;
}

Scalar classify_plain(const std::string& text) {
  static const std::regex kInt("[-+]?[0-9]+");
  static const std::regex kFloat("[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?");
  static const std::regex kSpecial("[-+]?\\.(inf|Inf|INF)|\\.(nan|NaN|NAN)");
  Scalar s;
  s.plain = true;
  s.text = text;
  if (text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL") {
    s.kind = Scalar::Kind::kNull;
  } else if (text == "true" || text == "True" || text == "TRUE") {
    s.kind = Scalar::Kind::kBool;
    s.b = true;
  } else if (text == "false" || text == "False" || text == "FALSE") {
    s.kind = Scalar::Kind::kBool;
  } else if (std::regex_match(text, kInt)) {
    s.kind = Scalar::Kind::kInt;
    errno = 0;
    s.i = std::strtoll(text.c_str(), nullptr, 10);
    s.out_of_range = errno == ERANGE;
    s.d = static_cast<double>(s.i);
  } else if (std::regex_match(text, kFloat)) {
    s.kind = Scalar::Kind::kFloat;
    s.d = std::strtod(text.c_str(), nullptr);
  } else if (std::regex_match(text, kSpecial)) {
    s.kind = Scalar::Kind::kFloat;
    s.d = std::nan("");  // rejected below as not finite
  } else {
    s.kind = Scalar::Kind::kString;
  }
  return s;
}

Scalar from_yaml(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return Scalar{};
  const std::string& tag = node.Tag();
  if (tag == "!" || tag == "tag:yaml.org,2002:str") {
    Scalar s;
    s.kind = Scalar::Kind::kString;
    s.text = node.Scalar();
    return s;
  }
  return classify_plain(node.Scalar());
}

Scalar from_json(const nlohmann::json& value) {
  Scalar s;
  s.text = value.dump();
  switch (value.type()) {
    case nlohmann::json::value_t::boolean:
      s.kind = Scalar::Kind::kBool;
      s.b = value.get<bool>();
      break;
    case nlohmann::json::value_t::number_integer:
      s.kind = Scalar::Kind::kInt;
      s.i = value.get<int64_t>();
      s.d = static_cast<double>(s.i);
      break;
    case nlohmann::json::value_t::number_unsigned:
      s.kind = Scalar::Kind::kInt;
      s.out_of_range = value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX);
      s.i = static_cast<int64_t>(value.get<uint64_t>());
      s.d = static_cast<double>(s.i);
      break;
    case nlohmann::json::value_t::number_float:
      s.kind = Scalar::Kind::kFloat;
      s.d = value.get<double>();
      break;
    case nlohmann::json::value_t::string:
      s.kind = Scalar::Kind::kString;
      s.text = value.get<std::string>();
      break;
    default:
      s.kind = Scalar::Kind::kNull;
      break;
  }
  return s;
}

std::string format_bound(double v) {
  if (std::floor(v) == v && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  return nlohmann::json(v).dump();
}

// Converts one scalar for an element type (int, float, bool, string, loss_scale) and checks
// choices and bounds. `name` is the key, with "[i]" for list elements.
nlohmann::json coerce_scalar(const KeySpec& spec, const std::string& type, const Scalar& s,
                             const std::string& name, const SourceLoc& where) {
  using Kind = Scalar::Kind;
  nlohmann::json out;
  if (s.kind == Kind::kNull) {
    std::string hint = type == "string" ? " (write \"\" for an empty string)" : "";
    fail(where, name + " needs a value, got nothing" + hint);
  }
  if (type == "int") {
    if (s.kind != Kind::kInt) fail(where, name + " must be an integer, got " + shown(s));
    // Every int key is a count, an epoch, a size or a seed the code holds in 32 bits.
    if (s.out_of_range || s.i > INT32_MAX || s.i < INT32_MIN) {
      fail(where, name + " is out of the 32-bit integer range (at most 2147483647), got " + s.text);
    }
    out = s.i;
  } else if (type == "float") {
    if (s.kind != Kind::kInt && s.kind != Kind::kFloat) {
      fail(where, name + " must be a number, got " + shown(s));
    }
    if (!std::isfinite(s.d)) fail(where, name + " must be a finite number, got " + s.text);
    out = s.d;
  } else if (type == "bool") {
    if (s.kind != Kind::kBool) fail(where, name + " must be true or false, got " + shown(s));
    out = s.b;
  } else if (type == "string") {
    if (s.kind != Kind::kString && !s.plain) {
      fail(where, name + " must be a string, got " + shown(s));
    }
    try {
      (void)nlohmann::json(s.text).dump();  // rejects invalid UTF-8 before it reaches a hash
    } catch (const nlohmann::json::exception&) {
      fail(where, name + " is not valid UTF-8 text");
    }
    out = s.text;
  } else if (type == "loss_scale") {
    std::string expect = " must be \"dynamic\", -1 (dynamic)";
    for (const auto& c : spec.choices) expect += ", \"" + c + "\"";
    expect += " or a positive number, got ";
    if (s.kind == Kind::kString && s.text == "dynamic") {
      out = "dynamic";
    } else if (s.kind == Kind::kString &&
               std::find(spec.choices.begin(), spec.choices.end(), s.text) != spec.choices.end()) {
      out = s.text;  // an extra word the schema allows (amp.loss_scale: auto)
    } else if (s.kind == Kind::kInt || s.kind == Kind::kFloat) {
      if (!std::isfinite(s.d)) fail(where, name + expect + s.text);
      if (s.d == -1) {
        out = "dynamic";
      } else if (s.d > 0) {
        out = s.d;
      } else {
        fail(where, name + expect + s.text);
      }
    } else {
      fail(where, name + expect + shown(s));
    }
  } else {
    fail(where, "schema type " + type + " of " + spec.key + " is unknown");
  }

  if (!spec.choices.empty() && out.is_string() && type != "loss_scale") {
    const auto& text = out.get_ref<const std::string&>();
    if (std::find(spec.choices.begin(), spec.choices.end(), text) == spec.choices.end()) {
      fail(where, name + " must be one of " + join(spec.choices, ", ") + ", got " + out.dump());
    }
  }
  if (out.is_number()) {
    double v = out.get<double>();
    if (spec.min && v < *spec.min) {
      fail(where, name + " must be >= " + format_bound(*spec.min) + ", got " + s.text);
    }
    if (spec.max && v > *spec.max) {
      fail(where, name + " must be <= " + format_bound(*spec.max) + ", got " + s.text);
    }
  }
  return out;
}

// Damerau-Levenshtein (optimal string alignment) distance.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

std::string last_component(const std::string& key) {
  auto dot = key.rfind('.');
  return dot == std::string::npos ? key : key.substr(dot + 1);
}

void flatten_json(const nlohmann::json& value, const std::string& path, const Schema& schema,
                  const std::string& origin, std::map<std::string, nlohmann::json>& out) {
  SourceLoc where{origin};
  if (!path.empty() && schema.find(path)) {
    out[path] = value;
    return;
  }
  if (!value.is_object()) {
    if (path.empty()) fail(where, "a config must be a JSON object, got " + value.dump());
    fail(where, schema.unknown_key_message(path));
  }
  if (!path.empty() && !schema.is_group(path)) fail(where, schema.unknown_key_message(path));
  for (const auto& item : value.items()) {
    flatten_json(item.value(), path.empty() ? item.key() : path + "." + item.key(), schema, origin,
                 out);
  }
}

// A schema entry's fields: each one known, type, default and doc present.
void check_schema_fields(const YAML::Node& body, const std::string& origin,
                         const SourceLoc& key_loc, const std::string& key) {
  static const std::set<std::string> kFields = {"type", "default", "doc",       "choices", "min",
                                                "max",  "unique",  "max_items", "identity"};
  for (const auto& field : body) {
    if (!kFields.count(field.first.Scalar())) {
      fail(SourceLoc::from_mark(origin, field.first.Mark().line, field.first.Mark().column),
           "schema entry " + key + " has an unknown field " + field.first.Scalar() +
               " (fields: type, default, doc, choices, min, max, unique, max_items, "
               "identity)");
    }
  }
  for (const char* required : {"type", "default", "doc"}) {
    if (!body[required]) fail(key_loc, "schema entry " + key + " lacks `" + required + "`");
  }
}

// A schema entry's `choices` (string and loss_scale keys) and `min` / `max` (numeric keys).
void parse_choices_and_bounds(const YAML::Node& body, const SourceLoc& key_loc, KeySpec& spec) {
  const std::string elem = element_type(spec.type);
  if (body["choices"]) {
    if ((elem != "string" && elem != "loss_scale") || !body["choices"].IsSequence() ||
        body["choices"].size() == 0) {
      fail(key_loc, "schema entry " + spec.key +
                        ": choices must be a non-empty list and "
                        "only string and loss_scale keys take them");
    }
    for (const auto& c : body["choices"]) spec.choices.push_back(c.Scalar());
  }
  for (const char* bound : {"min", "max"}) {
    if (!body[bound]) continue;
    if (elem != "int" && elem != "float" && elem != "loss_scale") {
      fail(key_loc, "schema entry " + spec.key + ": only numeric keys take " + bound);
    }
    Scalar s = from_yaml(body[bound]);
    if (s.kind != Scalar::Kind::kInt && s.kind != Scalar::Kind::kFloat) {
      fail(key_loc, "schema entry " + spec.key + ": " + bound + " must be a number");
    }
    (std::string(bound) == "min" ? spec.min : spec.max) = s.d;
  }
}

// A schema entry's `identity` (always when absent).
void parse_identity(const YAML::Node& body, const SourceLoc& key_loc, KeySpec& spec) {
  if (!body["identity"]) return;
  const std::string id = body["identity"].Scalar();
  if (id == "always") {
    spec.identity = KeySpec::Identity::kAlways;
  } else if (id == "non_default") {
    spec.identity = KeySpec::Identity::kNonDefault;
  } else if (id == "never") {
    spec.identity = KeySpec::Identity::kNever;
  } else if (id == "content" && spec.type == "string") {
    spec.identity = KeySpec::Identity::kContent;
  } else {
    fail(key_loc, "schema entry " + spec.key +
                      ": identity must be always, non_default, "
                      "never or content (string keys only), got \"" +
                      id + "\"");
  }
}

// A schema entry's `unique` and `max_items` (list keys only).
void parse_list_rules(const YAML::Node& body, const SourceLoc& key_loc, KeySpec& spec) {
  if (!body["unique"] && !body["max_items"]) return;
  if (!is_list_type(spec.type)) {
    fail(key_loc, "schema entry " + spec.key + ": only list keys take unique and max_items");
  }
  if (body["unique"]) {
    const Scalar s = from_yaml(body["unique"]);
    if (s.kind != Scalar::Kind::kBool) {
      fail(key_loc, "schema entry " + spec.key + ": unique must be true or false");
    }
    spec.unique = s.b;
  }
  if (body["max_items"]) {
    const Scalar s = from_yaml(body["max_items"]);
    if (s.kind != Scalar::Kind::kInt || s.out_of_range || s.i < 1) {
      fail(key_loc, "schema entry " + spec.key + ": max_items must be an integer >= 1");
    }
    spec.max_items = static_cast<size_t>(s.i);
  }
}

// A YAML list too long for `spec`'s max_items (checked before its elements are read, so a list
// of 10^9 anchored elements is refused by its size alone).
void check_list_length(const KeySpec& spec, const YAML::Node& value, const SourceLoc& where) {
  if (spec.max_items && value.size() > *spec.max_items) {
    fail(where, spec.key + " has " + std::to_string(value.size()) + " entries, more than the " +
                    std::to_string(*spec.max_items) +
                    " it takes (its entry in schemas/ says why); shorten the list");
  }
}

// The first repeat among the coerced elements of a `unique` list, named by both positions.
void check_unique(const KeySpec& spec, const nlohmann::json& items,
                  const std::vector<SourceLoc>& locs) {
  if (!spec.unique) return;
  std::map<std::string, size_t> first;  // element's JSON text -> its index
  for (size_t i = 0; i < items.size(); ++i) {
    const auto [it, added] = first.emplace(items[i].dump(), i);
    if (added) continue;
    fail(locs[i], spec.key + "[" + std::to_string(i) + "] repeats " + items[i].dump() +
                      " (first at " + spec.key + "[" + std::to_string(it->second) + "]" +
                      (locs[it->second].line > 0 ? ", " + locs[it->second].str() : "") +
                      "); list each entry once");
  }
}

}  // namespace

// ---- SourceLoc ----

std::string SourceLoc::str() const {
  std::string out = file;
  if (line > 0) {
    out += ":" + std::to_string(line);
    if (column > 0) out += ":" + std::to_string(column);
  }
  return out;
}

std::string SourceLoc::prefix() const {
  std::string s = str();
  return s.empty() ? s : s + ": ";
}

SourceLoc SourceLoc::from_mark(const std::string& file, int line0, int column0) {
  SourceLoc loc{file};
  if (line0 >= 0) {
    loc.line = line0 + 1;
    loc.column = column0 >= 0 ? column0 + 1 : 0;
  }
  return loc;
}

// Appends a short rendering of `node` to `out`, stopping once `out` is longer than `limit`: a
// value built from nested YAML anchors may have 10^9 leaves, of which a message shows a line.
void brief_into(const YAML::Node& node, std::string& out, size_t limit) {
  if (!node.IsDefined() || node.IsNull()) {
    out += "nothing (null)";
  } else if (node.IsScalar()) {
    out += shown(from_yaml(node));
  } else if (node.IsMap()) {
    out += "a mapping";
  } else {
    out += "[";
    bool first = true;
    for (const auto& item : node) {
      if (out.size() > limit) break;
      out += first ? "" : ", ";
      first = false;
      brief_into(item, out, limit);
    }
    out += "]";
  }
}

std::string yaml_brief(const YAML::Node& node) {
  constexpr size_t kLimit = 80;
  std::string out;
  brief_into(node, out, kLimit);
  if (!node.IsSequence() || out.size() <= kLimit) return out;
  return out.substr(0, kLimit - 3) + "...]";
}

std::string suggest_among(const std::string& unknown, const std::vector<std::string>& candidates) {
  if (unknown.empty()) return "";
  // Ranked by (tier, distance): a full-key distance d within the limit ranks 2d; the same last
  // component in another group ranks 3 (between one and two edits); a leaf one edit away ranks
  // after every full-key match.
  const size_t limit = std::max<size_t>(1, std::min<size_t>(3, unknown.size() / 3));
  const std::string last = last_component(unknown);
  std::string best;
  std::pair<size_t, size_t> best_score{SIZE_MAX, SIZE_MAX};
  for (const auto& key : candidates) {
    if (key == unknown) continue;
    const size_t d = edit_distance(unknown, key);
    const std::string key_last = last_component(key);
    size_t tier = SIZE_MAX;
    if (d <= limit) tier = 2 * d;
    if (key_last == last) {
      tier = std::min<size_t>(tier, 3);
    } else if (last.size() >= 4 && edit_distance(last, key_last) <= 1) {
      tier = std::min(tier, 2 * limit + 1);
    }
    if (tier == SIZE_MAX) continue;
    std::pair<size_t, size_t> score{tier, d};
    if (score < best_score) {
      best_score = score;
      best = key;
    }
  }
  return best;
}

// ---- Schema ----

const Schema& Schema::builtin() {
  static const Schema schema =
      Schema::parse(amptune::embedded::config_yaml, "schemas/config.yaml (compiled in)");
  return schema;
}

const Schema& Schema::sweep_blocks() {
  static const Schema schema =
      Schema::parse(amptune::embedded::sweep_yaml, "schemas/sweep.yaml (compiled in)");
  return schema;
}

Schema Schema::parse(std::string_view yaml_text, const std::string& origin) {
  static const std::regex kKeyName("[a-z][a-z0-9_]*(\\.[a-z][a-z0-9_]*)*");
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml_text));
  } catch (const YAML::Exception& e) {
    fail(SourceLoc::from_mark(origin, e.mark.line, e.mark.column), "YAML syntax error: " + e.msg);
  }
  if (!root.IsMap()) fail(SourceLoc{origin}, "a schema must be a mapping of config keys");

  Schema schema;
  for (const auto& entry : root) {
    const auto key_loc =
        SourceLoc::from_mark(origin, entry.first.Mark().line, entry.first.Mark().column);
    KeySpec spec;
    spec.key = entry.first.Scalar();
    if (!std::regex_match(spec.key, kKeyName)) {
      fail(key_loc, "schema key \"" + spec.key + "\" must be dotted lower_case words");
    }
    if (schema.index_.count(spec.key))
      fail(key_loc, "schema key " + spec.key + " is declared twice");
    const YAML::Node& body = entry.second;
    if (!body.IsMap()) fail(key_loc, "schema entry " + spec.key + " must be a mapping");
    check_schema_fields(body, origin, key_loc, spec.key);
    spec.type = body["type"].Scalar();
    if (!kTypes.count(spec.type)) {
      fail(key_loc, "schema entry " + spec.key + " has an unknown type \"" + spec.type + "\"");
    }
    spec.doc = body["doc"].Scalar();
    if (spec.doc.empty()) fail(key_loc, "schema entry " + spec.key + " has an empty doc");
    parse_choices_and_bounds(body, key_loc, spec);
    parse_list_rules(body, key_loc, spec);
    parse_identity(body, key_loc, spec);
    const YAML::Node& def = body["default"];
    spec.default_value =
        schema.coerce(spec, def, SourceLoc::from_mark(origin, def.Mark().line, def.Mark().column));
    schema.index_[spec.key] = schema.keys_.size();
    schema.keys_.push_back(std::move(spec));
  }
  // nested() needs every key to be a leaf: "a.b" and "a.b.c" cannot both exist.
  for (const auto& spec : schema.keys_) {
    if (schema.is_group(spec.key)) {
      fail(SourceLoc{origin}, "schema key " + spec.key + " is both a key and a group of keys");
    }
  }
  return schema;
}

const KeySpec* Schema::find(const std::string& key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &keys_[it->second];
}

bool Schema::is_group(const std::string& prefix) const {
  const std::string p = prefix + ".";
  auto it = index_.lower_bound(p);
  return it != index_.end() && it->first.compare(0, p.size(), p) == 0;
}

std::string Schema::suggest(const std::string& unknown) const {
  std::vector<std::string> names;
  for (const auto& spec : keys_) names.push_back(spec.key);
  return suggest_among(unknown, names);
}

std::string Schema::unknown_key_message(const std::string& key, const std::string& context) const {
  std::string message = "unknown config key " + key;
  if (!context.empty()) message += " (" + context + ")";
  std::string suggestion = suggest(key);
  if (!suggestion.empty()) message += "; did you mean " + suggestion + "?";
  message += " (every key is documented in schemas/config.yaml)";
  return message;
}

nlohmann::json Schema::coerce(const KeySpec& spec, const YAML::Node& value,
                              const SourceLoc& where) const {
  const std::string elem = element_type(spec.type);
  if (!is_list_type(spec.type)) {
    if (value.IsDefined() && (value.IsSequence() || value.IsMap())) {
      fail(where, spec.key + " must be a single value, got " + yaml_brief(value));
    }
    return coerce_scalar(spec, elem, from_yaml(value), spec.key, where);
  }
  if (!value.IsDefined() || !value.IsSequence()) {
    fail(where, spec.key + " must be a list like [" + (elem == "string" ? "a, b" : "1, 2") +
                    "] ([] for none), got " + yaml_brief(value));
  }
  check_list_length(spec, value, where);
  nlohmann::json out = nlohmann::json::array();
  std::vector<SourceLoc> locs;
  for (size_t i = 0; i < value.size(); ++i) {
    const YAML::Node item = value[i];
    // Element positions are only meaningful when `where` points into the same text.
    SourceLoc loc = where;
    if (where.line > 0 && item.Mark().line >= 0) {
      loc = SourceLoc::from_mark(where.file, item.Mark().line, item.Mark().column);
    }
    const std::string name = spec.key + "[" + std::to_string(i) + "]";
    if (item.IsSequence() || item.IsMap()) {
      fail(loc, name + " must be a single value, got " + yaml_brief(item));
    }
    out.push_back(coerce_scalar(spec, elem, from_yaml(item), name, loc));
    locs.push_back(loc);
  }
  check_unique(spec, out, locs);
  return out;
}

nlohmann::json Schema::coerce(const KeySpec& spec, const nlohmann::json& value,
                              const SourceLoc& where) const {
  const std::string elem = element_type(spec.type);
  if (!is_list_type(spec.type)) {
    if (value.is_structured())
      fail(where, spec.key + " must be a single value, got " + value.dump());
    return coerce_scalar(spec, elem, from_json(value), spec.key, where);
  }
  if (!value.is_array()) fail(where, spec.key + " must be a list, got " + value.dump());
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < value.size(); ++i) {
    const std::string name = spec.key + "[" + std::to_string(i) + "]";
    if (value[i].is_structured())
      fail(where, name + " must be a single value, got " + value[i].dump());
    out.push_back(coerce_scalar(spec, elem, from_json(value[i]), name, where));
  }
  return out;
}

// ---- Config ----

Config::Config() : Config(Schema::builtin()) {}

Config::Config(const Schema& schema) : schema_(&schema) {
  for (const auto& spec : schema.keys()) values_[spec.key] = spec.default_value;
}

const KeySpec& Config::spec(const std::string& key) const {
  const KeySpec* spec = schema_->find(key);
  if (!spec) throw ConfigError(schema_->unknown_key_message(key));
  return *spec;
}

void Config::set(const std::string& key, nlohmann::json value) {
  const KeySpec& s = spec(key);
  values_[key] = schema_->coerce(s, value, SourceLoc{});
}

void Config::set_yaml(const std::string& key, const std::string& value_yaml,
                      const SourceLoc& where) {
  const KeySpec* s = schema_->find(key);
  if (!s) fail(where, schema_->unknown_key_message(key));
  // "--set model.weights=" means the empty string, not null.
  if (value_yaml.find_first_not_of(" \t") == std::string::npos && s->type == "string") {
    values_[key] = schema_->coerce(*s, nlohmann::json(""), where);
    return;
  }
  YAML::Node node;
  try {
    node = YAML::Load(value_yaml);
  } catch (const YAML::Exception& e) {
    fail(where, "the value of " + key + " is not valid YAML (" + e.msg + "): " + value_yaml);
  }
  values_[key] = schema_->coerce(*s, node, where);
}

const nlohmann::json& Config::at(const std::string& key) const {
  spec(key);
  return values_.at(key);
}

const nlohmann::json& Config::typed(const std::string& key, const char* getter,
                                    const char* type) const {
  const KeySpec& s = spec(key);
  const nlohmann::json& v = values_.at(key);
  if (s.type == type) return v;
  if (s.type == "loss_scale") {
    if ((std::string(type) == "float" && v.is_number()) ||
        (std::string(type) == "string" && v.is_string())) {
      return v;
    }
    throw ConfigError("config key " + key + " is " + v.dump() + "; check at(\"" + key +
                      "\").is_string() before calling " + getter);
  }
  throw ConfigError("config key " + key + " has type " + s.type + " in schemas/config.yaml; " +
                    getter + " reads " + type + " keys");
}

int64_t Config::get_int(const std::string& key) const {
  return typed(key, "get_int", "int").get<int64_t>();
}
double Config::get_double(const std::string& key) const {
  return typed(key, "get_double", "float").get<double>();
}
bool Config::get_bool(const std::string& key) const {
  return typed(key, "get_bool", "bool").get<bool>();
}
std::string Config::get_string(const std::string& key) const {
  return typed(key, "get_string", "string").get<std::string>();
}
std::vector<int64_t> Config::get_int_list(const std::string& key) const {
  return typed(key, "get_int_list", "int_list").get<std::vector<int64_t>>();
}
std::vector<double> Config::get_double_list(const std::string& key) const {
  return typed(key, "get_double_list", "float_list").get<std::vector<double>>();
}
std::vector<std::string> Config::get_string_list(const std::string& key) const {
  return typed(key, "get_string_list", "string_list").get<std::vector<std::string>>();
}

namespace {
// root["a"]["b"] = value for the dotted key "a.b".
void put_nested(nlohmann::json& root, const std::string& key, const nlohmann::json& value) {
  nlohmann::json* node = &root;
  size_t start = 0;
  for (size_t dot = key.find('.'); dot != std::string::npos; dot = key.find('.', start)) {
    node = &(*node)[key.substr(start, dot - start)];
    start = dot + 1;
  }
  (*node)[key.substr(start)] = value;
}
}  // namespace

nlohmann::json Config::nested() const {
  nlohmann::json root = nlohmann::json::object();
  for (const auto& [key, value] : values_) put_nested(root, key, value);
  return root;
}

std::string Config::canonical_json() const {
  // nlohmann::json objects are std::maps (sorted keys); doubles print as the shortest text that
  // reads back to the same value (0.1 -> "0.1", 1.0 -> "1.0"), so the text is stable.
  return nested().dump();
}

namespace {

bool in_identity(const KeySpec& s, const nlohmann::json& value) {
  if (s.identity == KeySpec::Identity::kNever || s.identity == KeySpec::Identity::kContent) {
    return false;
  }
  return s.identity != KeySpec::Identity::kNonDefault || value != s.default_value;
}

}  // namespace

std::string Config::hash() const {
  // The nested identity object built directly, without a Config copy.
  nlohmann::json identity = nlohmann::json::object();
  for (const auto& [key, value] : values_) {
    if (in_identity(spec(key), value)) put_nested(identity, key, value);
  }
  return sha256_hex(identity.dump());
}

std::optional<HashTemplate> Config::hash_template(const std::vector<std::string>& keys) const {
  // The identity text with a unique marker string as each key's value, cut at the markers.
  nlohmann::json identity = nlohmann::json::object();
  std::map<std::string, size_t> slot_of;
  for (size_t k = 0; k < keys.size(); ++k) {
    const KeySpec& s = spec(keys[k]);
    if (s.identity == KeySpec::Identity::kNonDefault) return std::nullopt;
    if (in_identity(s, s.default_value)) slot_of[keys[k]] = k;
  }
  for (const auto& [key, value] : values_) {
    const auto slot = slot_of.find(key);
    if (slot != slot_of.end()) {
      put_nested(identity, key, "\x01" "amptune slot " + std::to_string(slot->second) + "\x01");
    } else if (in_identity(spec(key), value)) {
      put_nested(identity, key, value);
    }
  }
  const std::string text = identity.dump();
  HashTemplate t;
  static const std::string kOpen = "\"\\u0001amptune slot ", kClose = "\\u0001\"";
  size_t from = 0;
  for (size_t at; (at = text.find(kOpen, from)) != std::string::npos;) {
    const size_t end = text.find(kClose, at);
    t.pieces_.push_back(text.substr(from, at - from));
    t.slots_.push_back(std::stoul(text.substr(at + kOpen.size(), end - at - kOpen.size())));
    from = end + kClose.size();
  }
  t.pieces_.push_back(text.substr(from));
  return t;
}

std::string HashTemplate::hash(const std::vector<const nlohmann::json*>& values) const {
  std::string text = pieces_[0];
  for (size_t i = 0; i < slots_.size(); ++i) {
    text += values.at(slots_[i])->dump();
    text += pieces_[i + 1];
  }
  return sha256_hex(text);
}

std::string run_identity(const std::string& config_hash, const std::string& data_fingerprint) {
  if (data_fingerprint.empty()) return config_hash;
  return sha256_hex(config_hash + "|data " + data_fingerprint);
}

std::string fork_identity(const std::string& config_hash, const std::string& parent_identity,
                          int parent_epoch, bool reset_optimizer,
                          const std::string& changed_data_fingerprint) {
  return sha256_hex(config_hash + "|fork of " + parent_identity + " at epoch " +
                    std::to_string(parent_epoch) + (reset_optimizer ? " reset" : "") +
                    (changed_data_fingerprint.empty() ? "" : "|data " + changed_data_fingerprint));
}

Config Config::from_json(const std::string& json_text, const std::string& origin) {
  return from_json(json_text, origin, Schema::builtin());
}

Config Config::from_json(const std::string& json_text, const std::string& origin,
                         const Schema& schema) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    fail(SourceLoc{origin}, std::string("config JSON does not parse: ") + e.what());
  }
  std::map<std::string, nlohmann::json> flat;
  flatten_json(doc, "", schema, origin, flat);
  Config config(schema);
  for (auto& [key, value] : flat) {
    config.values_[key] = schema.coerce(*schema.find(key), value, SourceLoc{origin});
  }
  return config;
}

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? separator : "") + items[i];
  return out;
}

std::pair<std::string, std::string> split_assignment(const std::string& text) {
  auto eq = text.find('=');
  if (eq == std::string::npos) {
    throw UsageError("expected key=value (e.g. optim.lr=0.05), got \"" + text + "\"");
  }
  std::string key = text.substr(0, eq);
  auto first = key.find_first_not_of(" \t");
  auto last = key.find_last_not_of(" \t");
  key = first == std::string::npos ? "" : key.substr(first, last - first + 1);
  if (key.empty()) throw UsageError("expected key=value, the key is empty in \"" + text + "\"");
  return {key, text.substr(eq + 1)};
}

}  // namespace amptune
