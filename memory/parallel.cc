// memory/parallel.cc -- see memory/parallel.h (policy and sources there).
#include "memory/parallel.h"

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "base/checked.h"
#include "base/dtype.h"
#include "base/name_pattern.h"
#include "core/blocks.h"
#include "memory/optimizer.h"

namespace memest::memory {
namespace {

using base::SatAdd;
using base::SatMul;

uint64_t CeilDiv(uint64_t a, uint64_t b) { return b == 0 ? a : a / b + (a % b != 0); }

bool IsInitializer(const core::Graph& g, int id) {
  return id >= 0 && g.value(id).kind == core::ValueKind::kInitializer;
}

// The 2-D initializer a matmul operand comes from (directly or through Transpose/Cast/Identity),
// or -1.
int WeightSource(const core::Graph& g, int id) {
  for (int hops = 0; hops < 3 && id >= 0; ++hops) {
    const core::Value& v = g.value(id);
    if (v.kind == core::ValueKind::kInitializer) return v.dims.size() == 2 ? id : -1;
    if (v.producer < 0) return -1;
    const core::Node& p = g.node(v.producer);
    if (p.op_type != "Transpose" && p.op_type != "Cast" && p.op_type != "Identity") return -1;
    id = p.inputs.empty() ? -1 : p.inputs[0];
  }
  return -1;
}

std::optional<int64_t> DimOf(const core::BoundGraph& b, int id, int axis) {
  if (id < 0) return std::nullopt;
  const auto& s = b.shapes[static_cast<size_t>(id)];
  if (!s) return std::nullopt;
  const int rank = static_cast<int>(s->size());
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return std::nullopt;
  return (*s)[static_cast<size_t>(axis)];
}

Status NotDivisible(const std::string& what, int64_t width, int64_t tp, const core::Node& n) {
  return InvalidArgument("tensor parallelism " + std::to_string(tp) + " does not divide the " +
                         what + " " + std::to_string(width) + " at node '" + n.name + "' (" +
                         n.op_type + ")");
}

// The tensor-parallel dataflow of the header's policy: per value, whether it is split.
Result<std::vector<uint32_t>> TensorParallelSplit(const core::BoundGraph& b, const Options& o) {
  const core::Graph& g = *b.graph;
  const int64_t tp = o.parallel.tp;
  std::vector<uint8_t> split(g.values.size(), 0);
  int weight_splits = 0;
  for (const core::Node& n : g.nodes) {
    bool any_split = false;
    for (int in : n.inputs) {
      if (in >= 0 && !IsInitializer(g, in) && split[static_cast<size_t>(in)]) any_split = true;
    }
    auto set_outputs = [&](bool s) {
      for (int out : n.outputs) {
        if (out >= 0) split[static_cast<size_t>(out)] = s;
      }
    };
    const bool gemm = n.op_type == "Gemm";
    if ((n.op_type == "MatMul" || gemm) && n.inputs.size() >= 2 && n.inputs[0] >= 0 &&
        !IsInitializer(g, n.inputs[0])) {
      const int w = WeightSource(g, n.inputs[1]);
      if (w >= 0) {
        const bool column = !split[static_cast<size_t>(n.inputs[0])];
        split[static_cast<size_t>(w)] = 1;
        ++weight_splits;
        // Width checked: the output features of a column split, the input of a row split.
        const int64_t width =
            column ? DimOf(b, n.outputs[0], -1).value_or(0) : DimOf(b, n.inputs[0], -1).value_or(0);
        if (width > 0 && width % tp != 0) {
          return NotDivisible(column ? "output width of a column-parallel Linear"
                                     : "input width of a row-parallel Linear",
                              width, tp, n);
        }
        if (gemm && n.inputs.size() >= 3 && IsInitializer(g, n.inputs[2]) && column) {
          split[static_cast<size_t>(n.inputs[2])] = 1;
        }
        set_outputs(column);
        continue;
      }
    }
    if (n.op_type == "Gather" && !n.inputs.empty() && IsInitializer(g, n.inputs[0]) &&
        g.value(n.inputs[0]).dims.size() == 2) {
      const int64_t vocab = DimOf(b, n.inputs[0], 0).value_or(0);
      if (vocab > 0 && vocab % tp != 0) return NotDivisible("vocabulary", vocab, tp, n);
      split[static_cast<size_t>(n.inputs[0])] = 1;
      ++weight_splits;
      set_outputs(false);
      continue;
    }
    if (any_split && n.op_type == "Add") {
      for (int in : n.inputs) {
        if (IsInitializer(g, in)) split[static_cast<size_t>(in)] = 1;  // column-parallel bias
      }
    }
    if (any_split && n.op_type == "Softmax" && !n.inputs.empty()) {
      const auto& s = b.shapes[static_cast<size_t>(n.inputs[0])];
      if (s && s->size() == 4 && (*s)[1] > 0 && (*s)[1] % tp != 0) {
        return NotDivisible("attention head count", (*s)[1], tp, n);
      }
    }
    set_outputs(any_split);
  }
  if (weight_splits == 0) {
    return InvalidArgument("tensor parallelism " + std::to_string(tp) +
                           ": the graph has no Linear (MatMul/Gemm on a 2-D weight) or "
                           "embedding to split");
  }
  std::vector<uint32_t> divisor(g.values.size(), 1);
  for (size_t i = 0; i < g.values.size(); ++i) {
    const core::Value& v = g.values[i];
    const bool activation = v.kind == core::ValueKind::kIntermediate && !v.graph_output;
    if (split[i] || (o.parallel.sequence_parallel && activation)) {
      divisor[i] = static_cast<uint32_t>(std::min<int64_t>(tp, UINT32_MAX));
    }
  }
  return divisor;
}

// The node that made the one input of `n` when `n` only keeps that tensor alive (an Identity
// whose output nothing reads: the Hugging Face builder's hold of a tensor a Python variable still
// names), or -1.
int HeldFrom(const core::Graph& g, const core::Node& n) {
  if (n.op_type != "Identity" || n.inputs.size() != 1 || n.inputs[0] < 0) return -1;
  for (int out : n.outputs) {
    if (out >= 0 && (g.value(out).graph_output || !g.value(out).consumers.empty())) return -1;
  }
  return g.value(n.inputs[0]).producer;
}

}  // namespace

Result<ParallelPlan> ParallelPlan::Make(const core::BoundGraph& bound, const Options& options) {
  const core::Graph& g = *bound.graph;
  ParallelPlan plan;
  plan.p_ = options.parallel;
  plan.micro_batches_ = options.micro_batches;
  plan.stage_of_node_.assign(g.nodes.size(), 0);
  if (!options.parallel.enabled()) return plan;

  plan.blocks_ = core::FindBlocks(g);  // header: Layers
  const core::Blocks& blocks = plan.blocks_;
  const int64_t pp = options.parallel.pp;
  if (pp > 1 && pp > blocks.count()) {
    return InvalidArgument("a pipeline of " + std::to_string(pp) + " stages is deeper than the " +
                           std::to_string(blocks.count()) + " blocks of the graph" +
                           (blocks.word.empty()
                                ? std::string(" (no repeated '<name>.<index>' blocks found)")
                                : " ('" + blocks.pattern() + "')"));
  }
  plan.stages_ = static_cast<int>(pp);
  std::unordered_map<int, int> ordinal;
  for (size_t i = 0; i < blocks.indices.size(); ++i) {
    ordinal[blocks.indices[i]] = static_cast<int>(i);
  }
  int current = 0;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const int l = blocks.of_node[k];
    if (l >= 0) {
      current = static_cast<int>(static_cast<int64_t>(ordinal[l]) * pp / blocks.count());
    }
    plan.stage_of_node_[k] = current;
    // A hold stays on the stage that made its tensor: a stage's module names only its own
    // tensors, and a hold read on a later stage would send the tensor there.
    if (const int from = HeldFrom(g, g.nodes[k]); from >= 0 && static_cast<size_t>(from) < k) {
      plan.stage_of_node_[k] = plan.stage_of_node_[static_cast<size_t>(from)];
    }
  }
  // Which stages read each value.
  std::vector<std::vector<int>> readers(g.values.size());
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    for (int in : g.nodes[k].inputs) {
      if (in < 0) continue;
      std::vector<int>& r = readers[static_cast<size_t>(in)];
      if (r.empty() || r.back() != plan.stage_of_node_[k]) r.push_back(plan.stage_of_node_[k]);
    }
  }
  plan.readers_ = std::move(readers);

  if (options.parallel.tp > 1) {
    MEMEST_ASSIGN_OR_RETURN(plan.divisor_, TensorParallelSplit(bound, options));
  }

  // FSDP units and modules.
  std::unique_ptr<base::NamePattern> unit_re;
  if (!options.parallel.fsdp_unit.empty()) {
    MEMEST_ASSIGN_OR_RETURN(unit_re,
                            base::NamePattern::Compile(options.parallel.fsdp_unit, "fsdp_unit",
                                                       /*with_match=*/true));
  }
  plan.unit_of_value_.assign(g.values.size(), -1);
  plan.module_of_value_.assign(g.values.size(), -1);
  std::map<std::string, int> units, modules;
  for (size_t i = 0; i < g.values.size(); ++i) {
    const core::Value& v = g.values[i];
    if (v.kind != core::ValueKind::kInitializer || v.consumers.empty()) continue;
    std::string unit;
    if (unit_re) {
      unit = unit_re->MatchedText(v.name);
    } else {
      int l = blocks.IndexIn(v.name);
      if (l < 0) l = blocks.of_node[static_cast<size_t>(v.consumers.front())];
      if (l >= 0) unit = std::to_string(l);
    }
    if (!unit.empty()) {
      plan.unit_of_value_[i] = units.emplace(unit, static_cast<int>(units.size())).first->second;
    }
    const size_t dot = v.name.rfind('.');
    const std::string module = dot == std::string::npos ? "\x01" + v.name : v.name.substr(0, dot);
    plan.module_of_value_[i] =
        modules.emplace(module, static_cast<int>(modules.size())).first->second;
  }
  if (unit_re && units.empty()) {
    return InvalidArgument("fsdp_unit '" + options.parallel.fsdp_unit +
                           "' matches no parameter name");
  }
  return plan;
}

