#include "learned/features.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <span>

#include "analytical/analytical.h"
#include "base/checked.h"
#include "core/bind.h"
#include "core/graph.h"
#include "memest/gpu_profile.h"
#include "memory/context.h"
#include "memory/device.h"
#include "memory/optimizer.h"
#include "ops/rules.h"
#include "ops/value_facts.h"
#include "symbolic/symbolic.h"

namespace memest::learned {
namespace {

using base::SatAdd;

constexpr const char* kPrecisionNames[] = {"fp32", "amp_fp16", "amp_bf16", "bf16"};

std::vector<FeatureSpec> BuildSpecs() {
  std::vector<FeatureSpec> specs = {
      // Monotone: grow with batch, train vs infer, optimizer state.
      {"log_symbolic_device", true},
      {"log_symbolic_allocated", true},
      {"log_analytical_device", true},
      {"log_activation_bytes", true},
      {"log_activation_x_batch", true},
      {"log_saved_bytes", true},
      {"log_batch", true},
      {"mode_train", true},
      {"opt_momentum_buffer", true},
      {"opt_second_moment", true},
      // Free: graph shape and constants of the run.
      {"log_nodes", false},
      {"log_parameters", false},
      {"log_parameter_bytes", false},
      {"log_activation_bytes_per_sample", false},
  };
  for (const std::string& op : OpVocabulary()) specs.push_back({"op_" + op, false});
  specs.push_back({"op_other", false});
  for (const std::string& kind : ActivationKinds()) specs.push_back({"act_" + kind, false});
  for (const char* p : kPrecisionNames) specs.push_back({std::string("precision_") + p, false});
  specs.push_back({"log_gpu_context", false});
  specs.push_back({"log_gpu_workspace", false});
  return specs;
}

// The activation kind node `k` stands for, or "" when it is not an activation (or is the inner
// part of a composite that another node already counts).
std::string ActivationOf(const core::Graph& g, size_t k) {
  const core::Node& n = g.nodes[k];
  if (!n.domain.empty()) return "";
  const std::string& op = n.op_type;
  auto consumers_of_output = [&](const core::Node& node) -> std::span<const int> {
    if (node.outputs.empty() || node.outputs[0] < 0) return {};
    return core::Span(g.value(node.outputs[0]).consumers);
  };
  if (op == "Relu") return "relu";
  if (op == "LeakyRelu") return "leaky_relu";
  if (op == "Elu" || op == "Celu") return "elu";
  if (op == "Selu") return "selu";
  if (op == "Gelu" || op == "Erf") return "gelu";
  if (op == "PRelu") return "prelu";
  if (op == "Mish") return "mish";
  if (op == "HardSwish" || op == "HardSigmoid" || op == "Softsign" || op == "ThresholdedRelu") {
    return "other";
  }
  if (op == "Softplus") {
    for (int c : consumers_of_output(n)) {
      if (g.node(c).op_type == "Tanh") return "mish";
    }
    return "softplus";
  }
  if (op == "Tanh") {
    if (!n.inputs.empty() && n.inputs[0] >= 0) {
      const int p = g.value(n.inputs[0]).producer;
      if (p >= 0 && g.node(p).op_type == "Softplus") return "";
    }
    return "tanh";
  }
  if (op == "Sigmoid") {
    const int x = n.inputs.empty() ? -1 : n.inputs[0];
    for (int c : consumers_of_output(n)) {
      const core::Node& m = g.node(c);
      if (m.op_type == "Mul" && x >= 0 &&
          std::find(m.inputs.begin(), m.inputs.end(), x) != m.inputs.end()) {
        return "silu";
      }
    }
    return "sigmoid";
  }
  return "";
}

// Sum of the run-time bytes of every value that is not an initializer.
uint64_t ActivationBytes(const core::BoundGraph& bound, const ops::ValueFacts& facts) {
  const core::Graph& g = *bound.graph;
  uint64_t total = 0;
  for (size_t i = 0; i < g.values.size(); ++i) {
    const core::ValueKind kind = g.values[i].kind;
    if (kind == core::ValueKind::kIntermediate || kind == core::ValueKind::kDataInput) {
      total = SatAdd(total, facts.bytes(static_cast<int>(i)));
    }
  }
  return total;
}

// Input batch + every tensor autograd saves (train only), deduplicated by storage.
uint64_t SavedBytes(const core::BoundGraph& bound, const ops::ValueFacts& facts, Mode mode) {
  const core::Graph& g = *bound.graph;
  std::vector<bool> counted(g.values.size(), false);
  uint64_t total = 0;
  auto add_value = [&](int id) {
    id = facts.root(id);
    if (id < 0 || counted[static_cast<size_t>(id)]) return;
    if (g.value(id).kind == core::ValueKind::kInitializer) return;
    counted[static_cast<size_t>(id)] = true;
    total = SatAdd(total, facts.bytes(id));
  };
  for (int id : g.data_inputs) add_value(id);
  if (mode != Mode::kTrain) return total;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    for (const ops::SavedTensor& s : facts.Saved(k)) {
      if (s.value >= 0) {
        add_value(s.value);
      } else {
        total = SatAdd(total, s.bytes);
      }
    }
  }
  return total;
}

}  // namespace

