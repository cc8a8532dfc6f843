// tools/train_device.cc -- memest-train --device-truth (tools/train_device.h).
#include "tools/train_device.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "base/stats.h"
#include "core/graph.h"
#include "memest/calibrate.h"
#include "memest/memest.h"
#include "tools/eval/evaluate.h"

namespace memest {
namespace {

// The calibration grid of memest calibrate (memest/calibrate.h).
const std::vector<double>& Grid() {
  static const std::vector<double> kGrid = CalibrationSettings{}.conv_workspace_grid;
  return kGrid;
}

struct DatasetSpec {
  std::string name, csv, gpu, base_stack;
};

// The device-level datasets and the stacks memest calibrate fits them from
// (scripts/calibrate_stacks.sh).
const std::vector<DatasetSpec>& Datasets() {
  static const std::vector<DatasetSpec> kSpecs = {
      {"timm-a100", "datasets/timm-a100/jobs.csv", "a100-40gb", "pytorch2-lazy"},
      {"h200-torch211", "datasets/h200-torch211/jobs.csv", "h200-141gb", "h200-pytorch2.11-lazy"},
  };
  return kSpecs;
}

// --- memest calibrate's fit (api/calibrate.cc), reproduced on the same table
// -------------------

using base::Median;  // the same summaries as api/calibrate.cc (base/stats.h)
using base::Quantile;
using base::TrimmedMean;

// The symbolic estimate of one row at one grid coefficient, library memory 0.
struct Components {
  double device = 0;
  Breakdown breakdown;
};

// Op-class mix of a graph (shares of its nodes).
constexpr const char* kOpClasses[] = {"conv",    "matmul", "norm", "softmax", "activation",
                                      "eltwise", "shape",  "pool", "reduce",  "other"};
constexpr size_t kNumOpClasses = std::size(kOpClasses);

size_t OpClass(const std::string& op) {
  static const std::map<std::string, size_t> kClass = [] {
    std::map<std::string, size_t> m;
    for (const char* o : {"Conv", "ConvTranspose"}) m[o] = 0;
    for (const char* o : {"Gemm", "MatMul"}) m[o] = 1;
    for (const char* o :
         {"BatchNormalization", "LayerNormalization", "InstanceNormalization", "GroupNormalization",
          "SimplifiedLayerNormalization", "RMSNormalization"}) {
      m[o] = 2;
    }
    for (const char* o : {"Softmax", "LogSoftmax"}) m[o] = 3;
    for (const char* o : {"Relu", "LeakyRelu", "Elu", "Celu", "Selu", "PRelu", "Sigmoid", "Tanh",
                          "Softplus", "Erf", "Gelu", "HardSigmoid", "HardSwish", "Mish", "Clip"}) {
      m[o] = 4;
    }
    for (const char* o : {"Add", "Sub", "Mul",        "Div",   "Pow",   "Sqrt", "Neg",
                          "Exp", "Log", "Reciprocal", "Where", "Equal", "Less", "Greater",
                          "Not", "Abs", "Max",        "Min",   "Floor", "Ceil", "Round"}) {
      m[o] = 5;
    }
    for (const char* o : {"Reshape", "Transpose", "Concat", "Gather", "Slice", "Flatten", "Squeeze",
                          "Unsqueeze", "Expand", "Shape", "Split", "Identity", "Cast", "Constant",
                          "ConstantOfShape", "Pad", "Tile", "Range", "Dropout"}) {
      m[o] = 6;
    }
    for (const char* o : {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"}) {
      m[o] = 7;
    }
    for (const char* o : {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceL2", "ArgMax",
                          "TopK", "CumSum"}) {
      m[o] = 8;
    }
    return m;
  }();
  auto it = kClass.find(op);
  return it == kClass.end() ? kNumOpClasses - 1 : it->second;
}

struct Row {
  size_t dataset = 0;  // index into Datasets(); Datasets().size() for GPUMemNet
  std::string id, family;
  uint64_t measured = 0;
  Options options;
  std::vector<Components> grid;  // per grid coefficient (all equal without convolutions)
  double params = 0, nodes = 0;
  std::vector<double> mix;  // kNumOpClasses shares
  double gpu_total = 0, context = 0;
};

std::vector<std::string> FeatureNamesV2() {
  std::vector<std::string> n = {"log_symbolic_device",
                                "log_batch",
                                "share_weights",
                                "share_gradients",
                                "share_optimizer",
                                "share_saved_activations",
                                "share_transient",
                                "share_allocator_overhead",
                                "share_cached_free",
                                "share_context",
                                "share_library",
                                "log_parameters",
                                "log_nodes",
                                "attention_fused",
                                "log_gpu_total_memory",
                                "conv_workspace_coefficient"};
  for (const char* c : kOpClasses) n.push_back(std::string("mix_") + c);
  return n;
}

// The feature vector of `r` under the stack (grid index g, library bytes L).
std::vector<double> FeaturesOf(const Row& r, size_t g, double library) {
  const Components& c = r.grid[g];
  const double s = c.device + library;
  const Breakdown& b = c.breakdown;
  auto share = [&](uint64_t v) { return static_cast<double>(v) / s; };
  std::vector<double> v = {std::log(s),
                           std::log1p(static_cast<double>(r.options.batch.value_or(1))),
                           share(b.weights),
                           share(b.gradients),
                           share(b.optimizer_state),
                           share(b.saved_activations),
                           share(b.transient),
                           share(b.allocator_overhead),
                           share(b.cached_free),
                           share(b.cuda_context),
                           library / s,
                           std::log1p(r.params),
                           std::log1p(r.nodes),
                           r.options.attention == Attention::kEager ? 0.0 : 1.0,
                           std::log(r.gpu_total),
                           Grid()[g]};
  v.insert(v.end(), r.mix.begin(), r.mix.end());
  return v;
}

// The ops whose rule uses a cuDNN convolution workspace (ops/rules.cc: Conv, ConvTranspose in the
// default domain), as api/calibrate.cc asks it; tools/ may not include ops/.
bool HasConvolution(const Model& m) {
  for (const core::Node& n : m.graph().nodes) {
    const bool onnx = n.domain.empty() || n.domain == "ai.onnx";
    if (onnx && (n.op_type == "Conv" || n.op_type == "ConvTranspose")) return true;
  }
  return false;
}

// Fills r.grid, the graph facts and the GPU size.
Status Describe(const Estimator& sym, const Model& model, const StackProfile& base,
                const GpuProfile& gpu, Row* r) {
  const bool conv = HasConvolution(model);
  for (size_t g = 0; g < Grid().size(); ++g) {
    if (g >= 1 && !conv) {
      r->grid.push_back(r->grid[0]);
      continue;
    }
    StackProfile stack = base;
    stack.library_memory.bytes = 0;
    stack.conv_workspace.value = Grid()[g];
    stack.bands.clear();
    Options o = r->options;
    o.gpu = gpu.name;
    o.custom_stack = std::make_shared<const StackProfile>(stack);
    MEMEST_ASSIGN_OR_RETURN(Estimate e, sym.Run(model, o));
    r->grid.push_back({static_cast<double>(e.peak_device), e.breakdown});
  }
  r->params = static_cast<double>(model.summary().parameter_count);
  const auto& nodes = model.graph().nodes;
  r->nodes = static_cast<double>(nodes.size());
  r->mix.assign(kNumOpClasses, 0.0);
  for (const core::Node& n : nodes) {
    r->mix[n.domain.empty() ? OpClass(n.op_type) : kNumOpClasses - 1] += 1.0;
  }
  for (double& m : r->mix) m /= std::max(1.0, r->nodes);
  r->gpu_total = static_cast<double>(gpu.total_memory.bytes);
  r->context = static_cast<double>(base.cuda_context.bytes);
  return Status::Ok();
}

struct FoldFit {
  size_t grid = 0;
  double library = 0;
};

// memest calibrate's FitStack over rows[i] with use[i].
FoldFit FitStack(const std::vector<Row>& rows, const std::vector<size_t>& idx,
                 const std::vector<bool>& use) {
  FoldFit best;
  double best_score = 0;
  bool first = true;
  for (size_t g = 0; g < Grid().size(); ++g) {
    std::vector<double> gaps;
    for (size_t k = 0; k < idx.size(); ++k) {
      if (use[k])
        gaps.push_back(static_cast<double>(rows[idx[k]].measured) - rows[idx[k]].grid[g].device);
    }
    const double library = std::max(0.0, Median(gaps));
    std::vector<double> errors;
    for (size_t k = 0; k < idx.size(); ++k) {
      if (!use[k]) continue;
      const Row& r = rows[idx[k]];
      errors.push_back(
          std::abs((r.grid[g].device + library) / static_cast<double>(r.measured) - 1));
    }
    const double score = TrimmedMean(errors);
    if (first || score < best_score - 1e-12) {
      best = {g, library};
      best_score = score;
    }
    first = false;
  }
  return best;
}

struct Summary {
  size_t n = 0;
  double median = 0, p90 = 0, under = 0, under5 = 0;
};

Summary Summarize(const std::vector<double>& errors) {
  Summary s;
  s.n = errors.size();
  if (errors.empty()) return s;
  std::vector<double> abs_errors;
  for (double e : errors) abs_errors.push_back(std::abs(e));
  s.median = Median(abs_errors);
  s.p90 = Quantile(abs_errors, 0.9);
  const double n = static_cast<double>(errors.size());
  s.under = std::count_if(errors.begin(), errors.end(), [](double e) { return e < 0; }) / n;
  s.under5 = std::count_if(errors.begin(), errors.end(), [](double e) { return e < -0.05; }) / n;
  return s;
}

std::string Line(const std::string& what, const Summary& s) {
  return fmt::format(
      "  {:<44} n={:<4} median {:5.1f} %  P90 {:5.1f} %  under {:5.1f} %  "
      "under by > 5 % {:5.1f} %\n",
      what, s.n, 100 * s.median, 100 * s.p90, 100 * s.under, 100 * s.under5);
}

}  // namespace

namespace {

// The timm datasets' jobs (censored ones are not used), each described by the symbolic backend
// under its dataset's base stack.
Status AddTimmRows(const DeviceTrainArgs& args, const Estimator& sym, std::vector<Row>* rows,
                   std::ostringstream* log) {
  for (size_t d = 0; d < Datasets().size(); ++d) {
    const DatasetSpec& spec = Datasets()[d];
    int excluded = 0;
    MEMEST_ASSIGN_OR_RETURN(std::vector<MeasuredJob> jobs,
                            ReadMeasuredJobsCsv(args.root + "/" + spec.csv, &excluded));
    MEMEST_ASSIGN_OR_RETURN(StackProfile base, ResolveStack(spec.base_stack));
    MEMEST_ASSIGN_OR_RETURN(GpuProfile gpu, FindGpuProfile(spec.gpu));
    for (const MeasuredJob& j : jobs) {
      Row r;
      r.dataset = d;
      r.id = spec.name + "/" + j.id;
      r.family = j.group.empty() ? j.model_name : j.group;
      r.measured = j.measured_bytes;
      r.options = j.options;
      if (Status st = Describe(sym, *j.model, base, gpu, &r); !st.ok()) {
        return st.WithContext(r.id);
      }
      rows->push_back(std::move(r));
    }
    *log << fmt::format("{}: {} jobs ({} censored, not used), gpu {}, base stack {}\n", spec.name,
                        jobs.size(), excluded, spec.gpu, spec.base_stack);
  }
  return Status::Ok();
}

// Every Nth GPUMemNet row (--gpumemnet-stride), as dataset `index`: training only, never scored
// (its stack was fitted on these rows).
Status AddGpumemnetRows(const DeviceTrainArgs& args, const Estimator& sym, size_t index,
                        std::vector<Row>* rows, std::ostringstream* log) {
  if (args.gpumemnet_stride <= 0) return Status::Ok();
  MEMEST_ASSIGN_OR_RETURN(eval::GpumemnetData data, eval::LoadGpumemnet("", args.root));
  MEMEST_ASSIGN_OR_RETURN(StackProfile base, ResolveStack("pytorch2-lazy"));
  MEMEST_ASSIGN_OR_RETURN(GpuProfile gpu, FindGpuProfile("a100-40gb"));
  int used = 0, seen = 0;
  for (const eval::MeasuredRow& row : data.rows) {
    if (row.status != eval::RowStatus::kOk || !row.peaks.device) continue;
    if (seen++ % args.gpumemnet_stride != 0) continue;
    const int at = std::stoi(row.model_path.substr(std::string("gpumemnet:").size()));
    MEMEST_ASSIGN_OR_RETURN(std::shared_ptr<const Model> model,
                            LoadModelFromBytes(data.bytes.at(at), "/", row.model_path));
    Row r;
    r.dataset = index;
    r.id = "gpumemnet/" + row.id;
    const eval::RowAttrs& a = data.attrs.at(at);
    r.family = "gpumemnet/" + a.at("arch") + "/step" + a.at("step");
    r.measured = *row.peaks.device;
    r.options = row.options;
    if (Status st = Describe(sym, *model, base, gpu, &r); !st.ok()) return st.WithContext(r.id);
    rows->push_back(std::move(r));
    ++used;
  }
  *log << fmt::format(
      "GPUMemNet: {} of {} rows (every {}th), gpu a100-40gb, base stack "
      "pytorch2-lazy; training only, never scored\n",
      used, seen, args.gpumemnet_stride);
  return Status::Ok();
}

// The rows grouped for the leave-one-family-out folds.
struct Folds {
  std::vector<std::vector<size_t>> by_set;  // row indices per dataset
  std::vector<std::string> families;        // scored families (GPUMemNet's are not)
  std::vector<std::string> groups_all;      // every family: the members' validation units
};

Folds MakeFolds(const std::vector<Row>& rows, size_t n_sets, size_t gpumemnet_index) {
  Folds f;
  f.by_set.resize(n_sets);
  std::set<std::string> family_set, groups;
  for (size_t i = 0; i < rows.size(); ++i) {
    f.by_set[rows[i].dataset].push_back(i);
    if (rows[i].dataset != gpumemnet_index) family_set.insert(rows[i].family);
    groups.insert(rows[i].family);
  }
  f.families.assign(family_set.begin(), family_set.end());
  f.groups_all.assign(groups.begin(), groups.end());
  return f;
}

// The ensemble members of one fold: each validates on its own 20 % of the training families.
std::vector<learned::MemberSplit> MemberSplitsOf(const DeviceTrainArgs& args,
                                                 const std::vector<Row>& rows,
                                                 const std::vector<std::string>& groups_all,
                                                 const std::string& held,
                                                 const std::vector<int>& train) {
  std::vector<std::string> groups;
  for (const std::string& g : groups_all) {
    if (g != held) groups.push_back(g);
  }
  const size_t n_val = std::max<size_t>(1, static_cast<size_t>(std::ceil(0.2 * groups.size())));
  return learned::GroupMemberSplits(
      train, [&](int i) -> const std::string& { return rows[static_cast<size_t>(i)].family; },
      groups, n_val, args.members, args.seed);
}

// Held-out predictions of every scored row: the symbolic estimate under the stack fitted without
// its family, and the learned residual over it.
struct Predictions {
  std::vector<double> symbolic, learned;
  std::vector<FoldFit> all_fit;        // per dataset: the stack fitted on all its rows
  std::map<size_t, int> grid_choices;  // per dataset: folds that chose another coefficient
};

// One fold: the stacks fitted without family `held`, the residual trained on the other rows,
// the held-out rows predicted into *p. An error names the fold.
Status RunFold(const DeviceTrainArgs& args, const std::vector<Row>& rows, const Folds& folds,
               const std::string& held, Predictions* p) {
  const std::vector<std::string> names = FeatureNamesV2();
  const size_t nf = names.size();
  const size_t n_sets = folds.by_set.size();
  std::vector<FoldFit> fit(n_sets);
  for (size_t d = 0; d < n_sets; ++d) {
    const std::vector<size_t>& set = folds.by_set[d];
    if (set.empty()) continue;
    std::vector<bool> use(set.size());
    for (size_t k = 0; k < use.size(); ++k) use[k] = rows[set[k]].family != held;
    fit[d] = FitStack(rows, set, use);
    if (fit[d].grid != p->all_fit[d].grid) ++p->grid_choices[d];
  }
  learned::Dataset data;
  data.x.resize(static_cast<Eigen::Index>(rows.size()), static_cast<Eigen::Index>(nf));
  data.y.resize(static_cast<Eigen::Index>(rows.size()));
  std::vector<int> train, test;
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const FoldFit& f = fit[r.dataset];
    const std::vector<double> x = FeaturesOf(r, f.grid, f.library);
    for (size_t k = 0; k < nf; ++k) {
      data.x(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(k)) = x[k];
    }
    const double base = r.grid[f.grid].device + f.library;
    data.y(static_cast<Eigen::Index>(i)) = std::log(static_cast<double>(r.measured) / base);
    (r.family == held ? test : train).push_back(static_cast<int>(i));
    if (r.family == held) p->symbolic[i] = base;
  }
  learned::TrainConfig config = args.config;
  config.seed = args.seed;
  auto net = learned::Train(data, MemberSplitsOf(args, rows, folds.groups_all, held, train), train,
                            names, std::vector<bool>(nf, false), config);
  if (!net.ok()) return net.status().WithContext("fold " + held);
  for (int i : test) {
    std::vector<double> x(nf);
    for (size_t k = 0; k < nf; ++k) {
      x[k] = data.x(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(k));
    }
    double mean = 0;
    for (double l : net->Predict(x)) mean += l;
    mean /= static_cast<double>(net->members.size());
    p->learned[static_cast<size_t>(i)] = p->symbolic[static_cast<size_t>(i)] * std::exp(mean);
  }
  return Status::Ok();
}

// The held-out comparison per dataset and over both GPUs.
void Report(const DeviceTrainArgs& args, const std::vector<Row>& rows, const Folds& folds,
            const Predictions& p, std::ostringstream* log) {
  const std::vector<std::string> names = FeatureNamesV2();
  *log << fmt::format("leave one family out: {} families; {} features: {}\n", folds.families.size(),
                      names.size(), fmt::join(names, ", "));
  for (size_t d = 0; d < Datasets().size(); ++d) {
    *log << fmt::format(
        "stack fit on all {} rows: workspace coefficient {}, library {:.0f} "
        "MiB; "
        "{} folds chose another coefficient\n",
        Datasets()[d].name, Grid()[p.all_fit[d].grid], p.all_fit[d].library / 1048576.0,
        p.grid_choices.count(d) ? p.grid_choices.at(d) : 0);
  }
  std::vector<double> all_l, all_s, all_c;
  for (size_t d = 0; d < Datasets().size(); ++d) {
    std::vector<double> el, es, ec;
    for (size_t i : folds.by_set[d]) {
      const double m = static_cast<double>(rows[i].measured);
      el.push_back(p.learned[i] / m - 1);
      es.push_back(p.symbolic[i] / m - 1);
      ec.push_back(std::max(p.learned[i], p.symbolic[i]) / m - 1);
    }
    *log << Datasets()[d].name << " (held out by family):\n";
    *log << Line("symbolic, stack fitted without the family", Summarize(es));
    *log << Line("learned residual over that estimate", Summarize(el));
    *log << Line("max(symbolic, learned)", Summarize(ec));
    all_l.insert(all_l.end(), el.begin(), el.end());
    all_s.insert(all_s.end(), es.begin(), es.end());
    all_c.insert(all_c.end(), ec.begin(), ec.end());
  }
  *log << "both GPUs:\n";
  *log << Line("symbolic, stack fitted without the family", Summarize(all_s));
  *log << Line("learned residual over that estimate", Summarize(all_l));
  *log << Line("max(symbolic, learned)", Summarize(all_c));
  *log << fmt::format(
      "config: members {}, hidden {}, weight decay {}, learning rate {}, batch "
      "{}, epochs {}, "
      "patience {}, seed {}\n",
      args.members, args.config.hidden, args.config.weight_decay, args.config.learning_rate,
      args.config.batch_size, args.config.max_epochs, args.config.patience, args.seed);
}

// --predictions: every scored row's held-out predictions (CSV).
void WritePredictions(const std::string& path, const std::vector<Row>& rows, const Predictions& p,
                      size_t gpumemnet_index) {
  std::ofstream out(path);
  out << "id,family,measured_bytes,symbolic_held_out_bytes,learned_held_out_"
         "bytes\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].dataset == gpumemnet_index) continue;
    out << fmt::format("{},{},{},{:.0f},{:.0f}\n", rows[i].id, rows[i].family, rows[i].measured,
                       p.symbolic[i], p.learned[i]);
  }
}

}  // namespace

