// tools/eval/report.cc -- see report.h.
#include "tools/eval/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <tuple>
#include <utility>

#include "tools/eval/heldout.h"

namespace memest::eval {
namespace {

using Json = nlohmann::json;

constexpr Split kSplits[] = {Split::kHeldOut, Split::kUsed};

struct Acc {
  std::vector<Pair> pairs;
  std::vector<double> micros;
};

// ---- markdown helpers ----------------------------------------------------------------------

struct Table {
  std::vector<std::string> header;
  std::vector<bool> right;  // right-aligned columns
  std::vector<std::vector<std::string>> rows;
};

std::string RenderTable(const Table& t) {
  std::string out = "|";
  for (const auto& h : t.header) out += " " + h + " |";
  out += "\n|";
  for (size_t i = 0; i < t.header.size(); ++i) {
    out += (i < t.right.size() && t.right[i]) ? "---:|" : "---|";
  }
  out += "\n";
  for (const auto& r : t.rows) {
    out += "|";
    for (const auto& c : r) out += " " + c + " |";
    out += "\n";
  }
  return out;
}

std::string Micros(std::optional<double> us) {
  if (!us) return "—";
  if (*us >= 100) return fmt::format("{:.0f}", *us);
  return fmt::format("{:.1f}", *us);
}

std::string Num(int64_t n) {
  std::string s = std::to_string(n);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return s;
}

// "12 of 30 (40.0 %)" or "0 of 0".
std::string OfTotal(int64_t part, int64_t total) {
  if (total == 0) return "0 of 0";
  return Num(part) + " of " + Num(total) + " (" + Pct(static_cast<double>(part) / total) + ")";
}

std::string SignedPct(std::optional<double> fraction) {
  if (!fraction) return "—";
  return (*fraction > 0 ? "+" : "") + Pct(fraction);
}

// Signed bytes in MiB: "+12.5 MiB", "-1,003 MiB", "0.0 MiB".
std::string GapMiB(std::optional<double> bytes) {
  if (!bytes) return "—";
  const double mib = *bytes / 1048576.0;
  const double a = mib < 0 ? -mib : mib;
  const std::string digits =
      a >= 100 ? Num(static_cast<int64_t>(a + 0.5)) : fmt::format("{:.1f}", a);
  if (digits == "0.0") return "0.0 MiB";
  return (mib > 0 ? "+" : "-") + digits + " MiB";
}

const char* LevelTitle(Level level) {
  switch (level) {
    case Level::kDevice:
      return "Device level";
    case Level::kReserved:
      return "Allocator level: reserved";
    case Level::kAllocated:
      return "Allocator level: allocated";
    case Level::kTensor:
      return "Tensor level";
  }
  return "?";
}

std::string LevelWhat(Level level, const std::string& cpu_profile) {
  switch (level) {
    case Level::kDevice:
      return "Measured `peaks.device` (GPUMemNet rows: maximum of nvidia-smi `memory.used`, "
             "sampled once a second; memest-measure rows: max of total − free from "
             "cudaMemGetInfo) vs predicted `peak_device` (CUDA context + reserved + memory "
             "outside the allocator).";
    case Level::kReserved:
      return "Measured `peaks.reserved` (`torch.cuda.max_memory_reserved`) vs predicted "
             "`peak_reserved`.";
    case Level::kAllocated:
      return "Measured `peaks.allocated` (`torch.cuda.max_memory_allocated`) vs predicted "
             "`peak_allocated`.";
    case Level::kTensor: {
      const std::string head =
          "Measured `peaks.tensor` (maximum of live tensor bytes, the sum of `nbytes`, from "
          "memest-measure's tracking allocator; CPU rows have only this level) vs predicted "
          "`peak_allocated` with the `" +
          cpu_profile + "` profile. ";
      Result<GpuProfile> gpu = FindGpuProfile(cpu_profile);
      if (gpu.ok() && gpu->cublas_workspace.bytes == 0) {
        return head +
               "That profile has no cuBLAS workspace; the prediction still rounds every "
               "tensor up to a 512-byte block.";
      }
      const std::string ws =
          gpu.ok() ? fmt::format("{:.4g} MiB", gpu->cublas_workspace.bytes / 1048576.0) : "?";
      return head +
             "The prediction counts 512-byte block rounding and that profile's cuBLAS "
             "workspaces (2 × " +
             ws +
             " in training when the graph has a GEMM), which a CPU run does not allocate: small "
             "models are over-predicted at this level by construction (see \"median p − m\").";
    }
  }
  return "";
}

Table ErrorTable(const std::vector<const ErrorGroup*>& groups) {
  Table t;
  for (const char* h :
       {"backend", "family", "N", "median", "MAPE", "P90", "max", "±5 %", "±10 %", "±20 %", "under",
        "1 GiB bin", "8 GiB bin", "median signed", "median p − m", "µs/row"}) {
    t.header.push_back(h);
  }
  const size_t text_cols = 2;  // backend, family
  for (size_t i = 0; i < t.header.size(); ++i) t.right.push_back(i >= text_cols);
  for (const ErrorGroup* g : groups) {
    std::vector<std::string> r;
    const ErrorStats& st = g->stats;
    for (std::string c :
         {g->backend, g->family, Num(st.n), Pct(st.median), Pct(st.mean), Pct(st.p90), Pct(st.max),
          Pct(st.within5), Pct(st.within10), Pct(st.within20), Pct(st.under), Pct(st.bin1),
          Pct(st.bin8), SignedPct(st.median_signed), GapMiB(st.median_gap),
          Micros(g->median_micros)}) {
      r.push_back(std::move(c));
    }
    t.rows.push_back(std::move(r));
  }
  return t;
}

Table FitTable(const std::vector<const FitGroup*>& groups) {
  Table t;
  t.header = {"backend",
              "family",
              "rows",
              "ok",
              "oom",
              "error",
              "not evaluated",
              "estimate failed",
              "OOM rows predicted \"does not fit\"",
              "ok rows predicted \"does not fit\"",
              "µs/row"};
  for (size_t i = 0; i < t.header.size(); ++i) t.right.push_back(i >= 2);
  for (const FitGroup* g : groups) {
    t.rows.push_back({g->backend, g->family, Num(g->rows), Num(g->ok), Num(g->oom), Num(g->error),
                      Num(g->not_evaluated), Num(g->failed), OfTotal(g->oom_refused, g->oom_known),
                      OfTotal(g->ok_refused, g->ok_known), Micros(g->median_micros)});
  }
  return t;
}

// The family whose numbers stand for a whole split: "all" when present, else the only family.
std::vector<const ErrorGroup*> HeadlineGroups(const Summary& s, Split split) {
  std::vector<const ErrorGroup*> out;
  for (Level level : kLevels) {
    for (const std::string& b : s.backends) {
      const ErrorGroup* pick = FindErrorGroup(s, split, level, b, kAllFamilies);
      if (pick == nullptr) {
        for (const ErrorGroup& g : s.errors) {
          if (g.split == split && g.level == level && g.backend == b) {
            pick = &g;
            break;
          }
        }
      }
      if (pick != nullptr) out.push_back(pick);
    }
  }
  return out;
}

Table HeadlineTable(const std::vector<const ErrorGroup*>& groups) {
  Table t;
  t.header = {"backend",         "truth", "rows",      "median",      "P90",
              "under-estimates", "±10 %", "1 GiB bin", "median p − m"};
  t.right = {false, false, true, true, true, true, true, true, true};
  for (const ErrorGroup* g : groups) {
    std::string truth = ToString(g->level);
    if (g->family != kAllFamilies) truth += " (" + g->family + ")";
    t.rows.push_back({g->backend, truth, Num(g->stats.n), Pct(g->stats.median), Pct(g->stats.p90),
                      Pct(g->stats.under), Pct(g->stats.within10), Pct(g->stats.bin1),
                      GapMiB(g->stats.median_gap)});
  }
  return t;
}

// One line per headline group: how far below or above the measurement the prediction is, in
// bytes, and how much that gap varies between rows.
std::string HeadlineReading(const std::vector<const ErrorGroup*>& groups) {
  std::string out;
  for (const ErrorGroup* g : groups) {
    const ErrorStats& st = g->stats;
    if (!st.median_gap) continue;
    out += fmt::format(
        "- `{}`, {} level: predicted − measured is {} at the median; 80 % of rows lie between {} "
        "and {}; {} of rows are under-estimated.\n",
        g->backend, ToString(g->level), GapMiB(st.median_gap), GapMiB(st.gap_p10),
        GapMiB(st.gap_p90), Pct(st.under));
  }
  if (!out.empty()) {
    out +=
        "\nA gap that hardly changes between small and large models is a fixed per-process "
        "cost (CUDA context, libraries loaded outside the allocator) that the GPU profile does "
        "not match; a gap that grows with the model is in the per-tensor accounting.\n";
  }
  return out;
}

std::string SplitBody(const Summary& s, Split split) {
  std::string out;
  bool any = false;
  for (Level level : kLevels) {
    std::vector<const ErrorGroup*> groups;
    for (const ErrorGroup& g : s.errors) {
      if (g.split == split && g.level == level) groups.push_back(&g);
    }
    if (groups.empty()) continue;
    any = true;
    out += fmt::format("### {} ({})\n\n{}\n\n", LevelTitle(level), ToString(split),
                       LevelWhat(level, s.cpu_profile));
    out += RenderTable(ErrorTable(groups)) + "\n";
  }
  if (!any) out += "No row of this split has a measured peak that a backend estimated.\n\n";
  std::vector<const FitGroup*> fits;
  for (const FitGroup& g : s.fits) {
    if (g.split == split) fits.push_back(&g);
  }
  if (!fits.empty()) {
    out += fmt::format(
        "### Row status, failures and fit ({})\n\nRows with status `oom` or `error` are not in "
        "the error tables above; they are counted here. \"Predicted does not fit\" means "
        "`peak_device` > the device's capacity (the GPU profile's usable memory, else the row's "
        "`device.total_memory`); it is counted only where the capacity is known (CUDA rows). On "
        "OOM rows it is the right call; on ok rows it is a false refusal.\n\n",
        ToString(split));
    out += RenderTable(FitTable(fits)) + "\n";
  }
  return out;
}

std::string Definitions() {
  return R"(## Definitions

For one row, with predicted bytes p and measured bytes m > 0 at the same truth level:

- **relative error** e = (p − m) / m; the tables show |e| except "median signed" (e itself:
  positive = over-estimate).
- **median**: of |e| over the N rows; the middle value for odd N, the mean of the two middle
  values for even N. **MAPE**: the mean of |e|. **max**: the largest |e|.
- **P90**: nearest rank, the ⌈0.9 N⌉-th smallest |e| (no interpolation; of 10 rows, the 9th).
- **±x %**: share of rows with |p − m| × 100 ≤ x × m, computed exactly on integers (a row exactly
  x % off counts as within).
- **under**: share of rows with p < m (strictly): the estimate would have let the job OOM.
- **1 GiB bin / 8 GiB bin**: share of rows with ⌊p / B⌋ = ⌊m / B⌋, B = 2^30 or 2^33 bytes
  (GPUMemNet's "1 GB" MLP bins and "8 GB" CNN/Transformer bins, read as binary gigabytes since
  its labels are MiB). A value exactly on a boundary k·B belongs to bin k, the bin it opens.
- **median p − m**: the median of p − m in MiB; a constant offset (e.g. a CUDA context the
  GPU profile under-states) shows here.
- **µs/row**: median wall time of one `Estimator::Run` (model loading excluded), one thread.
- **held-out / used**: a row is *used* for a backend when its `used_for` names that backend
  (`train:<backend>`, `train:<backend>-<version>`) or names no backend at all (e.g.
  `calibrate:<gpu>.cuda_context`, a GPU profile every backend reads); otherwise it is held out
  for that backend. Used rows appear only in the "used" tables. GPUMemNet rows carry no marks of
  their own: the learned backend's training rows are re-derived from learned/weights.json and
  marked `train:learned` (see Inputs).
)";
}

std::string BackendsLine(const Summary& s) {
  std::string out = "Backends evaluated: ";
  for (size_t i = 0; i < s.backends.size(); ++i) {
    out += (i ? ", " : "") + ("`" + s.backends[i] + "`");
  }
  if (s.backends.empty()) out += "none";
  out += ".";
  if (!s.unavailable.empty()) {
    out += " Not evaluated (unavailable in this build): ";
    for (size_t i = 0; i < s.unavailable.size(); ++i) {
      out +=
          (i ? "; " : "") + ("`" + s.unavailable[i].name + "` (" + s.unavailable[i].reason + ")");
    }
    out += ".";
  }
  return out + "\n";
}

std::string InputsSection(const Summary& s) {
  std::string out = "## Inputs\n\n";
  for (const std::string& n : s.notes) out += "- " + n + "\n";
  out += "- " + Num(s.rows) + " rows in all. " + BackendsLine(s);
  if (!s.machine.empty()) out += "- Timings taken on: " + s.machine + ".\n";
  if (!s.row_errors.empty()) {
    out += "- Rows measured as `oom` or `error` (counted, not in the error tables):\n";
    for (const std::string& e : s.row_errors) out += "  - " + e + "\n";
  }
  if (!s.failures.empty()) {
    out += "- Rows a backend could not estimate (by error code; first message):\n";
    for (const std::string& f : s.failures) out += "  - " + f + "\n";
  }
  out += "\n";
  return out;
}

std::string ReportBody(const Summary& s) {
  std::string out;
  out +=
      "## Held-out rows\n\nFor each backend, the rows that were not used to train or calibrate "
      "anything it depends on (see \"held-out / used\" under Definitions).\n\n";
  out += SplitBody(s, Split::kHeldOut);
  out += "## Rows used for training or calibration\n\n";
  auto tags = s.used_tags.find(Split::kUsed);
  bool any_used = false;
  for (const FitGroup& g : s.fits) any_used |= g.split == Split::kUsed;
  if (!any_used) {
    out +=
        "None: no row in the input is marked in `used_for` for an evaluated backend, so every "
        "number above is held out.\n\n";
  } else {
    out += "Rows marked in `used_for` (";
    if (tags != s.used_tags.end()) {
      bool first = true;
      for (const std::string& t : tags->second) {
        out += (first ? "" : ", ") + ("`" + t + "`");
        first = false;
      }
    }
    out +=
        "). A backend's errors on rows it was trained or calibrated on are not evidence of "
        "its accuracy on new jobs.\n\n";
    out += SplitBody(s, Split::kUsed);
  }
  return out;
}

std::optional<double> Field(const ErrorGroup* g, std::optional<double> ErrorStats::*field) {
  if (g == nullptr) return std::nullopt;
  return g->stats.*field;
}

// "analytical 12.3 %, symbolic 4.5 %" for one statistic of one group per backend.
std::string PerBackend(const Summary& s, Split split, Level level, const std::string& family,
                       std::optional<double> ErrorStats::*field) {
  std::string out;
  for (const std::string& b : s.backends) {
    const ErrorGroup* g = FindErrorGroup(s, split, level, b, family);
    if (g == nullptr) continue;
    out += (out.empty() ? "" : "; ") + b + " " + Pct(Field(g, field)) + " (N = " + Num(g->stats.n) +
           ")";
  }
  return out.empty() ? "no rows of this kind yet" : out;
}

// The group standing for a split at one level: "all", else the only family.
std::string DeviceFamily(const Summary& s, Level level) {
  for (const ErrorGroup& g : s.errors) {
    if (g.split == Split::kHeldOut && g.level == level && g.family == kAllFamilies) {
      return kAllFamilies;
    }
  }
  for (const ErrorGroup& g : s.errors) {
    if (g.split == Split::kHeldOut && g.level == level) return g.family;
  }
  return kAllFamilies;
}

std::string AnchorsSection(const Summary& s) {
  const std::string dev = DeviceFamily(s, Level::kDevice);
  const std::string alloc = DeviceFamily(s, Level::kAllocated);
  Table t;
  t.header = {"published", "their figure", "their rows and truth", "memest, this run (held out)",
              "comparable?"};
  t.rows = {
      {"GPUMemNet MLP ensemble", "97.6–98.4 % right 1 GB bin",
       "3-fold CV on these 6,000 MLP rows (trained on them); device level",
       "1 GiB bin accuracy on the GPUMemNet rows: " +
           PerBackend(s, Split::kHeldOut, Level::kDevice, "gpumemnet", &ErrorStats::bin1),
       "same rows and truth; GPUMemNet's figure is 3-fold cross-validation; memest scores each "
       "backend only on rows it was not trained on (analytical and symbolic are fitted to none; "
       "learned: its held-out split, see Inputs)"},
      {"GPUMemNet on 18 real models", "right bin 9/18; 56.6 % MAPE (bin edge)",
       "VGG16, ResNet-50, BERT, GPT-2, …; device level", "not in this data", "no"},
      {"FakeTensor / MemTracker vs nvidia-smi", "median 45.8 %; 86 % under-estimates",
       "5,085 timm runs; device level",
       "median: " + PerBackend(s, Split::kHeldOut, Level::kDevice, dev, &ErrorStats::median) +
           "; under-estimates: " +
           PerBackend(s, Split::kHeldOut, Level::kDevice, dev, &ErrorStats::under),
       "same truth level, different models"},
      {"MemTracker's own tests", "accepts ±10 % of allocator active peak", "allocator level",
       "within ±10 % at allocated level: " +
           PerBackend(s, Split::kHeldOut, Level::kAllocated, alloc, &ErrorStats::within10),
       "same truth level, different models"},
      {"Horus formula", "29.5 % median", "GPUMemNet's 18 real rows; device level",
       "median at device level: " +
           PerBackend(s, Split::kHeldOut, Level::kDevice, dev, &ErrorStats::median),
       "same truth level, different models"},
      {"DNNPerf (GNN)", "13.7 % memory error", "their training graphs",
       "MAPE at device level: " +
           PerBackend(s, Split::kHeldOut, Level::kDevice, dev, &ErrorStats::mean),
       "different models and setup"},
      {"PerfSeer (GNN)", "≈ 5.1 % MAPE (secondary source)", "ONNX-like graphs", "see DNNPerf row",
       "different models and setup"},
      {"LLMem", "≤ 1.6 % single GPU", "LLM fine-tuning", "not in this data", "no"},
  };
  t.right.assign(t.header.size(), false);
  return "## Compared with published figures\n\nFigures as published by each tool's authors "
         "(papers and repositories). Only the first row is measured on the same rows; "
         "the others are on other models and only say which ballpark a number is in.\n\n" +
         RenderTable(t) + "\n";
}

std::string PlotsSection(const Summary& s, const std::string& dir) {
  std::string out =
      "## Plots\n\nHeld-out rows only. Scatter: predicted vs measured bytes on log-log axes, one "
      "colour per truth level; points on the diagonal are exact, the band is ±20 %. Histogram: "
      "signed relative error (share of the level's rows per bin; the bin width is on the x "
      "axis).\n\n";
  for (const std::string& b : s.backends) {
    out += fmt::format("![{0}: predicted vs measured]({1}/scatter_{0}.svg)\n", b, dir);
    out += fmt::format("![{0}: error histogram]({1}/errors_{0}.svg)\n\n", b, dir);
  }
  return out;
}

// A sub-bullet naming the default stack's CUDA context and library memory, and their sources
// (the GPU profile `name` says only the capacity).
std::string ProfileContext(const std::string& name) {
  Result<StackProfile> stack = ResolveStack("");
  if (!stack.ok()) return "";
  return fmt::format(
      "  - Predicted with the `{}` profile and the default stack `{}`: CUDA context {:.0f} MiB, "
      "library memory {:.0f} MiB ({}). The context's source, as recorded in base/stacks.json: "
      "\"{}\"\n",
      name, stack->name, stack->cuda_context.bytes / 1048576.0,
      stack->library_memory.bytes / 1048576.0,
      stack->cuda_context.calibrated ? "calibrated" : "not calibrated on a GPU by memest",
      stack->cuda_context.source);
}

std::string TruthSection(const Summary& s) {
  return "## What truth each table uses\n\n"
         "- **GPUMemNet rows** (family `gpumemnet`, " +
         Num(s.gpumemnet_rows) +
         " in this run): MLPs trained for 60 s with Adam, fp32, on an NVIDIA A100-SXM4-40GB. The "
         "label is **device level**: the maximum of nvidia-smi `memory.used`, sampled once a "
         "second, so it includes the CUDA context, library workspaces and the caching "
         "allocator's reserve. memest rebuilds each model as an ONNX graph from the row's layer "
         "list (datasets/gpumemnet/) and predicts with the `a100-40gb` profile. Only the "
         "device-level tables have these rows. Rows the importer marks `error` (a bug in "
         "GPUMemNet's step-1 script for one-output models: the run crashed at the first loss) are "
         "counted but not scored.\n" +
         ProfileContext("a100-40gb") + "- **CPU rows** (memest-measure on a CPU, " +
         Num(s.cpu_rows) +
         " in this run): **tensor level** only, the maximum of live tensor bytes, compared with "
         "the predicted `peak_allocated` (see the tensor-level caveat in its table).\n"
         "- **CUDA rows from memest-measure** (" +
         Num(s.cuda_rows) +
         " in this run): allocated, reserved and device level, each against the prediction at "
         "the same level, with the profile of the row's GPU (`FindGpuProfileForDevice`, "
         "tools/eval/evaluate.h).\n\n";
}

}  // namespace

