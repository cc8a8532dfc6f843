// Tests of memest-eval's library (tools/eval/): every metric on hand-made pairs with exact
// expected values, the bin edges, the measured-row reader on good and malformed lines, the
// aggregation and the markdown / CSV / JSON tables on a tiny evaluation, the evaluator on a small
// model file, and the SVG plots.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "base/sha256.h"
#include "memest/memest.h"
#include "testing/onnx_builder.h"
#include "tools/eval/evaluate.h"
#include "tools/eval/heldout.h"
#include "tools/eval/metrics.h"
#include "tools/eval/plots.h"
#include "tools/eval/report.h"
#include "tools/eval/rows.h"

namespace memest::eval {
namespace {

using memest::testing::GraphBuilder;
using memest::testing::kFloat;
using memest::testing::TempDir;

// ---- metrics ----------------------------------------------------------------------------------

TEST(EvalMetrics, RelativeErrorsAndUnder) {
  EXPECT_DOUBLE_EQ(SignedRelativeError({110, 100}), 0.1);
  EXPECT_DOUBLE_EQ(SignedRelativeError({90, 100}), -0.1);
  EXPECT_DOUBLE_EQ(AbsRelativeError({90, 100}), 0.1);
  EXPECT_DOUBLE_EQ(SignedRelativeError({0, 100}), -1.0);
  EXPECT_TRUE(IsUnder({99, 100}));
  EXPECT_FALSE(IsUnder({100, 100}));  // equal is not an under-estimate
  EXPECT_FALSE(IsUnder({101, 100}));
}

TEST(EvalMetrics, WithinIsInclusiveAndExact) {
  EXPECT_TRUE(IsWithin({105, 100}, 5));  // exactly 5 % off: within
  EXPECT_TRUE(IsWithin({95, 100}, 5));
  EXPECT_FALSE(IsWithin({106, 100}, 5));
  EXPECT_FALSE(IsWithin({94, 100}, 5));
  EXPECT_TRUE(IsWithin({120, 100}, 20));
  EXPECT_FALSE(IsWithin({121, 100}, 20));
  EXPECT_TRUE(IsWithin({100, 100}, 0));
  // No overflow near the top of uint64.
  const uint64_t big = std::numeric_limits<uint64_t>::max() / 2;
  EXPECT_TRUE(IsWithin({big + big / 10, big}, 10));
  EXPECT_FALSE(IsWithin({std::numeric_limits<uint64_t>::max(), big}, 10));
}

TEST(EvalMetrics, MedianOddEvenEmpty) {
  EXPECT_EQ(*Median({3, 1, 2}), 2);
  EXPECT_EQ(*Median({4, 1, 3, 2}), 2.5);
  EXPECT_EQ(*Median({7}), 7);
  EXPECT_FALSE(Median({}).has_value());
  EXPECT_EQ(*Mean({1, 2, 3, 6}), 3);
  EXPECT_FALSE(Mean({}).has_value());
}

TEST(EvalMetrics, P90IsNearestRank) {
  std::vector<double> ten = {10, 9, 8, 7, 6, 5, 4, 3, 2, 1};
  EXPECT_EQ(*NearestRank(ten, 90), 9);  // ceil(0.9 * 10) = 9th smallest
  std::vector<double> eleven = ten;
  eleven.push_back(11);
  EXPECT_EQ(*NearestRank(eleven, 90), 10);  // ceil(9.9) = 10
  std::vector<double> twenty;
  for (int i = 1; i <= 20; ++i) twenty.push_back(i);
  EXPECT_EQ(*NearestRank(twenty, 90), 18);
  EXPECT_EQ(*NearestRank(twenty, 100), 20);
  EXPECT_EQ(*NearestRank({5}, 90), 5);
  EXPECT_EQ(*NearestRank({1, 2}, 50), 1);
  EXPECT_FALSE(NearestRank({}, 90).has_value());
  EXPECT_FALSE(NearestRank({1}, 0).has_value());
}

TEST(EvalMetrics, BinsAndTheirEdges) {
  EXPECT_EQ(Bin(0, kBin1), 0u);
  EXPECT_EQ(Bin(kGiB - 1, kBin1), 0u);
  EXPECT_EQ(Bin(kGiB, kBin1), 1u);  // a boundary value opens the next bin
  EXPECT_EQ(Bin(2 * kGiB - 1, kBin1), 1u);
  EXPECT_EQ(Bin(8 * kGiB - 1, kBin8), 0u);
  EXPECT_EQ(Bin(8 * kGiB, kBin8), 1u);
  EXPECT_TRUE(SameBin({kGiB, 2 * kGiB - 1}, kBin1));
  EXPECT_FALSE(SameBin({kGiB - 1, kGiB}, kBin1));  // one byte apart, across the edge
  EXPECT_FALSE(SameBin({kGiB, kGiB - 1}, kBin1));
  EXPECT_TRUE(SameBin({kGiB - 1, kGiB}, kBin8));
  EXPECT_FALSE(SameBin({8 * kGiB, 8 * kGiB - 1}, kBin8));
}

TEST(EvalMetrics, SummarizeHandMadeRows) {
  // |e| = 0, 0.1, 0.2, 0.5; e = 0, +0.1, -0.2, +0.5. The zero-truth pair is ignored.
  const std::vector<Pair> pairs = {{100, 100}, {110, 100}, {80, 100}, {150, 100}, {5, 0}};
  const ErrorStats s = Summarize(pairs);
  EXPECT_EQ(s.n, 4);
  EXPECT_DOUBLE_EQ(*s.median, 0.15);
  EXPECT_DOUBLE_EQ(*s.mean, 0.2);
  EXPECT_DOUBLE_EQ(*s.p90, 0.5);  // rank ceil(3.6) = 4
  EXPECT_DOUBLE_EQ(*s.max, 0.5);
  EXPECT_DOUBLE_EQ(*s.median_signed, 0.05);
  EXPECT_DOUBLE_EQ(*s.median_gap, 5.0);  // gaps 0, +10, -20, +50
  EXPECT_DOUBLE_EQ(*s.within5, 0.25);
  EXPECT_DOUBLE_EQ(*s.within10, 0.5);
  EXPECT_DOUBLE_EQ(*s.within20, 0.75);  // the -20 % row is on the boundary: within
  EXPECT_DOUBLE_EQ(*s.under, 0.25);
  EXPECT_DOUBLE_EQ(*s.bin1, 1.0);
  EXPECT_DOUBLE_EQ(*s.bin8, 1.0);

  const ErrorStats bins = Summarize({{kGiB, kGiB - 1}, {kGiB + 1, kGiB}, {3 * kGiB, 9 * kGiB}});
  EXPECT_DOUBLE_EQ(*bins.bin1, 1.0 / 3);
  EXPECT_DOUBLE_EQ(*bins.bin8, 2.0 / 3);

  const ErrorStats empty = Summarize({{1, 0}});
  EXPECT_EQ(empty.n, 0);
  EXPECT_FALSE(empty.median.has_value());
  EXPECT_FALSE(empty.under.has_value());
}

// ---- rows -------------------------------------------------------------------------------------

constexpr char kGoodRow[] = R"({"schema": "memest.measurement/1", "id": "abc",
  "model": {"path": "m.onnx", "sha256": "00", "name": "m", "family": "cnn", "extra": 1},
  "config": {"mode": "train", "batch": 32, "dims": {"seq": 128}, "optimizer": "adamw",
             "weight_decay": 0.01, "precision": "amp-bf16", "loss": "mse", "iterations": 3},
  "device": {"kind": "cuda", "name": "NVIDIA H100 80GB HBM3", "total_memory": 85045477376,
             "capability": "9.0"},
  "provenance": {"tool": "memest-measure 0.1.0"}, "status": "ok", "error": null,
  "peaks": {"tensor": 123, "allocated": 456, "reserved": 789, "device": 1011},
  "context_bytes": 446693376, "used_for": ["train:learned-v1"], "unknown_field": [1, 2]})";

