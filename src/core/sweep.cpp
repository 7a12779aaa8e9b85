#include "core/sweep.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>
#include <unordered_map>

#include "core/error.h"
#include "core/log.h"

namespace amptune {
namespace {

const std::vector<std::string> kTopLevel = {"name", "description", "base",   "grid",
                                            "zip",  "exclude",     "repeat", "forks"};
constexpr size_t kMaxCells = 1000000;

[[noreturn]] void fail(const SourceLoc& where, const std::string& message) {
  throw ConfigError(where.prefix() + message);
}

std::string value_text(const nlohmann::json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

struct Ctx {
  std::string file;
  const Schema& schema;
  SourceLoc loc(const YAML::Node& node) const {
    return SourceLoc::from_mark(file, node.Mark().line, node.Mark().column);
  }
};

// One config key of a mapping that may be nested ({optim: {lr: 0.1}}) or dotted ({optim.lr: 0.1}).
struct Leaf {
  std::string key;
  YAML::Node value;
  SourceLoc key_loc;
  SourceLoc value_loc;  // the key's position when the value is empty
};

std::string key_text(const Ctx& ctx, const YAML::Node& key) {
  if (!key.IsScalar()) fail(ctx.loc(key), "a key must be a plain word, got " + yaml_brief(key));
  return key.Scalar();
}

void collect_leaves(const Ctx& ctx, const YAML::Node& map, const std::string& prefix,
                    const std::string& section, std::vector<Leaf>& out,
                    std::map<std::string, SourceLoc>& seen) {
  for (const auto& item : map) {
    const std::string word = key_text(ctx, item.first);
    const std::string path = prefix.empty() ? word : prefix + "." + word;
    const SourceLoc key_loc = ctx.loc(item.first);
    const YAML::Node& value = item.second;
    if (ctx.schema.find(path)) {
      auto it = seen.find(path);
      if (it != seen.end()) {
        fail(key_loc, path + " is given twice in " + section + " (first at " + it->second.str() +
                          "); keep one");
      }
      seen.emplace(path, key_loc);
      SourceLoc value_loc = value.IsNull() ? key_loc : ctx.loc(value);
      out.push_back(Leaf{path, value, key_loc, value_loc});
    } else if (ctx.schema.is_group(path)) {
      if (!value.IsMap()) {
        fail(key_loc, path + " is a group of config keys, not a key; write " + path +
                          ": {key: value} or " + path + ".key: value");
      }
      collect_leaves(ctx, value, path, section, out, seen);
    } else {
      fail(key_loc, ctx.schema.unknown_key_message(path, "in " + section));
    }
  }
}

std::vector<Leaf> leaves_of(const Ctx& ctx, const YAML::Node& map, const std::string& section) {
  if (!map.IsMap()) {
    fail(ctx.loc(map), section + " must be a mapping of config keys, got " + yaml_brief(map));
  }
  std::vector<Leaf> out;
  std::map<std::string, SourceLoc> seen;
  collect_leaves(ctx, map, "", section, out, seen);
  return out;
}

// One factor of the cartesian product: a grid key, a zip group or repeat.
struct Axis {
  std::string section;            // "grid", "zip group 2", "repeat"
  std::vector<std::string> keys;  // one key, or the keys of a zip group
  std::vector<SourceLoc> key_locs;
  std::vector<std::vector<nlohmann::json>> rows;  // rows[i][k]: value of keys[k] at position i
};

// The values of one swept list, coerced element by element (each element is one cell's value).
std::vector<nlohmann::json> axis_values(const Ctx& ctx, const Leaf& leaf,
                                        const std::string& section) {
  const KeySpec& spec = *ctx.schema.find(leaf.key);
  if (!leaf.value.IsSequence()) {
    fail(leaf.value_loc, "in " + section + ", " + leaf.key +
                             " must be a list of the values to try, e.g. " + leaf.key +
                             ": [a, b], got " + yaml_brief(leaf.value));
  }
  if (leaf.value.size() == 0) {
    fail(leaf.value_loc,
         "in " + section + ", the list of " + leaf.key + " is empty; give at least one value");
  }
  const bool list_key = spec.type.size() > 5 && spec.type.substr(spec.type.size() - 5) == "_list";
  std::vector<nlohmann::json> values;
  for (const auto& item : leaf.value) {
    const SourceLoc loc = ctx.loc(item);
    if (list_key && !item.IsSequence()) {
      fail(loc, leaf.key + " takes a list, so each value in " + section + " is a list: write " +
                    leaf.key + ": [[17], [10, 15]], got " + yaml_brief(item));
    }
    values.push_back(ctx.schema.coerce(spec, item, loc));
  }
  return values;
}

// Rejects two positions of one axis with equal values: they would be the same cell twice.
// Linear: a grid key may list 100,000 values.
void check_unique_rows(const Axis& axis, const std::vector<std::vector<SourceLoc>>& locs) {
  std::unordered_map<std::string, size_t> first;  // canonical text of a row -> its position
  first.reserve(axis.rows.size());
  for (size_t i = 0; i < axis.rows.size(); ++i) {
    const auto [it, inserted] = first.emplace(nlohmann::json(axis.rows[i]).dump(), i);
    if (inserted) continue;
    std::vector<std::string> parts;
    for (size_t k = 0; k < axis.keys.size(); ++k) {
      parts.push_back(axis.keys[k] + "=" + value_text(axis.rows[i][k]));
    }
    fail(locs[i][0], "duplicate cell: " + axis.section + " lists " + join(parts, " ") +
                         " twice (also at " + locs[it->second][0].str() +
                         "); each value makes one cell, remove the repeat");
  }
}

Axis parse_grid_key(const Ctx& ctx, const Leaf& leaf) {
  Axis axis{"grid", {leaf.key}, {leaf.key_loc}, {}};
  std::vector<std::vector<SourceLoc>> locs;
  size_t i = 0;
  for (auto& v : axis_values(ctx, leaf, "grid")) {
    axis.rows.push_back({std::move(v)});
    locs.push_back({ctx.loc(leaf.value[i++])});
  }
  check_unique_rows(axis, locs);
  return axis;
}

Axis parse_zip_group(const Ctx& ctx, const YAML::Node& group, size_t number) {
  const std::string section = "zip group " + std::to_string(number);
  if (!group.IsMap() || group.size() == 0) {
    fail(ctx.loc(group),
         section + " must be a non-empty mapping of key: [values], got " + yaml_brief(group));
  }
  Axis axis{section, {}, {}, {}};
  std::vector<std::vector<nlohmann::json>> columns;
  std::vector<std::vector<SourceLoc>> column_locs;
  for (const Leaf& leaf : leaves_of(ctx, group, section)) {
    axis.keys.push_back(leaf.key);
    axis.key_locs.push_back(leaf.key_loc);
    columns.push_back(axis_values(ctx, leaf, section));
    column_locs.emplace_back();
    for (const auto& item : leaf.value) column_locs.back().push_back(ctx.loc(item));
  }
  for (size_t k = 1; k < columns.size(); ++k) {
    if (columns[k].size() != columns[0].size()) {
      fail(ctx.loc(group), section + ": the lists advance together and need the same length, but " +
                               axis.keys[0] + " has " + std::to_string(columns[0].size()) +
                               " values and " + axis.keys[k] + " has " +
                               std::to_string(columns[k].size()));
    }
  }
  std::vector<std::vector<SourceLoc>> row_locs;
  for (size_t i = 0; i < columns[0].size(); ++i) {
    axis.rows.emplace_back();
    row_locs.emplace_back();
    for (size_t k = 0; k < columns.size(); ++k) {
      axis.rows.back().push_back(columns[k][i]);
      row_locs.back().push_back(column_locs[k][i]);
    }
  }
  check_unique_rows(axis, row_locs);
  return axis;
}

struct ExcludeEntry {
  SourceLoc loc;
  std::vector<std::pair<std::string, nlohmann::json>> match;
  size_t hits = 0;
};

}  // namespace

Config Cell::config() const {
  Config config = *base;
  for (const auto& item : axes.items()) config.set(item.key(), nlohmann::json(item.value()));
  return config;
}

nlohmann::json Cell::value(const std::string& key) const {
  auto it = axes.find(key);
  return it != axes.end() ? nlohmann::json(*it) : base->at(key);
}

std::string Cell::label() const {
  if (axes.empty()) return "base";
  std::string out;
  for (const auto& item : axes.items()) {
    if (!out.empty()) out += ' ';
    out += item.key() + "=" +
           (item.value().is_string() ? item.value().get<std::string>() : item.value().dump());
  }
  return out;
}

// `forks:` entries (see sweep.h), checked against the expanded cells.
std::vector<ForkDecl> parse_forks(const Ctx& ctx, const YAML::Node& node, const SourceLoc& loc,
                                  const std::vector<Cell>& cells) {
  const std::string example =
      "e.g. forks: [{from: {where: {optim.lr: 0.1}, epoch: 1}, grid: {amp.loss_scale: [dynamic, 128]}}]";
  if (!node.IsSequence() || node.size() == 0) {
    fail(loc, "forks must be a list of fork entries, " + example + ", got " + yaml_brief(node));
  }
  size_t planned_forks = 0;  // over all entries, capped like cells
  std::vector<ForkDecl> out;
  for (const auto& entry : node) {
    ForkDecl fork;
    fork.loc = ctx.loc(entry);
    if (!entry.IsMap()) fail(fork.loc, "a forks entry is a mapping, " + example);
    YAML::Node from, grid, set;
    bool have_from = false, have_grid = false, have_set = false;
    for (const auto& item : entry) {
      const std::string key = key_text(ctx, item.first);
      const SourceLoc key_loc = ctx.loc(item.first);
      if (key == "from") {
        from = item.second;
        have_from = true;
      } else if (key == "grid") {
        grid = item.second;
        have_grid = true;
      } else if (key == "set") {
        set = item.second;
        have_set = true;
      } else if (key == "reset_optimizer") {
        if (!item.second.IsScalar() || (item.second.Scalar() != "true" && item.second.Scalar() != "false")) {
          fail(ctx.loc(item.second), "reset_optimizer is true or false, got " + yaml_brief(item.second));
        }
        fork.reset_optimizer = item.second.Scalar() == "true";
      } else if (key == "name") {
        if (!item.second.IsScalar()) fail(ctx.loc(item.second), "name must be text");
        fork.name = item.second.Scalar();
      } else {
        fail(key_loc, "unknown key " + key + " in a forks entry; the keys are from, grid, set, "
                      "reset_optimizer, name");
      }
    }
    if (!have_from || !from.IsMap()) {
      fail(fork.loc, "a forks entry needs from: {where: {key: value}, epoch: N}");
    }
    bool have_epoch = false;
    for (const auto& item : from) {
      const std::string key = key_text(ctx, item.first);
      if (key == "epoch") {
        KeySpec spec{"epoch", "int", "", {}, {}, 0.0, std::nullopt};
        fork.epoch = static_cast<int>(ctx.schema.coerce(spec, item.second, ctx.loc(item.second)).get<int64_t>());
        have_epoch = true;
      } else if (key == "where") {
        for (const Leaf& leaf : leaves_of(ctx, item.second, "forks.from.where")) {
          fork.where.emplace_back(leaf.key, ctx.schema.coerce(*ctx.schema.find(leaf.key), leaf.value, leaf.value_loc));
        }
      } else {
        fail(ctx.loc(item.first), "unknown key " + key + " in from:; the keys are where and epoch");
      }
    }
    if (!have_epoch) fail(ctx.loc(from), "from: needs epoch: N (the 0-based epoch whose checkpoint the fork starts from)");
    // overrides: the fixed `set` values times the cartesian product of `grid`
    std::vector<std::pair<std::string, nlohmann::json>> fixed;
    std::map<std::string, SourceLoc> seen;
    auto check_key = [&](const Leaf& leaf) {
      if (leaf.key.rfind("model.", 0) == 0) {
        fail(leaf.key_loc, leaf.key + " cannot change in a fork (the checkpoint holds the parent's "
                           "model); sweep it in grid: instead");
      }
      if (!seen.emplace(leaf.key, leaf.key_loc).second) {
        fail(leaf.key_loc, leaf.key + " is given twice in this forks entry; keep one");
      }
    };
    if (have_set) {
      for (const Leaf& leaf : leaves_of(ctx, set, "forks.set")) {
        check_key(leaf);
        fixed.emplace_back(leaf.key, ctx.schema.coerce(*ctx.schema.find(leaf.key), leaf.value, leaf.value_loc));
      }
    }
    if (!have_set && !have_grid) {
      fail(fork.loc, "a forks entry changes something: give set: {key: value} and/or grid: "
                     "{key: [values]} (a fork without changes is `amptune fork RUN --epoch N`)");
    }
    fork.override_sets.push_back(fixed);
    if (have_grid) {
      for (const Leaf& leaf : leaves_of(ctx, grid, "forks.grid")) {
        check_key(leaf);
        const auto values = axis_values(ctx, leaf, "forks.grid");
        if (fork.override_sets.size() * values.size() > kMaxCells) {
          fail(leaf.key_loc, "this forks entry's grid expands to more than " +
                                 std::to_string(kMaxCells) +
                                 " override sets; split it into several entries or use fewer "
                                 "values");
        }
        std::vector<std::vector<std::pair<std::string, nlohmann::json>>> next;
        for (const auto& base : fork.override_sets) {
          for (const auto& value : values) {
            auto row = base;
            row.emplace_back(leaf.key, value);
            next.push_back(std::move(row));
          }
        }
        fork.override_sets = std::move(next);
      }
    }
    for (const Cell& cell : cells) {
      bool match = true;
      for (const auto& [key, value] : fork.where) match = match && cell.value(key) == value;
      if (!match) continue;
      const int64_t epochs = cell.value("schedule.epochs").get<int64_t>();
      if (epochs == 0) {
        fail(ctx.loc(from), "cell " + std::to_string(cell.index) +
                                " is evaluation-only (schedule.epochs: 0) and saves no "
                                "checkpoint to fork from; narrow from.where to trained cells");
      }
      if (fork.epoch + 1 >= epochs) {
        fail(ctx.loc(from), "the fork starts after epoch " + std::to_string(fork.epoch) +
                                " but cell " + std::to_string(cell.index) + " trains only " +
                                std::to_string(epochs) +
                                " epochs, so nothing is left to train; pick an earlier epoch");
      }
      fork.cells.push_back(cell.index);
    }
    if (fork.cells.empty()) fail(ctx.loc(from), "from.where matches no cell of the sweep");
    planned_forks += fork.cells.size() * fork.override_sets.size();
    if (planned_forks > kMaxCells) {
      fail(fork.loc, "the forks: entries plan more than " + std::to_string(kMaxCells) +
                         " forks (cells matched x override sets); narrow from.where or split the "
                         "sweep");
    }
    out.push_back(std::move(fork));
  }
  return out;
}

Sweep parse_sweep(const std::string& yaml_text, const std::string& origin,
                  const std::vector<std::string>& sets) {
  const Schema& schema = Schema::builtin();
  const Ctx ctx{origin, schema};
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    fail(SourceLoc::from_mark(origin, e.mark.line, e.mark.column),
         "YAML syntax error: " + e.msg + " (check indentation, brackets and quotes here)");
  }
  if (!root.IsDefined() || root.IsNull()) {
    fail(SourceLoc{origin}, "the sweep file is empty; it needs at least `name:` (docs/CONFIG.md)");
  }
  if (!root.IsMap()) {
    fail(ctx.loc(root), "a sweep file is a mapping with the keys " + join(kTopLevel, ", ") +
                            ", got " + yaml_brief(root));
  }

