// Inputs from elsewhere (docs/SECURITY.md): databases merged from other machines or edited by
// hand, and the names they carry. The real binary on crafted databases: paths outside a run's own
// checkpoint folder are never deleted, and names with terminal escapes print escaped.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "integration/harness.h"
#include "store/store.h"
#include "unit/store/raw_exec.h"

namespace amptune::testing {
namespace {

namespace fs = std::filesystem;

// SQL on a database through a raw connection (the crafting a hostile file needs).
void sql(const std::string& db, const std::string& statements) { store::raw_exec(db, statements); }

// A database whose epoch rows name files elsewhere (a hostile shard, or a row edited by hand):
// merge does not take them over as checkpoints, and a resume that finds them invalid and starts
// again deletes nothing but its own files.
TEST(Untrusted, CheckpointPathsOutsideTheRunsFolderAreNeverDeleted) {
  const TinySweep f = make_tiny_sweep(quick_tiny("", 3));
  Result r = run_amptune({"run", f.yaml, "--stop-after-epoch", "1", "-q"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string victim = f.dir + "/victim.txt", other = f.dir + "/elsewhere/epoch_0000.pt";
  write_file(victim, "not amptune's");
  write_file(other, "not amptune's either");
  sql(f.db, "UPDATE epochs SET checkpoint_path = '" + victim + "' WHERE epoch = 1;"
            "UPDATE epochs SET checkpoint_path = '" + other + "' WHERE epoch = 0;");

  r = run_amptune({"merge", f.db, "--into", "results/merged.sqlite"}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("2 recorded checkpoint paths lie outside their run's own checkpoint folder"),
            std::string::npos)
      << r.err;
  for (const auto& e : epochs_of(f.dir + "/results/merged.sqlite", "1")) {
    EXPECT_FALSE(e.checkpoint) << "epoch " << e.epoch << " kept a foreign checkpoint";
  }

  // The rows' files fail their recorded size and sha256: resume falls back to nothing, starts
  // again and forgets the rows, leaving the files.
  const std::string run = store::Store(f.db).runs("tiny").at(0).name;
  r = run_amptune({"resume", run}, f.dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("no valid checkpoint left"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("not deleting " + victim), std::string::npos) << r.err;
  EXPECT_EQ(read_file(victim), "not amptune's");
  EXPECT_EQ(read_file(other), "not amptune's either");
  EXPECT_EQ(epochs_of(f.db, run).size(), 3u);
}

// Names from a merged database reach the terminal escaped: no colour change, no cursor move.
TEST(Untrusted, NamesWithTerminalEscapesPrintEscaped) {
  const TinySweep f = make_tiny_sweep(quick_tiny("", 1));
  ASSERT_EQ(run_amptune({"run", f.yaml, "-q"}, f.dir).exit_code, 0);
  sql(f.db, "UPDATE sweeps SET name = 'tiny' || char(27) || '[2J';"
            "UPDATE runs SET label = 'x' || char(27) || ']0;title' || char(7),"
            " name = 'r' || char(27) || '[31m' WHERE id = 1;");
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"list"}, {"show", "1"}, {"status"}}) {
    const Result r = run_amptune(args, f.dir);
    ASSERT_EQ(r.exit_code, 0) << args[0] << ": " << r.err;
    EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << args[0] << " printed an escape";
    EXPECT_EQ(r.out.find('\x07'), std::string::npos) << args[0];
    EXPECT_NE(r.out.find("\\x1b"), std::string::npos) << args[0] << ":\n" << r.out;
  }
}

// A database from elsewhere whose epochs table is a view spelled "EPOCHS" (SQLite reads it for
// epochs) that returns rows forever: merge and status over several files refuse it, exit 5,
// naming the file and the table, instead of reading it forever; the target stays as it was.
TEST(Untrusted, AViewInPlaceOfATableIsRefusedWhateverItsCase) {
  const TinySweep f = make_tiny_sweep(quick_tiny("", 1));
  ASSERT_EQ(run_amptune({"run", f.yaml, "-q"}, f.dir).exit_code, 0);
  ASSERT_EQ(run_amptune({"merge", f.db, "--into", "results/into.sqlite"}, f.dir).exit_code, 0);
  const std::string crafted = f.dir + "/results/crafted.sqlite";
  fs::copy_file(f.db, crafted);
  sql(crafted, "PRAGMA foreign_keys = OFF;"
               "DROP TABLE loss_scale_events; DROP TABLE metrics; DROP TABLE epochs;"
               "CREATE VIEW EPOCHS AS WITH RECURSIVE x(n) AS (SELECT 1 UNION ALL "
               "SELECT n + 1 FROM x) SELECT n AS run_id, n AS epoch, n AS global_step FROM x");
  const std::vector<std::vector<std::string>> commands = {
      {"merge", crafted, "--into", "results/into.sqlite"},
      {"status", "--db", f.db, crafted},
  };
  for (const auto& args : commands) {
    const pid_t pid = spawn_amptune(args, f.dir);
    StopOnExit stop(pid);
    EXPECT_EQ(wait_exit_code(pid, 60), 5) << args[0];
    const std::string err = read_file(f.dir + "/child.err");
    EXPECT_NE(err.find(crafted + " cannot be merged: epochs is a view, not a table (\"EPOCHS\""),
              std::string::npos)
        << args[0] << ": " << err;
  }
  EXPECT_EQ(epochs_of(f.dir + "/results/into.sqlite", "1").size(), 1u);
  EXPECT_EQ(store::Store(f.dir + "/results/into.sqlite").runs().size(), 1u);
}

// A shard whose rows break the schema (a run status outside its CHECK) or hold an epoch past an
// int: `amptune merge` exits 5 naming the input, the table, the row and the column, and the
// target is unchanged. Before, the first said only "CHECK constraint failed: ..." and the second
// was merged, for every reader of the target to trip on.
TEST(Untrusted, MergeRefusesRowsBreakingTheSchemaOrTheReadersRange) {
  const TinySweep f = make_tiny_sweep(quick_tiny("", 1));
  ASSERT_EQ(run_amptune({"run", f.yaml, "-q"}, f.dir).exit_code, 0);
  const std::string into = f.dir + "/results/into.sqlite";
  ASSERT_EQ(run_amptune({"merge", f.db, "--into", into}, f.dir).exit_code, 0);
  const std::string crafted = f.dir + "/results/crafted.sqlite";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"PRAGMA ignore_check_constraints = ON; UPDATE runs SET status = 'bogus', "
       "config_hash = 'another1', name = 'other'",
       "table runs, row 1, column status breaks the schema (CHECK constraint failed: status IN"},
      {"PRAGMA foreign_keys = OFF; UPDATE epochs SET epoch = 2147483648",
       "table epochs, row 1, column epoch holds 2147483648, outside [0, 2147483646]"},
  };
  for (const auto& [change, expected] : cases) {
    fs::copy_file(f.db, crafted, fs::copy_options::overwrite_existing);
    sql(crafted, change);
    const Result r = run_amptune({"merge", crafted, "--into", into}, f.dir);
    EXPECT_EQ(r.exit_code, 5) << r.err;
    EXPECT_NE(r.err.find(crafted + ": " + expected), std::string::npos) << r.err;
  }
  EXPECT_EQ(store::Store(into).runs().size(), 1u);
  EXPECT_EQ(epochs_of(into, "1").size(), 1u);
}

