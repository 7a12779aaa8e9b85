// Unit tests of the comparison table (app/views/compare.h) on made-up sweeps: grouping, the epoch a
// run contributes, ranks and ties, direction, baselines, mixed statuses, errors, and the three
// writers.
#include "app/views/compare.h"

#include <functional>
#include <sstream>

#include "core/error.h"
#include "unit/app/app_fixture.h"

namespace amptune::app {
namespace {

using json = nlohmann::json;

// The message of the UsageError f throws ("<no UsageError>" when it throws none).
std::string usage_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& error) {
    EXPECT_EQ(error.code(), ExitCode::kUsage);
    return error.what();
  }
  return "<no UsageError>";
}

// Sweep "grid": optim.lr x seed, opt_level a run column; acc1 per epoch 0, 1, 2.
//   cell 0  lr 0.1 seed 1 O1  acc1 50 60 55  100 img/s  overflow_steps 1 (epoch 0) + 2 (epoch 2)
//   cell 1  lr 0.1 seed 2 O2  acc1 52 58 70  200 img/s
//   cell 2  lr 0.2 seed 1 O1  acc1 40 45 44  100 img/s
//   cell 3  lr 0.2 seed 2 O2  acc1 41 43 47  100 img/s
class CompareTest : public AppTest {
 protected:
  void SetUp() override {
    const std::vector<std::vector<double>> acc1 = {
        {50, 60, 55}, {52, 58, 70}, {40, 45, 44}, {41, 43, 47}};
    for (int cell = 0; cell < 4; ++cell) {
      Run run;
      run.cell = cell;
      run.axes = json{{"optim.lr", cell < 2 ? 0.1 : 0.2}, {"seed", cell % 2 + 1}}.dump();
      run.columns = {{"opt_level", cell % 2 ? "\"O2\"" : "\"O1\""}};
      ids_.push_back(add_run(run));
      for (int epoch = 0; epoch < 3; ++epoch) {
        Epoch e;
        e.metrics["acc1"] = acc1[cell][epoch];
        if (cell == 0 && epoch != 1) e.metrics["overflow_steps"] = epoch == 0 ? 1 : 2;
        e.fps = cell == 1 ? 200 : 100;
        add_epoch(ids_.back(), epoch, e);
      }
      finish(ids_.back());
    }
  }

  CompareTable compare(const std::string& by, const std::string& epoch = "best",
                       const std::string& metric = "") {
    CompareOptions options;
    options.sweep = "grid";
    std::istringstream keys(by);
    for (std::string key; std::getline(keys, key, ',');) options.by.push_back(key);
    options.epoch = epoch;
    options.metric = metric;
    return build_compare(store_, options);
  }

  // The rows' values of one --by column and their metric values, in table order.
  static std::vector<std::string> keys(const CompareTable& table, size_t column = 0) {
    std::vector<std::string> out;
    for (const auto& row : table.rows) out.push_back(by_text(row.by_values.at(column)));
    return out;
  }
  static std::vector<std::optional<double>> values(const CompareTable& table) {
    std::vector<std::optional<double>> out;
    for (const auto& row : table.rows) out.push_back(row.value);
    return out;
  }
  static std::vector<std::optional<int>> ranks(const CompareTable& table) {
    std::vector<std::optional<int>> out;
    for (const auto& row : table.rows) out.push_back(row.rank);
    return out;
  }

  std::vector<int64_t> ids_;
};

TEST_F(CompareTest, BySweptKeyMeansEachRunsBestValue) {
  const CompareTable table = compare("optim.lr");
  EXPECT_EQ(table.metric, "acc1");
  EXPECT_TRUE(table.higher_is_better);
  ASSERT_EQ(table.rows.size(), 2u);
  EXPECT_EQ(keys(table), (std::vector<std::string>{"0.1", "0.2"}));
  const CompareRow& first = table.rows[0];
  EXPECT_EQ(first.run_ids, (std::vector<int64_t>{ids_[0], ids_[1]}));
  EXPECT_EQ(first.runs, 2);
  EXPECT_EQ(first.runs_with_value, 2);
  EXPECT_EQ(first.value, 65.0);  // (60 + 70) / 2
  EXPECT_EQ(first.best_epochs, (std::vector<int>{1, 2}));
  EXPECT_EQ(first.mean_fps, 150.0);
  EXPECT_EQ(first.overflow_steps, 3.0);
  EXPECT_EQ(first.skipped_steps, std::nullopt);
  EXPECT_EQ(first.status, "done");
  EXPECT_EQ(first.rank, 1);
  EXPECT_EQ(table.rows[1].value, 46.0);  // (45 + 47) / 2
  EXPECT_EQ(table.rows[1].overflow_steps, std::nullopt);
  EXPECT_EQ(table.rows[1].rank, 2);
}