const char* ToString(Split split) { return split == Split::kHeldOut ? "held-out" : "used"; }

std::string Pct(std::optional<double> fraction) {
  if (!fraction) return "—";
  const double v = *fraction * 100.0;
  const double a = v < 0 ? -v : v;
  if (a >= 99.95 && a < 100) return fmt::format("{:.2f} %", v);  // not "100.0 %" for 99.96 %
  if (a >= 100) return fmt::format("{:.0f} %", v);
  if (a >= 10 || a == 0) return fmt::format("{:.1f} %", v);
  return fmt::format("{:.2f} %", v);
}

namespace {

// Aggregate's running totals: one pass over the rows fills them, Finish() turns them into the
// Summary's groups in the report's order.
class Aggregator {
 public:
  explicit Aggregator(const Evaluation& ev) : ev_(ev) {
    s_.backends = ev.backends;
    s_.rows = static_cast<int64_t>(ev.rows.size());
  }

  void Add(const MeasuredRow& row, const RowOutcome& out) {
    CountRow(row, out);
    for (size_t b = 0; b < ev_.backends.size(); ++b) {
      const Split split = UsedBy(row, ev_.backends[b]) ? Split::kUsed : Split::kHeldOut;
      families_[split].insert(row.family);
      if (split == Split::kUsed) {
        for (const std::string& t : row.used_for) s_.used_tags[split].insert(t);
      }
      for (const std::string& fam : {row.family, std::string(kAllFamilies)}) {
        AddFit(row, out, split, b, fam);
      }
      if (out.setup.ok()) AddErrors(row, out.predictions[b], split, b);
    }
  }