bool ParallelPlan::parameter_on_stage(int id, int stage) const {
  if (id < 0) return false;
  if (readers_.empty()) return true;  // one GPU
  const std::vector<int>& r = readers_[static_cast<size_t>(id)];
  return std::find(r.begin(), r.end(), stage) != r.end();
}

int ParallelPlan::layers_on_stage(int stage) const {
  const int layers = blocks_.count();
  if (layers == 0) return 0;
  const int64_t pp = stages_;
  int count = 0;
  for (int l = 0; l < layers; ++l) count += static_cast<int>(l * pp / layers) == stage;
  return count;
}

int ParallelPlan::in_flight(int stage) const {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(stages_ - stage, micro_batches_)));
}

int ParallelPlan::communicators() const {
  return (p_.DataParallel() > 1) + (p_.tp > 1) + (p_.pp > 1);
}

int64_t ParallelPlan::first_rank(int stage) const { return stage * p_.DataParallel() * p_.tp; }
int64_t ParallelPlan::last_rank(int stage) const { return first_rank(stage + 1) - 1; }

uint64_t NcclBufferBytes(const ParallelPlan& plan) {
  constexpr uint64_t kLl128 = 4'915'200, kLl = 524'288;  // NCCL src/init.cc defaults
  constexpr uint64_t kGranule = uint64_t{2} << 20;       // cuMem allocation granularity
  constexpr uint64_t kConnectionsPerChannel = 3;
  const Parallelism& p = plan.degrees();
  const uint64_t per_connection =
      CeilDiv(SatAdd(SatAdd(p.nccl_buffsize, kLl128), kLl), kGranule) * kGranule;
  return SatMul(SatMul(SatMul(static_cast<uint64_t>(plan.communicators()),
                              static_cast<uint64_t>(p.nccl_channels)),
                       kConnectionsPerChannel),
                per_connection);
}