  // Top-level keys, in file order (the order of grid / zip / repeat decides the axis order).
  std::vector<std::pair<std::string, YAML::Node>> sections;
  std::map<std::string, SourceLoc> section_loc;
  for (const auto& item : root) {
    const std::string key = key_text(ctx, item.first);
    const SourceLoc loc = ctx.loc(item.first);
    if (std::find(kTopLevel.begin(), kTopLevel.end(), key) == kTopLevel.end()) {
      std::string message = "unknown top-level key " + key;
      std::string close = suggest_among(key, kTopLevel);
      if (schema.find(key) || schema.is_group(key)) {
        message += "; config keys go under base: (or grid:/zip: to sweep them)";
      } else if (!close.empty()) {
        message += "; did you mean " + close + "?";
      } else {
        message += "; the top-level keys are " + join(kTopLevel, ", ");
      }
      fail(loc, message);
    }
    if (section_loc.count(key)) {
      fail(loc, "top-level key " + key + " is given twice (first at " + section_loc[key].str() +
                    "); keep one");
    }
    section_loc[key] = loc;
    sections.emplace_back(key, item.second);
  }
  // The node of a top-level key; IsDefined() is false when the file does not have it.
  auto section = [&](const std::string& key) {
    for (const auto& s : sections) {
      if (s.first == key) return s.second;
    }
    return YAML::Node(YAML::NodeType::Undefined);
  };