std::string OneLine(std::string s) {
  for (char& c : s) {
    if (c == '\n') c = ' ';
  }
  return s;
}

// Replaces the first `from` in `s` by `to` (the test fails when `from` is absent).
std::string Replace(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? s : s.replace(at, from.size(), to);
}

std::string CpuRow(const std::string& path, uint64_t tensor, const std::string& extra = "") {
  return R"({"schema":"memest.measurement/1","id":")" + path + std::to_string(tensor) +
         R"(","model":{"path":")" + path +
         R"(","family":"mlp"},"config":{"mode":"train","batch":4,"optimizer":"sgd"},)"
         R"("device":{"kind":"cpu","name":null,"total_memory":null},"status":"ok",)"
         R"("peaks":{"tensor":)" +
         std::to_string(tensor) + R"(,"allocated":null,"reserved":null,"device":null})" + extra +
         "}";
}

TEST(EvalRows, ParsesEveryFieldTheTablesUse) {
  auto row = ParseMeasuredRow(OneLine(kGoodRow), "rows.jsonl", 1);
  ASSERT_TRUE(row.ok()) << row.status().ToString();
  EXPECT_EQ(row->id, "abc");
  EXPECT_EQ(row->model_path, "m.onnx");
  EXPECT_EQ(row->model_sha256, "00");
  EXPECT_EQ(row->family, "cnn");
  EXPECT_EQ(row->options.mode, Mode::kTrain);
  EXPECT_EQ(*row->options.batch, 32);
  EXPECT_EQ(row->options.dims.at("seq"), 128);
  EXPECT_EQ(row->options.optimizer, Optimizer::kAdamW);
  EXPECT_DOUBLE_EQ(row->options.weight_decay, 0.01);
  EXPECT_EQ(row->options.precision, Precision::kAmpBf16);
  EXPECT_EQ(row->options.loss, Loss::kMse);
  EXPECT_EQ(row->device_kind, "cuda");
  EXPECT_EQ(row->device_name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(*row->device_total_memory, 85045477376u);
  EXPECT_EQ(row->status, RowStatus::kOk);
  EXPECT_EQ(*row->peaks.tensor, 123u);
  EXPECT_EQ(*row->peaks.Get(Level::kAllocated), 456u);
  EXPECT_EQ(*row->peaks.Get(Level::kReserved), 789u);
  EXPECT_EQ(*row->peaks.Get(Level::kDevice), 1011u);
  ASSERT_EQ(row->used_for.size(), 1u);
  EXPECT_EQ(row->used_for[0], "train:learned-v1");
}

TEST(EvalRows, NullsKeepDefaultsAndBlankLinesAreSkipped) {
  const std::string text =
      "\n" + CpuRow("a.onnx", 10) + "\n   \n" + CpuRow("b.onnx", 20, R"(,"used_for":null)") + "\n";
  auto rows = ParseMeasuredRows(text, "cpu.jsonl");
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].line, 2);
  EXPECT_EQ((*rows)[1].line, 4);
  EXPECT_EQ((*rows)[0].options.optimizer, Optimizer::kSgd);
  EXPECT_EQ((*rows)[0].options.precision, Precision::kFp32);
  EXPECT_FALSE((*rows)[0].device_total_memory.has_value());
  EXPECT_FALSE((*rows)[0].peaks.device.has_value());
  EXPECT_TRUE((*rows)[1].used_for.empty());
}