// Values of another type or shape in a database edited or crafted, opened directly: show prints
// a number where a setting's string was, and exits 5 naming the table, the row and the column
// for a config that is not JSON or a prune decision's compared_json of another shape (it
// crashed with exit 1).
TEST(Untrusted, ShowRefusesValuesOfAnotherShape) {
  const TinySweep f = make_tiny_sweep(quick_tiny("", 1));
  ASSERT_EQ(run_amptune({"run", f.yaml, "-q"}, f.dir).exit_code, 0);
  sql(f.db, "UPDATE runs SET backend = 3");
  Result shown = run_amptune({"show", "1"}, f.dir);
  EXPECT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_NE(shown.out.find("amp backend 3"), std::string::npos) << shown.out;
  sql(f.db, "PRAGMA ignore_check_constraints = ON; UPDATE runs SET config_json = 'oops'");
  shown = run_amptune({"show", "1", "--config"}, f.dir);
  EXPECT_EQ(shown.exit_code, 5) << shown.err;
  EXPECT_NE(shown.err.find("table runs, row 1, column config_json is not JSON"),
            std::string::npos)
      << shown.err;
  EXPECT_EQ(shown.out, "");
  sql(f.db, "UPDATE runs SET config_json = '{}';"
            "INSERT INTO prune_decisions (run_id, epoch, action, rule, metric, compared_json, "
            "decided_at) VALUES (1, 0, 'stop', 'asha', 'acc1', '[{\"run_id\": \"1\", "
            "\"value\": 0.5}]', '2026-01-01T00:00:00.000Z')");
  const Result r = run_amptune({"show", "1"}, f.dir);
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_NE(r.err.find("table prune_decisions, row 1, column compared_json entry 0"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.out, "");
}

// The bytes a terminal obeys: C0 controls (ESC, CR, BEL, ...; not CSV's line end "\r\n"), DEL,
// the C1 controls U+0080 - U+009F as UTF-8 (0xc2 0x80 - 0xc2 0x9f), and bytes that are not UTF-8
// (0xff).
bool has_raw_control(const std::string& text) {
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') continue;
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f || c == 0xff) return true;
    if (c == 0xc2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
      return true;
    }
  }
  return false;
}