  Sweep sweep;
  sweep.source_path = origin;
  sweep.yaml_text = yaml_text;

  const YAML::Node name = section("name");
  if (!name.IsDefined()) {
    fail(SourceLoc{origin}, "the sweep has no name; add `name: my_sweep` (letters, digits, _ . -)");
  }
  static const std::regex kName("[A-Za-z0-9_.-]+");
  if (!name.IsScalar() || !std::regex_match(name.Scalar(), kName)) {
    fail(name.IsNull() ? section_loc["name"] : ctx.loc(name),
         "name must be letters, digits, '_', '.' or '-' (it names runs and rows), got " +
             yaml_brief(name));
  }
  sweep.name = name.Scalar();
  const YAML::Node description = section("description");
  if (description.IsDefined() && !description.IsNull()) {
    if (!description.IsScalar()) {
      fail(ctx.loc(description), "description must be text, got " + yaml_brief(description));
    }
    sweep.description = description.Scalar();
  }

  // base
  const YAML::Node base = section("base");
  if (base.IsDefined() && !base.IsNull()) {
    for (const Leaf& leaf : leaves_of(ctx, base, "base")) {
      sweep.base.set(leaf.key, schema.coerce(*schema.find(leaf.key), leaf.value, leaf.value_loc));
      sweep.key_locs[leaf.key] = leaf.key_loc;
    }
  }

