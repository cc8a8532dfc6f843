// analytical/analytical.cc -- closed-form accounting over the ONNX graph.
//
// Formula (all sizes from core::Bind: ONNX shape inference with the bound dims; "facts" is
// ../shared/reference/pytorch-memory-facts.md):
//
//   P  = bytes of trainable parameters                 (bf16 precision: halved)
//   Bf = bytes of other initializers (BN running stats, constants)
//   W  = P + Bf (+ AMP: C = low-precision copies of weights used by matmul/conv, facts 5.1)
//   G  = P                                             gradients (facts 4.4)
//   S  = k * P, k = 0 sgd, 1 momentum, 2 adam/adamw    optimizer state (facts 4.2)
//   A  = input batch + every tensor autograd saves (ops/rules.h, facts 3; deduplicated)
//        + the loss's saved tensors (cross-entropy: fp32 log-probs + int64 targets; mse: target)
//   Tf = max over nodes of the node's outputs that are not saved (+ rule workspace)
//   Tb = max over nodes of (gradients flowing into its outputs + out of its activation inputs)
//   To = foreach optimizer temporaries: adam/adamw P, +P for L2 weight decay (adam/sgd) (facts 4.3)
//   WS = cuBLAS workspace x 2 in training (forward + autograd threads), x 1 in inference, when the
//        graph has GEMMs (facts 2.3)
//
//   train:  allocated = max( W + S + A + G + max(Tf, Tb) + WS      -> phase backward,
//                            W + S + G + To + WS                   -> phase optimizer_step )
//           (conservative: all gradients are counted alongside all saved activations)
//   infer:  allocated = W + WS + max over the forward walk of the live activations, where a
//           tensor dies after its last consumer (views share their source's storage)
//
//   Each tensor is a 512-byte-rounded block (facts 1.3). reserved ~= blocks > 1 MiB rounded up to
//   2 MiB + small blocks packed into 2 MiB segments (facts 1.4); fragmentation and block reuse are
//   the symbolic backend's job. device = reserved + CUDA context (GPU profile, facts 2.1).
//   Breakdown fields hold requested bytes; allocator_overhead = reserved - requested.
//
// Mixed precision (facts 5.2/5.3): an activation is fp16/bf16 ("low") when produced by a
// lower-precision op (conv, matmul) or by a pass-through op on low inputs; fp32-policy ops
// (softmax, layer norm, ...) produce fp32 and save an fp32 copy of low inputs.
#include "analytical/analytical.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "core/bind.h"
#include "core/checked.h"
#include "core/dtype.h"
#include "ops/rules.h"

namespace memest::analytical {
namespace {

using core::SatAdd;
using core::SatMul;

constexpr uint64_t kBlock = 512;                  // facts 1.3 kMinBlockSize
constexpr uint64_t kSmallSize = uint64_t{1} << 20;  // facts 1.1 kSmallSize
constexpr uint64_t kSegmentRound = uint64_t{2} << 20;  // facts 1.1 kRoundLarge / kSmallBuffer

uint64_t RoundUp(uint64_t n, uint64_t m) { return SatMul(n / m + (n % m != 0), m); }

// Requested bytes, and what the caching allocator makes of them (closed-form approximation).
struct Blocks {
  uint64_t requested = 0;
  uint64_t allocated = 0;  // 512-byte-rounded blocks
  uint64_t large = 0;      // reserved bytes of blocks > 1 MiB (2 MiB-rounded)
  uint64_t small = 0;      // allocated bytes of blocks <= 1 MiB