// Text from a database (sweep and run names, labels, messages; metric names cannot carry
// controls: a CHECK refuses them) and from a checkpoint (its metadata) reaches stdout and stderr
// escaped, whichever command prints it: the escaping sits where amptune writes to the terminal,
// not in each command.
TEST(Untrusted, TextFromDatabasesAndCheckpointsPrintsEscaped) {
  const TinySweep f = make_tiny_sweep(quick_tiny("grid:\n  seed: [0]\n", 1));
  ASSERT_EQ(run_amptune({"run", f.yaml, "-q"}, f.dir).exit_code, 0);
  // ESC [2J, CR, BEL, the C1 control CSI (U+009B) and a byte that is not UTF-8.
  const std::string bad = "char(27) || '[2J' || char(13) || char(7) || char(155) || "
                          "CAST(X'FF' AS TEXT)";
  sql(f.db, "UPDATE sweeps SET name = 'tiny' || " + bad + ";"
            "UPDATE runs SET name = 'r' || " + bad + ", label = 'l' || " + bad +
            ", message = 'm' || " + bad + ", status = 'failed' WHERE id = 1;"
            // A swept value, as compare's tables show it (JSON text holds no invalid UTF-8).
            "UPDATE run_params SET value_json = json_quote('s' || char(27) || '[2J' || "
            "char(13) || char(7) || char(155)) WHERE key = 'seed';"
            "UPDATE runs SET axes_json = json_object('seed', json(value_json)) FROM run_params "
            "WHERE run_params.run_id = runs.id AND key = 'seed';");
  const std::string sweep = store::Store(f.db).sweep_names().at(0);
  const std::string escaped = "\\x1b[2J\\x0d\\x07\\u009b\\xff";
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"list"},
           {"show", "1"},
           {"status"},
           {"compare", "--sweep", sweep, "--by", "seed"},
           {"compare", "--sweep", sweep, "--by", "seed", "--format", "csv"},
           {"compare", "--sweep", sweep, "--metric", "nothing" + sweep.substr(4)},
           {"show", "r" + sweep.substr(4) + "x"}}) {
    const Result r = run_amptune(args, f.dir);
    EXPECT_FALSE(has_raw_control(r.out)) << args[0] << " printed a control byte:\n" << r.out;
    EXPECT_FALSE(has_raw_control(r.err)) << args[0] << " printed a control byte:\n" << r.err;
    const bool table = args[0] == "compare" && args.size() > 3 && args[3] == "--by";
    EXPECT_NE((r.out + r.err).find(table ? "s\\x1b[2J\\x0d\\x07\\u009b" : escaped),
              std::string::npos)
        << args[0] << ":\n" << r.out << r.err;
  }

  // A checkpoint whose metadata carries the same controls (JSON escapes in its header): eval's
  // error (exit 6) names the value, escaped.
  sql(f.db, "UPDATE runs SET status = 'done' WHERE id = 1;"
            "UPDATE epochs SET checkpoint_bytes = NULL, checkpoint_sha256 = NULL");
  std::string file = epochs_of(f.db, "1").at(0).checkpoint->path;
  if (file[0] != '/') file = f.dir + "/" + file;
  std::string bytes = read_file(file);
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = length << 8 | static_cast<unsigned char>(bytes[i]);
  std::string header = bytes.substr(8, length);
  const std::string format = "amptune-checkpoint-2";
  ASSERT_NE(header.find(format), std::string::npos) << header;
  header.replace(header.find(format), format.size(), "x\\u001b[2J\\r\\u0007\\u009bx");
  std::string crafted(8, '\0');
  for (int i = 0; i < 8; ++i) crafted[i] = static_cast<char>(header.size() >> (8 * i) & 0xff);
  write_file(file, crafted + header + bytes.substr(8 + length));
  const Result r = run_amptune({"eval", "1"}, f.dir);
  EXPECT_EQ(r.exit_code, 6) << r.err;
  EXPECT_FALSE(has_raw_control(r.out + r.err)) << r.out << r.err;
  EXPECT_NE(r.err.find("x\\x1b[2J\\x0d\\x07\\u009bx"), std::string::npos) << r.err;
}