  // Axes in declaration order; repeat's seeds are filled in after --set (they start at seed).
  std::vector<Axis> axes;
  std::map<std::string, std::pair<std::string, SourceLoc>> swept;  // key -> (section, where)
  auto add_axis = [&](Axis axis) {
    for (size_t k = 0; k < axis.keys.size(); ++k) {
      auto it = swept.find(axis.keys[k]);
      if (it != swept.end()) {
        fail(axis.key_locs[k], axis.keys[k] + " is swept twice: in " + it->second.first + " at " +
                                   it->second.second.str() + " and in " + axis.section +
                                   "; sweep each key once (keys that advance together go in one "
                                   "zip group)");
      }
      swept.emplace(axis.keys[k], std::make_pair(axis.section, axis.key_locs[k]));
      sweep.key_locs[axis.keys[k]] = axis.key_locs[k];
    }
    axes.push_back(std::move(axis));
  };
  size_t repeat_axis = SIZE_MAX;
  YAML::Node repeat_node;
  for (const auto& [key, node] : sections) {
    const SourceLoc loc = section_loc[key];
    if (key == "grid") {
      if (!node.IsMap() || node.size() == 0) {
        fail(loc,
             "grid must map swept keys to lists of values, e.g. grid: {optim.lr: [0.05, 0.1]}"
             ", got " +
                 yaml_brief(node));
      }
      for (const Leaf& leaf : leaves_of(ctx, node, "grid")) add_axis(parse_grid_key(ctx, leaf));
    } else if (key == "zip") {
      if (!node.IsSequence() || node.size() == 0) {
        fail(loc,
             "zip must be a list of groups, e.g. zip: [{optim.lr: [0.1, 0.2], "
             "data.batch_size: [128, 256]}], got " +
                 yaml_brief(node));
      }
      for (size_t g = 0; g < node.size(); ++g) add_axis(parse_zip_group(ctx, node[g], g + 1));
    } else if (key == "repeat") {
      if (!schema.find("seed")) fail(loc, "repeat needs the config key seed in the schema");
      repeat_node = node;
      repeat_axis = axes.size();
      add_axis(Axis{"repeat", {"seed"}, {loc}, {}});
    }
  }
  const bool repeat_count = repeat_axis != SIZE_MAX && repeat_node.IsScalar();