  void Add(uint64_t bytes, uint64_t count = 1) {
    if (bytes == 0 || count == 0) return;
    const uint64_t block = bytes < kBlock ? kBlock : RoundUp(bytes, kBlock);
    requested = SatAdd(requested, SatMul(bytes, count));
    allocated = SatAdd(allocated, SatMul(block, count));
    if (block > kSmallSize) {
      large = SatAdd(large, SatMul(RoundUp(block, kSegmentRound), count));
    } else {
      small = SatAdd(small, SatMul(block, count));
    }
  }
  void Add(const Blocks& o) {
    requested = SatAdd(requested, o.requested);
    allocated = SatAdd(allocated, o.allocated);
    large = SatAdd(large, o.large);
    small = SatAdd(small, o.small);
  }
  uint64_t Reserved() const { return SatAdd(large, RoundUp(small, kSegmentRound)); }
};

bool IsGemm(const core::Node& n) {
  static const std::set<std::string> kGemm = {"MatMul", "Gemm", "Einsum", "LSTM", "GRU", "RNN",
                                              "Attention"};
  return kGemm.count(n.op_type) > 0;
}

class Analytical final : public Estimator {
 public:
  std::string_view name() const override { return "analytical"; }
  Result<Estimate> Run(const Model& model, const Options& options) const override;
};

// Per-run state; Run() builds one on the stack (the estimator itself stays immutable).
class Accounting {
 public:
  Accounting(const core::BoundGraph& b, const Options& o) : b_(b), g_(*b.graph), o_(o) {
    rg_ = ops::RequiresGrad(b_);
    PropagatePrecision();
    ComputeRoots();
  }

  Result<Estimate> Train(const GpuProfile& gpu);
  Result<Estimate> Infer(const GpuProfile& gpu);

 private:
  void PropagatePrecision();
  void ComputeRoots();
  uint64_t Eff(int id) const;            // bytes in the dtype the value has at run time
  uint64_t EffOrFallback(int id);        // Eff, or a conservative guess for unknown shapes
  void Weights(Blocks* weights, Blocks* params_only, Blocks* cast_cache) const;
  uint64_t Workspace(const GpuProfile& gpu, int count) const;
  void Finish(const Blocks& all, const GpuProfile& gpu, Estimate* e) const;