namespace {

// The parameters of one rank, summed as the sharding rules need them.
struct Totals {
  uint64_t trained = 0;        // elements of trainable parameters
  uint64_t frozen = 0;         // elements of the others
  uint64_t trained_bytes = 0;  // as the estimate stores them
  uint64_t frozen_bytes = 0;
  uint64_t largest_module = 0;  // elements
  uint64_t root = 0;            // FSDP: elements outside every unit
  std::vector<uint64_t> unit;   // FSDP: elements per unit
  std::vector<uint64_t> unit_trained;
  std::vector<std::pair<uint64_t, uint64_t>> trained_tensors;  // (elements, bytes)
  std::vector<BucketedTensor> gradients;                       // of the trained tensors
};

RankStates Shard(const Totals& t, const Options& o) {
  const Parallelism& p = o.parallel;
  RankStates r;
  const uint64_t dp = static_cast<uint64_t>(std::max<int64_t>(1, p.DataParallel()));
  const uint64_t c = ComputeBytes(o);
  const bool zero = IsZero(p.sharding);
  if (p.sharding == Sharding::kNone || p.sharding == Sharding::kFsdpNoShard) {
    if (p.sharding == Sharding::kNone && dp > 1) {
      r.buckets = MakeDdpBuckets(t.gradients, p.bucket_cap_mb);
      r.grads_in_buckets = GradientsInBuckets(o);  // else a flat copy of every gradient
    }
    return r;
  }
  r.unsharded = false;
  const uint64_t states = static_cast<uint64_t>(StateTensorsPerParameter(o.optimizer));
  auto frozen_as = [&](uint64_t bytes_per) {  // frozen parameters, never wider than stored
    return std::min(t.frozen_bytes, SatMul(t.frozen, bytes_per));
  };
  if (zero) {
    const bool z2 = p.sharding != Sharding::kZero1, z3 = p.sharding == Sharding::kZero3;
    const uint64_t lp = SatAdd(SatMul(t.trained, c), frozen_as(c));
    r.weights = z3 ? CeilDiv(lp, dp) : lp;
    r.gradients = z2 ? CeilDiv(SatMul(t.trained, c), dp) : SatMul(t.trained, c);
    const uint64_t part = CeilDiv(t.trained, dp);      // this rank's elements of the partition
    r.optimizer_state = SatMul(part, 4 + 4 * states);  // fp32 master copy + state
    r.fp32_grad_buffer = SatMul(z3 ? std::min(part, p.zero_sub_group_size) : part, 4);
    if (z3) r.gathered = SatMul(t.largest_module, 2 * c);
    if (p.offload_optimizer) {
      r.host = SatAdd(SatAdd(r.optimizer_state, r.fp32_grad_buffer), z2 ? r.gradients : 0);
      r.optimizer_state = r.fp32_grad_buffer = 0;
      if (z2) r.gradients = 0;
    }
    if (p.offload_params && z3) {
      r.host = SatAdd(r.host, r.weights);
      r.weights = 0;
    }
    return r;
  }
  // FSDP2.
  const uint64_t s = p.sharding == Sharding::kFsdpHybrid
                         ? std::min<uint64_t>(dp, static_cast<uint64_t>(p.gpus_per_node))
                         : dp;
  const uint64_t own = o.precision == Precision::kBf16 ? 2 : 4;  // the sharded dtype
  r.weights = CeilDiv(SatAdd(SatMul(t.trained, own), frozen_as(own)), s);
  r.gradients = CeilDiv(SatMul(t.trained, own), s);
  r.optimizer_state = SharedStateBytes(o.optimizer);
  for (const auto& [elements, bytes] : t.trained_tensors) {
    for (uint64_t b :
         StateTensorBytes(o.optimizer, CeilDiv(elements, s), CeilDiv(SatMul(elements, own), s))) {
      r.optimizer_state = SatAdd(r.optimizer_state, b);
    }
  }
  std::vector<uint64_t> units = t.unit;
  std::sort(units.rbegin(), units.rend());
  uint64_t gathered = t.root;
  if (p.sharding == Sharding::kFsdpGradOp) {
    for (uint64_t u : units) gathered = SatAdd(gathered, u);
  } else {
    for (size_t i = 0; i < units.size() && i < 2; ++i) gathered = SatAdd(gathered, units[i]);
  }
  uint64_t unit_grads = 0;
  for (uint64_t u : t.unit_trained) unit_grads = std::max(unit_grads, u);
  if (t.unit_trained.empty()) unit_grads = t.trained;  // one unit: the root
  r.gathered = SatMul(SatAdd(gathered, unit_grads), c);
  if (p.offload_optimizer || p.offload_params) {  // CPUOffloadPolicy: shards and state on host
    r.host = SatAdd(SatAdd(r.weights, r.gradients), r.optimizer_state);
    r.weights = r.gradients = r.optimizer_state = 0;
  }
  return r;
}

}  // namespace

