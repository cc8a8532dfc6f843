// analytical/analytical.cc -- closed-form accounting over the ONNX graph.
//
// Formula (all sizes from core::Bind: memest's shape rules evaluated at the bound dims, ONNX's
// inference only for If/Loop/Scan; sections cited are those of docs/memory-model.md):
//
//   P  = bytes of trainable parameters                 (bf16 precision: halved)
//   Bf = bytes of other initializers (BN running stats, constants)
//   W  = P + Bf (+ AMP: C = low-precision copies of weights used by matmul/conv,
//        memory-model.md §5.1)
//   G  = Pg                                            gradients (memory-model.md §4.4)
//   S  = k * Pg, k = 0 sgd, 1 momentum, 2 adam/adamw   optimizer state (memory-model.md §4.2;
//        bitsandbytes' 8-bit Adam: memory/optimizer.h StateTensorBytes, per parameter)
//   Pg = the part of P that backward reaches from the loss on the first output (a parameter
//        that feeds other outputs alone gets no .grad and no state: ValueFacts::gets_gradient)
//   Parameters that do not train may be stored in 2 bytes or quantized (memory/weight_storage.h):
//   W counts their stored bytes, and a matmul on a quantized weight adds its dequantization
//   transient to Tf (and to Tb when its input needs a gradient)
//   A  = input batch + every tensor autograd saves (ops/rules.h, memory-model.md §3; deduplicated)
//        with activation checkpointing (core/checkpoint.h): outside the checkpointed segments as
//        above, + the segments' inputs + the largest segment's saves and outputs (recomputed in
//        backward one segment at a time)
//        + the loss's saved tensors (memory/loss.h: cross-entropy's fp32 log-probs + int64
//        targets; mse: the target) + the graph outputs no node saves when the training loop
//        holds them until backward has run (Options::outputs_held: a language model's logits)
//   Tf = max over nodes of the node's outputs that are not saved (+ rule workspace, + a
//        convolution's cuDNN workspace, memory/device.h), + the activations no gradient flows
//        through and no node saves that are alive there, from their node to their last reader
//        (a frozen part of the model runs as inference does: NoGradRoots)
//   Tb = max over nodes of (gradients flowing into its outputs + out of its activation inputs,
//        + a convolution's cuDNN workspace), and the loss backward's peak (memory/loss.h)
//   To = optimizer temporaries at the step's peak (memory/optimizer.h StepTemporariesFor):
//        foreach: one parameter-sized list (P) when it makes any (Adam's sqrt, L2's gradient
//        copy: one after the other); single-tensor: k x (largest parameter), k = 2 for
//        adam/adamw + 1 for L2; fused: 0
//   WS = cuBLAS workspace x 2 in training (forward + autograd threads), x 1 in inference, when the
//        graph has GEMMs (memory-model.md §2.3)
//
//   train:  allocated = max( W + S + A + G + max(Tf, Tb) + WS      -> phase backward,
//                            W + S + G + To + WS                   -> phase optimizer_step )
//           (conservative: all gradients are counted alongside all saved activations); both
//           phases are reported at their own peaks (Estimate::phases), the larger is the
//           estimate's. A and the transients are gathered term by term (analytical/step_terms.h
//           StepTerms: summed as they come, and kept one by one for the max-batch search's
//           curves), and StepPeaks adds them up into both phases
//   infer:  allocated = W + WS + max over the forward walk of the live activations, where a
//           tensor dies after its last consumer (views share their source's storage); the data
//           inputs live to the end but a decoder's past KV cache (memory/kv_cache.h); the walk
//           is its terms (step_terms.h LiveWalk), and StepPeaks adds the rest
//
//   Each tensor is a 512-byte-rounded block (memory-model.md §1.3). reserved ~= blocks of 10 MiB
//   or more rounded up to 2 MiB each + blocks of 1-10 MiB as their shares of the 20 MiB segments
//   that blocks of their size fill (20 MiB / floor(20 MiB / block) each), in whole segments + small
//   blocks (up to 1 MiB) packed into 2 MiB segments: the segments cudaMalloc is asked for and how
//   they are split (memory-model.md §1.4; step_terms.h Blocks::Charge); fragmentation and
//   block reuse are the symbolic backend's job. device = reserved + CUDA context
//   + library memory (the stack profile, memory/device.h).
//   Breakdown fields hold requested bytes; allocator_overhead = allocated - requested (rounding),
//   cached_free = reserved - allocated.
//
// Many GPUs (Options::parallel, memory/parallel.h): the estimate is one pipeline stage's
// (EstimationContext::stage()): only the stage's nodes and the parameters they read count, the
// saved activations A count min(pp - stage, micro-batches) times (1F1B), tensor-parallel splits
// are already in the value facts' bytes, and W, G, S are memory::ShardModelStates' when the
// states are sharded (ZeRO, FSDP; no AMP cast cache then: the model runs in its low dtype).
// Collective buffers (DDP buckets, gathered units) are allocator blocks; in the step phase the
// gathered units are freed and ZeRO's fp32 gradient partition exists. DDP's wrap is a third
// phase: W + the two broadcast buffers in flight that reserve the most (memory::MakeDdpBroadcasts),
// before the first iteration. NCCL's buffers sit outside the allocator, like the CUDA context.
//
// Mixed precision (memory-model.md §5.2/5.3): an activation is fp16/bf16 ("low") when produced by a
// lower-precision op (conv, matmul) or by a pass-through op on low inputs; fp32-policy ops
// (softmax, layer norm, ...) produce fp32 and save an fp32 copy of low inputs.
#include "analytical/analytical.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <queue>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "analytical/step_terms.h"
#include "base/checked.h"
#include "base/dtype.h"
#include "core/bind.h"
#include "core/checkpoint.h"
#include "core/symbolic_shapes.h"
#include "memory/context.h"
#include "memory/device.h"
#include "memory/kv_cache.h"
#include "memory/loss.h"
#include "memory/optimizer.h"
#include "memory/parallel.h"
#include "ops/rules.h"
#include "ops/value_facts.h"