TEST_F(CompareTest, ByRunColumnGroupsByItsValue) {
  const CompareTable table = compare("opt_level");
  EXPECT_EQ(keys(table), (std::vector<std::string>{"O2", "O1"}));
  EXPECT_EQ(table.rows[0].by_values[0], json("O2"));
  EXPECT_EQ(values(table), (std::vector<std::optional<double>>{58.5, 52.5}));
  EXPECT_EQ(table.rows[0].run_ids, (std::vector<int64_t>{ids_[1], ids_[3]}));
}

TEST_F(CompareTest, WithoutByEverySweptKeyMakesOneRowPerCell) {
  const CompareTable table = compare("");
  EXPECT_EQ(table.by, (std::vector<std::string>{"optim.lr", "seed"}));
  EXPECT_EQ(values(table), (std::vector<std::optional<double>>{70, 60, 47, 45}));
  EXPECT_EQ(keys(table, 1), (std::vector<std::string>{"2", "1", "2", "1"}));
  EXPECT_EQ(table.rows[0].best_epochs, (std::vector<int>{2}));
  EXPECT_EQ(table.rows[3].best_epochs, (std::vector<int>{1}));
}

TEST_F(CompareTest, EpochLastAndNTakeThatEpochsValue) {
  CompareTable last = compare("optim.lr", "last");
  EXPECT_EQ(values(last), (std::vector<std::optional<double>>{62.5, 45.5}));
  EXPECT_EQ(last.rows[0].best_epochs, (std::vector<int>{2}));
  EXPECT_EQ(compare_columns(last)[3], "epoch");

  CompareTable first = compare("optim.lr", "0");
  EXPECT_EQ(values(first), (std::vector<std::optional<double>>{51, 40.5}));
  EXPECT_EQ(first.rows[1].best_epochs, (std::vector<int>{0}));

  // An epoch no run reached: no values, no ranks, rows in cell order.
  CompareTable none = compare("optim.lr", "7");
  EXPECT_EQ(values(none), (std::vector<std::optional<double>>{std::nullopt, std::nullopt}));
  EXPECT_EQ(ranks(none), (std::vector<std::optional<int>>{std::nullopt, std::nullopt}));
  EXPECT_EQ(keys(none), (std::vector<std::string>{"0.1", "0.2"}));
  EXPECT_EQ(none.rows[0].mean_fps, 150.0);  // the totals do not depend on --epoch
}

TEST_F(CompareTest, EpochsColumnAsMetricUsesItsDirection) {
  // train_loss = 2 - epoch / 4 in every run: lower is better, so epoch 2 (1.5); all rows tie.
  const CompareTable table = compare("optim.lr", "best", "train_loss");
  EXPECT_FALSE(table.higher_is_better);
  EXPECT_EQ(values(table), (std::vector<std::optional<double>>{1.5, 1.5}));
  EXPECT_EQ(table.rows[0].best_epochs, (std::vector<int>{2}));
  EXPECT_EQ(ranks(table), (std::vector<std::optional<int>>{1, 1}));
  // A name metric_info does not list counts as higher-is-better.
  EXPECT_TRUE(compare("optim.lr", "best", "lr").higher_is_better);
}