std::vector<ParameterShare> RankParameters(const core::BoundGraph& bound,
                                           const ops::ValueFacts& facts, const ParallelPlan& plan,
                                           int stage) {
  const core::Graph& g = *bound.graph;
  std::vector<ParameterShare> out;
  const std::vector<int>& units = plan.unit_of_value();
  const std::vector<int>& modules = plan.module_of_value();
  for (size_t i = 0; i < g.values.size(); ++i) {
    const core::Value& v = g.values[i];
    const int id = static_cast<int>(i);
    if (!v.trainable || v.kind != core::ValueKind::kInitializer || v.consumers.empty() ||
        !plan.parameter_on_stage(id, stage)) {
      continue;
    }
    ParameterShare s;
    s.value = id;
    s.elements = facts.Share(id, bound.Numel(id).value_or(0));
    s.bytes = facts.bytes(id);
    s.trainable = facts.trainable(id);
    s.unit = i < units.size() ? units[i] : -1;
    s.module = i < modules.size() ? modules[i] : id;
    s.dtype = v.dtype;
    s.first_use = -1;  // its first reader on this stage (the one whose backward completes it)
    for (int k : v.consumers) {
      if (plan.stage_of_node(static_cast<size_t>(k)) == stage &&
          (s.first_use < 0 || k < s.first_use)) {
        s.first_use = k;
      }
    }
    out.push_back(s);
  }
  return out;
}