namespace memest::analytical {
namespace {

using base::SatAdd;
using base::SatMul;

class Analytical final : public Estimator {
 public:
  std::string_view name() const override { return "analytical"; }
  // The closed form has no model of the allocator's settings (expandable segments, split and
  // rounding limits): those need the replay of the symbolic backend.
  OptionSupport supports() const override {
    OptionSupport s;
    s.allocator_settings = false;
    // Nor has it an allocator whose state a prefill could leave behind.
    s.prefill = false;
    return s;
  }
  Result<Estimate> EstimateIn(const memory::EstimationContext& ctx) const override;
};

// Per-run state; Run() builds one on the stack (the estimator itself stays immutable).
class Accounting {
 public:
  explicit Accounting(const memory::EstimationContext& ctx)
      : b_(ctx.bound()),
        g_(*b_.graph),
        o_(ctx.options()),
        facts_(ctx.facts()),
        stack_(ctx.stack()),
        weights_(ctx.weights()),
        kept_outputs_(memory::KeptOutputs(*b_.graph, ctx.kv_cache())),
        kv_(ctx.kv_cache()),
        checkpoint_(ctx.checkpoint()),
        plan_(ctx.parallel()),
        stage_(ctx.stage()),
        grads_in_buckets_(memory::GradientsInBuckets(ctx.options())) {}

  // The training estimate, its terms in *terms (step_terms.h).
  Result<Estimate> Train(const GpuProfile& gpu, StepTerms* terms);
  // The inference estimate, its forward walk in *terms.
  Result<Estimate> Infer(const GpuProfile& gpu, StepTerms* terms);

 private:
  class SavedSet;
  // The largest forward and backward transients, with the backward's node (the loss's when its
  // backward is the largest).
  struct Activations {
    uint64_t forward = 0, backward = 0;
    std::string backward_node;
  };

  // A transient and its parts (TermParts).
  struct Transient {
    uint64_t bytes = 0;
    TermParts parts;
    void Add(uint64_t b, TermParts p = {}) {
      bytes = SatAdd(bytes, b);
      if (p.fixed != 0) parts.fixed = SatAdd(parts.fixed, p.fixed);
      if (p.quadratic != 0) parts.quadratic = SatAdd(parts.quadratic, p.quadratic);
    }
    void Remove(uint64_t b, TermParts p) {
      bytes -= std::min(bytes, b);
      parts.fixed -= std::min(parts.fixed, p.fixed);
      parts.quadratic -= std::min(parts.quadratic, p.quadratic);
    }
  };

  // Training: the activations no gradient flows through and no node saves (a frozen part of the
  // model runs as inference does), by storage root: the last node on the stage that reads one
  // (through any alias; INT_MAX for a graph output kept to the end), -1 for every other value.
  // Each is held from its node to that last reader, beside what that node holds.
  struct NoGradHeld {
    std::vector<int> last_use;
    bool any = false;  // some such activation is read after the node that makes it
  };
  NoGradHeld NoGradRoots() const;

  void Weights(Blocks* weights, Blocks* params_only, Blocks* cast_cache) const;
  Blocks OptimizerState() const;
  // Fills terms' saved activations and transients (their segments too): with their parts where
  // the terms are kept (a plain estimate works none of them out).
  Activations SavedAndTransients(StepTerms* terms) const;
  template <bool kParts>
  Activations SavedAndTransientsOf(StepTerms* terms) const;
  // Inference: per node, the storage roots whose last use (by any alias) it is; graph outputs
  // kept to the end are in none.
  std::vector<std::vector<int>> LastUses() const;
  // Per storage root, the last node on the stage that reads it through any alias (views share
  // their source's storage); -1 for a value no node reads.
  std::vector<int> LastReaders() const;
  // Node k's outputs nobody keeps, its workspace and its cuDNN workspace `cudnn_ws`.
  // `saved_here`: the values node k saves (a few; no order).
  template <bool kParts>
  Transient ForwardTransient(const core::Node& n, size_t k, uint64_t cudnn_ws,
                             std::span<const int> saved_here) const;
  // The gradients node k's backward holds at once, with its workspaces.
  template <bool kParts>
  Transient BackwardTransient(const core::Node& n, size_t k, uint64_t cudnn_ws) const;
  // Many GPUs: the rank's sharded states, DDP buckets and NCCL buffers (memory/parallel.h).
  // Sets t's states and NCCL buffers; returns the host bytes (ZeRO's offload), 0 on one GPU.
  uint64_t ShardStates(const memory::StepTemporaries& temps, StepTerms* t) const;
  uint64_t Workspace(const GpuProfile& gpu, int count) const;
  uint64_t LargestParameter() const;
  uint64_t Eff(int id) const { return facts_.bytes(id); }
  // Value id's bytes as a term's parts (TermParts) in the searched dim: fixed when its symbolic
  // shape holds none of the searched atoms, quadratic when two of its dims are each exactly one
  // of them and the rest hold none. A value with one dim affine in a searched atom x, k x + r (r
  // the terms holding no searched atom, a decode step's `past + seq`), the rest holding none,
  // has the fixed part r / (k x + r) of its bytes, where r > 0 at the bound dims. None
  // otherwise. Worked out only where terms are kept.
  TermParts Parts(int id) const { return keep_parts_ ? PartsOf(id) : TermParts{}; }
  TermParts PartsOf(int id) const;
  // PartsOf(id), or none when `kParts` is false (nothing worked out).
  template <bool kParts>
  TermParts PartsIf(int id) const {
    if constexpr (kParts) {
      return PartsOf(id);
    } else {
      return {};
    }
  }
  // The parts of `bytes` of a tensor with value id's dims (a copy of it in another dtype): id's
  // parts in proportion.
  template <bool kParts>
  TermParts PartsIf(int id, uint64_t bytes) const {
    if constexpr (kParts) {
      return ScaledParts(PartsOf(id), Eff(id), bytes);
    } else {
      return {};
    }
  }
  static TermParts ScaledParts(TermParts p, uint64_t of, uint64_t bytes);
  // Whether t's terms are kept, and so their parts worked out, in t.searched: its atoms, the
  // leading dims of the data inputs or the named symbol.
  void StartParts(const StepTerms& t);
  // Whether `d` holds one of the searched atoms, through the opaque atoms it is built of (an
  // unknown atom is read as holding one).
  bool HoldsSearched(const core::DimExpr& d) const;
  bool AtomHoldsSearched(core::AtomId a) const;
  // How `d` holds the searched atoms: not at all, as exactly one of them, as k x + r with k > 0
  // (x one of them, r holding none), or otherwise.
  enum class Holds : uint8_t { kNone, kExactly, kAffine, kOtherwise };
  Holds HowHolds(const core::DimExpr& d) const;
  // The bound value of searched atom x, or nullopt.
  std::optional<int64_t> SearchedValue(core::AtomId x) const;
  // A value's fixed bytes through its affine dim `dim` (Degree's kAffineDim + dim).
  uint64_t AffineFixed(int id, size_t dim) const;
  bool OnStage(size_t node) const { return plan_.stage_of_node(node) == stage_; }
  // A parameter (or buffer) this rank holds: read by a node of its stage.
  bool Held(const core::Value& v, int id) const {
    return v.kind == core::ValueKind::kInitializer && !v.consumers.empty() &&
           plan_.parameter_on_stage(id, stage_);
  }