// A database edited or crafted, used directly with --db: compare, report, tune --status, list
// and show exit 5 naming the table, the row and the column of a value of another type or
// shape, and print nothing. Before, compare and report crashed on an axes_json that is not JSON
// and tune --status on such a change_json (exit 1), list named no row, show printed 'high' as 0.
TEST(Untrusted, CommandsRefuseValuesOfAnotherShapeNamingTheRowAndColumn) {
  const TinySweep f = make_tiny_sweep(quick_tiny("", 1));
  ASSERT_EQ(run_amptune({"run", f.yaml, "-q"}, f.dir).exit_code, 0);
  const std::string saved = f.dir + "/results/saved.sqlite";
  fs::copy_file(f.db, saved);
  const std::string tune =
      "INSERT INTO tune_searches (id, sweep_id, block_json, metric, higher_is_better, "
      "reference_run_id, start_run_id, created_at) VALUES (1, 1, '{}', 'acc1', 1, 1, 1, 'now');"
      "INSERT INTO tune_rounds VALUES (1, 1, 'search', 1, 0, NULL, '');"
      "INSERT INTO tune_candidates (search_id, round, seq, move, change_json, reason, run_id, "
      "fork_epoch) VALUES (1, 1, 0, 'loss_scale', 'oops', '', 1, 0);";
  struct Case {
    std::string change;
    std::vector<std::string> args;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"UPDATE runs SET axes_json = 'oops'",
       {"compare", "--sweep", "tiny"},
       "table runs, row 1, column axes_json is not JSON: 'oops'"},
      {"UPDATE runs SET axes_json = 'oops'",
       {"report", "--sweep", "tiny", "--out", "report"},
       "table runs, row 1, column axes_json is not JSON: 'oops'"},
      {tune,
       {"tune", "--status", f.yaml},
       "table tune_candidates, row 1, column change_json is not JSON: 'oops'"},
      {"UPDATE runs SET status = 'bogus'",
       {"list"},
       "table runs, row 1, column status holds 'bogus', not a run status"},
      {"UPDATE metrics SET value = 'high' WHERE name = 'acc1'",
       {"show", "1"},
       "table metrics, row 1, column value holds 'high', not a number"},
  };
  for (const Case& c : cases) {
    fs::copy_file(saved, f.db, fs::copy_options::overwrite_existing);
    sql(f.db, "PRAGMA ignore_check_constraints = ON;" + c.change);
    const Result r = run_amptune(c.args, f.dir);
    EXPECT_EQ(r.exit_code, 5) << c.args[0] << ": " << r.err;
    EXPECT_NE(r.err.find("amptune.sqlite: " + c.expected), std::string::npos)
        << c.args[0] << ": " << r.err;
    EXPECT_EQ(r.out, "") << c.args[0];
  }
}