  Summary Finish() && {
    for (Split split : kSplits) {
      if (!families_.count(split)) continue;
      const std::vector<std::string> fams = FamilyOrder(split);
      EmitErrorGroups(split, fams);
      EmitFitGroups(split, fams);
    }
    for (const auto& [message, count] : row_errors_) {
      s_.row_errors.push_back(fmt::format("{} row(s) with status {}", count, message));
    }
    for (const auto& [key, value] : failures_) {
      s_.failures.push_back(fmt::format("{}: {} row(s), {}; first: {}", key.first, value.first,
                                        ErrorCodeName(key.second), value.second));
    }
    return std::move(s_);
  }

 private:
  using ErrKey = std::tuple<Split, Level, size_t, std::string>;
  using FitKey = std::tuple<Split, size_t, std::string>;
  using FailureKey = std::pair<std::string, ErrorCode>;

  // The row's truth source, its own status, and whether it could be set up at all.
  void CountRow(const MeasuredRow& row, const RowOutcome& out) {
    if (row.family == "gpumemnet") {
      ++s_.gpumemnet_rows;
    } else if (row.device_kind == "cpu") {
      ++s_.cpu_rows;
    } else {
      ++s_.cuda_rows;
    }
    if (row.status != RowStatus::kOk) {
      ++row_errors_[std::string(ToString(row.status)) + ": " +
                    (row.error.empty() ? "(no message)" : row.error)];
    }
    if (!out.setup.ok()) AddFailure({"not evaluated", out.setup.code()}, row, out.setup);
  }