  const core::BoundGraph& b_;
  const core::Graph& g_;
  const Options& o_;
  const ops::ValueFacts& facts_;
  const StackProfile& stack_;
  const memory::WeightStorage& weights_;
  const std::vector<int> kept_outputs_;  // outputs kept to the end (memory/kv_cache.h)
  const memory::KvCache& kv_;
  const std::vector<core::CheckpointSegment>& checkpoint_;  // core/checkpoint.h
  const memory::ParallelPlan& plan_;
  const int stage_;
  // DDP with gradient_as_bucket_view: the gradients are the buckets, and the gradient a node's
  // backward makes for a parameter is a transient, copied in and freed (memory/parallel.h).
  const bool grads_in_buckets_;
  bool keep_parts_ = false;  // the terms are kept one by one (StepTerms::keep)
  std::vector<core::AtomId> searched_;
  std::vector<int64_t> searched_values_;  // each searched atom's bound value, -1 unbound
  mutable std::vector<int8_t> holds_;     // per atom: -1 not worked out yet, 0 no, 1 yes
  // Per value: -2 not worked out yet; -1 a part of none; 0-3 the searched dims' degree, each dim
  // exactly a searched atom; kAffineDim + i: dim i affine in one (HowHolds), the rest none.
  mutable std::vector<int8_t> degree_;
  static constexpr int kAffineDim = 4;
  int Degree(int id) const;
};

void Accounting::StartParts(const StepTerms& t) {
  keep_parts_ = t.keep;
  searched_.clear();
  searched_values_.clear();
  holds_.clear();
  degree_.clear();
  const core::SymbolicShapes* sym = g_.symbolic.get();
  if (!keep_parts_ || sym == nullptr) return;
  const std::string& searched = t.searched;
  if (searched.empty()) {
    for (const std::vector<core::AtomId>& axes : sym->input_atoms) {
      if (!axes.empty() && axes[0] >= 0) searched_.push_back(axes[0]);
    }
  } else if (std::optional<core::AtomId> a = sym->table.FindSymbol(searched)) {
    searched_.push_back(*a);
  }
  for (core::AtomId a : searched_) {
    const auto it = b_.bindings.find(sym->table.atom(a).name);
    searched_values_.push_back(it != b_.bindings.end() ? it->second : -1);
  }
  holds_.assign(sym->table.size(), -1);
  degree_.assign(sym->types.size(), -2);
}

std::optional<int64_t> Accounting::SearchedValue(core::AtomId x) const {
  for (size_t i = 0; i < searched_.size(); ++i) {
    if (searched_[i] == x && searched_values_[i] >= 0) return searched_values_[i];
  }
  return std::nullopt;
}

bool Accounting::AtomHoldsSearched(core::AtomId a) const {
  if (a < 0 || static_cast<size_t>(a) >= holds_.size()) return true;
  int8_t& h = holds_[static_cast<size_t>(a)];
  if (h < 0) {
    const core::AtomDef& def = g_.symbolic->table.atom(a);
    switch (def.kind) {
      case core::AtomKind::kSymbol:
        h = std::find(searched_.begin(), searched_.end(), a) != searched_.end();
        break;
      case core::AtomKind::kUnknown:
        h = 1;
        break;
      default:  // opaque: its operands are older atoms
        h = HoldsSearched(def.a) || HoldsSearched(def.b);
    }
  }
  return h > 0;
}

bool Accounting::HoldsSearched(const core::DimExpr& d) const {
  for (const core::DimExpr::Term& t : d.terms()) {
    for (core::AtomId a : t.monomial) {
      if (AtomHoldsSearched(a)) return true;
    }
  }
  return false;
}

Accounting::Holds Accounting::HowHolds(const core::DimExpr& d) const {
  const std::optional<core::AtomId> atom = d.AsAtom();
  if (atom && std::find(searched_.begin(), searched_.end(), *atom) != searched_.end()) {
    return Holds::kExactly;
  }
  int linear = 0;  // terms k x, x searched, k > 0
  for (const core::DimExpr::Term& t : d.terms()) {
    const bool holds = std::any_of(t.monomial.begin(), t.monomial.end(),
                                   [this](core::AtomId a) { return AtomHoldsSearched(a); });
    if (!holds) continue;
    const bool searched_atom =
        t.monomial.size() == 1 &&
        std::find(searched_.begin(), searched_.end(), t.monomial[0]) != searched_.end();
    if (!searched_atom || t.coef <= 0 || ++linear > 1) return Holds::kOtherwise;
  }
  return linear == 1 ? Holds::kAffine : Holds::kNone;
}

int Accounting::Degree(int id) const {
  if (id < 0 || static_cast<size_t>(id) >= degree_.size()) return -1;
  int8_t& memo = degree_[static_cast<size_t>(id)];
  if (memo != -2) return memo;
  memo = -1;
  const auto& shape = g_.symbolic->types[static_cast<size_t>(id)].shape;
  if (!shape) return memo;
  int degree = 0;
  int affine_dim = -1;
  for (size_t i = 0; i < shape->size(); ++i) {
    switch (HowHolds((*shape)[i])) {
      case Holds::kNone:
        break;
      case Holds::kExactly:
        ++degree;
        break;
      case Holds::kAffine:
        if (affine_dim >= 0 || i + kAffineDim > INT8_MAX) return memo;
        affine_dim = static_cast<int>(i);
        break;
      case Holds::kOtherwise:
        return memo;  // moved by the searched dim otherwise than as a factor of it
    }
  }
  if (affine_dim >= 0) {
    if (degree == 0) memo = static_cast<int8_t>(kAffineDim + affine_dim);
    return memo;  // (an affine dim beside an exact one: none)
  }
  memo = static_cast<int8_t>(std::min(degree, 3));
  return memo;
}

uint64_t Accounting::AffineFixed(int id, size_t dim) const {
  const core::MaybeDims dims = b_.shapes.Find(id);
  if (!dims || dim >= (*dims).size() || (*dims)[dim] <= 0) return 0;
  const int64_t bound = (*dims)[dim];
  // r = the dim at the bound dims less its term k x.
  const core::DimExpr& d = (*g_.symbolic->types[static_cast<size_t>(id)].shape)[dim];
  int64_t rest = bound;
  for (const core::DimExpr::Term& t : d.terms()) {
    if (t.monomial.size() != 1 || !AtomHoldsSearched(t.monomial[0])) continue;
    const std::optional<int64_t> x = SearchedValue(t.monomial[0]);
    if (!x) return 0;
    int64_t kx = 0;
    if (__builtin_mul_overflow(t.coef, *x, &kx) || __builtin_sub_overflow(rest, kx, &rest)) {
      return 0;
    }
  }
  if (rest <= 0 || rest > bound) return 0;
  using Wide = unsigned __int128;
  return static_cast<uint64_t>(Wide{Eff(id)} * static_cast<uint64_t>(rest) /
                               static_cast<uint64_t>(bound));
}

TermParts Accounting::ScaledParts(TermParts p, uint64_t of, uint64_t bytes) {
  if (of == 0) return {};
  using Wide = unsigned __int128;
  const auto scaled = [&](uint64_t part) {
    return static_cast<uint64_t>(Wide{std::min(part, of)} * bytes / of);
  };
  return {scaled(p.fixed), scaled(p.quadratic)};
}

TermParts Accounting::PartsOf(int id) const {
  const int degree = Degree(id);
  switch (degree) {
    case 0:
      return {Eff(id), 0};
    case 2:
      return {0, Eff(id)};
    default:
      if (degree >= kAffineDim) {
        return {AffineFixed(id, static_cast<size_t>(degree - kAffineDim)), 0};
      }
      return {};
  }
}

void Accounting::Weights(Blocks* weights, Blocks* params_only, Blocks* cast_cache) const {
  for (size_t i = 0; i < g_.values.size(); ++i) {
    const core::Value& v = g_.values[i];
    const int id = static_cast<int>(i);
    if (!Held(v, id)) continue;
    weights->Add(Eff(id));
    cast_cache->Add(facts_.amp_cast_bytes(id));  // memory-model.md §5.1 (0 unless trainable)
    if (facts_.gets_gradient(id)) params_only->Add(Eff(id));
  }
}

uint64_t Accounting::LargestParameter() const {
  uint64_t largest = 0;
  for (size_t i = 0; i < g_.values.size(); ++i) {
    const core::Value& v = g_.values[i];
    const int id = static_cast<int>(i);
    if (facts_.gets_gradient(id) && Held(v, id)) largest = std::max(largest, Eff(id));
  }
  return largest;
}

uint64_t Accounting::Workspace(const GpuProfile& gpu, int count) const {
  if (!facts_.has_gemm() || !o_.library_workspaces) return 0;
  return SatMul(gpu.cublas_workspace.bytes, static_cast<uint64_t>(count));
}

Blocks Accounting::OptimizerState() const {
  Blocks state;
  state.Add(memory::SharedStateBytes(o_.optimizer));
  for (size_t i = 0; i < g_.values.size(); ++i) {
    const int id = static_cast<int>(i);
    if (!facts_.gets_gradient(id) || !Held(g_.values[i], id)) continue;  // memory-model.md §4.2
    for (uint64_t bytes : memory::StateTensorBytes(
             o_.optimizer, facts_.Share(id, b_.Numel(id).value_or(0)), Eff(id))) {
      state.Add(bytes);
    }
  }
  return state;
}

// What backward needs kept, each value once (a view keeps its source), as terms. Under activation
// checkpointing a segment keeps only its inputs; what its nodes save exists for one segment at a
// time, when backward recomputes it (with its outputs), so the largest segment's set counts
// (StepPeaks).
class Accounting::SavedSet {
 public:
  SavedSet(const Accounting& a, std::vector<core::CheckpointSegment> segments, StepTerms* out)
      : a_(a),
        segs_(std::move(segments)),
        out_(*out),
        counted_(a.g_.values.size(), false),
        seg_counted_(segs_.size()) {
    for (size_t sg = 0; sg < segs_.size(); ++sg) {
      for (int in : segs_[sg].inputs) Save(in, -1);
      for (int out_id : segs_[sg].outputs) SaveInSegment(out_id, static_cast<int>(sg), -1);
    }
  }
  const std::vector<core::CheckpointSegment>& segments() const { return segs_; }

