// api/calibrate.cc -- fitting a stack profile to measured jobs; the policy is in
// memest/calibrate.h. Every job is estimated once per workspace coefficient on the grid; the fit,
// the leave-one-group-out refits and the band all reuse those estimates (a fit is a median).
#include "memest/calibrate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "base/sha256.h"
#include "base/stats.h"
#include "core/graph.h"
#include "memest/estimator.h"
#include "memest/json.h"
#include "ops/rules.h"

namespace memest {
namespace {

constexpr size_t kMinJobs = 6;
constexpr size_t kMinGroups = 3;
constexpr double kInconsistent = 0.10;  // same job measured twice, more than 10 % apart
constexpr double kBandLow = 0.025;      // band quantiles of the held-out residuals
constexpr double kBandHigh = 0.975;

using base::Median;
using base::Quantile;
using base::TrimmedMean;

std::string GroupOf(const MeasuredJob& j) { return j.group.empty() ? j.model_name : j.group; }

// Estimates in bytes, [grid index][job index], of the symbolic backend with the base context,
// no library memory and the grid's workspace coefficient.
using EstimateTable = std::vector<std::vector<double>>;

struct StackFit {
  size_t grid = 0;
  double library = 0;
  double score = 0;
};

// The best (coefficient, library memory) over the jobs with use[i].
StackFit FitStack(const EstimateTable& est, const std::vector<MeasuredJob>& jobs,
                  const std::vector<bool>& use) {
  StackFit best;
  bool first = true;
  for (size_t g = 0; g < est.size(); ++g) {
    std::vector<double> gaps;
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (use[i]) gaps.push_back(static_cast<double>(jobs[i].measured_bytes) - est[g][i]);
    }
    const double library = std::max(0.0, Median(gaps));
    std::vector<double> errors;
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (!use[i]) continue;
      errors.push_back(
          std::abs((est[g][i] + library) / static_cast<double>(jobs[i].measured_bytes) - 1));
    }
    const double score = TrimmedMean(errors);
    if (first || score < best.score - 1e-12) best = {g, library, score};
    first = false;
  }
  return best;
}

ErrorSummary Summarize(const std::vector<double>& errors, const std::vector<double>& upper) {
  ErrorSummary s;
  s.rows = static_cast<int>(errors.size());
  if (errors.empty()) return s;
  std::vector<double> abs_errors;
  for (double e : errors) abs_errors.push_back(std::abs(e));
  s.median_abs = Median(abs_errors);
  s.p90_abs = Quantile(abs_errors, 0.9);
  const double n = static_cast<double>(errors.size());
  s.under = static_cast<double>(
                std::count_if(errors.begin(), errors.end(), [](double e) { return e < 0; })) /
            n;
  s.under_5pct = static_cast<double>(std::count_if(errors.begin(), errors.end(),
                                                   [](double e) { return e < -0.05; })) /
                 n;
  if (!upper.empty()) {
    s.upper_under_5pct = static_cast<double>(std::count_if(upper.begin(), upper.end(),
                                                           [](double e) { return e < -0.05; })) /
                         static_cast<double>(upper.size());
  }
  return s;
}

Status CheckJobs(const std::vector<MeasuredJob>& jobs) {
  std::set<std::string> groups;
  for (const MeasuredJob& j : jobs) {
    if (!j.model) return InvalidArgument("job " + j.id + ": no model");
    if (j.measured_bytes == 0) return InvalidArgument("job " + j.id + ": measured 0 bytes");
    groups.insert(GroupOf(j));
  }
  if (jobs.size() < kMinJobs || groups.size() < kMinGroups) {
    return InvalidArgument("calibration needs at least " + std::to_string(kMinJobs) +
                           " measured jobs over at least " + std::to_string(kMinGroups) +
                           " models or families, got " + std::to_string(jobs.size()) +
                           " job(s) over " + std::to_string(groups.size()) +
                           ": measure 10-20 jobs of different models (docs/stacks.md)");
  }
  // The same job measured twice must agree.
  std::map<std::string, const MeasuredJob*> seen;
  for (const MeasuredJob& j : jobs) {
    const std::string key = j.model_name + "|" + OptionsToJson(j.options);  // every knob
    auto [it, fresh] = seen.emplace(key, &j);
    if (fresh) continue;
    const double a = static_cast<double>(it->second->measured_bytes);
    const double b = static_cast<double>(j.measured_bytes);
    if (std::abs(a - b) > kInconsistent * std::min(a, b)) {
      return InvalidArgument("inconsistent rows: " + it->second->id + " and " + j.id +
                             " are the same job measured " + std::to_string(a / 1048576.0) +
                             " and " + std::to_string(b / 1048576.0) +
                             " MiB (more than 10 % apart): fix or drop one");
    }
  }
  return Status::Ok();
}