  // Counts the first failure of each (who, code) with its row and message, the others by number.
  void AddFailure(const FailureKey& key, const MeasuredRow& row, const Status& status) {
    auto& f = failures_[key];
    if (f.first++ == 0) {
      f.second = row.source + ":" + std::to_string(row.line) + ": " + status.message();
    }
  }

  // The fit table's counts for backend `b` on family `fam`: rows, outcomes, refusals.
  void AddFit(const MeasuredRow& row, const RowOutcome& out, Split split, size_t b,
              const std::string& fam) {
    auto& [g, micros] = fit_[{split, b, fam}];
    g.split = split;
    g.backend = ev_.backends[b];
    g.family = fam;
    ++g.rows;
    g.ok += row.status == RowStatus::kOk;
    g.oom += row.status == RowStatus::kOom;
    g.error += row.status == RowStatus::kError;
    if (!out.setup.ok()) {
      ++g.not_evaluated;
      return;
    }
    const Prediction& p = out.predictions[b];
    if (!p.status.ok()) {
      ++g.failed;
      return;
    }
    micros.push_back(p.micros);
    if (!p.fits) return;
    if (row.status == RowStatus::kOom) {
      ++g.oom_known;
      g.oom_refused += !*p.fits;
    } else if (row.status == RowStatus::kOk) {
      ++g.ok_known;
      g.ok_refused += !*p.fits;
    }
  }