// Two databases given one checkpoint.dir: the folder is the first one's, the second is refused
// before it writes or deletes anything there.
TEST(Untrusted, ACheckpointFolderBelongsToOneDatabase) {
  const TinySweep f = make_tiny_sweep(quick_tiny("", 1));
  const std::string shared = f.dir + "/shared";
  const std::vector<std::string> set = {"--set", "checkpoint.dir=" + shared, "-q"};
  std::vector<std::string> a = {"run", f.yaml, "--db", "results/a.sqlite"};
  a.insert(a.end(), set.begin(), set.end());
  ASSERT_EQ(run_amptune(a, f.dir).exit_code, 0);
  const std::string file = shared + "/1/epoch_0000.pt";
  const std::string bytes = read_file(file);
  std::vector<std::string> b = {"run", f.yaml, "--db", "results/b.sqlite"};
  b.insert(b.end(), set.begin(), set.end());
  const Result r = run_amptune(b, f.dir);
  EXPECT_EQ(r.exit_code, 8) << r.err;
  EXPECT_NE(r.err.find("the checkpoint folder " + shared + " belongs to the database"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("a.sqlite"), std::string::npos) << r.err;
  EXPECT_EQ(read_file(file), bytes);
  EXPECT_TRUE(epochs_of(f.dir + "/results/b.sqlite", "1").empty());
  // The same path made again (the first database deleted): it takes the folder over.
  fs::remove(f.dir + "/results/a.sqlite");
  const Result again = run_amptune(a, f.dir);
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.err.find("belonged to an earlier database"), std::string::npos) << again.err;
}

// Waits (at most 60 s) until process `pid` has its SIGINT and SIGTERM handlers installed
// (/proc/PID/status SigCgt): before that, loading LibTorch, a signal would kill it by default.
bool catches_stop_signals(pid_t pid) {
  for (int i = 0; i < 1200; ++i) {
    std::istringstream status(read_file("/proc/" + std::to_string(pid) + "/status"));
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("SigCgt:", 0) != 0) continue;
      const unsigned long long mask = std::stoull(line.substr(7), nullptr, 16);
      if ((mask >> (SIGINT - 1) & 1) && (mask >> (SIGTERM - 1) & 1)) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// SIGINT / SIGTERM end long work within a second with exit code 130, leaving nothing
// half-written: a merge of a large input (one transaction: the target stays as it was) and the
// planning of a 1,000,000-cell sweep (nothing written yet).
TEST(Untrusted, SignalsStopLongWorkAtOnce) {
  const TinySweep f = make_tiny_sweep(quick_tiny("", 1));
  ASSERT_EQ(run_amptune({"run", f.yaml, "-q"}, f.dir).exit_code, 0);
  const std::string big = f.dir + "/results/big.sqlite";
  fs::copy_file(f.db, big);
  // 400,000 more epochs of 5 metrics each in run 1 of the input.
  sql(big, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 400000) "
           "INSERT INTO epochs (run_id, epoch, global_step, recorded_at) "
           "SELECT 1, i, i, '2026-01-01T00:00:00.000Z' FROM n;"
           "INSERT INTO metrics (run_id, epoch, name, value) SELECT run_id, epoch, m.name, 1.0 "
           "FROM epochs, (SELECT 'a' AS name UNION SELECT 'b' UNION SELECT 'c' UNION SELECT 'd' "
           "UNION SELECT 'e') m WHERE epoch > 0");
  ASSERT_EQ(run_amptune({"merge", f.db, "--into", "results/into.sqlite"}, f.dir).exit_code, 0);
  const auto before = epochs_of(f.dir + "/results/into.sqlite", "1").size();
  for (const int sig : {SIGINT, SIGTERM}) {
    const pid_t pid = spawn_amptune({"merge", big, "--into", "results/into.sqlite"}, f.dir);
    StopOnExit stop(pid);
    ASSERT_TRUE(catches_stop_signals(pid));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // into the merge
    ::kill(pid, sig);
    EXPECT_EQ(wait_exit_code(pid, 5), 130) << read_file(f.dir + "/child.err");
    EXPECT_EQ(epochs_of(f.dir + "/results/into.sqlite", "1").size(), before);
    EXPECT_EQ(store::Store(f.dir + "/results/into.sqlite").integrity_check(), "ok");
  }

  // A sweep of 1,000,000 cells plans for many seconds.
  std::string seeds;
  for (int i = 0; i < 100000; ++i) seeds += (i ? "," : "") + std::to_string(i);
  write_file(f.dir + "/huge.yaml", read_file(f.yaml) + "grid:\n  optim.lr: [0.1, 0.2, 0.3, 0.4, "
                                   "0.5, 0.6, 0.7, 0.8, 0.9, 1.0]\n  seed: [" + seeds + "]\n");
  const pid_t pid = spawn_amptune({"run", "huge.yaml", "--db", "results/huge.sqlite"}, f.dir);
  StopOnExit stop(pid);
  ASSERT_TRUE(catches_stop_signals(pid));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // into the planning
  ::kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit_code(pid, 5), 130) << read_file(f.dir + "/child.err");
  EXPECT_FALSE(fs::exists(f.dir + "/results/huge.sqlite"));
}