double Log1p(double x) { return std::log1p(x); }

const std::vector<std::string>& OpVocabulary() {
  static const std::vector<std::string> kOps = {"Gemm",
                                                "MatMul",
                                                "Conv",
                                                "ConvTranspose",
                                                "BatchNormalization",
                                                "LayerNormalization",
                                                "Dropout",
                                                "Relu",
                                                "LeakyRelu",
                                                "Elu",
                                                "Selu",
                                                "PRelu",
                                                "Sigmoid",
                                                "Tanh",
                                                "Softplus",
                                                "Erf",
                                                "Softmax",
                                                "LogSoftmax",
                                                "Add",
                                                "Sub",
                                                "Mul",
                                                "Div",
                                                "Pow",
                                                "Sqrt",
                                                "Reshape",
                                                "Transpose",
                                                "Concat",
                                                "Gather",
                                                "Slice",
                                                "MaxPool",
                                                "AveragePool",
                                                "GlobalAveragePool",
                                                "ReduceMean",
                                                "Flatten",
                                                "Identity",
                                                "Cast",
                                                "Shape",
                                                "Unsqueeze",
                                                "Where",
                                                "Expand"};
  return kOps;
}

const std::vector<std::string>& ActivationKinds() {
  static const std::vector<std::string> kKinds = {
      "none", "relu", "leaky_relu", "elu",      "selu",  "gelu", "silu",
      "mish", "tanh", "sigmoid",    "softplus", "prelu", "other"};
  return kKinds;
}

const std::vector<FeatureSpec>& FeatureSpecs() {
  static const std::vector<FeatureSpec> kSpecs = BuildSpecs();
  return kSpecs;
}

std::vector<std::string> FeatureNames() {
  std::vector<std::string> out;
  for (const FeatureSpec& s : FeatureSpecs()) out.push_back(s.name);
  return out;
}

Result<Features> ComputeFeatures(const Model& model, const Options& options) {
  MEMEST_RETURN_IF_ERROR(Validate(options));
  MEMEST_ASSIGN_OR_RETURN(std::unique_ptr<memory::EstimationContext> ctx,
                          memory::EstimationContext::Make(model, options));
  return ComputeFeatures(*ctx);
}