  // --set changes base only; a swept key would be overwritten by every cell.
  for (const std::string& text : sets) {
    auto [key, value] = split_assignment(text);
    const SourceLoc where{"--set " + text};
    auto it = swept.find(key);
    if (it != swept.end() && !(key == "seed" && repeat_count)) {
      fail(where, key + " is swept by " + it->second.first + " at " + it->second.second.str() +
                      "; --set changes the base only; to run some of its cells use --only " + key +
                      "=<value>");
    }
    sweep.base.set_yaml(key, value, where);
    sweep.key_locs[key] = where;
  }

  if (repeat_axis != SIZE_MAX) {
    Axis& axis = axes[repeat_axis];
    const KeySpec& seed = *schema.find("seed");
    const SourceLoc loc = repeat_node.IsNull() ? section_loc["repeat"] : ctx.loc(repeat_node);
    std::vector<std::vector<SourceLoc>> locs;
    if (repeat_count) {
      KeySpec count{"repeat", "int", "", {}, {}, 1.0, std::nullopt};
      const int64_t n = schema.coerce(count, repeat_node, loc).get<int64_t>();
      if (n > static_cast<int64_t>(kMaxCells)) fail(loc, "repeat is too large");
      const int64_t first = sweep.base.at("seed").get<int64_t>();
      for (int64_t i = 0; i < n; ++i) {
        axis.rows.push_back({schema.coerce(seed, nlohmann::json(first + i), loc)});
        locs.push_back({loc});
      }
    } else if (repeat_node.IsSequence() && repeat_node.size() > 0) {
      for (const auto& item : repeat_node) {
        const SourceLoc item_loc = ctx.loc(item);
        axis.rows.push_back({schema.coerce(seed, item, item_loc)});
        locs.push_back({item_loc});
      }
    } else {
      fail(loc,
           "repeat must be a count (e.g. 3: seeds seed+0..seed+2) or a non-empty list of "
           "seeds (e.g. [0, 7]), got " +
               yaml_brief(repeat_node));
    }
    check_unique_rows(axis, locs);
  }