TEST(EvalRows, MalformedRowsNameFileLineAndField) {
  struct Case {
    std::string line;
    std::string expect;
  };
  const std::string good = CpuRow("a.onnx", 10);
  auto replace = [&](const std::string& from, const std::string& to) {
    return Replace(good, from, to);
  };
  const std::vector<Case> cases = {
      {"{not json", "rows.jsonl:2: not valid JSON"},
      {"[1, 2]", "rows.jsonl:2: expected a JSON object"},
      {replace("memest.measurement/1", "memest.measurement/2"), "schema: expected"},
      {replace(R"("path":"a.onnx",)", ""), "model.path: missing"},
      {replace(R"("mode":"train")", R"("mode":"fit")"), "config.mode: unknown mode 'fit'"},
      {replace(R"("batch":4)", R"("batch":0)"), "config.batch: expected an integer >= 1"},
      {replace(R"("optimizer":"sgd")", R"("optimizer":"lion")"), "config.optimizer"},
      {replace(R"("kind":"cpu")", R"("kind":"tpu")"), "device.kind: expected cpu|cuda"},
      {replace(R"("status":"ok")", R"("status":"done")"), "status: expected ok|oom|error"},
      {replace(R"("tensor":10)", R"("tensor":-5)"), "peaks.tensor: expected a non-negative"},
      {replace(R"("tensor":10)", R"("tensor":"10")"), "peaks.tensor: expected an integer"},
      {replace(R"("tensor":10)", R"("tensor":null)"), "peaks: status is ok but no peak"},
      {replace(R"("status":"ok",)", ""), "status: missing"},
      {replace(R"(,"peaks":{)", R"(,"peakz":{)"), "peaks: missing"},
  };
  for (const Case& c : cases) {
    auto rows = ParseMeasuredRows(good + "\n" + c.line + "\n" + good + "\n", "rows.jsonl");
    ASSERT_FALSE(rows.ok()) << c.line;
    EXPECT_EQ(rows.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(rows.status().message().find("rows.jsonl:2: "), std::string::npos)
        << rows.status().message();
    EXPECT_NE(rows.status().message().find(c.expect), std::string::npos)
        << "got: " << rows.status().message() << "\nexpected: " << c.expect;
  }
}

TEST(EvalRows, OomRowsMayHaveNoPeaks) {
  const std::string oom =
      Replace(Replace(CpuRow("a.onnx", 10), R"("status":"ok")", R"("status":"oom")"),
              R"("tensor":10)", R"("tensor":null)");
  auto row = ParseMeasuredRow(oom, "x", 1);
  ASSERT_TRUE(row.ok()) << row.status().ToString();
  EXPECT_EQ(row->status, RowStatus::kOom);
}

TEST(EvalRows, MissingFileIsNotFound) {
  auto rows = ReadMeasuredRows("/nonexistent/rows.jsonl");
  ASSERT_FALSE(rows.ok());
  EXPECT_EQ(rows.status().code(), ErrorCode::kNotFound);
}

// ---- aggregation and tables --------------------------------------------------------------------

MeasuredRow GpuRow(uint64_t device, RowStatus status = RowStatus::kOk,
                   std::vector<std::string> used = {}) {
  MeasuredRow r;
  r.source = "t.jsonl";
  r.line = 1;
  r.model_path = "m.onnx";
  r.family = "mlp";
  r.device_kind = "cuda";
  r.device_name = "NVIDIA A100-SXM4-40GB";
  r.status = status;
  if (status == RowStatus::kOk) r.peaks.device = device;
  r.used_for = std::move(used);
  return r;
}

RowOutcome Predicted(uint64_t device, double micros, std::optional<bool> fits = true) {
  RowOutcome o;
  o.profile = "a100-40gb";
  o.capacity = 1000;
  Prediction p;
  p.estimate.peak_device = device;
  p.micros = micros;
  p.fits = fits;
  o.predictions.push_back(p);
  return o;
}

// One backend "a": two held-out ok rows (+10 %, -10 %), one OOM row it refuses, one row whose
// model is missing, one row used for calibration (exact).
Evaluation TinyEvaluation() {
  Evaluation ev;
  ev.backends = {"a"};
  ev.rows = {GpuRow(100), GpuRow(200), GpuRow(0, RowStatus::kOom), GpuRow(300),
             GpuRow(400, RowStatus::kOk, {"calibrate:a100-40gb.cuda_context"})};
  ev.outcomes = {Predicted(110, 5), Predicted(180, 7), Predicted(5000, 9, false), RowOutcome{},
                 Predicted(400, 1)};
  ev.outcomes[3].setup = NotFound("model 'm.onnx' not found");
  return ev;
}

TEST(EvalReport, AggregatesSplitsLevelsAndFit) {
  const Summary s = Aggregate(TinyEvaluation());
  const ErrorGroup* held = FindErrorGroup(s, Split::kHeldOut, Level::kDevice, "a", "mlp");
  ASSERT_NE(held, nullptr);
  EXPECT_EQ(held->stats.n, 2);
  EXPECT_DOUBLE_EQ(*held->stats.median, 0.1);
  EXPECT_DOUBLE_EQ(*held->stats.under, 0.5);
  EXPECT_DOUBLE_EQ(*held->median_micros, 6.0);
  // One family per split: no "all" group.
  EXPECT_EQ(FindErrorGroup(s, Split::kHeldOut, Level::kDevice, "a", kAllFamilies), nullptr);
  EXPECT_EQ(FindErrorGroup(s, Split::kHeldOut, Level::kAllocated, "a", "mlp"), nullptr);
  const ErrorGroup* used = FindErrorGroup(s, Split::kUsed, Level::kDevice, "a", "mlp");
  ASSERT_NE(used, nullptr);
  EXPECT_EQ(used->stats.n, 1);
  EXPECT_DOUBLE_EQ(*used->stats.median, 0.0);
  ASSERT_EQ(s.fits.size(), 2u);
  const FitGroup& f = s.fits[0];
  EXPECT_EQ(f.split, Split::kHeldOut);
  EXPECT_EQ(f.rows, 4);
  EXPECT_EQ(f.ok, 3);
  EXPECT_EQ(f.oom, 1);
  EXPECT_EQ(f.not_evaluated, 1);
  EXPECT_EQ(f.oom_known, 1);
  EXPECT_EQ(f.oom_refused, 1);
  EXPECT_EQ(f.ok_known, 2);
  EXPECT_EQ(f.ok_refused, 0);
  EXPECT_EQ(s.used_tags.at(Split::kUsed).count("calibrate:a100-40gb.cuda_context"), 1u);
  ASSERT_EQ(s.failures.size(), 1u);
  EXPECT_NE(s.failures[0].find("not evaluated: 1 row(s), not_found"), std::string::npos);
}

TEST(EvalReport, MarkdownTableOfATinyDataset) {
  Summary s = Aggregate(TinyEvaluation());
  s.cpu_profile = "a100-40gb";
  const std::string md = RenderMarkdown(s);
  const std::string header =
      "| backend | family | N | median | MAPE | P90 | max | ±5 % | ±10 % | ±20 % | under | "
      "1 GiB bin | 8 GiB bin | median signed | median p − m | µs/row |\n"
      "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  const std::string held =
      "| a | mlp | 2 | 10.0 % | 10.0 % | 10.0 % | 10.0 % | 0.0 % | 100 % | 100 % | 50.0 % | "
      "100 % | 100 % | 0.0 % | 0.0 MiB | 6.0 |\n";
  EXPECT_NE(md.find(header + held), std::string::npos) << md;
  const std::string used =
      "| a | mlp | 1 | 0.0 % | 0.0 % | 0.0 % | 0.0 % | 100 % | 100 % | 100 % | 0.0 % | 100 % | "
      "100 % | 0.0 % | 0.0 MiB | 1.0 |\n";
  EXPECT_NE(md.find(used), std::string::npos) << md;
  EXPECT_NE(md.find("| a | mlp | 4 | 3 | 1 | 0 | 1 | 0 | 1 of 1 (100 %) | 0 of 2 (0.0 %) | 7.0 |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("`calibrate:a100-40gb.cuda_context`"), std::string::npos);
  EXPECT_LT(md.find("## Held-out rows"), md.find("## Rows used for training or calibration"));
  EXPECT_NE(
      md.find("| a | device (mlp) | 2 | 10.0 % | 10.0 % | 50.0 % | 100 % | 100 % | 0.0 MiB |"),
      std::string::npos)
      << md;

  RenderOptions doc;
  doc.doc = true;
  doc.plots_dir = "accuracy";
  const std::string page = RenderMarkdown(s, doc);
  EXPECT_EQ(page.rfind("# Accuracy\n", 0), 0u);
  EXPECT_NE(page.find("bash scripts/accuracy.sh"), std::string::npos);
  EXPECT_NE(page.find("CC BY 4.0"), std::string::npos);
  EXPECT_NE(page.find("86 % under-estimates"), std::string::npos);
  EXPECT_NE(page.find("(accuracy/scatter_a.svg)"), std::string::npos);
}

TEST(EvalReport, CsvAndJson) {
  const Summary s = Aggregate(TinyEvaluation());
  const std::string csv = RenderCsv(s);
  EXPECT_EQ(csv.rfind("split,level,backend,family,n,median,", 0), 0u);
  EXPECT_NE(csv.find("\nheld-out,device,a,mlp,2,0.1,0.1,0.1,0.1,0,-5,0,1,1,0.5,1,1,6,4,3,1,0,1,0,1,"
                     "1,2,0\n"),
            std::string::npos)
      << csv;
  const auto j = nlohmann::json::parse(RenderJson(s));
  EXPECT_EQ(j["schema"], kAccuracySchema);
  EXPECT_EQ(j["errors"][0]["n"], 2);
  EXPECT_EQ(j["fit"][0]["oom_refused"], 1);
  EXPECT_TRUE(j["errors"][0]["bin1gib"].is_number());
}

TEST(EvalReport, PercentText) {
  EXPECT_EQ(Pct(std::nullopt), "—");
  EXPECT_EQ(Pct(0.0), "0.0 %");
  EXPECT_EQ(Pct(0.0042), "0.42 %");
  EXPECT_EQ(Pct(0.123), "12.3 %");
  EXPECT_EQ(Pct(1.5), "150 %");
  EXPECT_EQ(Pct(1.0), "100 %");
  EXPECT_EQ(Pct(0.9996), "99.96 %");
  EXPECT_TRUE(ParseFormat("md").ok());
  EXPECT_FALSE(ParseFormat("xml").ok());
}

// ---- held-out rules ----------------------------------------------------------------------------

TEST(EvalHeldOut, UsedForTagsApplyToTheirBackend) {
  MeasuredRow row;
  EXPECT_FALSE(UsedBy(row, "learned"));
  row.used_for = {"train:learned-v1"};
  EXPECT_TRUE(UsedBy(row, "learned"));
  EXPECT_FALSE(UsedBy(row, "analytical"));
  EXPECT_FALSE(UsedBy(row, "learn"));  // a prefix of the name is not the name
  row.used_for = {"train:learned"};
  EXPECT_TRUE(UsedBy(row, "learned"));
  EXPECT_FALSE(UsedBy(row, "symbolic"));
  row.used_for = {"calibrate:a100-40gb.cuda_context"};  // a profile: every backend
  EXPECT_TRUE(UsedBy(row, "analytical"));
  EXPECT_TRUE(UsedBy(row, "learned"));
}

TEST(EvalHeldOut, HoldoutClauses) {
  const RowAttrs a = {{"arch", "gradual"}, {"depth", "4"}, {"source", "gpumemnet"}};
  EXPECT_TRUE(MatchesClause("arch=gradual", a));
  EXPECT_FALSE(MatchesClause("arch=pyramid", a));
  EXPECT_TRUE(MatchesClause("depth=3-5", a));
  EXPECT_TRUE(MatchesClause("depth=4-4", a));
  EXPECT_FALSE(MatchesClause("depth=5-9", a));
  EXPECT_FALSE(MatchesClause("act=relu", a));  // absent attribute
  EXPECT_FALSE(MatchesClause("nonsense", a));
}

MeasuredRow GmnRow(int index, RowStatus status = RowStatus::kOk) {
  MeasuredRow r;
  r.id = "id" + std::to_string(index);
  r.model_path = "gpumemnet:" + std::to_string(index);
  r.family = "gpumemnet";
  r.device_kind = "cuda";
  r.status = status;
  r.peaks.device = 1000;
  return r;
}

TEST(EvalHeldOut, LearnedTrainingRowsAreReDerivedAndVerified) {
  // Rows 0..3: 1 is "gradual" (a test row), 3 is an error row (never a sample).
  std::vector<MeasuredRow> rows = {GmnRow(0), GmnRow(1), GmnRow(2), GmnRow(3, RowStatus::kError)};
  const std::map<int, RowAttrs> gmn = {{0, {{"arch", "pyramid"}}},
                                       {1, {{"arch", "gradual"}}},
                                       {2, {{"arch", "uniform"}}},
                                       {3, {{"arch", "pyramid"}}}};
  std::vector<RowAttrs> attrs;
  for (const MeasuredRow& r : rows) attrs.push_back(AttrsOf(r, gmn));
  EXPECT_EQ(attrs[1].at("source"), "gpumemnet");
  nlohmann::json w = {{"training",
                       {{"data",
                         {{"inputs", {{{"file", "gpumemnet/mlp_data_step1.csv"}}}},
                          {"train_rows", 2},
                          {"train_row_ids_sha256", base::Sha256Hex("id0\nid2\n")}}},
                        {"split", {{"holdout", {"arch=gradual"}}}}}}};
  TrainingMarks m = MarkLearnedTrainingRows(w.dump(), attrs, &rows);
  EXPECT_TRUE(m.applied);
  EXPECT_TRUE(m.verified) << m.note;
  EXPECT_EQ(m.marked, 2);
  EXPECT_TRUE(UsedBy(rows[0], "learned"));
  EXPECT_FALSE(UsedBy(rows[1], "learned"));
  EXPECT_TRUE(UsedBy(rows[2], "learned"));
  EXPECT_FALSE(UsedBy(rows[3], "learned"));
  EXPECT_FALSE(UsedBy(rows[0], "symbolic"));
  EXPECT_NE(m.note.find("verified"), std::string::npos);

  // A different hash: still marked (conservative), but not verified.
  std::vector<MeasuredRow> again = {GmnRow(0), GmnRow(1), GmnRow(2)};
  w["training"]["data"]["train_row_ids_sha256"] = "00";
  m = MarkLearnedTrainingRows(w.dump(), attrs, &again);
  EXPECT_FALSE(m.verified);
  EXPECT_EQ(m.marked, 2);
  EXPECT_NE(m.note.find("NOT"), std::string::npos);

  // No weights, or weights trained on other files: nothing is marked.
  std::vector<MeasuredRow> none = {GmnRow(0)};
  EXPECT_FALSE(MarkLearnedTrainingRows("", attrs, &none).applied);
  w["training"]["data"]["inputs"] = {{{"file", "other.jsonl"}}};
  EXPECT_EQ(MarkLearnedTrainingRows(w.dump(), attrs, &none).marked, 0);
  EXPECT_TRUE(none[0].used_for.empty());
}

TEST(EvalHeldOut, SplitIsPerBackendInTheTables) {
  Evaluation ev;
  ev.backends = {"a", "learned"};
  for (int i = 0; i < 2; ++i) {
    MeasuredRow r = GpuRow(100);
    if (i == 1) r.used_for = {"train:learned"};
    ev.rows.push_back(r);
    RowOutcome o = Predicted(110, 1);
    o.predictions.push_back(o.predictions[0]);
    ev.outcomes.push_back(o);
  }
  const Summary s = Aggregate(ev);
  EXPECT_EQ(FindErrorGroup(s, Split::kHeldOut, Level::kDevice, "a", "mlp")->stats.n, 2);
  EXPECT_EQ(FindErrorGroup(s, Split::kHeldOut, Level::kDevice, "learned", "mlp")->stats.n, 1);
  EXPECT_EQ(FindErrorGroup(s, Split::kUsed, Level::kDevice, "learned", "mlp")->stats.n, 1);
  EXPECT_EQ(FindErrorGroup(s, Split::kUsed, Level::kDevice, "a", "mlp"), nullptr);
}

TEST(EvalHeldOut, BackendsUnavailableForEveryRowAreDropped) {
  Evaluation ev = TinyEvaluation();
  ev.backends = {"a", "b"};
  for (RowOutcome& o : ev.outcomes) {
    if (!o.setup.ok()) continue;
    Prediction p;
    p.status = Unavailable("no weights");
    o.predictions.push_back(p);
  }
  const std::vector<BackendInfo> dropped = DropUnavailable(&ev);
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0].name, "b");
  EXPECT_EQ(dropped[0].reason, "no weights");
  EXPECT_EQ(ev.backends, std::vector<std::string>{"a"});
  EXPECT_EQ(ev.outcomes[0].predictions.size(), 1u);
  EXPECT_TRUE(DropUnavailable(&ev).empty());
}

// ---- evaluator ---------------------------------------------------------------------------------

// y = x W: a one-MatMul MLP with a symbolic batch, written to <dir>/models/mlp.onnx.
void WriteOneMatMulModel(const TempDir& dir) {
  GraphBuilder b(17);
  b.AddInput("x", kFloat, {"batch", 64});
  b.AddInitializer("w", {64, 32});
  b.AddNode("MatMul", {"x", "w"}, {"y"});
  b.AddOutput("y", kFloat, {"batch", 32});
  dir.WriteFile("models/mlp.onnx", b.Serialize());
}

TEST(EvalEvaluator, EstimatesRowsOfAModelFile) {
  TempDir dir;
  WriteOneMatMulModel(dir);
  const std::string rows_path = dir.WriteFile(
      "rows.jsonl", CpuRow("models/mlp.onnx", 100000) + "\n" + CpuRow("models/absent.onnx", 5) +
                        "\n" +
                        Replace(CpuRow("models/mlp.onnx", 7), R"("kind":"cpu","name":null)",
                                R"("kind":"cuda","name":"TPU")") +
                        "\n");
  auto rows = ReadMeasuredRows(rows_path);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  EvalConfig config;
  config.backends = {"analytical"};
  config.root = "/nonexistent";  // the model is found next to the rows file
  auto evaluator = Evaluator::Create(config);
  ASSERT_TRUE(evaluator.ok()) << evaluator.status().ToString();
  Evaluation ev = (*evaluator)->EvaluateAll(*rows);
  ASSERT_EQ(ev.outcomes.size(), 3u);
  ASSERT_TRUE(ev.outcomes[0].setup.ok()) << ev.outcomes[0].setup.ToString();
  EXPECT_EQ(ev.outcomes[0].profile, "a100-40gb");
  EXPECT_FALSE(ev.outcomes[0].capacity.has_value());  // CPU row: capacity unknown
  ASSERT_EQ(ev.outcomes[0].predictions.size(), 1u);
  const Prediction& p = ev.outcomes[0].predictions[0];
  ASSERT_TRUE(p.status.ok()) << p.status.ToString();
  EXPECT_GT(p.estimate.peak_allocated, 0u);
  EXPECT_FALSE(p.fits.has_value());
  EXPECT_EQ(ev.outcomes[1].setup.code(), ErrorCode::kNotFound);
  EXPECT_EQ(ev.outcomes[2].setup.code(), ErrorCode::kNotFound);  // no profile for "TPU"
  const Summary s = Aggregate(ev);
  const ErrorGroup* g = FindErrorGroup(s, Split::kHeldOut, Level::kTensor, "analytical", "mlp");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->stats.n, 1);

  // A row measured on another model (sha256 differs) is not evaluated.
  auto other = ParseMeasuredRow(
      Replace(CpuRow("models/mlp.onnx", 9), R"("family")", R"("sha256":"ff","family")"), rows_path,
      9);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  RowOutcome mismatch = (*evaluator)->EvaluateRow(*other);
  EXPECT_EQ(mismatch.setup.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(mismatch.setup.message().find("different model"), std::string::npos);
}

TEST(EvalEvaluator, GpumemnetRowsAreRebuiltInMemory) {
  const std::string on_a100 = Replace(CpuRow("gpumemnet:0", 1), R"("kind":"cpu","name":null)",
                                      R"("kind":"cuda","name":"NVIDIA A100-SXM4-40GB")");
  auto rows = ParseMeasuredRows(
      on_a100 + "\n" + CpuRow("gpumemnet:x1", 1) + "\n" + CpuRow("gpumemnet:999999", 1) + "\n",
      "g.jsonl");
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  EvalConfig config;
  config.backends = {"analytical"};
  config.root = MEMEST_SOURCE_DIR;
  auto evaluator = Evaluator::Create(config);
  ASSERT_TRUE(evaluator.ok());
  RowOutcome bad = (*evaluator)->EvaluateRow((*rows)[1]);
  EXPECT_EQ(bad.setup.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.setup.message().find("gpumemnet:<row index>"), std::string::npos);
  RowOutcome first = (*evaluator)->EvaluateRow((*rows)[0]);
  if (first.setup.code() == ErrorCode::kNotFound) GTEST_SKIP() << first.setup.ToString();
  ASSERT_TRUE(first.setup.ok()) << first.setup.ToString();
  EXPECT_EQ(first.profile, "a100-40gb");
  ASSERT_TRUE(first.capacity.has_value());
  ASSERT_TRUE(first.predictions[0].status.ok());
  EXPECT_GT(first.predictions[0].estimate.peak_device, first.predictions[0].estimate.peak_reserved);
  EXPECT_EQ((*evaluator)->EvaluateRow((*rows)[2]).setup.code(), ErrorCode::kNotFound);
}

TEST(EvalEvaluator, TheStackAppliesToCudaRowsOnly) {
  TempDir dir;
  WriteOneMatMulModel(dir);
  const std::string rows_path = dir.WriteFile(
      "rows.jsonl", Replace(CpuRow("models/mlp.onnx", 7), R"("kind":"cpu","name":null)",
                            R"("kind":"cuda","name":"NVIDIA H200")") +
                        "\n" + CpuRow("models/mlp.onnx", 7) + "\n");
  auto rows = ReadMeasuredRows(rows_path);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  auto device_of = [&](const std::string& stack, size_t row) {
    EvalConfig config;
    config.backends = {"analytical"};
    config.gpu_stacks = {{"h200-141gb", stack}, {"a100-40gb", "pytorch-eager"}};
    auto evaluator = Evaluator::Create(config);
    EXPECT_TRUE(evaluator.ok());
    RowOutcome o = (*evaluator)->EvaluateRow((*rows)[row]);
    EXPECT_TRUE(o.setup.ok()) << o.setup.ToString();
    EXPECT_TRUE(o.predictions[0].status.ok()) << o.predictions[0].status.ToString();
    return o.predictions[0].estimate.peak_device;
  };
  const StackProfile measured = *ResolveStack("h200-pytorch2.11-lazy");
  const StackProfile fallback = *ResolveStack("");
  const uint64_t outside_measured = measured.cuda_context.bytes + measured.library_memory.bytes;
  const uint64_t outside_default = fallback.cuda_context.bytes + fallback.library_memory.bytes;
  EXPECT_EQ(device_of("h200-pytorch2.11-lazy", 0) - device_of("", 0),
            outside_measured - outside_default);
  EXPECT_EQ(device_of("h200-pytorch2.11-lazy", 1), device_of("", 1));  // a CPU row
}

TEST(EvalEvaluator, UnknownBackendFails) {
  EvalConfig config;
  config.backends = {"nope"};
  EXPECT_FALSE(Evaluator::Create(config).ok());
}

// ---- plots -------------------------------------------------------------------------------------

TEST(EvalPlots, ByteLabels) {
  EXPECT_EQ(BytesLabel(1 << 20), "1 MiB");
  EXPECT_EQ(BytesLabel(3.0 * (1 << 30)), "3 GiB");
  EXPECT_EQ(BytesLabel(512), "512 B");
  EXPECT_EQ(BytesLabel(256 * 1024.0), "256 KiB");
}

TEST(EvalPlots, SvgHasAxesLegendAndPoints) {
  const std::string scatter =
      ScatterSvg("t", {{"device level", "#1f77b4", {{1 << 20, 2 << 20}, {1 << 30, 1 << 29}}}});
  EXPECT_EQ(scatter.rfind("<svg", 0), 0u);
  EXPECT_NE(scatter.find("</svg>"), std::string::npos);
  EXPECT_NE(scatter.find("device level (N = 2)"), std::string::npos);
  EXPECT_NE(scatter.find("1 MiB"), std::string::npos);
  EXPECT_NE(scatter.find("1 GiB"), std::string::npos);
  EXPECT_NE(scatter.find("measured peak"), std::string::npos);
  EXPECT_EQ(std::count(scatter.begin(), scatter.end(), '\n') > 10, true);
  size_t circles = 0;
  for (size_t at = scatter.find("<circle"); at != std::string::npos;
       at = scatter.find("<circle", at + 1)) {
    ++circles;
  }
  EXPECT_EQ(circles, 2u);

  const std::string hist =
      HistogramSvg("h", {{"tensor level", "#d62728", {-0.5, -0.1, 0.0, 0.1, 0.2, 5.0}}});
  EXPECT_NE(hist.find("tensor level (N = 6, median +5 %)"), std::string::npos) << hist;
  EXPECT_NE(hist.find("0 = exact"), std::string::npos);
  EXPECT_NE(hist.find("share of rows"), std::string::npos);
  EXPECT_NE(ScatterSvg("empty", {}).find("no rows"), std::string::npos);
}

TEST(EvalPlots, MakePlotsWritesOnePairPerBackend) {
  const auto files = MakePlots(TinyEvaluation());
  ASSERT_EQ(files.size(), 2u);
  EXPECT_NE(files.at("scatter_a.svg").find("device level (N = 2)"), std::string::npos);
  EXPECT_TRUE(files.count("errors_a.svg"));
}

// ---- the memest-eval command ------------------------------------------------------------------

#ifdef MEMEST_EVAL_PATH
struct CommandResult {
  int exit_code = -1;
  std::string out;
};

CommandResult RunEval(const std::string& args, const TempDir& dir) {
  const std::string out_file = dir.path() + "/stdout.txt";
  const std::string cmd = std::string(MEMEST_EVAL_PATH) + " " + args + " > " + out_file + " 2>&1";
  const int status = std::system(cmd.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(out_file);
  std::ostringstream s;
  s << in.rdbuf();
  r.out = s.str();
  return r;
}

TEST(EvalCommand, TablesFromARowsFileAndClearErrors) {
  GraphBuilder b(17);
  b.AddInput("x", kFloat, {"batch", 16});
  b.AddInitializer("w", {16, 8});
  b.AddNode("MatMul", {"x", "w"}, {"y"});
  b.AddOutput("y", kFloat, {"batch", 8});
  TempDir dir;
  dir.WriteFile("m.onnx", b.Serialize());
  const std::string good =
      dir.WriteFile("good.jsonl", CpuRow("m.onnx", 4096) + "\n" + CpuRow("m.onnx", 8192) + "\n");
  CommandResult md = RunEval("-q --rows " + good + " --plots " + dir.path() + "/plots", dir);
  EXPECT_EQ(md.exit_code, 0) << md.out;
  EXPECT_NE(md.out.find("### Tensor level (held-out)"), std::string::npos) << md.out;
  EXPECT_NE(md.out.find("| analytical | mlp | 2 |"), std::string::npos) << md.out;
  std::ifstream svg(dir.path() + "/plots/scatter_analytical.svg");
  EXPECT_TRUE(svg.good());

  CommandResult json = RunEval("-q --format json --backend analytical --rows " + good, dir);
  ASSERT_EQ(json.exit_code, 0) << json.out;
  const auto j = nlohmann::json::parse(json.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << json.out;
  EXPECT_EQ(j["errors"][0]["level"], "tensor");
  EXPECT_EQ(j["errors"][0]["n"], 2);

  const std::string bad =
      dir.WriteFile("bad.jsonl", CpuRow("m.onnx", 1) + "\n" + "{\"schema\": 1}\n");
  CommandResult err = RunEval("-q --rows " + bad, dir);
  EXPECT_EQ(err.exit_code, 3);
  EXPECT_NE(err.out.find("bad.jsonl:2: schema: expected a string"), std::string::npos) << err.out;

  EXPECT_EQ(RunEval("-q", dir).exit_code, 2);
  EXPECT_EQ(RunEval("-q --rows " + good + " --format xml", dir).exit_code, 2);
  EXPECT_EQ(RunEval("-q --rows " + good + " --backend nope", dir).exit_code, 2);
}
#endif  // MEMEST_EVAL_PATH

}  // namespace
}  // namespace memest::eval