// tools/torch-pip.sh replaces the folder .deps/torch-VERSION and hands the versions to pip and
// to a Python check: an override that is not a release number stops it before any of that, so
// neither a path that climbs out of .deps nor a quote reaches them. A copy of the script in a
// scratch tree (it works in the tree it lies in); the torchvision case runs the --python path,
// which installs nothing whatever happens.
TEST(Untrusted, TorchPipTakesReleaseNumbersOnly) {
  const std::string dir = scratch_dir();
  fs::create_directories(dir + "/tools");
  fs::copy_file(std::string(AMPTUNE_SOURCE_DIR) + "/tools/torch-pip.sh",
                dir + "/tools/torch-pip.sh");
  fs::create_directories(dir + "/.deps/torch-x");
  const std::string victim = dir + "/victim/keep.txt";
  write_file(victim, "not amptune's");
  struct Case {
    std::string var, value;
    std::vector<std::string> args;
  };
  const std::vector<Case> cases = {
      {"AMPTUNE_TORCH_VERSION", "x/../../victim", {}},
      {"AMPTUNE_TORCH_VERSION", "2.11.0' != '' or open('victim/keep.txt', 'w') and '", {}},
      {"AMPTUNE_TORCHVISION_VERSION", "0.26.0 numpy==0", {"--python", "/nonexistent/python"}},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {"bash", "tools/torch-pip.sh"};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    const pid_t pid = spawn_program(argv, dir, SpawnOptions({{c.var, c.value}}, "pip"));
    StopOnExit stop(pid);
    EXPECT_EQ(wait_exit_code(pid, 60), 2) << c.var << "=" << c.value;
    EXPECT_NE(read_file(dir + "/pip.err")
                  .find("torch-pip: " + c.var + " '" + c.value +
                        "' is not a release number such as 2.11.0"),
              std::string::npos)
        << read_file(dir + "/pip.err");
    EXPECT_EQ(read_file(victim), "not amptune's");
    EXPECT_EQ(read_file(dir + "/pip.out"), "");
  }
  EXPECT_TRUE(fs::is_empty(dir + "/.deps/torch-x"));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir + "/.deps"), fs::directory_iterator()), 1);
}

}  // namespace
}  // namespace amptune::testing