  for (const Axis& axis : axes) {
    sweep.axis_keys.insert(sweep.axis_keys.end(), axis.keys.begin(), axis.keys.end());
  }
  auto axis_value_list = [&](const std::string& key) {
    for (const Axis& axis : axes) {
      for (size_t k = 0; k < axis.keys.size(); ++k) {
        if (axis.keys[k] != key) continue;
        std::vector<std::string> out;
        for (const auto& row : axis.rows) out.push_back(value_text(row[k]));
        return out;
      }
    }
    return std::vector<std::string>{};
  };

  // exclude
  std::vector<ExcludeEntry> excludes;
  const YAML::Node exclude = section("exclude");
  if (exclude.IsDefined() && !exclude.IsNull()) {
    if (!exclude.IsSequence()) {
      fail(section_loc["exclude"],
           "exclude must be a list of partial cells, e.g. exclude: "
           "[{optim.lr: 0.2, data.batch_size: 64}], got " +
               yaml_brief(exclude));
    }
    for (size_t e = 0; e < exclude.size(); ++e) {
      const std::string name = "exclude entry " + std::to_string(e + 1);
      const YAML::Node entry = exclude[e];
      if (!entry.IsMap() || entry.size() == 0) {
        fail(ctx.loc(entry), name + " must be a non-empty mapping of swept keys to values, got " +
                                 yaml_brief(entry));
      }
      ExcludeEntry parsed{ctx.loc(entry), {}, 0};
      for (const Leaf& leaf : leaves_of(ctx, entry, name)) {
        if (!swept.count(leaf.key)) {
          std::string message = name + " names " + leaf.key + ", which is not swept; exclude " +
                                "can only name swept keys: " + join(sweep.axis_keys, ", ");
          std::string close = suggest_among(leaf.key, sweep.axis_keys);
          if (!close.empty()) message += " (did you mean " + close + "?)";
          fail(leaf.key_loc, message);
        }
        nlohmann::json value = schema.coerce(*schema.find(leaf.key), leaf.value, leaf.value_loc);
        const auto values = axis_value_list(leaf.key);
        if (std::find(values.begin(), values.end(), value_text(value)) == values.end()) {
          fail(leaf.value_loc, name + ": " + leaf.key + "=" + value_text(value) +
                                   " is not one of its swept values " + join(values, ", "));
        }
        parsed.match.emplace_back(leaf.key, std::move(value));
      }
      excludes.push_back(std::move(parsed));
    }
  }