  // The predicted-vs-measured pairs of a row that ran, at every level it measured.
  void AddErrors(const MeasuredRow& row, const Prediction& p, Split split, size_t b) {
    if (!p.status.ok()) {
      AddFailure({ev_.backends[b], p.status.code()}, row, p.status);
      return;
    }
    if (row.status != RowStatus::kOk) return;
    for (Level level : kLevels) {
      const std::optional<uint64_t> measured = row.peaks.Get(level);
      if (!measured || *measured == 0) continue;
      const Pair pair{PredictedAt(p.estimate, level), *measured};
      for (const std::string& fam : {row.family, std::string(kAllFamilies)}) {
        Acc& a = err_[{split, level, b, fam}];
        a.pairs.push_back(pair);
        a.micros.push_back(p.micros);
      }
    }
  }

  // "all" first when there is more than one family, then the families by name.
  std::vector<std::string> FamilyOrder(Split split) {
    std::vector<std::string> out;
    const auto& fams = families_[split];
    if (fams.size() > 1) out.push_back(kAllFamilies);
    out.insert(out.end(), fams.begin(), fams.end());
    return out;
  }

  void EmitErrorGroups(Split split, const std::vector<std::string>& fams) {
    for (Level level : kLevels) {
      for (size_t b = 0; b < ev_.backends.size(); ++b) {
        for (const std::string& fam : fams) {
          auto it = err_.find({split, level, b, fam});
          if (it == err_.end()) continue;
          ErrorGroup g;
          g.split = split;
          g.level = level;
          g.backend = ev_.backends[b];
          g.family = fam;
          g.stats = Summarize(it->second.pairs);
          if (g.stats.n == 0) continue;
          g.median_micros = Median(it->second.micros);
          s_.errors.push_back(std::move(g));
        }
      }
    }
  }