Result<double> EstimateOne(const Estimator& est, const MeasuredJob& j, const std::string& gpu,
                           const StackProfile& stack) {
  Options o = j.options;
  o.gpu = gpu;
  o.custom_stack = std::make_shared<const StackProfile>(stack);
  Result<Estimate> e = est.Run(*j.model, o);
  if (!e.ok()) return e.status().WithContext("job " + j.id);
  return static_cast<double>(e->peak_device);
}

bool HasConvolution(const Model& m) {
  for (const core::Node& n : m.graph().nodes) {
    const ops::OpRule* rule = ops::RuleOf(n);
    if (rule != nullptr && rule->uses_cudnn_conv) return true;
  }
  return false;
}

Result<EstimateTable> EstimateGrid(const Estimator& est, const std::vector<MeasuredJob>& jobs,
                                   const CalibrationSettings& s) {
  EstimateTable table(s.conv_workspace_grid.size(), std::vector<double>(jobs.size()));
  for (size_t i = 0; i < jobs.size(); ++i) {
    const bool has_conv = HasConvolution(*jobs[i].model);
    std::vector<double> column;
    for (size_t g = 0; g < s.conv_workspace_grid.size(); ++g) {
      StackProfile stack = s.base;
      stack.library_memory.bytes = 0;
      stack.conv_workspace.value = s.conv_workspace_grid[g];
      stack.bands.clear();
      // A model without convolutions estimates the same at every coefficient.
      if (g >= 1 && !has_conv) {
        column.push_back(column[0]);
        continue;
      }
      MEMEST_ASSIGN_OR_RETURN(double bytes, EstimateOne(est, jobs[i], s.gpu, stack));
      column.push_back(bytes);
    }
    for (size_t g = 0; g < column.size(); ++g) table[g][i] = column[g];
  }
  return table;
}

std::string TodayUtc() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d", &tm);
  return buf;
}

nlohmann::json SummaryJson(const ErrorSummary& s) {
  return {
      {"rows", s.rows},   {"median_abs", s.median_abs}, {"p90_abs", s.p90_abs},
      {"under", s.under}, {"under_5pct", s.under_5pct}, {"upper_under_5pct", s.upper_under_5pct}};
}

// Provenance: one line per job (id, measured bytes), sorted, hashed.
std::string RowsSha256(const std::vector<MeasuredJob>& jobs) {
  std::vector<std::string> lines;
  for (const MeasuredJob& j : jobs) lines.push_back(j.id + "," + std::to_string(j.measured_bytes));
  std::sort(lines.begin(), lines.end());
  base::Sha256 h;
  for (const std::string& l : lines) h.Update(l + "\n");
  return h.HexDigest();
}

// Jobs by held-out group, in name order.
using Groups = std::vector<std::pair<std::string, std::vector<size_t>>>;

// Every group's jobs predicted by the fit made without that group (fold_fit[g]), and
// measured / predicted - 1 for each job.
struct HeldOut {
  std::vector<double> predicted, ratio;
};

HeldOut PredictHeldOut(const EstimateTable& table, const std::vector<MeasuredJob>& jobs,
                       const Groups& groups, const std::vector<StackFit>& fold_fit) {
  HeldOut h;
  h.predicted.resize(jobs.size());
  h.ratio.resize(jobs.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i : groups[g].second) {
      h.predicted[i] = table[fold_fit[g].grid][i] + fold_fit[g].library;
      h.ratio[i] = static_cast<double>(jobs[i].measured_bytes) / h.predicted[i] - 1;
    }
  }
  return h;
}

// The band of the held-out ratios, and its coverage measured group by group against the band of
// the other groups' ratios; `inside` and `upper` per job (upper: the band's top over measured).
struct MeasuredBand {
  ResidualBand band;
  std::vector<bool> inside;
  std::vector<double> upper;
};