  // Kept outside any segment (a graph input, a segment's input, a node's save), by `node`.
  void Save(int id, int node) {
    id = a_.facts_.root(id);
    if (id < 0 || counted_[static_cast<size_t>(id)]) return;
    if (a_.g_.value(id).kind == core::ValueKind::kInitializer) return;  // counted as weights
    counted_[static_cast<size_t>(id)] = true;
    const TermParts p = a_.Parts(id);
    out_.AddSaved({a_.Eff(id), -1, id, node, p.fixed, p.quadratic});
  }
  // Saved by `node` of segment `seg`: the segment's own if the segment makes it.
  void SaveInSegment(int id, int seg, int node) {
    id = a_.facts_.root(id);
    const core::Value& v = a_.g_.value(id);
    if (v.kind == core::ValueKind::kInitializer) return;
    const core::CheckpointSegment& c = segs_[static_cast<size_t>(seg)];
    if (v.kind != core::ValueKind::kIntermediate || v.producer < c.begin || v.producer >= c.end) {
      Save(id, node);  // made outside: a segment input, kept by the checkpoint
    } else if (seg_counted_[static_cast<size_t>(seg)].insert(id).second) {
      const TermParts p = a_.Parts(id);
      out_.AddSaved({a_.Eff(id), seg, id, node, p.fixed, p.quadratic});
    }
  }
  // Bytes saved by `node` of segment `seg` (-1: none) beyond the values (a copy of `value`, or
  // -1), with their parts (TermParts).
  void Bytes(uint64_t bytes, int seg, int value, int node, TermParts p = {}) {
    if (bytes > 0) {
      out_.AddSaved(
          {bytes, seg, value, node, std::min(p.fixed, bytes), std::min(p.quadratic, bytes)});
    }
  }