  void EmitFitGroups(Split split, const std::vector<std::string>& fams) {
    for (size_t b = 0; b < ev_.backends.size(); ++b) {
      for (const std::string& fam : fams) {
        auto it = fit_.find({split, b, fam});
        if (it == fit_.end()) continue;
        FitGroup g = it->second.first;
        g.median_micros = Median(it->second.second);
        s_.fits.push_back(std::move(g));
      }
    }
  }

  const Evaluation& ev_;
  Summary s_;
  std::map<ErrKey, Acc> err_;
  std::map<FitKey, std::pair<FitGroup, std::vector<double>>> fit_;
  std::map<Split, std::set<std::string>> families_;
  std::map<FailureKey, std::pair<int64_t, std::string>> failures_;
  std::map<std::string, int64_t> row_errors_;
};

}  // namespace

Summary Aggregate(const Evaluation& ev) {
  Aggregator a(ev);
  for (size_t i = 0; i < ev.rows.size(); ++i) a.Add(ev.rows[i], ev.outcomes[i]);
  return std::move(a).Finish();
}

const ErrorGroup* FindErrorGroup(const Summary& s, Split split, Level level,
                                 const std::string& backend, const std::string& family) {
  for (const ErrorGroup& g : s.errors) {
    if (g.split == split && g.level == level && g.backend == backend && g.family == family) {
      return &g;
    }
  }
  return nullptr;
}