MeasuredBand MeasureBand(const HeldOut& h, const std::vector<MeasuredJob>& jobs,
                         const Groups& groups) {
  MeasuredBand m;
  m.inside.resize(jobs.size());
  m.upper.resize(jobs.size());
  int inside = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<double> others;
    for (size_t o = 0; o < groups.size(); ++o) {
      if (o == g) continue;
      for (size_t i : groups[o].second) others.push_back(h.ratio[i]);
    }
    const double lo = std::min(0.0, Quantile(others, kBandLow));
    const double hi = std::max(0.0, Quantile(others, kBandHigh));
    for (size_t i : groups[g].second) {
      m.inside[i] = h.ratio[i] >= lo && h.ratio[i] <= hi;
      inside += m.inside[i] ? 1 : 0;
      m.upper[i] = h.predicted[i] * (1 + hi) / static_cast<double>(jobs[i].measured_bytes) - 1;
    }
  }
  m.band.low = std::min(0.0, Quantile(h.ratio, kBandLow));
  m.band.high = std::max(0.0, Quantile(h.ratio, kBandHigh));
  m.band.rows = static_cast<int>(jobs.size());
  m.band.coverage = static_cast<double>(inside) / static_cast<double>(jobs.size());
  return m;
}

std::vector<double> Errors(const std::vector<double>& predicted,
                           const std::vector<MeasuredJob>& jobs) {
  std::vector<double> e;
  for (size_t i = 0; i < jobs.size(); ++i) {
    e.push_back(predicted[i] / static_cast<double>(jobs[i].measured_bytes) - 1);
  }
  return e;
}

// The jobs by group (GroupOf), groups in name order.
Groups GroupJobs(const std::vector<MeasuredJob>& jobs) {
  std::map<std::string, std::vector<size_t>> by_group;
  for (size_t i = 0; i < jobs.size(); ++i) by_group[GroupOf(jobs[i])].push_back(i);
  return Groups(by_group.begin(), by_group.end());
}

// Leave one group out: fold_fit[g] is the fit made without group g's jobs.
std::vector<StackFit> FoldFits(const EstimateTable& table, const std::vector<MeasuredJob>& jobs,
                               const Groups& groups) {
  std::vector<StackFit> fold_fit;
  for (const auto& [name, members] : groups) {
    std::vector<bool> use(jobs.size(), true);
    for (size_t i : members) use[i] = false;
    fold_fit.push_back(FitStack(table, jobs, use));
  }
  return fold_fit;
}

// Each job's fitted and held-out prediction and error, group by group.
std::vector<JobResidual> JobResiduals(const std::vector<MeasuredJob>& jobs, const Groups& groups,
                                      const std::vector<double>& fitted, const HeldOut& held,
                                      const MeasuredBand& band) {
  std::vector<JobResidual> out;
  for (const auto& [name, members] : groups) {
    for (size_t i : members) {
      JobResidual jr;
      jr.id = jobs[i].id;
      jr.group = name;
      jr.measured = jobs[i].measured_bytes;
      jr.fitted = static_cast<uint64_t>(fitted[i]);
      jr.held_out = static_cast<uint64_t>(held.predicted[i]);
      jr.fitted_error = fitted[i] / static_cast<double>(jr.measured) - 1;
      jr.held_out_error = held.predicted[i] / static_cast<double>(jr.measured) - 1;
      jr.inside_band = band.inside[i];
      out.push_back(jr);
    }
  }
  return out;
}

// What the user had before: every job estimated with the base stack as it is.
Result<ErrorSummary> BaseStackErrors(const Estimator& est, const std::vector<MeasuredJob>& jobs,
                                     const CalibrationSettings& s) {
  std::vector<double> base_err;
  for (const MeasuredJob& job : jobs) {
    MEMEST_ASSIGN_OR_RETURN(double bytes, EstimateOne(est, job, s.gpu, s.base));
    base_err.push_back(bytes / static_cast<double>(job.measured_bytes) - 1);
  }
  return Summarize(base_err, {});
}

