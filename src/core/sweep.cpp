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

// The top-level keys of a sweep file, in the order messages list them; SweepReader reads each
// (parse_sweep says how to add one).
const std::vector<std::string> kTopLevel = {"name",    "description", "base",  "grid",  "zip",
                                            "exclude", "repeat",      "forks", "prune", "tune"};
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

namespace {

const std::string kForkExample =
    "e.g. forks: [{from: {where: {optim.lr: 0.1}, epoch: 1}, grid: {amp.loss_scale: [dynamic, "
    "128]}}]";

// The blocks of one forks entry as written; reset_optimizer and name go straight to the fork.
struct ForkBlocks {
  YAML::Node from, grid, set;
  bool have_from = false, have_grid = false, have_set = false;
};

ForkBlocks read_fork_keys(const Ctx& ctx, const YAML::Node& entry, ForkDecl& fork) {
  ForkBlocks blocks;
  for (const auto& item : entry) {
    const std::string key = key_text(ctx, item.first);
    const SourceLoc key_loc = ctx.loc(item.first);
    if (key == "from") {
      blocks.from = item.second;
      blocks.have_from = true;
    } else if (key == "grid") {
      blocks.grid = item.second;
      blocks.have_grid = true;
    } else if (key == "set") {
      blocks.set = item.second;
      blocks.have_set = true;
    } else if (key == "reset_optimizer") {
      if (!item.second.IsScalar() ||
          (item.second.Scalar() != "true" && item.second.Scalar() != "false")) {
        fail(ctx.loc(item.second),
             "reset_optimizer is true or false, got " + yaml_brief(item.second));
      }
      fork.reset_optimizer = item.second.Scalar() == "true";
    } else if (key == "name") {
      if (!item.second.IsScalar()) fail(ctx.loc(item.second), "name must be text");
      fork.name = item.second.Scalar();
    } else {
      fail(key_loc, "unknown key " + key +
                        " in a forks entry; the keys are from, grid, set, reset_optimizer, name");
    }
  }
  return blocks;
}

// from: {where: {key: value}, epoch: N}
void read_fork_from(const Ctx& ctx, const YAML::Node& from, ForkDecl& fork) {
  bool have_epoch = false;
  for (const auto& item : from) {
    const std::string key = key_text(ctx, item.first);
    if (key == "epoch") {
      KeySpec spec{"epoch", "int", "", {}, {}, 0.0, std::nullopt};
      fork.epoch = static_cast<int>(
          ctx.schema.coerce(spec, item.second, ctx.loc(item.second)).get<int64_t>());
      have_epoch = true;
    } else if (key == "where") {
      for (const Leaf& leaf : leaves_of(ctx, item.second, "forks.from.where")) {
        fork.where.emplace_back(
            leaf.key, ctx.schema.coerce(*ctx.schema.find(leaf.key), leaf.value, leaf.value_loc));
      }
    } else {
      fail(ctx.loc(item.first), "unknown key " + key + " in from:; the keys are where and epoch");
    }
  }
  if (!have_epoch) {
    fail(ctx.loc(from),
         "from: needs epoch: N (the 0-based epoch whose checkpoint the fork starts from)");
  }
}

// Each override set of `fork` once per value of `key`.
void multiply_override_sets(ForkDecl& fork, const std::string& key,
                            const std::vector<nlohmann::json>& values) {
  std::vector<std::vector<std::pair<std::string, nlohmann::json>>> next;
  for (const auto& base : fork.override_sets) {
    for (const auto& value : values) {
      auto row = base;
      row.emplace_back(key, value);
      next.push_back(std::move(row));
    }
  }
  fork.override_sets = std::move(next);
}

// The override sets: the fixed `set` values times the cartesian product of `grid`.
void read_fork_overrides(const Ctx& ctx, const ForkBlocks& blocks, ForkDecl& fork) {
  std::vector<std::pair<std::string, nlohmann::json>> fixed;
  std::map<std::string, SourceLoc> seen;
  auto check_key = [&](const Leaf& leaf) {
    if (leaf.key.rfind("model.", 0) == 0) {
      fail(leaf.key_loc, leaf.key +
                             " cannot change in a fork (the checkpoint holds the parent's "
                             "model); sweep it in grid: instead");
    }
    if (!seen.emplace(leaf.key, leaf.key_loc).second) {
      fail(leaf.key_loc, leaf.key + " is given twice in this forks entry; keep one");
    }
  };
  if (blocks.have_set) {
    for (const Leaf& leaf : leaves_of(ctx, blocks.set, "forks.set")) {
      check_key(leaf);
      fixed.emplace_back(leaf.key,
                         ctx.schema.coerce(*ctx.schema.find(leaf.key), leaf.value, leaf.value_loc));
    }
  }
  if (!blocks.have_set && !blocks.have_grid) {
    fail(fork.loc,
         "a forks entry changes something: give set: {key: value} and/or grid: "
         "{key: [values]} (a fork without changes is `amptune fork RUN --epoch N`)");
  }
  fork.override_sets.push_back(fixed);
  if (!blocks.have_grid) return;
  for (const Leaf& leaf : leaves_of(ctx, blocks.grid, "forks.grid")) {
    check_key(leaf);
    const auto values = axis_values(ctx, leaf, "forks.grid");
    if (fork.override_sets.size() * values.size() > kMaxCells) {
      fail(leaf.key_loc, "this forks entry's grid expands to more than " +
                             std::to_string(kMaxCells) +
                             " override sets; split it into several entries or use fewer "
                             "values");
    }
    multiply_override_sets(fork, leaf.key, values);
  }
}

// The cells `from.where` selects; each must train past `from.epoch`.
void match_fork_cells(const Ctx& ctx, const YAML::Node& from, const std::vector<Cell>& cells,
                      ForkDecl& fork) {
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
}

ForkDecl parse_fork_entry(const Ctx& ctx, const YAML::Node& entry, const std::vector<Cell>& cells) {
  ForkDecl fork;
  fork.loc = ctx.loc(entry);
  if (!entry.IsMap()) fail(fork.loc, "a forks entry is a mapping, " + kForkExample);
  const ForkBlocks blocks = read_fork_keys(ctx, entry, fork);
  if (!blocks.have_from || !blocks.from.IsMap()) {
    fail(fork.loc, "a forks entry needs from: {where: {key: value}, epoch: N}");
  }
  read_fork_from(ctx, blocks.from, fork);
  read_fork_overrides(ctx, blocks, fork);
  match_fork_cells(ctx, blocks.from, cells, fork);
  return fork;
}

// `forks:` entries (see sweep.h), checked against the expanded cells.
std::vector<ForkDecl> parse_forks(const Ctx& ctx, const YAML::Node& node, const SourceLoc& loc,
                                  const std::vector<Cell>& cells) {
  if (!node.IsSequence() || node.size() == 0) {
    fail(loc,
         "forks must be a list of fork entries, " + kForkExample + ", got " + yaml_brief(node));
  }
  size_t planned_forks = 0;  // over all entries, capped like cells
  std::vector<ForkDecl> out;
  for (const auto& entry : node) {
    ForkDecl fork = parse_fork_entry(ctx, entry, cells);
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

// A cell's hash, and the key that tells cells apart. Every cell's hash comes from one template
// of the base (the keys the axes set) with the cell's values spliced in: most of a large sweep's
// planning time was building and printing each cell's identity JSON (docs/PERFORMANCE.md
// "Planning large sweeps").
class CellIdentity {
 public:
  CellIdentity(const Schema& schema, const Config& base, const std::vector<std::string>& axis_keys)
      : axis_keys_(axis_keys),
        hash_template_(base.hash_template(axis_keys)),
        values_(axis_keys.size()) {
    // Swept paths of data (identity: content) are not in the config hash, but cells that read
    // different paths are different cells (their data, and so their runs, may differ).
    for (const std::string& key : axis_keys) {
      if (schema.find(key)->identity == KeySpec::Identity::kContent) content_axes_.push_back(key);
    }
  }

  // Sets `hash` to work.hash() and returns it followed by the swept paths of data.
  std::string key(const Config& work, std::string& hash) {
    if (hash_template_) {
      for (size_t k = 0; k < axis_keys_.size(); ++k) values_[k] = &work.at(axis_keys_[k]);
      hash = hash_template_->hash(values_);
    } else {
      hash = work.hash();
    }
    std::string out = hash;
    for (const std::string& content : content_axes_) out += "|" + work.at(content).dump();
    return out;
  }

 private:
  const std::vector<std::string>& axis_keys_;
  const std::optional<HashTemplate> hash_template_;
  std::vector<const nlohmann::json*> values_;  // reused: the values of axis_keys_ in a cell
  std::vector<std::string> content_axes_;
};

// Reads one sweep file into a Sweep, a top-level block per member; parse_sweep runs them in
// order. What a later block needs (the blocks by key, the axes, the swept keys, the exclude
// entries) is kept here between the steps.
class SweepReader {
 public:
  SweepReader(const std::string& yaml_text, const std::string& origin)
      : schema_(Schema::builtin()), ctx_{origin, schema_} {
    sweep_.source_path = origin;
    sweep_.yaml_text = yaml_text;
  }

  // The top-level keys, in file order (the order of grid / zip / repeat decides the axis order).
  void read_top_level_keys() {
    for (const auto& item : load_root()) {
      const std::string key = key_text(ctx_, item.first);
      const SourceLoc loc = ctx_.loc(item.first);
      if (std::find(kTopLevel.begin(), kTopLevel.end(), key) == kTopLevel.end()) {
        fail_unknown_top_level_key(key, loc);
      }
      if (block_loc_.count(key)) {
        fail(loc, "top-level key " + key + " is given twice (first at " + block_loc_[key].str() +
                      "); keep one");
      }
      block_loc_[key] = loc;
      blocks_.emplace_back(key, item.second);
    }
  }

  void read_name() {
    const YAML::Node name = block("name");
    if (!name.IsDefined()) {
      fail(SourceLoc{ctx_.file},
           "the sweep has no name; add `name: my_sweep` (letters, digits, _ . -)");
    }
    static const std::regex kName("[A-Za-z0-9_.-]+");
    if (!name.IsScalar() || !std::regex_match(name.Scalar(), kName)) {
      fail(name.IsNull() ? block_loc("name") : ctx_.loc(name),
           "name must be letters, digits, '_', '.' or '-' (it names runs and rows), got " +
               yaml_brief(name));
    }
    sweep_.name = name.Scalar();
  }

  void read_description() {
    const YAML::Node description = block("description");
    if (!description.IsDefined() || description.IsNull()) return;
    if (!description.IsScalar()) {
      fail(ctx_.loc(description), "description must be text, got " + yaml_brief(description));
    }
    sweep_.description = description.Scalar();
  }

  void read_base() {
    const YAML::Node base = block("base");
    if (!base.IsDefined() || base.IsNull()) return;
    for (const Leaf& leaf : leaves_of(ctx_, base, "base")) {
      sweep_.base.set(leaf.key,
                      schema_.coerce(*schema_.find(leaf.key), leaf.value, leaf.value_loc));
      sweep_.key_locs[leaf.key] = leaf.key_loc;
    }
  }

  // Axes in declaration order; repeat's seeds are filled in after --set (they start at seed).
  void read_axes() {
    for (const auto& [key, node] : blocks_) {
      if (key == "grid") {
        read_grid(node, block_loc(key));
      } else if (key == "zip") {
        read_zip(node, block_loc(key));
      } else if (key == "repeat") {
        declare_repeat(node, block_loc(key));
      }
    }
  }

  // --set changes base only; a swept key would be overwritten by every cell.
  void apply_sets(const std::vector<std::string>& sets) {
    for (const std::string& text : sets) {
      auto [key, value] = split_assignment(text);
      const SourceLoc where{"--set " + text};
      auto it = swept_.find(key);
      if (it != swept_.end() && !(key == "seed" && repeat_is_count())) {
        fail(where, key + " is swept by " + it->second.first + " at " + it->second.second.str() +
                        "; --set changes the base only; to run some of its cells use --only " +
                        key + "=<value>");
      }
      sweep_.base.set_yaml(key, value, where);
      sweep_.key_locs[key] = where;
    }
  }

  // repeat: a count (seeds seed+0, seed+1, ... of the base after --set) or a list of seeds.
  void read_repeat_seeds() {
    if (repeat_axis_ == SIZE_MAX) return;
    Axis& axis = axes_[repeat_axis_];
    const KeySpec& seed = *schema_.find("seed");
    const SourceLoc loc = repeat_node_.IsNull() ? block_loc("repeat") : ctx_.loc(repeat_node_);
    std::vector<std::vector<SourceLoc>> locs;
    if (repeat_is_count()) {
      KeySpec count{"repeat", "int", "", {}, {}, 1.0, std::nullopt};
      const int64_t n = schema_.coerce(count, repeat_node_, loc).get<int64_t>();
      if (n > static_cast<int64_t>(kMaxCells)) fail(loc, "repeat is too large");
      const int64_t first = sweep_.base.at("seed").get<int64_t>();
      for (int64_t i = 0; i < n; ++i) {
        axis.rows.push_back({schema_.coerce(seed, nlohmann::json(first + i), loc)});
        locs.push_back({loc});
      }
    } else if (repeat_node_.IsSequence() && repeat_node_.size() > 0) {
      for (const auto& item : repeat_node_) {
        const SourceLoc item_loc = ctx_.loc(item);
        axis.rows.push_back({schema_.coerce(seed, item, item_loc)});
        locs.push_back({item_loc});
      }
    } else {
      fail(loc,
           "repeat must be a count (e.g. 3: seeds seed+0..seed+2) or a non-empty list of "
           "seeds (e.g. [0, 7]), got " +
               yaml_brief(repeat_node_));
    }
    check_unique_rows(axis, locs);
  }

  void read_exclude() {
    const YAML::Node exclude = block("exclude");
    if (!exclude.IsDefined() || exclude.IsNull()) return;
    if (!exclude.IsSequence()) {
      fail(block_loc("exclude"),
           "exclude must be a list of partial cells, e.g. exclude: "
           "[{optim.lr: 0.2, data.batch_size: 64}], got " +
               yaml_brief(exclude));
    }
    for (size_t e = 0; e < exclude.size(); ++e) {
      excludes_.push_back(read_exclude_entry(exclude[e], "exclude entry " + std::to_string(e + 1)));
    }
  }

  // Expansion: mixed-radix counting with the last axis fastest.
  void expand_cells() {
    const size_t total = count_cells();
    // One working config: every cell sets the same keys, so each cell's values overwrite the
    // previous cell's and no per-cell copy of the base is made.
    auto shared_base = std::make_shared<const Config>(sweep_.base);
    Config work = sweep_.base;
    CellIdentity identity(schema_, work, sweep_.axis_keys);
    std::unordered_map<std::string, size_t> by_hash;
    by_hash.reserve(total);
    for (size_t n = 0; n < total; ++n) {
      Cell cell;
      cell.base = shared_base;
      nlohmann::json flat = set_cell_values(n, work, cell);
      if (excluded(flat)) continue;
      cell.index = static_cast<int>(sweep_.cells.size());
      auto [it, inserted] = by_hash.emplace(identity.key(work, cell.hash), sweep_.cells.size());
      if (!inserted) fail_duplicate_cells(sweep_.cells[it->second], cell);
      sweep_.cells.push_back(std::move(cell));
    }
    check_exclude_hits(total);
  }

  void read_forks() {
    const YAML::Node forks = block("forks");
    if (!forks.IsDefined()) return;
    sweep_.forks = parse_forks(ctx_, forks, block_loc("forks"), sweep_.cells);
  }

  // prune: (schemas/sweep.yaml), nested ({rule: asha}) or dotted (prune.rule under the block).
  void read_prune() {
    const YAML::Node node = block("prune");
    if (!node.IsDefined() || node.IsNull()) return;
    const Schema& schema = Schema::sweep_blocks();
    const Ctx ctx{ctx_.file, schema};
    if (!node.IsMap()) {
      fail(ctx.loc(node),
           "prune must be a mapping of its keys (rule, metric, grace_epochs, eta, "
           "min_cells), got " +
               yaml_brief(node));
    }
    std::vector<Leaf> leaves;
    std::map<std::string, SourceLoc> seen;
    collect_leaves(ctx, node, "prune", "prune", leaves, seen);
    PruneBlock p;
    p.loc = block_loc("prune");
    p.metric_loc = p.loc;
    auto value = [&](const std::string& key) {
      const KeySpec& spec = *schema.find(key);
      for (const Leaf& leaf : leaves) {
        if (leaf.key == key) return schema.coerce(spec, leaf.value, leaf.value_loc);
      }
      return spec.default_value;
    };
    const std::string rule = value("prune.rule").get<std::string>();  // one of its choices
    const std::optional<PruneRule> parsed = parse_prune_rule(rule);
    if (!parsed) fail(p.loc, "prune.rule: no rule named '" + rule + "'");
    p.rule = *parsed;
    p.metric = value("prune.metric").get<std::string>();
    p.grace_epochs = value("prune.grace_epochs").get<int64_t>();
    p.eta = value("prune.eta").get<int64_t>();
    p.min_cells = value("prune.min_cells").get<int64_t>();
    for (const Leaf& leaf : leaves) {
      if (leaf.key == "prune.metric") p.metric_loc = leaf.value_loc;
    }
    sweep_.prune = p;
  }

  // tune: (schemas/sweep.yaml; docs/TUNE.md): its own keys against the sweep-block schema, its
  // reference: and start: against the config schema, as base: is read.
  void read_tune() {
    const YAML::Node node = block("tune");
    if (!node.IsDefined()) return;
    const SourceLoc loc = block_loc("tune");
    for (const char* other : {"grid", "zip", "exclude", "repeat", "forks", "prune"}) {
      if (block(other).IsDefined()) {
        fail(block_loc(other),
             std::string("a sweep with a tune: block (line ") + std::to_string(loc.line) +
                 ") makes its own runs from base: " + other +
                 " cannot go with it; put the tune: block in a file of " + "its own");
      }
    }
    const Ctx ctx{ctx_.file, Schema::sweep_blocks()};
    if (!node.IsMap()) {
      fail(node.IsNull() ? loc : ctx.loc(node),
           "tune must be a mapping of its keys (metric, tolerance, reference, start, moves, "
           "fork_from, budget, halving, objective, diagnose, confirm, reference_repeats), got " +
               yaml_brief(node));
    }
    TuneBlock t;
    t.loc = t.metric_loc = t.budget_loc = t.start_loc = t.repeats_loc = loc;
    TuneLeaves read(Schema::sweep_blocks(), loc);
    read_tune_leaves(node, ctx, t, read);
    read_tune_values(t, read);
    sweep_.tune = std::move(t);
  }

  // The tune block's own keys as read (its reference: and start: go into the block directly).
  struct TuneLeaves {
    TuneLeaves(const Schema& s, const SourceLoc& block) : schema(s), loc(block) {}
    const Schema& schema;
    SourceLoc loc;  // the block's
    std::vector<Leaf> leaves;
    std::map<std::string, SourceLoc> seen;
    nlohmann::json canonical = nlohmann::json::object();
    nlohmann::json value(const std::string& key) const {
      const KeySpec& spec = *schema.find(key);
      for (const Leaf& leaf : leaves) {
        if (leaf.key == key) return schema.coerce(spec, leaf.value, leaf.value_loc);
      }
      return spec.default_value;
    }
    SourceLoc where(const std::string& key) const {
      for (const Leaf& leaf : leaves) {
        if (leaf.key == key) return leaf.value_loc;
      }
      return loc;
    }
  };

  void read_tune_leaves(const YAML::Node& node, const Ctx& ctx, TuneBlock& t, TuneLeaves& read) {
    bool have_reference = false, have_start = false;
    for (const auto& item : node) {
      const std::string word = key_text(ctx, item.first);
      if (word == "reference" || word == "start") {
        TuneBlock::Overrides& overrides = word == "start" ? t.start : t.reference;
        (word == "start" ? have_start : have_reference) = true;
        if (word == "start") t.start_loc = ctx.loc(item.first);
        if (item.second.IsNull()) continue;  // the base itself
        for (const Leaf& leaf : leaves_of(ctx_, item.second, "tune." + word)) {
          overrides.emplace_back(
              leaf.key, schema_.coerce(*schema_.find(leaf.key), leaf.value, leaf.value_loc));
          read.canonical[word][leaf.key] = overrides.back().second;
        }
        continue;
      }
      YAML::Node one(YAML::NodeType::Map);
      one.force_insert(item.first, item.second);
      collect_leaves(ctx, one, "tune", "tune", read.leaves, read.seen);
    }
    if (!have_reference || !have_start) {
      fail(read.loc, std::string("tune needs ") + (have_reference ? "start" : "reference") +
                         ": the config keys (over base) of " +
                         (have_reference ? "the setting the search starts from, e.g. start: "
                                           "{amp.opt_level: O2}"
                                         : "the fp32 run it compares with, e.g. reference: "
                                           "{amp.opt_level: O0}"));
    }
  }

  // tune.tolerance: exactly one of abs and rel, > 0.
  void read_tolerance(TuneBlock& t, const TuneLeaves& read) {
    t.tolerance_abs = read.value("tune.tolerance.abs").get<double>();
    t.tolerance_rel = read.value("tune.tolerance.rel").get<double>();
    const bool abs_given = read.seen.count("tune.tolerance.abs") > 0;
    const bool rel_given = read.seen.count("tune.tolerance.rel") > 0;
    if (abs_given == rel_given) {
      fail(abs_given ? read.where("tune.tolerance.rel") : read.loc,
           abs_given ? "tune.tolerance takes abs or rel, not both"
                     : "tune needs a tolerance: tolerance: {abs: 0.01} (metric units) or "
                       "tolerance: {rel: 0.01} (a share of the reference's value)");
    }
    const std::string key = abs_given ? "tune.tolerance.abs" : "tune.tolerance.rel";
    if (!(read.value(key).get<double>() > 0)) {
      fail(read.where(key), key + " must be > 0, got " + read.value(key).dump() +
                                " (a run never equals the reference exactly)");
    }
  }

  // tune.moves: at least one, each a choice of the schema (which names the allowable moves).
  void read_tune_moves(TuneBlock& t, const TuneLeaves& read) {
    for (const std::string& word : read.value("tune.moves").get<std::vector<std::string>>()) {
      const std::optional<TuneMoveKind> move = parse_tune_move_kind(word);
      if (!move || !is_allowable(*move)) {
        fail(read.where("tune.moves"), "tune.moves: no move named '" + word + "'");
      }
      t.moves.push_back(*move);
    }
    if (t.moves.empty()) fail(read.where("tune.moves"), "tune.moves must name at least one move");
  }

  void read_tune_values(TuneBlock& t, TuneLeaves& read) {
    t.metric = read.value("tune.metric").get<std::string>();
    t.metric_loc = read.where("tune.metric");
    read_tolerance(t, read);
    read_tune_moves(t, read);
    const std::string fork_from = read.value("tune.fork_from").get<std::string>();
    if (fork_from != "auto") {
      static const std::regex kEpoch("[0-9]{1,6}");
      if (!std::regex_match(fork_from, kEpoch)) {
        fail(read.where("tune.fork_from"),
             "tune.fork_from must be auto or an epoch number (0-based), got '" + fork_from + "'");
      }
      t.fork_from = std::stoi(fork_from);
    }
    t.budget_epochs = read.value("tune.budget.epochs").get<int64_t>();
    t.budget_loc = read.where("tune.budget.epochs");
    t.eta = read.value("tune.halving.eta").get<int64_t>();
    t.min_epochs = read.value("tune.halving.min_epochs").get<int64_t>();
    const std::string objective = read.value("tune.objective").get<std::string>();
    const std::optional<Objective> parsed = parse_objective(objective);  // one of its choices
    if (!parsed) {
      fail(read.where("tune.objective"), "tune.objective: no objective named '" + objective + "'");
    }
    t.objective = *parsed;
    t.diagnose_batches = read.value("tune.diagnose.batches").get<int64_t>();
    t.cosine_min = read.value("tune.diagnose.cosine_min").get<double>();
    t.confirm = read.value("tune.confirm").get<bool>();
    t.reference_repeats = read.value("tune.reference_repeats").get<int64_t>();
    t.repeats_loc = read.where("tune.reference_repeats");
    for (const KeySpec& spec : read.schema.keys()) {
      if (spec.key.rfind("tune.", 0) == 0) read.canonical[spec.key] = read.value(spec.key);
    }
    t.canonical = read.canonical.dump();
  }

  Sweep take() { return std::move(sweep_); }

 private:
  YAML::Node load_root() const {
    YAML::Node root;
    try {
      root = YAML::Load(sweep_.yaml_text);
    } catch (const YAML::Exception& e) {
      fail(SourceLoc::from_mark(ctx_.file, e.mark.line, e.mark.column),
           "YAML syntax error: " + e.msg + " (check indentation, brackets and quotes here)");
    }
    if (!root.IsDefined() || root.IsNull()) {
      fail(SourceLoc{ctx_.file},
           "the sweep file is empty; it needs at least `name:` (docs/CONFIG.md)");
    }
    if (!root.IsMap()) {
      fail(ctx_.loc(root), "a sweep file is a mapping with the keys " + join(kTopLevel, ", ") +
                               ", got " + yaml_brief(root));
    }
    return root;
  }

  [[noreturn]] void fail_unknown_top_level_key(const std::string& key, const SourceLoc& loc) const {
    std::string message = "unknown top-level key " + key;
    std::string close = suggest_among(key, kTopLevel);
    if (schema_.find(key) || schema_.is_group(key)) {
      message += "; config keys go under base: (or grid:/zip: to sweep them)";
    } else if (!close.empty()) {
      message += "; did you mean " + close + "?";
    } else {
      message += "; the top-level keys are " + join(kTopLevel, ", ");
    }
    fail(loc, message);
  }

  // The node of a top-level key; IsDefined() is false when the file does not have it.
  YAML::Node block(const std::string& key) const {
    for (const auto& b : blocks_) {
      if (b.first == key) return b.second;
    }
    return YAML::Node(YAML::NodeType::Undefined);
  }

  // Where a top-level key is; no position when the file does not have it.
  SourceLoc block_loc(const std::string& key) const {
    auto it = block_loc_.find(key);
    return it != block_loc_.end() ? it->second : SourceLoc{};
  }

  void read_grid(const YAML::Node& node, const SourceLoc& loc) {
    if (!node.IsMap() || node.size() == 0) {
      fail(loc,
           "grid must map swept keys to lists of values, e.g. grid: {optim.lr: [0.05, 0.1]}"
           ", got " +
               yaml_brief(node));
    }
    for (const Leaf& leaf : leaves_of(ctx_, node, "grid")) add_axis(parse_grid_key(ctx_, leaf));
  }

  void read_zip(const YAML::Node& node, const SourceLoc& loc) {
    if (!node.IsSequence() || node.size() == 0) {
      fail(loc,
           "zip must be a list of groups, e.g. zip: [{optim.lr: [0.1, 0.2], "
           "data.batch_size: [128, 256]}], got " +
               yaml_brief(node));
    }
    for (size_t g = 0; g < node.size(); ++g) add_axis(parse_zip_group(ctx_, node[g], g + 1));
  }

  // The repeat axis takes its place now; its seeds come in read_repeat_seeds.
  void declare_repeat(const YAML::Node& node, const SourceLoc& loc) {
    if (!schema_.find("seed")) fail(loc, "repeat needs the config key seed in the schema");
    repeat_node_ = node;
    repeat_axis_ = axes_.size();
    add_axis(Axis{"repeat", {"seed"}, {loc}, {}});
  }

  bool repeat_is_count() const { return repeat_axis_ != SIZE_MAX && repeat_node_.IsScalar(); }

  void add_axis(Axis axis) {
    for (size_t k = 0; k < axis.keys.size(); ++k) {
      auto it = swept_.find(axis.keys[k]);
      if (it != swept_.end()) {
        fail(axis.key_locs[k], axis.keys[k] + " is swept twice: in " + it->second.first + " at " +
                                   it->second.second.str() + " and in " + axis.section +
                                   "; sweep each key once (keys that advance together go in one "
                                   "zip group)");
      }
      swept_.emplace(axis.keys[k], std::make_pair(axis.section, axis.key_locs[k]));
      sweep_.key_locs[axis.keys[k]] = axis.key_locs[k];
      sweep_.axis_keys.push_back(axis.keys[k]);
    }
    axes_.push_back(std::move(axis));
  }

  ExcludeEntry read_exclude_entry(const YAML::Node& entry, const std::string& name) const {
    if (!entry.IsMap() || entry.size() == 0) {
      fail(ctx_.loc(entry),
           name + " must be a non-empty mapping of swept keys to values, got " + yaml_brief(entry));
    }
    ExcludeEntry parsed{ctx_.loc(entry), {}, 0};
    for (const Leaf& leaf : leaves_of(ctx_, entry, name)) {
      if (!swept_.count(leaf.key)) {
        std::string message = name + " names " + leaf.key + ", which is not swept; exclude " +
                              "can only name swept keys: " + join(sweep_.axis_keys, ", ");
        std::string close = suggest_among(leaf.key, sweep_.axis_keys);
        if (!close.empty()) message += " (did you mean " + close + "?)";
        fail(leaf.key_loc, message);
      }
      nlohmann::json value = schema_.coerce(*schema_.find(leaf.key), leaf.value, leaf.value_loc);
      const auto values = swept_values(leaf.key);
      if (std::find(values.begin(), values.end(), value_text(value)) == values.end()) {
        fail(leaf.value_loc, name + ": " + leaf.key + "=" + value_text(value) +
                                 " is not one of its swept values " + join(values, ", "));
      }
      parsed.match.emplace_back(leaf.key, std::move(value));
    }
    return parsed;
  }

  // The values an axis gives `key`, as text.
  std::vector<std::string> swept_values(const std::string& key) const {
    for (const Axis& axis : axes_) {
      for (size_t k = 0; k < axis.keys.size(); ++k) {
        if (axis.keys[k] != key) continue;
        std::vector<std::string> out;
        for (const auto& row : axis.rows) out.push_back(value_text(row[k]));
        return out;
      }
    }
    return {};
  }

  // The number of cells before exclude: the product of the axes' lengths.
  size_t count_cells() const {
    size_t total = 1;
    for (const Axis& axis : axes_) {
      total *= axis.rows.size();
      if (total > kMaxCells) {
        fail(SourceLoc{ctx_.file}, "the sweep expands to more than " + std::to_string(kMaxCells) +
                                       " cells; split it or use zip instead of grid");
      }
    }
    return total;
  }

  // Sets cell n's swept values in `work` and `cell`; returns them as one flat object.
  nlohmann::json set_cell_values(size_t n, Config& work, Cell& cell) const {
    cell.axes = nlohmann::ordered_json::object();
    size_t rest = n;
    std::vector<size_t> position(axes_.size());
    for (size_t a = axes_.size(); a-- > 0;) {
      position[a] = rest % axes_[a].rows.size();
      rest /= axes_[a].rows.size();
    }
    nlohmann::json flat = nlohmann::json::object();
    for (size_t a = 0; a < axes_.size(); ++a) {
      for (size_t k = 0; k < axes_[a].keys.size(); ++k) {
        const nlohmann::json& value = axes_[a].rows[position[a]][k];
        work.set(axes_[a].keys[k], value);
        cell.axes[axes_[a].keys[k]] = nlohmann::ordered_json(value);
        flat[axes_[a].keys[k]] = value;
      }
    }
    return flat;
  }

  // Whether an exclude entry drops the cell; counts each entry's hits.
  bool excluded(nlohmann::json& flat) {
    bool dropped = false;
    for (ExcludeEntry& entry : excludes_) {
      bool all = true;
      for (const auto& [key, value] : entry.match) all = all && flat[key] == value;
      if (all) {
        ++entry.hits;
        dropped = true;
      }
    }
    return dropped;
  }

  [[noreturn]] void fail_duplicate_cells(const Cell& first, const Cell& second) const {
    fail(SourceLoc{ctx_.file}, "duplicate cell: cells " + std::to_string(first.index) + " (" +
                                   first.label() + ") and " + std::to_string(second.index) + " (" +
                                   second.label() +
                                   ") have the same config; remove one of the values");
  }

  void check_exclude_hits(size_t total) const {
    if (sweep_.cells.empty()) {
      fail(block_loc("exclude"),
           "exclude drops all " + std::to_string(total) + " cells; nothing would run");
    }
    for (size_t e = 0; e < excludes_.size(); ++e) {
      if (excludes_[e].hits == 0) {
        log::warn(excludes_[e].loc.prefix() + "exclude entry " + std::to_string(e + 1) +
                  " matches no cell");
      }
    }
  }

  const Schema& schema_;
  const Ctx ctx_;
  Sweep sweep_;
  std::vector<std::pair<std::string, YAML::Node>> blocks_;  // the top-level keys, in file order
  std::map<std::string, SourceLoc> block_loc_;
  std::vector<Axis> axes_;
  std::map<std::string, std::pair<std::string, SourceLoc>> swept_;  // key -> (section, where)
  size_t repeat_axis_ = SIZE_MAX;  // index in axes_, SIZE_MAX without repeat:
  YAML::Node repeat_node_;
  std::vector<ExcludeEntry> excludes_;
};

}  // namespace

// The blocks are read in the order they depend on each other: --set changes base and so the
// first seed of repeat; exclude names the swept values; forks select among the cells. A new
// top-level block is its key in kTopLevel, one read_* member of SweepReader and one call here.
Sweep parse_sweep(const std::string& yaml_text, const std::string& origin,
                  const std::vector<std::string>& sets) {
  SweepReader reader(yaml_text, origin);
  reader.read_top_level_keys();
  reader.read_name();
  reader.read_description();
  reader.read_base();
  reader.read_axes();  // grid, zip and repeat, in file order
  reader.apply_sets(sets);
  reader.read_repeat_seeds();
  reader.read_exclude();
  reader.expand_cells();
  reader.read_forks();
  reader.read_prune();
  reader.read_tune();
  return reader.take();
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