std::string RenderMarkdown(const Summary& s, const RenderOptions& options) {
  std::string out;
  const std::vector<const ErrorGroup*> headline = HeadlineGroups(s, Split::kHeldOut);
  if (options.doc) {
    out += "# Accuracy\n\n";
    out += "<!-- Generated; do not edit. Regenerate with: " + options.command + " -->\n";
    out += "This page is generated in full by `" + options.command +
           "` (it builds memest-eval if needed, scores every available backend against all "
           "committed measured rows and GPUMemNet's rows, and rewrites this file and "
           "docs/accuracy/*.svg).\n\n";
    out += "## Headline (held-out rows)\n\n";
  } else {
    out += "# memest accuracy\n\n## Headline (held-out rows)\n\n";
  }
  if (headline.empty()) {
    out += "No held-out row was estimated.\n\n";
  } else {
    out += RenderTable(HeadlineTable(headline)) + "\n";
    if (options.doc) out += HeadlineReading(headline) + "\n";
  }
  out += BackendsLine(s) + "\n";
  if (options.doc) {
    out += TruthSection(s);
    out += AnchorsSection(s);
    if (!options.plots_dir.empty()) out += PlotsSection(s, options.plots_dir);
  } else if (!options.plots_dir.empty()) {
    out += PlotsSection(s, options.plots_dir);
  }
  out += InputsSection(s);
  out += ReportBody(s);
  out += Definitions();
  if (options.doc) {
    out +=
        "\n## Data and license\n\nGPUMemNet's MLP measurements (`mlp_data_step1.csv`, "
        "`mlp_data_step2.csv`, github.com/itu-rad/GPUMemNet) are licensed CC BY 4.0: "
        "E. Yousefzadeh-Asl-Miandoab, R. Karimzadeh, D. Yorulmaz, B. Ibragimov, P. Tözün, "
        "\"GPU Memory and Utilization Estimation for Training-Aware Resource Management: "
        "Opportunities and Limitations\", EuroMLSys 2026. The numbers and plots on this page "
        "that use those rows are derived from that data.\n";
  }
  return out;
}