namespace amptune::testing {
namespace {

// Runs `args` in the background and returns its exit code within `seconds`, and its stderr
// (a hang or a crash of the child fails the test, which stops it).
std::pair<int, std::string> exit_and_err(const std::vector<std::string>& args,
                                         const std::string& dir, double seconds = 60) {
  const pid_t pid = spawn_amptune(args, dir);
  StopOnExit stop(pid);
  const int code = wait_exit_code(pid, seconds);
  return {code, read_file(dir + "/child.err")};
}

// A database whose JSON columns nest 300,000 deep (CHECK constraints bypassed, as in a copied
// file): every reader refuses it, exit 5 naming the table, row and column. Before, compare and
// report crashed (exit 139: nlohmann copies and prints recursively) and show --config of a config
// 10,000 deep printed 200 MB.
TEST(Untrusted, DeeplyNestedJsonIsRefusedByEveryReader) {
  const TinySweep f = make_tiny_sweep(quick_tiny("", 1));
  ASSERT_EQ(run_amptune({"run", f.yaml, "-q"}, f.dir).exit_code, 0);
  const std::string saved = f.dir + "/saved.sqlite";
  fs::copy_file(f.db, saved);
  const std::string deep =
      "replace(hex(zeroblob(N)), '00', '{\"a\":') || '1' || replace(hex(zeroblob(N)), '00', '}')";
  const auto nested = [&](int n) {
    std::string s = deep;
    for (size_t at; (at = s.find('N')) != std::string::npos;) s.replace(at, 1, std::to_string(n));
    return s;
  };
  struct Case {
    std::string craft;
    std::vector<std::vector<std::string>> commands;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"UPDATE runs SET axes_json = '{\"x\":' || replace(hex(zeroblob(300000)), '00', '[') || "
       "replace(hex(zeroblob(300000)), '00', ']') || '}'",
       {{"compare", "--sweep", "tiny"}, {"report", "--sweep", "tiny", "--out", "report"},
        {"list"}, {"status"}},
       "table runs, row 1, column axes_json holds 600006 bytes of JSON, more than the 262144"},
      {"UPDATE runs SET config_json = " + nested(10000),
       {{"show", "1", "--config"}, {"list"}, {"compare", "--sweep", "tiny"}},
       "table runs, row 1, column config_json holds JSON nested more than 64 deep"},
  };
  for (const Case& c : cases) {
    fs::copy_file(saved, f.db, fs::copy_options::overwrite_existing);
    sql(f.db, "PRAGMA ignore_check_constraints = ON; " + c.craft);
    for (const auto& args : c.commands) {
      const auto [code, err] = exit_and_err(args, f.dir);
      EXPECT_EQ(code, 5) << args[0] << ": " << err;
      EXPECT_NE(err.find(c.expected), std::string::npos) << args[0] << ": " << err;
    }
  }
}

// A database (not a merge input: the file given with --db) whose epochs table was replaced by a
// recursive view spelled EPOCHS: every command refuses it when it opens the file, exit 5 naming
// it, where status, list, show, compare and report ran until killed.
TEST(Untrusted, ATableReplacedByAViewIsRefusedByEveryCommand) {
  const TinySweep f = make_tiny_sweep(quick_tiny("", 1));
  ASSERT_EQ(run_amptune({"run", f.yaml, "-q"}, f.dir).exit_code, 0);
  sql(f.db, "PRAGMA foreign_keys = OFF;"
            "DROP TABLE loss_scale_events; DROP TABLE metrics; DROP TABLE epochs;"
            "CREATE VIEW EPOCHS AS WITH RECURSIVE x(n) AS (SELECT 1 UNION ALL "
            "SELECT n + 1 FROM x) SELECT n AS run_id, n AS epoch, n AS global_step FROM x");
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"status"},
           {"list"},
           {"show", "1"},
           {"compare", "--sweep", "tiny"},
           {"report", "--sweep", "tiny", "--out", "report"},
           {"run", f.yaml, "-q"}}) {
    const auto [code, err] = exit_and_err(args, f.dir);
    EXPECT_EQ(code, 5) << args[0] << ": " << err;
    EXPECT_NE(err.find("results/amptune.sqlite: epochs is a view, not a table (\"EPOCHS\" in "
                       "its schema)"),
              std::string::npos)
        << args[0] << ": " << err;
  }
}

// A shard with a valid 50 MB config_json: merge refuses it (exit 5 naming the row and column)
// instead of merging it for every later list, status and serve to pay 1.5 GB; the target is
// unchanged. The same value in a database opened directly is refused by the readers.
TEST(Untrusted, HugeValuesAreRefusedByMergeAndByReaders) {
  const TinySweep f = make_tiny_sweep(quick_tiny("", 1));
  ASSERT_EQ(run_amptune({"run", f.yaml, "-q"}, f.dir).exit_code, 0);
  const std::string into = f.dir + "/results/into.sqlite";
  ASSERT_EQ(run_amptune({"merge", f.db, "--into", into}, f.dir).exit_code, 0);
  const std::string crafted = f.dir + "/results/crafted.sqlite";
  fs::copy_file(f.db, crafted);
  sql(crafted, "UPDATE runs SET config_hash = 'another1', name = 'other', config_json = "
               "json_set(config_json, '$.padding', hex(zeroblob(25000000)))");
  auto [code, err] = exit_and_err({"merge", crafted, "--into", into}, f.dir);
  EXPECT_EQ(code, 5) << err;
  EXPECT_NE(err.find(crafted + ": table runs, row 1, column config_json holds 500"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("bytes, more than the 262144 amptune reads there"), std::string::npos) << err;
  EXPECT_EQ(store::Store(into).runs().size(), 1u);
  std::tie(code, err) = exit_and_err({"list", "--db", crafted}, f.dir);
  EXPECT_EQ(code, 5) << err;
  EXPECT_NE(err.find("column config_json holds a value of 500"), std::string::npos) << err;
}

}  // namespace
}  // namespace amptune::testing