  // Expansion: mixed-radix counting with the last axis fastest.
  size_t total = 1;
  for (const Axis& axis : axes) {
    total *= axis.rows.size();
    if (total > kMaxCells) {
      fail(SourceLoc{origin}, "the sweep expands to more than " + std::to_string(kMaxCells) +
                                  " cells; split it or use zip instead of grid");
    }
  }
  // One working config: every cell sets the same keys, so each cell's values overwrite the
  // previous cell's and no per-cell copy of the base is made.
  auto shared_base = std::make_shared<const Config>(sweep.base);
  Config work = sweep.base;
  std::unordered_map<std::string, size_t> by_hash;
  by_hash.reserve(total);
  // Every cell's hash from one template of the base (the keys the axes set), with the cell's
  // values spliced in: most of a large sweep's planning time was building and printing each
  // cell's identity JSON (docs/PERFORMANCE.md "Planning large sweeps").
  std::vector<std::string> axis_keys;
  for (const Axis& axis : axes) axis_keys.insert(axis_keys.end(), axis.keys.begin(), axis.keys.end());
  const std::optional<HashTemplate> hash_template = work.hash_template(axis_keys);
  std::vector<const nlohmann::json*> axis_values(axis_keys.size());
  // Swept paths of data (identity: content) are not in the config hash, but cells that read
  // different paths are different cells (their data, and so their runs, may differ).
  std::vector<std::string> content_axes;
  for (const std::string& key : axis_keys) {
    if (schema.find(key)->identity == KeySpec::Identity::kContent) content_axes.push_back(key);
  }
  for (size_t n = 0; n < total; ++n) {
    Cell cell;
    cell.base = shared_base;
    cell.axes = nlohmann::ordered_json::object();
    size_t rest = n;
    std::vector<size_t> position(axes.size());
    for (size_t a = axes.size(); a-- > 0;) {
      position[a] = rest % axes[a].rows.size();
      rest /= axes[a].rows.size();
    }
    nlohmann::json flat = nlohmann::json::object();
    for (size_t a = 0; a < axes.size(); ++a) {
      for (size_t k = 0; k < axes[a].keys.size(); ++k) {
        const nlohmann::json& value = axes[a].rows[position[a]][k];
        work.set(axes[a].keys[k], value);
        cell.axes[axes[a].keys[k]] = nlohmann::ordered_json(value);
        flat[axes[a].keys[k]] = value;
      }
    }
    bool excluded = false;
    for (ExcludeEntry& entry : excludes) {
      bool all = true;
      for (const auto& [key, value] : entry.match) all = all && flat[key] == value;
      if (all) {
        ++entry.hits;
        excluded = true;
      }
    }
    if (excluded) continue;
    cell.index = static_cast<int>(sweep.cells.size());
    if (hash_template) {
      for (size_t k = 0; k < axis_keys.size(); ++k) axis_values[k] = &work.at(axis_keys[k]);
      cell.hash = hash_template->hash(axis_values);
    } else {
      cell.hash = work.hash();
    }
    std::string cell_key = cell.hash;
    for (const std::string& key : content_axes) cell_key += "|" + work.at(key).dump();
    auto [it, inserted] = by_hash.emplace(std::move(cell_key), sweep.cells.size());
    if (!inserted) {
      fail(SourceLoc{origin}, "duplicate cell: cells " + std::to_string(it->second) + " (" +
                                  sweep.cells[it->second].label() + ") and " +
                                  std::to_string(cell.index) + " (" + cell.label() +
                                  ") have the same config; remove one of the values");
    }
    sweep.cells.push_back(std::move(cell));
  }
  if (sweep.cells.empty()) {
    fail(section_loc["exclude"],
         "exclude drops all " + std::to_string(total) + " cells; nothing would run");
  }
  for (size_t e = 0; e < excludes.size(); ++e) {
    if (excludes[e].hits == 0) {
      log::warn(excludes[e].loc.prefix() + "exclude entry " + std::to_string(e + 1) +
                " matches no cell");
    }
  }
  const YAML::Node forks = section("forks");
  if (forks.IsDefined()) sweep.forks = parse_forks(ctx, forks, section_loc["forks"], sweep.cells);
  return sweep;
}

Sweep load_sweep(const std::string& path, const std::vector<std::string>& sets) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw ConfigError(path + ": cannot read the sweep file: " + std::strerror(errno));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ConfigError(path + ": read error");
  return parse_sweep(text.str(), path, sets);
}

std::vector<Cell> filter_cells(const std::vector<Cell>& cells,
                               const std::vector<std::string>& only) {
  const Schema& schema = cells.empty() ? Schema::builtin() : cells.front().base->schema();
  std::vector<std::pair<std::string, nlohmann::json>> wanted;
  for (const std::string& text : only) {
    auto [key, value] = split_assignment(text);
    Config probe(schema);  // set_yaml does the lookup, YAML parse and coercion
    probe.set_yaml(key, value, SourceLoc{"--only " + text});
    wanted.emplace_back(key, probe.at(key));
  }
  std::vector<Cell> out;
  for (const Cell& cell : cells) {
    bool keep = true;
    for (const auto& [key, value] : wanted) keep = keep && cell.value(key) == value;
    if (keep) out.push_back(cell);
  }
  return out;
}

}  // namespace amptune