 private:
  const Accounting& a_;
  const std::vector<core::CheckpointSegment> segs_;
  StepTerms& out_;
  std::vector<bool> counted_;
  std::vector<std::set<int>> seg_counted_;
};

template <bool kParts>
Accounting::Transient Accounting::ForwardTransient(const core::Node& n, size_t k, uint64_t cudnn_ws,
                                                   std::span<const int> saved_here) const {
  Transient t;
  t.Add(SatAdd(facts_.Workspace(k), cudnn_ws));
  // (a quantized weight's dequantization: a weight's size)
  const uint64_t dequantized = weights_.forward_transient(k);
  t.Add(dequantized, {kParts ? dequantized : 0, 0});
  for (int out : n.outputs) {
    if (out < 0 || facts_.root(out) != out ||
        std::find(saved_here.begin(), saved_here.end(), out) != saved_here.end()) {
      continue;
    }
    t.Add(Eff(out), PartsIf<kParts>(out));
  }
  return t;
}

template <bool kParts>
Accounting::Transient Accounting::BackwardTransient(const core::Node& n, size_t k,
                                                    uint64_t cudnn_ws) const {
  // A fused attention chain's backward is one kernel call (ops/fusion.h), run at its last node:
  // the gradients of the chain's own outputs and of its inputs from outside, all at once.
  Transient grad;
  const ops::FusedChain* chain = facts_.fusion().chain_of(k);
  const bool fused_attention = chain != nullptr && chain->kind == ops::FusedKind::kAttention;
  if (!fused_attention || chain->nodes.back() == k) {
    std::span<const int> outs = core::Span(n.outputs), ins = core::Span(n.inputs);
    std::vector<int> chain_outs;  // a fused chain's, each once
    if (fused_attention) {
      std::set<int> o;
      for (size_t m : chain->nodes) {
        for (int out : g_.nodes[m].outputs) {
          if (out >= 0 && !facts_.fusion().interior(out)) o.insert(out);
        }
      }
      chain_outs.assign(o.begin(), o.end());
      outs = chain_outs;
      ins = chain->inputs;
    }
    for (int out : outs) {
      if (facts_.requires_grad(out)) grad.Add(Eff(out), PartsIf<kParts>(out));
    }
    for (int in : ins) {
      if (facts_.requires_grad(in) &&
          (grads_in_buckets_ || g_.value(in).kind != core::ValueKind::kInitializer)) {
        grad.Add(Eff(in), PartsIf<kParts>(in));
      }
    }
  }
  if (grad.bytes > 0) grad.Add(SatAdd(cudnn_ws, facts_.BackwardWorkspace(k)));
  if (!n.inputs.empty() && facts_.requires_grad(n.inputs[0])) {
    const uint64_t dequantized = weights_.backward_transient(k);
    grad.Add(dequantized, {kParts ? dequantized : 0, 0});
  }
  return grad;
}

Accounting::Activations Accounting::SavedAndTransients(StepTerms* terms) const {
  return keep_parts_ ? SavedAndTransientsOf<true>(terms) : SavedAndTransientsOf<false>(terms);
}

template <bool kParts>
Accounting::Activations Accounting::SavedAndTransientsOf(StepTerms* terms) const {
  Activations a;
  terms->Start(static_cast<int>(checkpoint_.size()));
  if (terms->keep)
    terms->transients.reserve(2 * g_.nodes.size() + 1);  // each node's two, the loss's
  SavedSet saved(*this, checkpoint_, terms);
  for (int id : g_.data_inputs) {
    if (plan_.input_on_stage(id, stage_)) saved.Save(id, -1);
  }
  const std::vector<int> seg_of = core::SegmentOfNode(g_, saved.segments());
  // The activations no gradient flows through and no node saves, held until their last reader:
  // those made before a node and still alive there are part of its forward transient (its
  // inputs among them).
  const NoGradHeld held = NoGradRoots();
  Transient live;
  std::priority_queue<std::pair<int, int>, std::vector<std::pair<int, int>>, std::greater<>> dying;
  std::vector<int> saved_here;  // by the node at hand; reused, as most nodes save a few or none
  for (const core::Node& n : g_.nodes) {
    const size_t k = static_cast<size_t>(&n - g_.nodes.data());
    if (!OnStage(k)) continue;
    const int node = static_cast<int>(k);
    const ops::OpRule* rule = facts_.rule(k);
    saved_here.clear();
    const int seg = seg_of[k];
    for (const ops::SavedTensor& s : facts_.Saved(k)) {
      if (s.value < 0) {
        // (a copy has its source's dims: the same parts, in its own bytes)
        const TermParts p = s.source >= 0 ? PartsIf<kParts>(s.source, s.bytes)
                                          : TermParts{kParts && s.fixed ? s.bytes : 0, 0};
        saved.Bytes(s.bytes, seg, -1, node, p);
        continue;
      }
      if (seg >= 0) {
        saved.SaveInSegment(s.value, seg, node);
      } else {
        saved.Save(s.value, node);
      }
      saved_here.push_back(s.value);
      // fp32-policy op on a low-precision input saves an fp32 copy (memory-model.md §5.3).
      if (rule && rule->amp == ops::AmpPolicy::kFp32 && facts_.low(s.value) &&
          o_.precision != Precision::kBf16) {
        const uint64_t copy = b_.Bytes(s.value);
        saved.Bytes(copy, seg, s.value, node, PartsIf<kParts>(s.value, copy));
      }
    }
    // A loop that holds the model's outputs until backward has run (Options::outputs_held) keeps
    // an output no node saved like a save; one that drops them frees it after the loss's
    // forward, where its node's forward transient has counted it.
    for (int out : n.outputs) {
      if (!o_.outputs_held || out < 0 || !g_.value(out).graph_output ||
          std::find(kept_outputs_.begin(), kept_outputs_.end(), out) == kept_outputs_.end()) {
        continue;
      }
      saved.Save(out, node);
      saved_here.push_back(out);
    }
    const uint64_t cudnn_ws =
        memory::CudnnWorkspaceBytes(stack_, facts_, n, k, o_.library_workspaces);
    Transient fwd = ForwardTransient<kParts>(n, k, cudnn_ws, saved_here);
    if (held.any) {
      fwd.Add(live.bytes, live.parts);
      for (int out : n.outputs) {
        if (out < 0 || held.last_use[static_cast<size_t>(out)] <= node) continue;
        live.Add(Eff(out), PartsIf<kParts>(out));
        dying.emplace(held.last_use[static_cast<size_t>(out)], out);
      }
      for (; !dying.empty() && dying.top().first <= node; dying.pop()) {
        live.Remove(Eff(dying.top().second), PartsIf<kParts>(dying.top().second));
      }
    }
    // In backward the largest cuDNN call is a convolution's weight gradient's, when it has one
    // (none without a forward workspace: memory/device.h).
    const bool weight_gradient =
        cudnn_ws > 0 && n.inputs.size() > 1 && facts_.requires_grad(n.inputs[1]);
    const Transient bwd = BackwardTransient<kParts>(
        n, k,
        weight_gradient ? memory::CudnnWorkspaceBytes(stack_, facts_, n, k, o_.library_workspaces,
                                                      memory::ConvPass::kWeightGradient)
                        : cudnn_ws);
    const uint64_t forward = fwd.bytes, backward = bwd.bytes;
    terms->AddTransient(forward, fwd.parts);
    terms->AddTransient(backward, bwd.parts);
    a.forward = std::max(a.forward, forward);
    if (backward > a.backward) {
      a.backward = backward;
      a.backward_node = n.name;
    }
  }
  // Loss on the first graph output (options.h Loss), on the stage that computes it.
  const int first_out = g_.outputs.empty() ? -1 : g_.outputs.front();
  const int out_producer = first_out < 0 ? -1 : g_.value(first_out).producer;
  if (first_out >= 0 && (out_producer < 0 ? stage_ == plan_.stages() - 1
                                          : OnStage(static_cast<size_t>(out_producer)))) {
    const memory::LossTensors loss = memory::LossTensorsFor(b_, facts_, o_, first_out);
    if (loss.cross_entropy) saved.Bytes(loss.log_probs, -1, first_out, -1);
    saved.Bytes(loss.targets, -1, -1, -1);
    terms->AddTransient(loss.BackwardPeak());
    if (loss.BackwardPeak() > a.backward) {
      a.backward = loss.BackwardPeak();
      a.backward_node = "loss";
    }
  }
  return a;
}

uint64_t Accounting::ShardStates(const memory::StepTemporaries& temps, StepTerms* t) const {
  if (!o_.parallel.enabled()) return 0;
  ModelStates* m = &t->states;
  const std::vector<memory::ParameterShare> params =
      memory::RankParameters(b_, facts_, plan_, stage_);
  const memory::RankStates r = memory::ShardModelStates(params, o_);
  if (!r.unsharded) {
    Blocks others;  // buffers and constants: never sharded
    for (size_t i = 0; i < g_.values.size(); ++i) {
      const core::Value& v = g_.values[i];
      if (!v.trainable && Held(v, static_cast<int>(i))) others.Add(Eff(static_cast<int>(i)));
    }
    m->weights = others;
    m->weights.Add(r.weights);
    m->grads = Blocks();
    m->grads.Add(r.gradients);
    m->state = Blocks();
    m->state.Add(r.optimizer_state);
    m->cast_cache = Blocks();  // the model runs in its low dtype: no autocast copies
    m->collective.Add(r.gathered);
    m->step_only.Add(r.fp32_grad_buffer);
    m->step_temporaries = temps.lists > 0 ? r.gradients : 0;  // one shard-sized list
  }
  // DDP's buckets as rebuilt after the first backward (the ones made at wrap time hold the same
  // bytes in fewer blocks, so they never take more); with gradient_as_bucket_view they are the
  // gradients.
  if (r.grads_in_buckets) m->grads = Blocks();
  for (uint64_t size : r.buckets.rebuilt) (r.grads_in_buckets ? m->grads : m->buckets).Add(size);
  m->wrap_broadcast =
      FullestInFlight(memory::MakeDdpBroadcasts(b_, facts_, plan_, stage_, params, r).at_wrap);
  t->nccl_buffers = memory::NcclBufferBytes(plan_);
  return r.host;
}

Result<Estimate> Accounting::Train(const GpuProfile& gpu, StepTerms* t) {
  ModelStates& m = t->states;
  Blocks params;
  Weights(&m.weights, &params, &m.cast_cache);
  // Gradients: one block per parameter tensor, like the parameters; optimizer state: the
  // optimizer's tensors per parameter (memory/optimizer.h).
  m.grads = params;
  m.state = OptimizerState();
  StartParts(*t);
  const Activations act = SavedAndTransients(t);
  // The optimizer step's temporaries at its peak (memory/optimizer.h): one parameter-sized list,
  // or the single-tensor step's copies of the largest parameter.
  const memory::StepTemporaries temps = memory::StepTemporariesFor(o_);
  m.step_temporaries = temps.lists > 0
                           ? params.requested
                           : SatMul(LargestParameter(), static_cast<uint64_t>(temps.per_parameter));
  t->workspace = Workspace(gpu, 2);
  // Many GPUs: the rank's model states and collective buffers (memory/parallel.h).
  const uint64_t host_bytes = ShardStates(temps, t);
  t->in_flight = plan_.in_flight(stage_);

  Estimate e = StepPeaks(*t, stack_);
  e.backend = "analytical";
  e.host_bytes = host_bytes;
  if (e.peak_phase == Phase::kBackward) {
    e.peak_node = act.backward >= act.forward ? act.backward_node : "";
  }
  return e;
}

Accounting::NoGradHeld Accounting::NoGradRoots() const {
  NoGradHeld h;
  std::vector<uint8_t> held;  // made at the first such activation (most steps have none)
  const std::vector<bool>& requires_grad = facts_.requires_grad();
  // (By iterator and std::find: indexing a vector<bool> took about 19 instructions a value.)
  for (auto it = std::find(requires_grad.begin(), requires_grad.end(), false);
       it != requires_grad.end(); it = std::find(it + 1, requires_grad.end(), false)) {
    const size_t i = static_cast<size_t>(it - requires_grad.begin());
    const int id = static_cast<int>(i), producer = g_.values[i].producer;
    if (producer < 0 || facts_.root(id) != id || !OnStage(static_cast<size_t>(producer)) ||
        Eff(id) == 0) {
      continue;
    }
    if (held.empty()) held.assign(g_.values.size(), 0);
    held[i] = 1;
    h.any = true;
  }
  if (!h.any) return h;  // every activation gets a gradient (no frozen part)
  h.any = false;
  for (size_t k = 0; k < g_.nodes.size(); ++k) {
    if (!OnStage(k)) continue;
    for (const ops::SavedTensor& s : facts_.Saved(k)) {
      if (s.value >= 0 && facts_.root(s.value) >= 0)
        held[static_cast<size_t>(facts_.root(s.value))] = 0;
    }
  }
  h.last_use = LastReaders();
  for (size_t r = 0; r < held.size(); ++r) {
    if (held[r] == 0) {
      h.last_use[r] = -1;
    } else if (h.last_use[r] >= 0) {
      h.any = true;
    }
  }
  for (int out : kept_outputs_) {
    const int r = facts_.root(out);
    if (r >= 0 && held[static_cast<size_t>(r)] != 0) {
      h.last_use[static_cast<size_t>(r)] = std::numeric_limits<int>::max();
      h.any = true;
    }
  }
  return h;
}

std::vector<int> Accounting::LastReaders() const {
  std::vector<int> last(g_.values.size(), -1);
  for (size_t k = 0; k < g_.nodes.size(); ++k) {
    if (!OnStage(k)) continue;
    for (int in : g_.nodes[k].inputs) {
      const int r = in < 0 ? -1 : facts_.root(in);
      if (r >= 0) last[static_cast<size_t>(r)] = static_cast<int>(k);
    }
  }
  return last;
}

std::vector<std::vector<int>> Accounting::LastUses() const {
  // A source lives until the last use of any alias (inference runs one stage: every node).
  std::vector<int> last_use = LastReaders();
  for (int out : kept_outputs_) last_use[static_cast<size_t>(facts_.root(out))] = -1;
  // The caller holds its inputs to the end, except a decoder's past KV cache (memory/kv_cache.h).
  for (int id : g_.data_inputs) {
    if (!kv_.released_at_last_use(id)) last_use[static_cast<size_t>(id)] = -1;
  }
  std::vector<std::vector<int>> dies_after(g_.nodes.size());
  for (size_t id = 0; id < last_use.size(); ++id) {
    if (last_use[id] >= 0)
      dies_after[static_cast<size_t>(last_use[id])].push_back(static_cast<int>(id));
  }
  return dies_after;
}

Result<Estimate> Accounting::Infer(const GpuProfile& gpu, StepTerms* terms) {
  terms->StartInference();
  StartParts(*terms);
  Blocks params_only;
  Weights(&terms->states.weights, &params_only, &terms->states.cast_cache);
  terms->workspace = Workspace(gpu, 1);
  // The live activations node by node: a root from its producer (a data input from the start)
  // until its last use, graph outputs to the end; the peak is the fullest moment, with the
  // node's workspaces.
  const std::vector<std::vector<int>> dies_after = LastUses();
  std::vector<int32_t> made(g_.values.size(), -1);  // a live root's number in the walk
  LiveWalk& walk = terms->live;
  auto make = [&](int id) { made[static_cast<size_t>(id)] = walk.Make(Eff(id), Parts(id)); };
  for (int id : g_.data_inputs) make(id);
  for (size_t k = 0; k < g_.nodes.size(); ++k) {
    const core::Node& n = g_.nodes[k];
    const uint64_t ws =
        SatAdd(SatAdd(facts_.Workspace(k),
                      memory::CudnnWorkspaceBytes(stack_, facts_, n, k, o_.library_workspaces)),
               weights_.forward_transient(k));
    for (int out : n.outputs) {
      if (out >= 0 && facts_.root(out) == out) make(out);  // views: no new memory
    }
    walk.Run(static_cast<int32_t>(k), ws);
    for (int id : dies_after[k]) {
      int32_t& number = made[static_cast<size_t>(id)];
      if (number < 0) continue;
      walk.Free(number, Eff(id));
      number = -1;
    }
  }
  Estimate e = StepPeaks(*terms, stack_);
  if (walk.peak_node() >= 0) e.peak_node = g_.nodes[static_cast<size_t>(walk.peak_node())].name;
  return e;
}

// Under a memory fraction the verdict turns on what the caching allocator holds, which this
// backend does not model (see the policy above): said, not left silent.
void NoteFractionWithoutAllocatorModel(const Options& o, Estimate* e) {
  if (!o.allocator.memory_fraction) return;
  e->diagnostics.push_back(
      {Severity::kWarning, "fraction_without_allocator_model",
       "under --memory-fraction the reserved bytes decide, and the analytical backend models "
       "neither the caching allocator's cached segments nor its release and retry: its reserved "
       "peak can be far below the allocator's, and its largest batch past the largest that runs "
       "(docs/accuracy-device.md, \"Largest batch\"); the symbolic backend simulates the step "
       "within the limit",
       "", ""});
}

// With frozen parameters the gradients the closed form counts beside every saved activation (its
// stand-in for the cached and split blocks it does not count: docs/accuracy-lm.md, "Known gaps")
// are fewer, and measured its device peak reads under: said, not left silent.
void NoteFrozenWithoutAllocatorModel(const Options& o, Estimate* e) {
  if (o.mode != Mode::kTrain || (o.trainable.empty() && o.freeze.empty())) return;
  e->diagnostics.push_back(
      {Severity::kWarning, "frozen_without_allocator_model",
       "with frozen parameters the analytical backend counts fewer gradients, which otherwise "
       "cover the caching allocator's cached and split blocks it does not model: on 47 language-"
       "model jobs measured on an H100 training their last two layers, whose loop dropped the "
       "logits after the loss, its device peak was under the measurement on 35 told so (--outputs "
       "dropped; worst -23.1 %) and on 15 with the logits held (worst -14.1 %); the symbolic "
       "backend simulates the allocator (under on 8 with the logits held, worst -13.0 %; "
       "docs/accuracy-lm.md)",
       "", ""});
}

// A prefill (a forward that makes a key/value cache and reads none) can leave the caching
// allocator gigabytes cached and free at its peak, which the closed form does not count in
// inference (its reserved level is about its allocated one), and measured its device peak reads
// under: said, not left silent. (A decode step has its own warning, memory/context.cc.)
void NotePrefillWithoutAllocatorModel(const memory::EstimationContext& ctx, Estimate* e) {
  const memory::KvCache& kv = ctx.kv_cache();
  if (ctx.options().mode != Mode::kInfer || kv.empty() || kv.paged() || kv.reads_past()) return;
  e->diagnostics.push_back(
      {Severity::kWarning, "prefill_without_allocator_model",
       "the analytical backend counts no cached or split blocks in inference, and a prefill "
       "leaves the caching allocator's segments split around the key/value cache it makes layer "
       "by layer (phi-3.5-mini at 8 x 2,048 measured on an H100: 2,053 MiB reserved beyond the "
       "allocated peak; the analytical backend counts 2 MiB, the symbolic one 2.2 GiB): on 77 "
       "language-model prefills measured its device peak was under the measurement on 45 (worst "
       "-12.9 %), the symbolic backend's on 28 (worst -5.7 %; docs/accuracy-lm.md)",
       "", ""});
}

// The estimate in ctx, its terms in *terms (one by one where terms->keep).
Result<Estimate> Account(const memory::EstimationContext& ctx, StepTerms* terms) {
  Accounting acc(ctx);
  Result<Estimate> e = ctx.options().mode == Mode::kTrain ? acc.Train(ctx.gpu(), terms)
                                                          : acc.Infer(ctx.gpu(), terms);
  if (e.ok()) {
    NoteFractionWithoutAllocatorModel(ctx.options(), &*e);
    NoteFrozenWithoutAllocatorModel(ctx.options(), &*e);
    NotePrefillWithoutAllocatorModel(ctx, &*e);
  }
  return e;
}

Result<Estimate> Analytical::EstimateIn(const memory::EstimationContext& ctx) const {
  StepTerms sums_only;
  sums_only.keep = false;
  return Account(ctx, &sums_only);
}

}  // namespace

Result<Estimate> EstimateWithTerms(const memory::EstimationContext& ctx, StepTerms* terms,
                                   std::string_view searched) {
  *terms = StepTerms();
  terms->searched = std::string(searched);
  return Account(ctx, terms);
}

std::unique_ptr<Estimator> MakeAnalyticalEstimator() { return std::make_unique<Analytical>(); }

}  // namespace memest::analytical