TEST_F(CompareTest, AlsoMetricsAreTakenAtTheMetricsEpoch) {
  CompareOptions options;
  options.sweep = "grid";
  options.by = {"optim.lr"};
  options.also = {"train_loss", "acc1", "mrpe", "train_loss"};  // acc1 is the metric
  CompareTable table = build_compare(store_, options);
  EXPECT_EQ(table.also, (std::vector<std::string>{"train_loss", "mrpe"}));
  EXPECT_EQ(compare_columns(table),
            (std::vector<std::string>{"optim.lr", "runs", "acc1", "train_loss", "mrpe",
                                      "best_epoch", "img_s", "mfu", "overflow_steps",
                                      "skipped_steps", "status", "rank"}));
  // Row lr 0.1: best acc1 at epoch 1 (cell 0) and 2 (cell 1), train_loss 1.75 and 1.5 there;
  // mrpe (known to metric_info) was never recorded.
  ASSERT_EQ(table.rows[0].also_values.size(), 2u);
  EXPECT_EQ(table.rows[0].also_values[0], 1.625);
  EXPECT_EQ(table.rows[0].also_values[1], std::nullopt);
  options.epoch = "0";
  table = build_compare(store_, options);
  EXPECT_EQ(table.rows[0].also_values[0], 2.0);
  // No run reached the epoch: no value, nor beside it.
  options.epoch = "9";
  EXPECT_EQ(build_compare(store_, options).rows[0].also_values[0], std::nullopt);

  options.epoch = "last";
  table = build_compare(store_, options);
  EXPECT_EQ(table.rows[1].also_values[0], 1.5);
  std::ostringstream csv, text;
  write_compare_csv(table, csv);
  EXPECT_EQ(csv.str().substr(0, csv.str().find('\n')),
            "optim.lr,runs,acc1,train_loss,mrpe,epoch,img_s,mfu,overflow_steps,skipped_steps,"
            "status,rank\r");
  EXPECT_EQ(compare_json(table)[0]["train_loss"], 1.5);
  write_compare_text(table, text);
  EXPECT_NE(text.str().find("0.1       2     62.5  1.5         -     2"), std::string::npos)
      << text.str();

  options.also = {"acc7"};
  EXPECT_EQ(usage_error([&] { build_compare(store_, options); }),
            "unknown --also metric 'acc7' for sweep 'grid'; known metrics: acc1, epoch_seconds, "
            "lr, overflow_steps, train_fps_mean, train_loss");
  options.also = {"overflow_steps"};
  EXPECT_EQ(usage_error([&] { build_compare(store_, options); }),
            "--also metric 'overflow_steps' is a column of the table already (see amptune "
            "compare --help)");
}

TEST_F(CompareTest, BaselineDeltas) {
  CompareOptions options;
  options.sweep = "grid";
  options.by = {"optim.lr"};
  options.baseline = {{"optim.lr", "0.2"}};
  CompareTable table = build_compare(store_, options);
  EXPECT_TRUE(table.has_baseline);
  EXPECT_EQ(table.rows[0].delta, 19.0);
  EXPECT_EQ(table.rows[1].delta, 0.0);
  EXPECT_EQ(compare_columns(table).back(), "delta");
  EXPECT_EQ(compare_cells(table, table.rows[0]).back(), "+19");

  options.by = {"optim.lr", "seed"};
  options.baseline = {{"seed", "2"}, {"optim.lr", "0.1"}};  // cell 1: 70
  table = build_compare(store_, options);
  std::vector<std::optional<double>> deltas;
  for (const auto& row : table.rows) deltas.push_back(row.delta);
  EXPECT_EQ(deltas, (std::vector<std::optional<double>>{0, -10, -23, -25}));
  EXPECT_EQ(compare_cells(table, table.rows[1]).back(), "-10");
}

TEST_F(CompareTest, EqualValuesShareARank) {
  for (int cell = 0; cell < 3; ++cell) {
    Run run;
    run.sweep = "ties";
    run.cell = cell;
    run.axes = json{{"seed", cell + 1}}.dump();
    const int64_t id = add_run(run);
    add_epochs(id, "acc1", {cell == 2 ? 70.0 : 80.0});
  }
  CompareOptions options;
  options.sweep = "ties";
  const CompareTable table = build_compare(store_, options);
  EXPECT_EQ(ranks(table), (std::vector<std::optional<int>>{1, 1, 3}));
  EXPECT_EQ(keys(table), (std::vector<std::string>{"1", "2", "3"}));  // ties in cell order
}

TEST_F(CompareTest, LowerIsBetterMetricRanksTheSmallestFirst) {
  const std::vector<std::vector<double>> mrpe = {{100, 90, 95}, {80, 85, 120}};
  for (int cell = 0; cell < 2; ++cell) {
    Run run;
    run.sweep = "pose";
    run.cell = cell;
    run.axes = json{{"seed", cell + 1}}.dump();
    run.columns = {{"primary_metric", "\"mrpe\""}};
    add_epochs(add_run(run), "mrpe", mrpe[cell]);
  }
  CompareOptions options;
  options.sweep = "pose";
  CompareTable table = build_compare(store_, options);
  EXPECT_EQ(table.metric, "mrpe");
  EXPECT_FALSE(table.higher_is_better);
  EXPECT_EQ(keys(table), (std::vector<std::string>{"2", "1"}));
  EXPECT_EQ(values(table), (std::vector<std::optional<double>>{80, 90}));
  EXPECT_EQ(table.rows[0].best_epochs, (std::vector<int>{0}));
  EXPECT_EQ(table.rows[1].best_epochs, (std::vector<int>{1}));

  options.epoch = "last";  // 95 vs 120: the first cell wins now
  table = build_compare(store_, options);
  EXPECT_EQ(values(table), (std::vector<std::optional<double>>{95, 120}));
  EXPECT_EQ(keys(table), (std::vector<std::string>{"1", "2"}));

  std::ostringstream text;
  write_compare_text(table, text);
  EXPECT_EQ(text.str().substr(0, text.str().find('\n')),
            "sweep pose: mrpe (lower is better), epoch last, 2 rows");
}