DdpBroadcasts MakeDdpBroadcasts(const core::BoundGraph& bound, const ops::ValueFacts& facts,
                                const ParallelPlan& plan, int stage,
                                const std::vector<ParameterShare>& params, const RankStates& rank) {
  DdpBroadcasts out;
  if (rank.buckets.at_wrap.empty()) return out;  // not DDP
  const core::Graph& g = *bound.graph;
  std::vector<BucketedTensor> states, buffers;
  for (const ParameterShare& s : params) states.push_back({s.bytes, s.dtype});
  for (size_t i = 0; i < g.values.size(); ++i) {
    const core::Value& v = g.values[i];
    const int id = static_cast<int>(i);
    if (v.kind != core::ValueKind::kInitializer || v.trainable || v.consumers.empty() ||
        !plan.parameter_on_stage(id, stage) ||
        !(base::IsFloatDType(v.dtype) || v.dtype == base::kBool)) {
      continue;
    }
    uint64_t elements = 1;
    for (const core::Dim& d : v.dims) {
      elements = SatMul(elements, static_cast<uint64_t>(std::max<int64_t>(d.value, 0)));
    }
    if (elements > 1) buffers.push_back({facts.bytes(id), v.dtype});
  }
  out.each_forward = BroadcastBuffers(buffers);
  states.insert(states.end(), buffers.begin(), buffers.end());
  out.at_wrap = BroadcastBuffers(states);
  return out;
}

RankStates ShardModelStates(const std::vector<ParameterShare>& params, const Options& options) {
  Totals t;
  std::map<int, uint64_t> modules;
  std::map<int, std::pair<uint64_t, uint64_t>> units;  // unit -> (elements, trained)
  for (const ParameterShare& s : params) {
    if (s.trainable) {
      t.trained = SatAdd(t.trained, s.elements);
      t.trained_bytes = SatAdd(t.trained_bytes, s.bytes);
      t.trained_tensors.emplace_back(s.elements, s.bytes);
      t.gradients.push_back({s.bytes, s.dtype, s.first_use});
    } else {
      t.frozen = SatAdd(t.frozen, s.elements);
      t.frozen_bytes = SatAdd(t.frozen_bytes, s.bytes);
    }
    uint64_t& m = modules[s.module];
    m = SatAdd(m, s.elements);
    t.largest_module = std::max(t.largest_module, m);
    if (s.unit < 0) {
      t.root = SatAdd(t.root, s.elements);
    } else {
      auto& u = units[s.unit];
      u.first = SatAdd(u.first, s.elements);
      if (s.trainable) u.second = SatAdd(u.second, s.elements);
    }
  }
  for (const auto& [id, u] : units) {
    t.unit.push_back(u.first);
    t.unit_trained.push_back(u.second);
  }
  return Shard(t, options);
}

RankStates ShardModelStates(uint64_t elements, uint64_t largest_module, const Options& options) {
  Totals t;
  t.trained = elements;
  const uint64_t bytes = options.precision == Precision::kFp32 ||
                                 options.precision == Precision::kAmpFp16 ||
                                 options.precision == Precision::kAmpBf16
                             ? 4
                             : 2;
  t.trained_bytes = SatMul(elements, bytes);
  t.largest_module = largest_module;
  t.unit = {largest_module};
  t.unit_trained = {largest_module};
  t.trained_tensors = {{elements, t.trained_bytes}};
  t.gradients = {{t.trained_bytes, 0, 0}};
  return Shard(t, options);
}

}  // namespace memest::memory