int RunDeviceTraining(const DeviceTrainArgs& args) {
  const auto t0 = std::chrono::steady_clock::now();
  std::ostringstream log;
  auto sym = MakeEstimator("symbolic");
  if (!sym.ok()) {
    std::cerr << "memest-train: " << sym.status().ToString() << "\n";
    return 4;
  }
  std::vector<Row> rows;
  const size_t gpumemnet_index = Datasets().size();
  Status st = AddTimmRows(args, **sym, &rows, &log);
  if (st.ok()) st = AddGpumemnetRows(args, **sym, gpumemnet_index, &rows, &log);
  if (!st.ok()) {
    std::cerr << "memest-train: " << st.ToString() << "\n";
    return 3;
  }
  const auto t_features = std::chrono::steady_clock::now();

  const size_t n_sets = gpumemnet_index + 1;
  const Folds folds = MakeFolds(rows, n_sets, gpumemnet_index);
  Predictions p;
  p.symbolic.assign(rows.size(), 0);
  p.learned.assign(rows.size(), 0);
  p.all_fit.resize(n_sets);
  for (size_t d = 0; d < n_sets; ++d) {
    const std::vector<size_t>& set = folds.by_set[d];
    if (!set.empty()) p.all_fit[d] = FitStack(rows, set, std::vector<bool>(set.size(), true));
  }
  for (size_t fi = 0; fi < folds.families.size(); ++fi) {
    if (Status st = RunFold(args, rows, folds, folds.families[fi], &p); !st.ok()) {
      std::cerr << "memest-train: " << st.ToString() << "\n";
      return 4;
    }
    if ((fi + 1) % 10 == 0) {
      std::cerr << "memest-train: " << fi + 1 << " of " << folds.families.size() << " folds\n";
    }
  }
  const auto t_folds = std::chrono::steady_clock::now();

  Report(args, rows, folds, p, &log);
  log << fmt::format("rows: {}; features {:.1f} s, folds {:.1f} s\n", rows.size(),
                     std::chrono::duration<double>(t_features - t0).count(),
                     std::chrono::duration<double>(t_folds - t_features).count());
  std::cout << log.str();
  if (!args.report.empty()) {
    std::ofstream rep(args.report);
    rep << log.str();
  }
  if (!args.predictions.empty()) WritePredictions(args.predictions, rows, p, gpumemnet_index);
  return 0;
}

}  // namespace memest