TEST_F(CompareTest, MixedStatusGroupCountsEachStatus) {
  Run run;
  run.sweep = "mixed";
  run.axes = R"({"optim.lr": 0.1})";
  const int64_t done = add_run(run);
  add_epochs(done, "acc1", {50});
  finish(done);
  run.cell = 1;
  const int64_t running = add_run(run);
  store_.mark_running(running, records::Provenance{});
  add_epochs(running, "acc1", {60});
  run.cell = 2;
  add_run(run);  // pending, no epoch
  CompareOptions options;
  options.sweep = "mixed";
  const CompareTable table = build_compare(store_, options);
  ASSERT_EQ(table.rows.size(), 1u);
  EXPECT_EQ(table.rows[0].runs, 3);
  EXPECT_EQ(table.rows[0].runs_with_value, 2);
  EXPECT_EQ(table.rows[0].value, 55.0);
  EXPECT_EQ(table.rows[0].status, "done:1 pending:1 running:1");
}

TEST_F(CompareTest, ErrorsNameWhatIsUnknownAndWhatIsKnown) {
  CompareOptions options;
  EXPECT_NE(usage_error([&] { build_compare(store_, options); }).find("needs --sweep"),
            std::string::npos);
  options.sweep = "nope";
  EXPECT_EQ(usage_error([&] { build_compare(store_, options); }),
            "no sweep 'nope' in " + path_ + " (sweeps: grid)");

  options.sweep = "grid";
  options.by = {"optim.lrr"};
  const std::string by = usage_error([&] { build_compare(store_, options); });
  EXPECT_EQ(by.substr(0, by.find("; run columns")),
            "unknown --by key 'optim.lrr' for sweep 'grid'; swept keys: optim.lr, seed");
  EXPECT_NE(by.find("opt_level"), std::string::npos) << by;

  options.by = {};
  options.metric = "acc7";
  EXPECT_EQ(usage_error([&] { build_compare(store_, options); }),
            "unknown --metric 'acc7' for sweep 'grid'; known metrics: acc1, epoch_seconds, lr, "
            "overflow_steps, train_fps_mean, train_loss");
  options.metric = "mrpe";  // known to metric_info, never recorded here: rows without values
  EXPECT_EQ(build_compare(store_, options).rows[0].value, std::nullopt);

  options.metric = "";
  for (const char* epoch : {"soon", "-1", "", "2x"}) {
    options.epoch = epoch;
    EXPECT_NE(usage_error([&] { build_compare(store_, options); }).find("--epoch must be"),
              std::string::npos)
        << epoch;
  }
  options.epoch = "best";

  options.by = {"optim.lr"};
  options.baseline = {{"seed", "1"}};
  EXPECT_EQ(usage_error([&] { build_compare(store_, options); }),
            "--baseline key 'seed' is not a --by key (by: optim.lr)");
  options.baseline = {{"optim.lr", "0.3"}};
  EXPECT_EQ(usage_error([&] { build_compare(store_, options); }),
            "--baseline optim.lr=0.3 matches no row; optim.lr has the values 0.1, 0.2");

  // Each key matches a row, not both together.
  for (int cell = 0; cell < 2; ++cell) {
    Run run;
    run.sweep = "sparse";
    run.cell = cell;
    run.axes = json{{"optim.lr", cell ? 0.2 : 0.1}, {"seed", cell + 1}}.dump();
    run.columns = {{"primary_metric", cell ? "\"mrpe\"" : "\"acc1\""}};
    add_run(run);
  }
  options.sweep = "sparse";
  options.by = {};
  EXPECT_EQ(usage_error([&] { build_compare(store_, options); }),
            "the runs of sweep 'sparse' have different primary metrics (acc1, mrpe); choose one "
            "with --metric");
  options.metric = "acc1";
  options.baseline = {{"optim.lr", "0.1"}, {"seed", "2"}};
  EXPECT_NE(usage_error([&] { build_compare(store_, options); }).find("matches no single row"),
            std::string::npos);
}