  const core::BoundGraph& b_;
  const core::Graph& g_;
  const Options& o_;
  std::vector<bool> rg_;
  std::vector<bool> low_;  // fp16/bf16 at run time under AMP / bf16
  std::vector<int> root_;  // storage owner: a view's source (transitively), else itself
  std::set<std::string> fallback_ops_;
  std::vector<Diagnostic> diags_;
};

void Accounting::PropagatePrecision() {
  low_.assign(g_.values.size(), false);
  if (o_.precision == Precision::kFp32) return;
  if (o_.precision == Precision::kBf16) {
    for (size_t i = 0; i < g_.values.size(); ++i) low_[i] = b_.dtypes[i] == core::kFloat;
    return;
  }
  for (const core::Node& n : g_.nodes) {
    const ops::OpRule* rule = ops::FindRule(n.domain, n.op_type);
    const ops::AmpPolicy policy = rule ? rule->amp : ops::AmpPolicy::kPassThrough;
    bool any_low = false, all_low = true, any_float = false;
    for (int in : n.inputs) {
      if (in < 0 || !core::IsFloatDType(b_.dtypes[static_cast<size_t>(in)])) continue;
      any_float = true;
      any_low = any_low || low_[static_cast<size_t>(in)];
      all_low = all_low && low_[static_cast<size_t>(in)];
    }
    bool out_low = false;
    switch (policy) {
      case ops::AmpPolicy::kLowerPrecision: out_low = true; break;
      case ops::AmpPolicy::kPassThrough: out_low = any_low; break;
      case ops::AmpPolicy::kPromote: out_low = any_float && all_low; break;
      case ops::AmpPolicy::kFp32: out_low = false; break;
    }
    for (int out : n.outputs) {
      if (out >= 0 && b_.dtypes[static_cast<size_t>(out)] == core::kFloat) {
        low_[static_cast<size_t>(out)] = out_low;
      }
    }
  }
}

void Accounting::ComputeRoots() {
  root_.resize(g_.values.size());
  for (size_t i = 0; i < root_.size(); ++i) root_[i] = static_cast<int>(i);
  for (const core::Node& n : g_.nodes) {
    const ops::OpRule* rule = ops::FindRule(n.domain, n.op_type);
    if (!rule || !rule->view || n.inputs.empty() || n.inputs[0] < 0) continue;
    for (int out : n.outputs) {
      if (out >= 0) root_[static_cast<size_t>(out)] = root_[static_cast<size_t>(n.inputs[0])];
    }
  }
}

uint64_t Accounting::Eff(int id) const {
  const uint64_t bytes = b_.Bytes(id);
  return low_[static_cast<size_t>(id)] ? bytes / 2 : bytes;
}

uint64_t Accounting::EffOrFallback(int id) {
  if (b_.known(id)) return Eff(id);
  // Unknown shape: assume it is as large as the largest known tensor its producer touches.
  const core::Value& v = g_.value(id);
  uint64_t guess = 0;
  if (v.producer >= 0) {
    const core::Node& n = g_.nodes[static_cast<size_t>(v.producer)];
    for (int x : n.inputs) {
      if (x >= 0 && b_.known(x)) guess = std::max(guess, Eff(x));
    }
    for (int x : n.outputs) {
      if (x >= 0 && b_.known(x)) guess = std::max(guess, Eff(x));
    }
    fallback_ops_.insert(n.op_type);
  }
  return guess;
}

void Accounting::Weights(Blocks* weights, Blocks* params_only, Blocks* cast_cache) const {
  const bool amp = o_.precision == Precision::kAmpFp16 || o_.precision == Precision::kAmpBf16;
  for (size_t i = 0; i < g_.values.size(); ++i) {
    const core::Value& v = g_.values[i];
    if (v.kind != core::ValueKind::kInitializer || v.consumers.empty()) continue;
    const uint64_t bytes = Eff(static_cast<int>(i));
    weights->Add(bytes);
    if (!v.trainable) continue;
    params_only->Add(bytes);
    if (!amp) continue;
    for (int c : v.consumers) {  // facts 5.1: one cached low-precision copy per weight
      const ops::OpRule* rule = ops::FindRule(g_.nodes[static_cast<size_t>(c)].domain,
                                              g_.nodes[static_cast<size_t>(c)].op_type);
      if (rule && rule->amp == ops::AmpPolicy::kLowerPrecision && v.dtype == core::kFloat) {
        cast_cache->Add(bytes / 2);
        break;
      }
    }
  }
}

uint64_t Accounting::Workspace(const GpuProfile& gpu, int count) const {
  for (const core::Node& n : g_.nodes) {
    if (IsGemm(n)) return SatMul(gpu.cublas_workspace.bytes, static_cast<uint64_t>(count));
  }
  return 0;
}

void Accounting::Finish(const Blocks& all, const GpuProfile& gpu, Estimate* e) const {
  e->peak_allocated = all.allocated;
  e->peak_reserved = std::max(all.Reserved(), all.allocated);
  e->breakdown.cuda_context = gpu.cuda_context.bytes;
  // Breakdown fields hold requested bytes; the rest of reserved is allocator overhead.
  Breakdown& bd = e->breakdown;
  const uint64_t requested = SatAdd(
      SatAdd(SatAdd(bd.weights, bd.gradients), SatAdd(bd.optimizer_state, bd.saved_activations)),
      bd.transient);
  bd.allocator_overhead = e->peak_reserved > requested ? e->peak_reserved - requested : 0;
  e->peak_device = bd.Total();
  e->diagnostics.insert(e->diagnostics.end(), b_.diagnostics.begin(), b_.diagnostics.end());
  e->diagnostics.insert(e->diagnostics.end(), diags_.begin(), diags_.end());
  std::map<std::string, int> unknown_ops;
  for (const core::Node& n : g_.nodes) {
    if (!ops::FindRule(n.domain, n.op_type)) ++unknown_ops[(n.domain.empty() ? "" : n.domain + "::") + n.op_type];
  }
  for (const auto& [op, count] : unknown_ops) {
    e->diagnostics.push_back({Severity::kWarning, "unknown_op",
                              "no memory rule for op " + op + " (" + std::to_string(count) +
                                  " node(s)): every input and output is counted as saved",
                              "", op});
  }
  for (const core::Node& n : g_.nodes) {
    if (n.subgraph_nodes > 0) {
      e->diagnostics.push_back({Severity::kWarning, "control_flow",
                                "subgraph of " + std::to_string(n.subgraph_nodes) +
                                    " node(s) is counted through its outputs only",
                                n.name, n.op_type});
    }
  }
  if (!fallback_ops_.empty()) {
    std::string ops;
    for (const auto& op : fallback_ops_) ops += (ops.empty() ? "" : ", ") + op;
    e->diagnostics.push_back({Severity::kWarning, "size_fallback",
                              "tensors of unknown size (from " + ops +
                                  ") were sized like the largest tensor their node touches",
                              "", ""});
  }
}

Result<Estimate> Accounting::Train(const GpuProfile& gpu) {
  Estimate e;
  e.backend = "analytical";
  Blocks weights, params, cast_cache;
  Weights(&weights, &params, &cast_cache);
  uint64_t k = 0;  // facts 4.2
  switch (o_.optimizer) {
    case Optimizer::kSgd: k = 0; break;
    case Optimizer::kMomentum: k = 1; break;
    case Optimizer::kAdam:
    case Optimizer::kAdamW: k = 2; break;
  }
  // Gradients and optimizer state: one block per parameter tensor, like the parameters.
  Blocks grads = params;
  Blocks state;
  for (uint64_t i = 0; i < k; ++i) state.Add(params);

  // Saved activations (deduplicated by value), the input batch and the loss.
  Blocks saved;
  std::vector<bool> counted(g_.values.size(), false);
  auto save_value = [&](int id) {
    if (id >= 0) id = root_[static_cast<size_t>(id)];  // a view keeps its source alive
    if (id < 0 || counted[static_cast<size_t>(id)]) return;
    if (g_.value(id).kind == core::ValueKind::kInitializer) return;  // counted as weights
    counted[static_cast<size_t>(id)] = true;
    saved.Add(EffOrFallback(id));
  };
  for (int id : g_.data_inputs) save_value(id);
  uint64_t tf = 0, tb = 0;
  std::string tb_node;
  for (const core::Node& n : g_.nodes) {
    const ops::OpRule* rule = ops::FindRule(n.domain, n.op_type);
    std::set<int> saved_here;
    for (const ops::SavedTensor& s : ops::SavedTensors(n, b_, rg_)) {
      if (s.value >= 0) {
        save_value(s.value);
        saved_here.insert(s.value);
        // fp32-policy op on a low-precision input saves an fp32 copy (facts 5.3).
        if (rule && rule->amp == ops::AmpPolicy::kFp32 && low_[static_cast<size_t>(s.value)] &&
            o_.precision != Precision::kBf16) {
          saved.Add(b_.Bytes(s.value));
        }
      } else {
        saved.Add(s.bytes);
      }
    }
    // Forward transient: outputs of this node that nobody keeps, plus its workspace.
    uint64_t out_bytes = rule && rule->workspace
                             ? rule->workspace(ops::RuleContext{n, b_, rg_})
                             : 0;
    for (int out : n.outputs) {
      if (out < 0 || saved_here.count(out) || (rule && rule->view)) continue;
      out_bytes = SatAdd(out_bytes, EffOrFallback(out));
    }
    tf = std::max(tf, out_bytes);
    // Backward transient: incoming gradients of outputs + outgoing gradients of activations.
    uint64_t grad_bytes = 0;
    for (int out : n.outputs) {
      if (out >= 0 && rg_[static_cast<size_t>(out)]) grad_bytes = SatAdd(grad_bytes, EffOrFallback(out));
    }
    for (int in : n.inputs) {
      if (in >= 0 && rg_[static_cast<size_t>(in)] &&
          g_.value(in).kind != core::ValueKind::kInitializer) {
        grad_bytes = SatAdd(grad_bytes, EffOrFallback(in));
      }
    }
    if (grad_bytes > tb) {
      tb = grad_bytes;
      tb_node = n.name;
    }
  }
  // Loss on the first graph output (options.h Loss).
  if (!g_.outputs.empty()) {
    const int out = g_.outputs.front();
    const uint64_t logits = EffOrFallback(out);
    const auto& shape = b_.shapes[static_cast<size_t>(out)];
    const bool rank2 = shape && shape->size() >= 2 && shape->back() > 1;
    const bool ce = o_.loss == Loss::kCrossEntropy || (o_.loss == Loss::kAuto && rank2);
    if (ce && shape && !shape->empty() && shape->back() > 0) {
      const uint64_t numel = b_.Numel(out).value_or(0);
      saved.Add(SatMul(numel, 4));                                        // fp32 log-probs (facts 3.2)
      saved.Add(SatMul(numel / static_cast<uint64_t>(shape->back()), 8));  // int64 targets
    } else {
      saved.Add(logits);  // mse: the target
    }
    if (logits > tb) {  // gradient of the logits next to the incoming loss gradient
      tb = SatMul(logits, 2);
      tb_node = "loss";
    }
  }
  uint64_t to = 0;  // facts 4.3 foreach temporaries
  const bool l2 = o_.weight_decay > 0 && o_.optimizer != Optimizer::kAdamW;
  if (o_.optimizer == Optimizer::kAdam || o_.optimizer == Optimizer::kAdamW) to = params.requested;
  if (l2) to = SatAdd(to, params.requested);
  const uint64_t ws = Workspace(gpu, 2);

  Blocks fwdbwd = weights;
  fwdbwd.Add(cast_cache);
  fwdbwd.Add(state);
  fwdbwd.Add(saved);
  fwdbwd.Add(grads);
  fwdbwd.Add(std::max(tf, tb));
  fwdbwd.Add(ws);
  Blocks step = weights;
  step.Add(state);
  step.Add(grads);
  if (to) step.Add(to);
  step.Add(ws);

  Breakdown& bd = e.breakdown;
  bd.weights = SatAdd(weights.requested, 0);
  bd.gradients = grads.requested;
  bd.optimizer_state = state.requested;
  if (fwdbwd.Reserved() >= step.Reserved()) {
    bd.weights = SatAdd(bd.weights, cast_cache.requested);
    bd.saved_activations = saved.requested;
    bd.transient = SatAdd(std::max(tf, tb), ws);
    e.peak_phase = Phase::kBackward;
    e.peak_node = tb >= tf ? tb_node : "";
    Finish(fwdbwd, gpu, &e);
  } else {
    bd.transient = SatAdd(to, ws);
    e.peak_phase = Phase::kOptimizerStep;
    Finish(step, gpu, &e);
  }
  return e;
}

Result<Estimate> Accounting::Infer(const GpuProfile& gpu) {
  Estimate e;
  e.backend = "analytical";
  e.peak_phase = Phase::kInference;
  Blocks weights, params, cast_cache;
  Weights(&weights, &params, &cast_cache);
  const size_t nv = g_.values.size();
  // Views share their source's storage: a source lives until the last use of any alias.
  const std::vector<int>& root = root_;
  std::vector<int> last_use(nv, -1);
  for (size_t k = 0; k < g_.nodes.size(); ++k) {
    for (int in : g_.nodes[k].inputs) {
      if (in >= 0) last_use[static_cast<size_t>(root[static_cast<size_t>(in)])] = static_cast<int>(k);
    }
  }
  for (int out : g_.outputs) last_use[static_cast<size_t>(root[static_cast<size_t>(out)])] = INT32_MAX;
  std::vector<uint64_t> size(nv, 0);
  uint64_t live = 0, live_alloc = 0, peak = 0, peak_alloc = 0;
  auto block = [](uint64_t bytes) { return bytes == 0 ? 0 : bytes < kBlock ? kBlock : RoundUp(bytes, kBlock); };
  for (int id : g_.data_inputs) {
    size[static_cast<size_t>(id)] = EffOrFallback(id);
    live = SatAdd(live, size[static_cast<size_t>(id)]);
    live_alloc = SatAdd(live_alloc, block(size[static_cast<size_t>(id)]));
  }
  Blocks peak_set;
  std::string peak_node;
  std::vector<int> live_ids(g_.data_inputs.begin(), g_.data_inputs.end());
  for (size_t k = 0; k < g_.nodes.size(); ++k) {
    const core::Node& n = g_.nodes[k];
    const ops::OpRule* rule = ops::FindRule(n.domain, n.op_type);
    const uint64_t ws = rule && rule->workspace ? rule->workspace(ops::RuleContext{n, b_, rg_}) : 0;
    for (int out : n.outputs) {
      if (out < 0 || root[static_cast<size_t>(out)] != out) continue;  // views: no new memory
      size[static_cast<size_t>(out)] = EffOrFallback(out);
      live = SatAdd(live, size[static_cast<size_t>(out)]);
      live_alloc = SatAdd(live_alloc, block(size[static_cast<size_t>(out)]));
      live_ids.push_back(out);
    }
    if (SatAdd(live_alloc, block(ws)) > peak_alloc) {
      peak_alloc = SatAdd(live_alloc, block(ws));
      peak = SatAdd(live, ws);
      peak_node = n.name;
      peak_set = Blocks();
      for (int id : live_ids) peak_set.Add(size[static_cast<size_t>(id)]);
      peak_set.Add(ws);
    }
    // Free sources whose last use was this node.
    std::vector<int> still;
    for (int id : live_ids) {
      if (last_use[static_cast<size_t>(id)] == static_cast<int>(k)) {
        live -= std::min(live, size[static_cast<size_t>(id)]);
        live_alloc -= std::min(live_alloc, block(size[static_cast<size_t>(id)]));
      } else {
        still.push_back(id);
      }
    }
    live_ids.swap(still);
  }
  const uint64_t ws = Workspace(gpu, 1);
  Blocks all = weights;
  all.Add(cast_cache);
  all.Add(peak_set);
  all.Add(ws);
  Breakdown& bd = e.breakdown;
  bd.weights = SatAdd(weights.requested, cast_cache.requested);
  bd.saved_activations = 0;
  bd.transient = SatAdd(peak, ws);  // live activations at the peak + workspace
  e.peak_node = peak_node;
  Finish(all, gpu, &e);
  return e;
}

Result<Estimate> Analytical::Run(const Model& model, const Options& options) const {
  try {
    MEMEST_ASSIGN_OR_RETURN(GpuProfile gpu, FindGpuProfile(options.gpu));
    MEMEST_ASSIGN_OR_RETURN(core::BoundGraph bound, core::Bind(model.graph(), options));
    Accounting acc(bound, options);
    return options.mode == Mode::kTrain ? acc.Train(gpu) : acc.Infer(gpu);
  } catch (const std::bad_alloc&) {
    return Internal("analytical: out of memory");
  } catch (const std::exception& e) {
    return Internal(std::string("analytical: unexpected error: ") + e.what());
  }
}

}  // namespace

std::unique_ptr<Estimator> MakeAnalyticalEstimator() { return std::make_unique<Analytical>(); }

}  // namespace memest::analytical