// The fitted stack: the base stack with the fitted library memory and convolution workspace,
// the held-out bands of both backends, each value's source, and the calibration's record.
StackProfile FittedStack(const CalibrationSettings& s, const GpuProfile& gpu,
                         const std::vector<MeasuredJob>& jobs, size_t groups, const StackFit& all,
                         const MeasuredBand& band, const MeasuredBand& closed_band,
                         const CalibrationResult& r) {
  StackProfile st = s.base;
  st.name = s.name;
  st.display_name = s.display_name.empty() ? "calibrated from " + s.data_source : s.display_name;
  st.gpu = gpu.name;
  // The base's replicates vouch for its own measured values, not for the values fitted here.
  st.also_measured_on.clear();
  const std::string date = TodayUtc();
  const std::string from = std::to_string(jobs.size()) + " jobs (" + std::to_string(groups) +
                           " groups) of " + s.data_source + ", memest calibrate " + date;
  st.library_memory = {static_cast<uint64_t>(all.library),
                       "fitted: median of measured - estimated (symbolic backend, context " +
                           std::to_string(s.base.cuda_context.bytes) + " B) over " + from,
                       true};
  const bool any_conv = std::any_of(jobs.begin(), jobs.end(),
                                    [](const MeasuredJob& j) { return HasConvolution(*j.model); });
  if (any_conv) {
    st.conv_workspace = {s.conv_workspace_grid[all.grid],
                         "fitted: the grid value (x input + output + weight bytes of each spatial "
                         "convolution call) with the smallest trimmed mean error over " +
                             from,
                         true};
  } else {
    st.conv_workspace = s.base.conv_workspace;
    st.conv_workspace.source = "kept from stack " + s.base.name +
                               ": no calibration job has a convolution, so nothing measured it (" +
                               s.base.conv_workspace.source + ")";
  }
  const std::string band_source =
      "held out: 2.5 % and 97.5 % quantiles of measured / predicted - 1, each group predicted by "
      "a fit without it (leave-one-group-out over " +
      std::to_string(groups) + " groups of " + s.data_source +
      "); coverage measured group by group against the other groups' band";
  st.bands.clear();
  st.bands["symbolic"] = band.band;
  st.bands["analytical"] = closed_band.band;
  for (auto& [backend, b] : st.bands) b.source = band_source + " (" + backend + " backend)";
  nlohmann::json grid = s.conv_workspace_grid;
  nlohmann::json c = {{"date", date},
                      {"data", s.data_source},
                      {"jobs", jobs.size()},
                      {"groups", groups},
                      {"rows_sha256", RowsSha256(jobs)},
                      {"backend", "symbolic"},
                      {"conv_workspace_grid", grid},
                      {"base_stack", s.base.name},
                      {"base", SummaryJson(r.base)},
                      {"fitted", SummaryJson(r.fitted)},
                      {"held_out", SummaryJson(r.held_out)},
                      {"held_out_analytical", SummaryJson(r.held_out_analytical)}};
  st.calibration_json = c.dump();
  return st;
}

}  // namespace

Result<CalibrationResult> Calibrate(const std::vector<MeasuredJob>& jobs,
                                    const CalibrationSettings& s) {
  MEMEST_RETURN_IF_ERROR(CheckJobs(jobs));
  MEMEST_ASSIGN_OR_RETURN(GpuProfile gpu, FindGpuProfile(s.gpu));
  if (s.conv_workspace_grid.size() < 2 || s.name.empty()) {
    return InvalidArgument("calibration settings need a stack name and a grid of 2+ values");
  }
  MEMEST_ASSIGN_OR_RETURN(std::unique_ptr<Estimator> est, MakeEstimator("symbolic"));
  MEMEST_ASSIGN_OR_RETURN(std::unique_ptr<Estimator> closed, MakeEstimator("analytical"));
  MEMEST_ASSIGN_OR_RETURN(EstimateTable table, EstimateGrid(*est, jobs, s));
  MEMEST_ASSIGN_OR_RETURN(EstimateTable closed_table, EstimateGrid(*closed, jobs, s));

  CalibrationResult r;
  const size_t n = jobs.size();
  // The stack is fitted with the symbolic backend; the other backends are scored under it.
  const StackFit all = FitStack(table, jobs, std::vector<bool>(n, true));
  const Groups groups = GroupJobs(jobs);
  r.groups = static_cast<int>(groups.size());
  const std::vector<StackFit> fold_fit = FoldFits(table, jobs, groups);
  const HeldOut held = PredictHeldOut(table, jobs, groups, fold_fit);
  const MeasuredBand band = MeasureBand(held, jobs, groups);
  const HeldOut closed_held = PredictHeldOut(closed_table, jobs, groups, fold_fit);
  const MeasuredBand closed_band = MeasureBand(closed_held, jobs, groups);

  std::vector<double> fitted(n);
  for (size_t i = 0; i < n; ++i) fitted[i] = table[all.grid][i] + all.library;
  r.jobs = JobResiduals(jobs, groups, fitted, held, band);
  r.fitted = Summarize(Errors(fitted, jobs), {});
  r.held_out = Summarize(Errors(held.predicted, jobs), band.upper);
  r.held_out_analytical = Summarize(Errors(closed_held.predicted, jobs), closed_band.upper);
  MEMEST_ASSIGN_OR_RETURN(r.base, BaseStackErrors(*est, jobs, s));
  r.stack = FittedStack(s, gpu, jobs, groups.size(), all, band, closed_band, r);
  return r;
}

}  // namespace memest