TEST_F(CompareTest, CsvHasFullPrecisionAndEmptyFieldsForMissingValues) {
  std::ostringstream csv;
  write_compare_csv(compare("optim.lr"), csv);
  EXPECT_EQ(csv.str(),
            "optim.lr,runs,acc1,best_epoch,img_s,mfu,overflow_steps,skipped_steps,status,rank\r\n"
            "0.1,2,65.0,1;2,150.0,,3.0,,done,1\r\n"
            "0.2,2,46.0,1;2,100.0,,,,done,2\r\n");

  // Fields with a comma or a quote are quoted, quotes doubled.
  Run run;
  run.sweep = "quoted";
  run.axes = json{{"data.root", "a,\"b\""}}.dump();
  add_run(run);
  CompareOptions options;
  options.sweep = "quoted";
  std::ostringstream quoted;
  write_compare_csv(build_compare(store_, options), quoted);
  EXPECT_EQ(quoted.str(),
            "data.root,runs,acc1,best_epoch,img_s,mfu,overflow_steps,skipped_steps,status,rank\r\n"
            "\"a,\"\"b\"\"\",1,,,,,,,pending,\r\n");
}

TEST_F(CompareTest, JsonKeepsColumnOrderAndTypes) {
  EXPECT_EQ(compare_json(compare("optim.lr")).dump(),
            R"([{"optim.lr":0.1,"runs":2,"acc1":65.0,"best_epoch":[1,2],"img_s":150.0,"mfu":null,)"
            R"("overflow_steps":3.0,"skipped_steps":null,"status":"done","rank":1},)"
            R"({"optim.lr":0.2,"runs":2,"acc1":46.0,"best_epoch":[1,2],"img_s":100.0,"mfu":null,)"
            R"("overflow_steps":null,"skipped_steps":null,"status":"done","rank":2}])");
  const auto last = compare_json(compare("optim.lr,seed", "last"));
  EXPECT_EQ(last[0]["epoch"], 2);  // one epoch: a number, under "epoch" for --epoch last
  EXPECT_EQ(last[0]["seed"], 2);
}

// mfu: each run's mean img/s x its training FLOPs per sample / its peak, averaged over the
// group's runs that have both; runs without them (started before migration 19) leave it out.
TEST_F(CompareTest, MfuIsEachRunsMeanImgPerSecondOverItsPeak) {
  // Cells 0 and 1 (lr 0.1): 100 and 200 img/s x 1e6 FLOPs over 1e9 and 4e9 FLOP/s: 0.1, 0.05.
  store_.record_run_work(ids_[0], {1e6, 1e9, "fp32", "cpu: a"});
  store_.record_run_work(ids_[1], {1e6, 4e9, "fp32", "cpu: b"});
  // Cell 2 (lr 0.2): a GPU not in the table, no peak; cell 3 never counted.
  store_.record_run_work(ids_[2], {1e6, 0, "fp16", "cuda: X is not in the table"});
  const CompareTable table = compare("optim.lr");
  EXPECT_DOUBLE_EQ(*table.rows[0].mfu, 0.075);
  EXPECT_EQ(table.rows[1].mfu, std::nullopt);
  std::ostringstream text, csv;
  write_compare_text(table, text);
  EXPECT_NE(text.str().find("150.0  7.5%"), std::string::npos) << text.str();
  write_compare_csv(table, csv);
  EXPECT_NE(csv.str().find(",150.0,0.075"), std::string::npos) << csv.str();
  EXPECT_DOUBLE_EQ(compare_json(table)[0]["mfu"].get<double>(), 0.075);
  EXPECT_TRUE(compare_json(table)[1]["mfu"].is_null());
}

TEST_F(CompareTest, TextTableAlignsColumns) {
  std::ostringstream text;
  write_compare_text(compare("optim.lr"), text);
  EXPECT_EQ(
      text.str(),
      "sweep grid: acc1 (higher is better), epoch best, 2 rows\n"
      "optim.lr  runs  acc1  best_epoch  img_s  mfu  overflow_steps  skipped_steps  status  rank\n"
      "0.1       2     65    1;2         150.0  -    3               -              done    1\n"
      "0.2       2     46    1;2         100.0  -    -               -              done    2\n");
}

}  // namespace
}  // namespace amptune::app