std::string RenderCsv(const Summary& s) {
  std::string out =
      "split,level,backend,family,n,median,mean,p90,max,median_signed,median_gap_bytes,within5,"
      "within10,within20,under,bin1gib,bin8gib,median_us,rows,ok,oom,error,not_evaluated,failed,"
      "oom_known,"
      "oom_refused,ok_known,ok_refused\n";
  auto num = [](std::optional<double> v) { return v ? fmt::format("{:.6g}", *v) : std::string(); };
  for (const ErrorGroup& g : s.errors) {
    const FitGroup* f = nullptr;
    for (const FitGroup& c : s.fits) {
      if (c.split == g.split && c.backend == g.backend && c.family == g.family) f = &c;
    }
    const ErrorStats& st = g.stats;
    out += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}", ToString(g.split),
                       ToString(g.level), g.backend, g.family, st.n, num(st.median), num(st.mean),
                       num(st.p90), num(st.max), num(st.median_signed),
                       st.median_gap ? fmt::format("{:.0f}", *st.median_gap) : std::string(),
                       num(st.within5), num(st.within10), num(st.within20), num(st.under),
                       num(st.bin1), num(st.bin8), num(g.median_micros));
    if (f != nullptr) {
      out += fmt::format(",{},{},{},{},{},{},{},{},{},{}\n", f->rows, f->ok, f->oom, f->error,
                         f->not_evaluated, f->failed, f->oom_known, f->oom_refused, f->ok_known,
                         f->ok_refused);
    } else {
      out += ",,,,,,,,,,\n";
    }
  }
  return out;
}

std::string RenderJson(const Summary& s) {
  auto opt = [](std::optional<double> v) { return v ? Json(*v) : Json(nullptr); };
  Json j;
  j["schema"] = kAccuracySchema;
  j["backends"] = s.backends;
  j["unavailable"] = Json::array();
  for (const BackendInfo& b : s.unavailable) {
    j["unavailable"].push_back({{"name", b.name}, {"reason", b.reason}});
  }
  j["rows"] = s.rows;
  j["cpu_profile"] = s.cpu_profile;
  j["machine"] = s.machine;
  j["notes"] = s.notes;
  j["failures"] = s.failures;
  j["row_errors"] = s.row_errors;
  j["used_for"] = Json::object();
  for (const auto& [split, tags] : s.used_tags) j["used_for"][ToString(split)] = tags;
  j["errors"] = Json::array();
  for (const ErrorGroup& g : s.errors) {
    const ErrorStats& st = g.stats;
    j["errors"].push_back({{"split", ToString(g.split)},
                           {"level", ToString(g.level)},
                           {"backend", g.backend},
                           {"family", g.family},
                           {"n", st.n},
                           {"median", opt(st.median)},
                           {"mean", opt(st.mean)},
                           {"p90", opt(st.p90)},
                           {"max", opt(st.max)},
                           {"median_signed", opt(st.median_signed)},
                           {"median_gap_bytes", opt(st.median_gap)},
                           {"within5", opt(st.within5)},
                           {"within10", opt(st.within10)},
                           {"within20", opt(st.within20)},
                           {"under", opt(st.under)},
                           {"bin1gib", opt(st.bin1)},
                           {"bin8gib", opt(st.bin8)},
                           {"median_us", opt(g.median_micros)}});
  }
  j["fit"] = Json::array();
  for (const FitGroup& g : s.fits) {
    j["fit"].push_back({{"split", ToString(g.split)},
                        {"backend", g.backend},
                        {"family", g.family},
                        {"rows", g.rows},
                        {"ok", g.ok},
                        {"oom", g.oom},
                        {"error", g.error},
                        {"not_evaluated", g.not_evaluated},
                        {"failed", g.failed},
                        {"oom_known", g.oom_known},
                        {"oom_refused", g.oom_refused},
                        {"ok_known", g.ok_known},
                        {"ok_refused", g.ok_refused},
                        {"median_us", opt(g.median_micros)}});
  }
  return j.dump(2) + "\n";
}

}  // namespace memest::eval