Result<Features> ComputeFeatures(const memory::EstimationContext& ctx) {
  const Model& model = ctx.model();
  const Options& options = ctx.options();
  const GpuProfile& gpu = ctx.gpu();
  const core::Graph& g = model.graph();
  Features f;
  GraphFacts& facts = f.facts;

  // The two backends this one corrects, over the same context (one binding for all three).
  MEMEST_ASSIGN_OR_RETURN(f.symbolic, symbolic::MakeSymbolicEstimator()->EstimateIn(ctx));
  MEMEST_ASSIGN_OR_RETURN(f.analytical, analytical::MakeAnalyticalEstimator()->EstimateIn(ctx));

  // Shapes at the bound batch, and at batch 1 for the per-sample size.
  const core::BoundGraph& bound = ctx.bound();
  const ops::ValueFacts& value_facts = ctx.facts();
  facts.batch = options.batch.value_or(1);
  facts.activation_bytes = ActivationBytes(bound, value_facts);
  facts.activation_bytes_per_sample = facts.activation_bytes;
  if (options.batch.has_value() && *options.batch != 1) {
    Options one = options;
    one.batch = 1;
    auto bound_one = core::Bind(g, one);
    if (bound_one.ok()) {
      const ops::ValueFacts facts_one(*bound_one, options.precision,
                                      memory::KernelChoices(options, ctx.gpu()));
      facts.activation_bytes_per_sample = ActivationBytes(*bound_one, facts_one);
    } else {
      facts.activation_bytes_per_sample =
          facts.activation_bytes / static_cast<uint64_t>(*options.batch);
    }
  }
  facts.saved_bytes = SavedBytes(bound, value_facts, options.mode);
  facts.nodes = static_cast<int64_t>(g.nodes.size());
  facts.parameters = model.summary().parameter_count;
  for (size_t i = 0; i < g.values.size(); ++i) {
    if (g.values[i].kind == core::ValueKind::kInitializer && g.values[i].trainable) {
      facts.parameter_bytes = SatAdd(facts.parameter_bytes, value_facts.bytes(static_cast<int>(i)));
    }
  }

  // Op counts and the activation kind.
  const std::vector<std::string>& vocab = OpVocabulary();
  for (const std::string& op : vocab) facts.op_counts[op] = 0;
  facts.op_counts["other"] = 0;
  std::map<std::string, int64_t> kinds;
  std::set<std::string> op_types;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const core::Node& n = g.nodes[k];
    const std::string name = n.domain.empty() ? n.op_type : n.domain + "::" + n.op_type;
    op_types.insert(name);
    const bool in_vocab =
        n.domain.empty() && std::find(vocab.begin(), vocab.end(), n.op_type) != vocab.end();
    ++facts.op_counts[in_vocab ? n.op_type : "other"];
    const std::string kind = ActivationOf(g, k);
    if (!kind.empty()) ++kinds[kind];
  }
  facts.op_types.assign(op_types.begin(), op_types.end());
  int64_t best = 0;
  for (const std::string& kind : ActivationKinds()) {
    auto it = kinds.find(kind);
    if (it != kinds.end() && it->second > best) {
      best = it->second;
      facts.activation = kind;
    }
  }

  // The vector, in FeatureSpecs() order.
  const double batch = static_cast<double>(facts.batch);
  const bool train = options.mode == Mode::kTrain;
  const bool momentum = train && memory::StateTensorsPerParameter(options.optimizer) >= 1;
  const bool second_moment = train && memory::HasSecondMoment(options.optimizer);
  std::vector<double>& v = f.values;
  v.reserve(FeatureSpecs().size());
  v.push_back(Log1p(static_cast<double>(f.symbolic.peak_device)));
  v.push_back(Log1p(static_cast<double>(f.symbolic.peak_allocated)));
  v.push_back(Log1p(static_cast<double>(f.analytical.peak_device)));
  v.push_back(Log1p(static_cast<double>(facts.activation_bytes)));
  v.push_back(Log1p(static_cast<double>(facts.activation_bytes_per_sample) * batch));
  v.push_back(Log1p(static_cast<double>(facts.saved_bytes)));
  v.push_back(Log1p(batch));
  v.push_back(train ? 1.0 : 0.0);
  v.push_back(momentum ? 1.0 : 0.0);
  v.push_back(second_moment ? 1.0 : 0.0);
  v.push_back(Log1p(static_cast<double>(facts.nodes)));
  v.push_back(Log1p(static_cast<double>(facts.parameters)));
  v.push_back(Log1p(static_cast<double>(facts.parameter_bytes)));
  v.push_back(Log1p(static_cast<double>(facts.activation_bytes_per_sample)));
  for (const std::string& op : vocab) v.push_back(Log1p(static_cast<double>(facts.op_counts[op])));
  v.push_back(Log1p(static_cast<double>(facts.op_counts["other"])));
  for (const std::string& kind : ActivationKinds()) {
    v.push_back(kind == facts.activation ? 1.0 : 0.0);
  }
  for (int p = 0; p < 4; ++p) v.push_back(static_cast<int>(options.precision) == p ? 1.0 : 0.0);
  v.push_back(Log1p(static_cast<double>(ctx.stack().cuda_context.bytes)));
  v.push_back(Log1p(static_cast<double>(gpu.cublas_workspace.bytes)));
  if (v.size() != FeatureSpecs().size()) {
    return Internal("learned: feature vector has " + std::to_string(v.size()) + " values, " +
                    std::to_string(FeatureSpecs().size()) + " expected");
  }
  return f;
}

}  // namespace memest::learned
