// symbolic/timeline.cc -- PyTorch eager training semantics over the bound graph.
//
// Policy (sections of docs/memory-model.md):
//  * Start: every parameter and buffer is allocated once, in graph order (weights).
//  * Each iteration: zero_grad(set_to_none=True) frees every .grad (memory-model.md §4.4); the new
//    input batch (and int64 targets) is allocated before the previous one is freed (loader
//    semantics).
//  * Forward, in topological order: a node allocates its outputs (views allocate nothing and keep
//    their source alive, memory-model.md §3.1), its extra saved tensors (masks, indices,
//    statistics) and its workspace (freed at once). A tensor dies after its last consumer unless
//    some node saved it (ops/rules.h, memory-model.md §3.2) or it is a graph output. Under AMP the
//    first lower-precision use of an fp32 parameter allocates its cached low-precision copy
//    (memory-model.md §5.1); the copy lives until the last backward node that saved it, or the end
//    of forward.
//  * The first GEMM of the forward creates the main thread's cuBLAS workspace; the first GEMM of
//    the backward creates the autograd thread's (memory-model.md §2.3, INF); both persist.
//  * A convolution allocates its cuDNN workspace after its outputs in forward, and frees it at
//    once (the stack's size, memory/device.h); in backward, its data-gradient call's after the
//    input's gradient, then its weight-gradient call's after the weight's.
//  * Loss on the first output: cross-entropy keeps the log-probs (memory/loss.h), mse the
//    target. The outputs live to the end of backward, unless Options::outputs_held is false: then
//    an output no node saved is freed once the loss exists. Its backward: cross-entropy holds the
//    log-probs' gradient and the logits' gradient at once.
//  * Backward, in reverse order, for nodes with an input that requires grad and an output that has
//    a gradient: allocate one gradient per such input (views pass the gradient buffer through),
//    all of them before any is passed on (the engine adds a node's outputs to the next nodes'
//    input buffers once the node's function returned: torch/csrc/autograd/engine.cpp,
//    evaluate_function); a parameter's first gradient becomes its .grad (stolen, memory-model.md
//    §3.1), later ones are added in place (freed); fan-out gradients of activations accumulate in
//    place (the new buffer is freed, memory-model.md §3.1); then the node's output gradients and
//    saved tensors are freed (memory-model.md §3.1 release_variables).
//  * Activation checkpointing (Options::checkpoint_segments or checkpoint_blocks; cuts in
//    core/checkpoint.h, EstimationContext::checkpoint()): nodes of a
//    checkpointed segment save nothing in the forward; the segment's inputs are kept until its
//    backward. When backward reaches the segment, its forward runs again (saving as usual, with
//    its own autocast cache), then backward goes through it and the recomputed outputs and the
//    kept inputs are released (torch.utils.checkpoint, reentrant).
//  * Gradient accumulation (Options::micro_batches): k forward/backward passes on batch/k, the
//    later gradients added into .grad in place, then one step. Under DDP the first k - 1
//    backward passes run under no_sync() (only the last one all-reduces), as Accelerate and
//    Lightning accumulate.
//  * Optimizer step (memory-model.md §4.1-4.3), over the parameters backward gives a .grad
//    (ValueFacts::gets_gradient): iteration 1 creates the state (adam: 2 per
//    parameter, momentum: 1). Foreach (the default): L2 weight decay allocates a gradient-sized
//    copy of all grads, then frees it; adam then allocates the sqrt copy of all exp_avg_sq (one per
//    parameter) and frees it. Single-tensor: per parameter, the L2 copy and adam's sqrt and
//    quotient (memory-model.md §4.3: about 2 x the largest parameter). Fused: no parameter-sized
//    temporaries.
//  * Many GPUs (Options::parallel, memory/parallel.h), one rank of the pipeline stage
//    EstimationContext::stage(): tensor-parallel shares are in the value facts' bytes. DDP's
//    constructor broadcasts the rank's parameters, then its buffers (the floating-point and
//    boolean initializers of more than one element that are not parameters), through flat copies
//    made and freed two at a time, and the first micro-batch of each iteration broadcasts the
//    buffers so in its forward, before the first node (memory/ddp_buckets.h BroadcastBuffers). DDP
//    allocates one gradient bucket per dtype with the model and frees them for the rebuilt ones
//    (memory/ddp_buckets.h) at the end of the first iteration, which it keeps. PyTorch rebuilds
//    them in the next forward, after zero_grad and the next batch; made before, they leave
//    iteration 2 starting as iteration 3 does, which the loop and the traces need. With
//    gradient_as_bucket_view the buckets are the gradients: a parameter's gradient is freed at its
//    earliest reader's backward in the backward that all-reduces (copied into its bucket). Under
//    ZeRO and FSDP the rank's parameters, gradients and optimizer state are flat buffers of
//    memory::ShardModelStates' sizes (no autocast weight copies: the model computes in its low
//    dtype); a parameter's gradient is written into the gradient buffer and freed. ZeRO-3 and FSDP
//    gather each unit's parameters (ZeRO-3: one module) before its first node in forward and again
//    in backward, FSDP full/hybrid prefetching the next unit; a unit's gathered parameters are
//    freed after its last forward node (kept until its backward under fsdp-grad-op), and in
//    backward the unit's unsharded gradients live from its first backward node until the
//    reduce-scatter after its last; parameters in no unit stay gathered from the start of forward
//    to the end of backward. ZeRO's step allocates its fp32 gradient partition for the step. NCCL's
//    buffers are outside the allocator, like the CUDA context.
//  * Pipeline stages (pp > 1, 1F1B): the rank runs only its stage's nodes and holds only the
//    parameters they read (memory/parallel.h). Each micro-batch's forward first receives the
//    activations its nodes read from earlier stages (held until its backward is done, as
//    Megatron-LM keeps input_tensor); what it sends on is freed once sent unless a node of the
//    stage saved it (Megatron's deallocate_output_tensor). A stage without the loss starts its
//    backward from the received gradients of what it sent, and the gradients of what it
//    received are sent back and freed. Under 1F1B the stage runs in_flight = min(pp - stage,
//    micro-batches) forwards before its first backward and keeps that many in flight until the
//    cool-down: the micro-batches' passes run one after another as with gradient accumulation,
//    and from the first forward's end until the last backward of the iteration, in_flight - 1
//    other micro-batches' saved tensors (the activations and AMP weight copies the first
//    forward left alive, re-allocated tensor by tensor) are held beside the current one
//    (Narayanan et al., 2021, §2.2). Activation checkpointing with stages is not modelled.
//  * Inference: forward only, no saved tensors, no gradients, one cuBLAS workspace. Data inputs
//    live to the end of the iteration, except a decoder's past KV cache, released after its last
//    reader (memory/kv_cache.h).
//  * The loop: iterations run until one starts from the state an earlier one started from
//    (symbolic/timeline_loop.cc, whose policy says how; memory-model.md §6).
//  * Every event goes through CachingAllocatorModel (symbolic/allocator.h) -- or, following an
//    allocator run made already over the same requests (Simulate's AllocatorRun overload, the
//    max-batch check), is checked against the run's next request and reads the allocator's state
//    after it from the run. Peaks over all simulated iterations; device peak = peak reserved + the
//    stack's CUDA context and library memory (memory/device.h, memory-model.md §2.2). The
//    breakdown is taken at the fullest moment (most allocated) at peak reserved: requested bytes
//    per category, allocator rounding (allocated - requested) and cached-but-free segment memory
//    (reserved - allocated). Separately, each category's own maximum over all iterations, with
//    the phase, iteration and node where it was first reached (Estimate::largest).
#include "symbolic/timeline.h"

#include <algorithm>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>

#include "base/checked.h"
#include "base/dtype.h"
#include "base/id_vector.h"
#include "core/checkpoint.h"
#include "memory/context.h"
#include "memory/device.h"
#include "memory/kv_cache.h"
#include "memory/loss.h"
#include "memory/optimizer.h"
#include "memory/parallel.h"
#include "ops/rules.h"
#include "ops/value_facts.h"
#include "symbolic/allocator.h"
#include "symbolic/sim.h"

namespace memest::symbolic {
namespace internal {

inline Tensor Sim::NewSlot(uint64_t bytes, Category c) {
  uint32_t slot;
  if (free_slots_.empty()) {
    slot = static_cast<uint32_t>(tensors_.size());
    tensors_.emplace_back();
  } else {
    slot = free_slots_.back();
    free_slots_.pop_back();
  }
  Live& t = tensors_[slot];
  t.bytes = bytes;
  t.category = c;
  t.alive = true;
  live_[c] += bytes;
  return HandleOf(slot, t.generation);
}

Tensor Sim::Malloc(uint64_t bytes, Category c, SizeRecipe recipe) {
  if (bytes == 0) return -1;
  const Tensor handle = NewSlot(bytes, c);
  Live& t = tensors_[SlotOf(handle)];
  t.made_in = iteration_;
  t.made_at = made_++;
  if (collect_micro_batch_) micro_batch_made_.emplace_back(handle, recipe);
  if (requests_ != nullptr) {  // a trace: the request is what it keeps (no allocator, no peaks)
    t.handle = mallocs_++;
    if (noting_loop_) {
      NoteLoopMalloc(t);
      loop_recipes_.push_back(recipe);
    }
    trace_->recipes.push_back(recipe);
    trace_->moments.push_back(TracedHere(c));
    Trace({bytes, -1});
    return handle;
  }
  // After a request failed for good the step is not an estimate (symbolic/symbolic.cc): the rest
  // of the iteration runs without the allocator, whose every later failure would release and
  // scan again.
  if (run_ != nullptr) {  // following a run: the malloc's number names its block, as in a trace
    t.handle = mallocs_++;
    FollowRequest({bytes, -1});
    if (noting_loop_) NoteLoopMalloc(t);
  } else if (alloc_.oom()) {
    t.handle = -1;
  } else {
    t.handle = alloc_.Malloc(bytes);
    if (alloc_.oom()) oom_at_ = Here(bytes);
    if (noting_loop_) NoteLoopMalloc(t);
  }
  NoteMallocMoments(c);
  Record(true, bytes, c);
  return handle;
}

Sim::Live* Sim::Find(Tensor t) {
  if (t < 0) return nullptr;
  Live& l = tensors_[SlotOf(t)];
  return l.alive && l.generation == GenerationOf(t) ? &l : nullptr;
}

void Sim::Free(Tensor* t) {
  if (Live* l = Find(*t)) {
    if (l->made_in == 0) ++made_before_changed_;
    l->alive = false;
    l->generation = (l->generation + 1) & 0x7fffffff;
    free_slots_.push_back(SlotOf(*t));
    live_[l->category] -= l->bytes;
    if (requests_ != nullptr) {  // a trace
      *t = -1;
      if (noting_loop_) NoteLoopFree(*l);
      trace_->moments.push_back(TracedHere(l->category));
      Trace({0, l->handle});
      return;
    }
    if (run_ != nullptr) {
      FollowRequest({0, l->handle});
    } else {
      alloc_.Free(l->handle);
    }
    if (noting_loop_) NoteLoopFree(*l);
    NoteCachedFree();
    Record(false, l->bytes, l->category);
  }
  *t = -1;
}

void Sim::Relabel(Tensor t, Category c) {
  Live* l = Find(t);
  if (l == nullptr) return;  // a freed tensor has no bytes to move
  if (l->made_in == 0) ++made_before_changed_;
  if (noting_loop_) {
    loop_relabels_.push_back(
        {static_cast<uint32_t>(loop_requests_.size()), l->category, c, l->bytes});
  }
  if (requests_ != nullptr) {
    trace_->relabels.push_back(
        {requests_->size(), l->handle, static_cast<uint8_t>(c), TracedHere(c)});
  }
  live_[l->category] -= l->bytes;
  l->category = c;
  live_[c] += l->bytes;
  NoteLargest(c);
}

Sim::Moment Sim::Here(uint64_t bytes) const { return {bytes, phase_, iteration_, node_}; }

CategoryPeak Sim::Describe(const Moment& m) const {
  CategoryPeak p;
  p.bytes = m.bytes;
  p.phase = m.phase;
  p.iteration = m.iteration;
  if (m.node >= 0) p.node = g_.node(m.node).name;
  return p;
}

void Sim::NoteLargest(Category c) {
  const uint64_t now = live_[c];
  if (now > largest_[c].bytes) largest_[c] = Here(now);
}

void Sim::FollowRequest(const AllocatorRequest& r) {
  const std::vector<AllocatorRequest>& want = run_->requests;
  if (run_next_ >= want.size() || !SameRequest(r, want[run_next_], run_->config)) {
    if (!run_differs_at_) run_differs_at_ = run_next_;
    return;
  }
  TakeRunState();
}

void Sim::NoteCachedFree() {
  const AllocatorStats& s = Stats();
  const uint64_t now = s.reserved > s.allocated ? s.reserved - s.allocated : 0;
  if (now > largest_cached_free_.bytes) largest_cached_free_ = Here(now);
}

void Sim::Record(bool malloc, uint64_t bytes, Category c) {
  if (!record_) return;
  TimelineEvent e;
  e.malloc = malloc;
  e.bytes = bytes;
  e.category = c;
  e.phase = phase_;
  e.node = node_;
  e.iteration = iteration_;
  e.allocated = Stats().allocated;
  e.reserved = Stats().reserved;
  sim_.events.push_back(e);
}

void Sim::IndexValues() {
  kind_.assign(g_.values.size(), core::ValueKind::kIntermediate);
  for (int i = 0; i < static_cast<int>(g_.values.size()); ++i) {
    const core::Value& v = g_.value(i);
    kind_[i] = v.kind;
    // torch.optim steps only the parameters with a .grad (memory-model.md §4.2).
    if (facts_.gets_gradient(i) && !v.consumers.empty() && plan_.parameter_on_stage(i, stage_)) {
      step_params_.push_back(i);
    }
  }
}

void Sim::Prepare() {
  const size_t nv = g_.values.size(), nn = g_.nodes.size();
  IndexValues();
  uses_.assign(nv, 0);
  saved_by_.assign(nv, 0);
  cast_saves_.assign(nv, 0);
  saved_.resize(nn);
  if (!checkpoint_.empty()) seg_of_ = core::SegmentOfNode(g_, checkpoint_);  // training only
  input_roots_at_.assign(nn + 1, 0);
  size_t inputs = 0;
  for (const core::Node& n : g_.nodes) inputs += n.inputs.size();
  input_roots_.clear();
  input_roots_.reserve(inputs);  // at most one root per input: filled without moving
  for (size_t k = 0; k < nn; ++k) {
    roots_.clear();
    for (int in : g_.nodes[k].inputs) {
      if (in >= 0) roots_.push_back(facts_.root(in));
    }
    SortUnique(&roots_);
    input_roots_.insert(input_roots_.end(), roots_.begin(), roots_.end());
    input_roots_at_[k + 1] = input_roots_.size();
  }
  cudnn_workspace_.assign(nn, kNeitherWorkedOut);
  for (size_t k = 0; k < nn; ++k) {
    if (!OnStage(k)) continue;
    for (int r : InputRoots(k, -1)) ++uses_[r];
    if (!train_) continue;
    saved_[k] = StepSaves(k);
    // A checkpointed node saves nothing in the forward (it runs under no_grad); its saves are
    // counted when the segment is recomputed in backward.
    if (Checkpointed(k)) continue;
    const ops::OpRule* rule = facts_.rule(k);
    for (const auto& s : saved_[k]) {
      if (s.value >= 0 && kind_[s.value] == core::ValueKind::kInitializer &&
          facts_.amp_cast_bytes(s.value) > 0 && rule &&
          rule->amp == ops::AmpPolicy::kLowerPrecision) {
        ++cast_saves_[s.value];
      }
    }
    for (int r : SavedRoots(k, -1)) ++saved_by_[r];
  }
  for (const core::CheckpointSegment& seg : checkpoint_) {  // the checkpoint keeps its inputs
    std::set<int> roots;
    for (int in : seg.inputs) roots.insert(facts_.root(in));
    for (int r : roots) ++saved_by_[r];
  }
  FindStageBoundary();
  PrepareLoss();
  value_.assign(nv, -1);
  grad_.assign(nv, -1);
  param_grad_.assign(nv, -1);
  cast_.assign(nv, -1);
  extras_.assign(nn, {});
  // Slots for the tensors alive at once: at most about two per value (its storage and its
  // gradient) besides a few others; reserved so that the vector rarely moves. The allocator
  // model's blocks are about as many (one per live tensor, a free one beside some).
  const size_t alive_at_once = std::min<size_t>(2 * nv + 64, size_t{1} << 24);
  tensors_.reserve(alive_at_once);
  if (requests_ == nullptr && run_ == nullptr) alloc_.Reserve(alive_at_once);
  if (!record_) return;
  sim_.node_names.reserve(nn);
  for (const auto& n : g_.nodes) sim_.node_names.push_back(n.name);
}

void Sim::PrepareLoss() {
  // The loss is computed on the stage that makes the first output (the last for a graph input).
  const int producer = g_.outputs.empty() ? -1 : g_.value(g_.outputs.front()).producer;
  const bool loss_here =
      producer < 0 ? stage_ == plan_.stages() - 1 : OnStage(static_cast<size_t>(producer));
  if (train_ && !g_.outputs.empty() && loss_here) {
    loss_value_ = g_.outputs.front();
    loss_tensors_ = memory::LossTensorsFor(b_, facts_, o_, loss_value_);
  }
}

void Sim::AllocateWeights() {
  phase_ = Phase::kUnknown;
  for (size_t i = 0; i < g_.values.size(); ++i) {
    const core::Value& v = g_.values[i];
    if (v.kind != core::ValueKind::kInitializer || v.consumers.empty()) continue;
    if (!plan_.parameter_on_stage(static_cast<int>(i), stage_)) continue;  // another stage's
    if (sharded_ && v.trainable) continue;  // in the flat buffer below
    if (value_[i] >= 0) continue;           // the prefill's (AdoptPrefill)
    value_[i] = Malloc(facts_.bytes(static_cast<int>(i)), Category::kWeights,
                       {SizeRecipe::kValue, static_cast<int32_t>(i)});
  }
  if (sharded_) flat_weights_ = Malloc(rank_.weights, Category::kWeights, {SizeRecipe::kSame});
  // DDP's constructor broadcasts the parameters and buffers, then its reducer allocates its
  // buckets (one per dtype). (Many GPUs are modelled for training only: no prefill ran before.)
  BroadcastCoalesced(wrap_broadcast_);
  for (uint64_t size : rank_.buckets.at_wrap) {
    buckets_.push_back(Malloc(size, BucketCategory(), {SizeRecipe::kSame}));
  }
  if (train_) {
    const auto k = static_cast<uint64_t>(memory::StateTensorsPerParameter(o_.optimizer));
    state_.reserve(k * g_.values.size());
  }
}

void Sim::PrepareParallel() {
  if (!o_.parallel.enabled()) return;
  const std::vector<memory::ParameterShare> params =
      memory::RankParameters(b_, facts_, plan_, stage_);
  rank_ = memory::ShardModelStates(params, o_);
  sharded_ = !rank_.unsharded;
  memory::DdpBroadcasts broadcasts =
      memory::MakeDdpBroadcasts(b_, facts_, plan_, stage_, params, rank_);
  wrap_broadcast_ = std::move(broadcasts.at_wrap);
  buffer_broadcast_ = std::move(broadcasts.each_forward);
  unit_of_node_.assign(g_.nodes.size(), -1);
  if (train_ && rank_.grads_in_buckets) {
    // A parameter's gradient is complete, copied into its bucket and freed, at its earliest
    // reader's backward on this stage (the last one backward reaches).
    for (const memory::ParameterShare& s : params) {
      if (s.trainable && s.first_use >= 0) bucket_copies_.emplace_back(s.first_use, s.value);
    }
    std::sort(bucket_copies_.rbegin(), bucket_copies_.rend());
  }
  if (!train_ || !GathersUnits(o_.parallel.sharding)) return;
  // ZeRO-3 gathers one module at a time, FSDP one wrap unit.
  auto unit_of = [&](const memory::ParameterShare& s) {
    return o_.parallel.sharding == Sharding::kZero3 ? s.module : s.unit;
  };
  const uint64_t c = memory::ComputeBytes(o_);
  int units = 0;
  for (const memory::ParameterShare& s : params) units = std::max(units, unit_of(s) + 1);
  unit_bytes_.assign(static_cast<size_t>(units), 0);
  unit_grad_bytes_.assign(static_cast<size_t>(units), 0);
  unit_first_.assign(static_cast<size_t>(units), -1);
  unit_last_.assign(static_cast<size_t>(units), -1);
  for (const memory::ParameterShare& s : params) {
    const uint64_t bytes = base::SatMul(s.elements, c);
    const int u = unit_of(s);
    if (u < 0) {
      root_bytes_ = base::SatAdd(root_bytes_, bytes);
      continue;
    }
    unit_bytes_[u] = base::SatAdd(unit_bytes_[u], bytes);
    if (s.trainable) {
      unit_grad_bytes_[u] = base::SatAdd(unit_grad_bytes_[u], bytes);
    }
    for (int k : g_.value(s.value).consumers) {
      if (!OnStage(static_cast<size_t>(k))) continue;  // a tied weight's other stage
      int& node_unit = unit_of_node_[k];
      if (node_unit < 0) node_unit = u;
    }
  }
  for (size_t k = 0; k < g_.nodes.size(); ++k) {
    const int u = unit_of_node_[k];
    if (u < 0) continue;
    if (unit_first_[u] < 0) {
      unit_first_[u] = static_cast<int>(k);
      unit_order_.push_back(u);
    }
    unit_last_[u] = static_cast<int>(k);
  }
  gathered_.assign(static_cast<size_t>(units), -1);
  unit_grads_.assign(static_cast<size_t>(units), -1);
}

void Sim::BroadcastCoalesced(const std::vector<uint64_t>& buffers) {
  constexpr size_t kInFlight = 2;
  Tensor in_flight[kInFlight] = {-1, -1};
  for (size_t i = 0; i < buffers.size(); ++i) {
    Tensor& slot = in_flight[i % kInFlight];
    Free(&slot);  // bucket i - 2's, once it is copied back
    slot = Malloc(buffers[i], Category::kCollective, {SizeRecipe::kSame});
  }
  for (size_t i = buffers.size(); i < buffers.size() + kInFlight; ++i) {
    Free(&in_flight[i % kInFlight]);  // in the order they were made
  }
}

void Sim::Gather(int unit, Tensor* into) {
  if (*into < 0) *into = Malloc(unit_bytes_[unit], Category::kCollective, {SizeRecipe::kSame});
}

namespace {

// FSDP full/hybrid issue the next unit's all-gather while the current one computes (implicit
// prefetch); ZeRO-3 and grad-op are modelled without it.
bool Prefetches(const Parallelism& p) {
  return p.sharding == Sharding::kFsdpFull || p.sharding == Sharding::kFsdpHybrid;
}

}  // namespace

void Sim::GatherForward(size_t k) {
  if (unit_of_node_.empty()) return;
  const int u = unit_of_node_[k];
  if (u < 0 || unit_first_[u] != static_cast<int>(k)) return;
  Gather(u, &gathered_[u]);
  if (!Prefetches(o_.parallel)) return;
  const auto at = std::find(unit_order_.begin(), unit_order_.end(), u);
  if (at != unit_order_.end() && at + 1 != unit_order_.end()) {
    Gather(*(at + 1), &gathered_[*(at + 1)]);
  }
}

void Sim::ReleaseForward(size_t k) {
  if (unit_of_node_.empty() || o_.parallel.sharding == Sharding::kFsdpGradOp) return;
  const int u = unit_of_node_[k];
  if (u >= 0 && unit_last_[u] == static_cast<int>(k)) {
    Free(&gathered_[u]);  // reshard after forward
  }
}

void Sim::GatherBackward(size_t k) {
  if (unit_of_node_.empty()) return;
  const int u = unit_of_node_[k];
  if (u < 0 || unit_last_[u] != static_cast<int>(k)) return;
  Gather(u, &gathered_[u]);
  if (unit_grads_[u] < 0) {
    unit_grads_[u] = Malloc(unit_grad_bytes_[u], Category::kCollective, {SizeRecipe::kSame});
  }
  if (!Prefetches(o_.parallel)) return;
  const auto at = std::find(unit_order_.begin(), unit_order_.end(), u);
  if (at != unit_order_.end() && at != unit_order_.begin()) {
    Gather(*(at - 1), &gathered_[*(at - 1)]);
  }
}

void Sim::ReduceScatter(size_t k) {
  if (unit_of_node_.empty()) return;
  const int u = unit_of_node_[k];
  if (u < 0 || unit_first_[u] != static_cast<int>(k)) return;
  Free(&unit_grads_[u]);
  Free(&gathered_[u]);
}

void Sim::FreeIfDead(int root, bool output_dropped) {
  if (root < 0) return;
  const core::ValueKind kind = kind_[root];
  if (kind == core::ValueKind::kInitializer) return;
  if (kind == core::ValueKind::kDataInput && !kv_cache_.released_at_last_use(root)) return;
  if (uses_left_[root] > 0 || saved_left_[root] > 0) {
    return;
  }
  if (kept_root_[static_cast<size_t>(root)] && !output_dropped) return;
  Free(&value_[root]);
}

bool Sim::MadeIn(int root, int seg) const {
  const core::Value& v = g_.value(root);
  if (v.kind != core::ValueKind::kIntermediate || v.producer < 0) return false;
  const core::CheckpointSegment& s = checkpoint_[static_cast<size_t>(seg)];
  return v.producer >= s.begin && v.producer < s.end;
}

// Backward reached a checkpointed segment: its forward runs again with grad enabled from the
// kept inputs (reentrant torch.utils.checkpoint): outputs, saved tensors and extras as in a
// normal forward; unsaved intermediates die after their last reader in the segment; the
// recomputed segment outputs stay alive until the segment's backward is done (they are the
// roots of the inner backward). Under AMP the recomputation has its own autocast cache.
void Sim::Recompute(int seg) {
  const core::CheckpointSegment& s = checkpoint_[static_cast<size_t>(seg)];
  bool needed = false;
  for (int out : s.outputs) needed = needed || grad_[out] >= 0;
  if (!needed) return;
  // Per-segment counts for the roots the segment makes.
  for (int k = s.begin; k < s.end; ++k) {
    const core::Node& n = g_.node(k);
    for (int out : n.outputs) {
      if (out >= 0 && facts_.root(out) == out) {
        uses_left_[out] = 0;
        saved_left_[out] = 0;
      }
    }
  }
  for (int k = s.begin; k < s.end; ++k) {
    for (int r : InputRoots(static_cast<size_t>(k), seg)) ++uses_left_[r];
    for (int r : SavedRoots(static_cast<size_t>(k), seg)) ++saved_left_[r];
  }
  std::set<int> held;
  for (int out : s.outputs) held.insert(facts_.root(out));
  for (int r : held) {
    if (MadeIn(r, seg)) ++saved_left_[r];
  }
  for (int k = s.begin; k < s.end; ++k) ForwardNode(static_cast<size_t>(k), seg);
  ClearAutocastCache();  // the recomputation's own cache
}

// The segment's backward is done: the recomputed outputs and the kept inputs are released.
void Sim::ReleaseSegment(int seg) {
  const core::CheckpointSegment& s = checkpoint_[static_cast<size_t>(seg)];
  std::set<int> roots;
  for (int out : s.outputs) roots.insert(facts_.root(out));
  for (int r : roots) {
    if (!MadeIn(r, seg) || saved_left_[r] == 0) continue;
    --saved_left_[r];
    FreeIfDead(r);
  }
  roots.clear();
  for (int in : s.inputs) roots.insert(facts_.root(in));
  for (int r : roots) {
    if (saved_left_[r] > 0) --saved_left_[r];
    FreeIfDead(r);
  }
}

std::span<const int> Sim::InputRoots(size_t k, int seg) {
  const auto all = std::span<const int>(input_roots_)
                       .subspan(input_roots_at_[k], input_roots_at_[k + 1] - input_roots_at_[k]);
  if (seg < 0) return all;
  roots_.clear();  // the segment's own, still sorted and each once
  for (int r : all) {
    if (MadeIn(r, seg)) roots_.push_back(r);
  }
  return roots_;
}

const std::vector<int>& Sim::SavedRoots(size_t k, int seg) {
  saved_roots_.clear();
  for (const auto& s : saved_[k]) {
    if (s.value < 0 || kind_[s.value] == core::ValueKind::kInitializer) continue;
    const int r = facts_.root(s.value);
    if (seg < 0 || MadeIn(r, seg)) saved_roots_.push_back(r);
  }
  SortUnique(&saved_roots_);
  return saved_roots_;
}

// Allocates the node's outputs (views allocate nothing and keep their source alive,
// memory-model.md §3.1), its autocast weight copies (memory-model.md §5.1), its workspace (freed at
// once) and the extra tensors it saves, then frees what died. In a recomputation the segment's own
// counts decide, outputs that are still alive are not made again, and the saved autocast copies are
// counted here.
void Sim::ForwardNode(size_t k, int seg) {
  const core::Node& n = g_.nodes[k];
  node_ = static_cast<int>(k);
  const ops::OpRule* rule = facts_.rule(k);
  const bool lower = rule && rule->amp == ops::AmpPolicy::kLowerPrecision;
  if (seg < 0) GatherForward(k);
  if (lower && !sharded_) {
    for (int in : n.inputs) {
      if (in >= 0 && cast_[in] < 0 && facts_.amp_cast_bytes(in) > 0) {
        cast_[in] =
            Malloc(facts_.amp_cast_bytes(in), Category::kWeights, {SizeRecipe::kAmpCast, in});
      }
    }
  }
  // A quantized weight is dequantized (int8: the input quantized) for the call, then dropped
  // (memory/weight_storage.h).
  Tensor dequantized = Malloc(weights_.forward_transient(k), Category::kTransient,
                              {SizeRecipe::kWeightForward, static_cast<int32_t>(k)});
  for (int out : n.outputs) {
    if (out < 0 || facts_.root(out) != out) continue;  // views allocate nothing
    if (seg >= 0 && value_[out] >= 0) continue;
    value_[out] = Malloc(facts_.bytes(out),
                         saved_left_[out] > 0 ? Category::kActivations : Category::kTransient,
                         {SizeRecipe::kValue, out});
  }
  Free(&dequantized);
  // The rule's workspace (a fused attention kernel's scores) lives while the kernel writes what it
  // keeps: freed after the saved extras exist.
  Tensor ws = Malloc(facts_.Workspace(k), Category::kTransient,
                     {SizeRecipe::kWorkspace, static_cast<int32_t>(k)});
  if (train_ && (seg >= 0 || !Checkpointed(k))) {
    for (size_t i = 0; i < saved_[k].size(); ++i) {
      const auto& sv = saved_[k][i];
      if (sv.value < 0) {
        extras_[k].push_back(
            Malloc(sv.bytes, Category::kActivations,
                   {SizeRecipe::kSavedExtra, static_cast<int32_t>(k), static_cast<int32_t>(i)}));
      } else if (seg >= 0 && lower && kind_[sv.value] == core::ValueKind::kInitializer &&
                 facts_.amp_cast_bytes(sv.value) > 0) {
        ++cast_left_[sv.value];
      }
    }
  }
  // A cuDNN call's workspace likewise: a recurrent layer's reserve (a saved extra) is allocated
  // before the call, beside its workspace (memory-model.md §2.6).
  CudnnWorkspace(k);
  Free(&ws);
  for (int r : InputRoots(k, seg)) {
    --uses_left_[r];
    FreeIfDead(r);
  }
  for (int out : n.outputs) {
    if (out >= 0 && facts_.root(out) == out) FreeIfDead(out);  // outputs nobody reads
  }
  if (seg < 0) ReleaseForward(k);
}

// The autocast cache is cleared when its autocast region ends; copies saved for backward stay
// (memory-model.md §5.1).
void Sim::ClearAutocastCache() {
  for (size_t i = 0; i < cast_.size(); ++i) {
    if (cast_[i] >= 0 && cast_left_[i] == 0) Free(&cast_[i]);
  }
}

uint64_t Sim::CudnnWorkspaceOf(size_t k, memory::ConvPass pass) {
  uint64_t& bytes = cudnn_workspace_[k][pass == memory::ConvPass::kWeightGradient];
  if (bytes == kNotWorkedOut) {
    bytes =
        memory::CudnnWorkspaceBytes(stack_, facts_, g_.nodes[k], k, o_.library_workspaces, pass);
  }
  return bytes;
}

void Sim::CudnnWorkspace(size_t k, memory::ConvPass pass) {
  const uint64_t bytes = CudnnWorkspaceOf(k, pass);
  if (bytes == 0) return;
  const int32_t weight = pass == memory::ConvPass::kWeightGradient ? 1 : 0;
  Tensor ws = Malloc(bytes, Category::kTransient,
                     {SizeRecipe::kCudnnWorkspace, static_cast<int32_t>(k), weight});
  Free(&ws);
}

void Sim::RebuildBuckets() {
  if (buckets_.empty()) return;
  phase_ = Phase::kForward;  // DDP's _pre_forward
  for (Tensor& t : buckets_) Free(&t);
  buckets_.clear();
  for (uint64_t size : rank_.buckets.rebuilt) {
    buckets_.push_back(Malloc(size, BucketCategory(), {SizeRecipe::kSame}));
  }
}

void Sim::CopyIntoBuckets(size_t kk, size_t* next) {
  if (!syncs_gradients_) return;  // under no_sync(): .grad stays its own tensor
  for (; *next < bucket_copies_.size() && bucket_copies_[*next].first == static_cast<int>(kk);
       ++*next) {
    Free(&param_grad_[bucket_copies_[*next].second]);
  }
}

void Sim::Forward(int it) {
  phase_ = train_ ? Phase::kForward : Phase::kInference;
  uses_left_ = uses_;
  saved_left_ = saved_by_;
  cast_left_ = cast_saves_;
  if (train_ && root_bytes_ > 0 && root_gathered_ < 0) {
    root_gathered_ = Malloc(root_bytes_, Category::kCollective, {SizeRecipe::kSame});
  }
  ReceiveActivations();
  for (size_t k = 0; k < g_.nodes.size(); ++k) {
    if (!OnStage(k)) continue;
    node_ = static_cast<int>(k);
    const ops::OpRule* rule = facts_.rule(k);
    if (o_.library_workspaces && ws_forward_ < 0 && rule && rule->uses_cublas) {
      ws_forward_ = Malloc(cublas_workspace_, Category::kTransient, {SizeRecipe::kSame});
    }
    ForwardNode(k, -1);
  }
  node_ = -1;
  ClearAutocastCache();
  (void)it;
}

void Sim::Loss() {
  if (loss_value_ < 0) return;
  phase_ = Phase::kForward;
  if (loss_tensors_.cross_entropy) {
    log_probs_ =
        Malloc(loss_tensors_.log_probs, Category::kActivations, {SizeRecipe::kLossLogProbs});
  }
  loss_ = Malloc(4, Category::kTransient, {SizeRecipe::kSame});
  // A loop that drops the outputs once the loss exists frees an output nothing saved
  // (Options::outputs_held).
  if (!o_.outputs_held) {
    for (int out : g_.outputs) FreeIfDead(facts_.root(out), /*output_dropped=*/true);
  }
}

void Sim::LossBackward() {
  if (loss_value_ < 0) return;
  Tensor seed = Malloc(4, Category::kTransient, {SizeRecipe::kSame});  // ones_like(loss)
  // memory/loss.h: cross-entropy's gradient of the log-probs, then of the output while both
  // are alive (the first dies with NllLossBackward's release_variables); MSE's one gradient.
  // Measured on the CPU harness, datasets/measured/cpu/bundled.jsonl.
  Tensor grad_log_probs =
      loss_tensors_.cross_entropy
          ? Malloc(loss_tensors_.log_probs, Category::kTransient, {SizeRecipe::kLossLogProbs})
          : -1;
  if (loss_tensors_.cross_entropy) Free(&seed);
  grad_[loss_value_] =
      Malloc(loss_tensors_.output_grad, Category::kTransient, {SizeRecipe::kLossOutputGrad});
  Free(&grad_log_probs);
  Free(&seed);
  Free(&log_probs_);
}

void Sim::Deliver(int in, Tensor g) {
  if (sharded_ && facts_.trainable(in)) {
    Free(&g);  // written into the rank's gradient buffer (or the unit's, then scattered)
    return;
  }
  Tensor& slot = facts_.trainable(in) ? param_grad_[in] : grad_[in];
  if (slot < 0) {
    if (facts_.trainable(in) && g >= 0) {
      // Stolen into .grad (memory-model.md §3.1): re-label it as a parameter gradient.
      Relabel(g, Category::kGradients);
    }
    slot = g;
  } else {
    Free(&g);  // added in place into the existing buffer
  }
}

void Sim::InputGradients(size_t kk, std::span<const int> ins) {
  const core::Node& n = g_.nodes[kk];
  const ops::OpRule* rule = facts_.rule(kk);
  if (rule && rule->view) {
    // The gradient of a view is a view of the output gradient: pass the buffer through.
    Tensor g = -1;
    for (int out : n.outputs) {
      if (out >= 0 && grad_[out] >= 0 && g < 0) {
        g = grad_[out];
        grad_[out] = -1;
      }
    }
    if (!n.inputs.empty() && facts_.requires_grad(n.inputs[0])) {
      Deliver(n.inputs[0], g);
    } else {
      Free(&g);
    }
    return;
  }
  // The input's gradient is computed from the dequantized weight (memory/weight_storage.h).
  Tensor dequantized = !n.inputs.empty() && facts_.requires_grad(n.inputs[0])
                           ? Malloc(weights_.backward_transient(kk), Category::kTransient,
                                    {SizeRecipe::kWeightBackward, static_cast<int32_t>(kk)})
                           : -1;
  // An attention kernel's backward buffers (ops/attention.h), alive while the input gradients
  // are made.
  Tensor bws = Malloc(facts_.BackwardWorkspace(kk), Category::kTransient,
                      {SizeRecipe::kBackwardWorkspace, static_cast<int32_t>(kk)});
  // A convolution's cuDNN calls run one after the other: the data gradient's, then the weight
  // gradient's, each with its own workspace (memory/device.h).
  const bool conv = rule && rule->uses_cudnn_conv;
  std::vector<std::pair<int, Tensor>>& made = made_gradients_;
  made.clear();
  for (int in : ins) {
    if (!facts_.requires_grad(in)) continue;
    made.emplace_back(in, Malloc(facts_.bytes(in), Category::kTransient, {SizeRecipe::kValue, in}));
    if (!conv) continue;
    if (in == n.inputs[0]) {
      CudnnWorkspace(kk, memory::ConvPass::kDataGradient);
    } else if (n.inputs.size() > 1 && in == n.inputs[1]) {
      CudnnWorkspace(kk, memory::ConvPass::kWeightGradient);
    }
  }
  Free(&bws);
  Free(&dequantized);
  for (const auto& [in, g] : made) Deliver(in, g);
}

void Sim::ReleaseSaved(size_t kk, int seg) {
  const ops::OpRule* rule = facts_.rule(kk);
  std::vector<int>& released = released_;  // each root once, in the order saved
  released.clear();
  for (const auto& s : saved_[kk]) {
    if (s.value < 0) continue;
    if (kind_[s.value] == core::ValueKind::kInitializer) {
      const size_t p = static_cast<size_t>(s.value);
      if (cast_[p] >= 0 && rule && rule->amp == ops::AmpPolicy::kLowerPrecision &&
          --cast_left_[p] == 0) {
        Free(&cast_[p]);
      }
      continue;
    }
    const int r = facts_.root(s.value);
    // In a recomputed segment, only what the recomputation made is counted per node; the
    // segment's inputs are held by the checkpoint until ReleaseSegment.
    if (seg >= 0 && !MadeIn(r, seg)) continue;
    if (std::find(released.begin(), released.end(), r) == released.end()) {
      released.push_back(r);
      --saved_left_[r];
      FreeIfDead(r);
    }
  }
  for (Tensor& t : extras_[kk]) Free(&t);
  extras_[kk].clear();
}

void Sim::BackwardNode(size_t kk) {
  const core::Node& n = g_.nodes[kk];
  node_ = static_cast<int>(kk);
  const int seg = Checkpointed(kk) ? seg_of_[kk] : -1;
  if (seg >= 0 && static_cast<int>(kk) == checkpoint_[static_cast<size_t>(seg)].end - 1) {
    Recompute(seg);
    node_ = static_cast<int>(kk);
  }
  GatherBackward(kk);
  const ops::OpRule* rule = facts_.rule(kk);
  bool needs = false, has_out_grad = false;
  const std::span<const int> ins = facts_.GradInputs(kk);
  for (int in : ins) needs = needs || facts_.requires_grad(in);
  for (int out : n.outputs) has_out_grad = has_out_grad || (out >= 0 && grad_[out] >= 0);
  if (needs && has_out_grad) {
    if (o_.library_workspaces && ws_backward_ < 0 && rule && rule->uses_cublas) {
      ws_backward_ = Malloc(cublas_workspace_, Category::kTransient, {SizeRecipe::kSame});
    }
    InputGradients(kk, ins);
    // A recurrent layer's cuDNN backward runs while the output's and the inputs' gradients are
    // alive (a convolution's calls ran in InputGradients).
    if (rule && !rule->uses_cudnn_conv) CudnnWorkspace(kk);
  }
  for (int out : n.outputs) {
    if (out >= 0) Free(&grad_[out]);
  }
  // release_variables: saved tensors die with their node (memory-model.md §3.1).
  ReleaseSaved(kk, seg);
  if (seg >= 0 && static_cast<int>(kk) == checkpoint_[static_cast<size_t>(seg)].begin) {
    ReleaseSegment(seg);
  }
  ReduceScatter(kk);
}

void Sim::Backward() {
  phase_ = Phase::kBackward;
  if (sharded_ && flat_grads_ < 0) {
    flat_grads_ = Malloc(rank_.gradients, Category::kGradients, {SizeRecipe::kSame});
  }
  LossBackward();
  ReceiveGradients();
  size_t bucket_copy = 0;  // the next of bucket_copies_
  for (size_t kk = g_.nodes.size(); kk-- > 0;) {
    if (!OnStage(kk)) continue;
    BackwardNode(kk);
    CopyIntoBuckets(kk, &bucket_copy);
  }
  node_ = -1;
  ReleaseReceived();
  Free(&root_gathered_);
  for (Tensor& t : grad_) Free(&t);
  for (Tensor& t : cast_) Free(&t);
  Free(&loss_);
  for (int out : g_.outputs) Free(&value_[facts_.root(out)]);
}

void Sim::Step(int it) {
  phase_ = Phase::kOptimizerStep;
  if (sharded_) {
    // The rank's flat optimizer state (DeepSpeed: fp32 master copy and moments), created at the
    // first step; ZeRO's fp32 gradient partition for the step. DeepSpeed steps with one fused
    // kernel; FSDP's foreach step makes shard-sized temporaries (memory/parallel.h).
    if (it == 1) {
      flat_state_ = Malloc(rank_.optimizer_state, Category::kOptimizerState, {SizeRecipe::kSame});
    }
    Tensor fp32_grads = Malloc(rank_.fp32_grad_buffer, Category::kGradients, {SizeRecipe::kSame});
    for (int i = 0; i < memory::StepTemporariesFor(o_).lists; ++i) {
      Tensor t = Malloc(rank_.gradients, Category::kTransient, {SizeRecipe::kSame});
      Free(&t);
    }
    Free(&fp32_grads);
    return;
  }
  const std::vector<int>& params = step_params_;
  if (it == 1) {  // lazily created state (memory-model.md §4.2, memory/optimizer.h)
    if (const uint64_t shared = memory::SharedStateBytes(o_.optimizer); shared > 0) {
      state_.push_back(Malloc(shared, Category::kOptimizerState, {SizeRecipe::kSame}));
    }
    for (int p : params) {
      int32_t i = 0;
      for (uint64_t bytes : StateTensorsOf(p)) {
        state_.push_back(
            Malloc(bytes, Category::kOptimizerState, {SizeRecipe::kStateTensor, p, i++}));
      }
    }
  }
  // memory/optimizer.h: foreach makes whole lists one after another (the L2 copy of the
  // gradients, then Adam's sqrt of the second moments), each one temporary per parameter;
  // single-tensor holds its copies of one parameter at a time.
  const memory::StepTemporaries temps = memory::StepTemporariesFor(o_);
  for (int list = 0; list < temps.lists; ++list) {
    std::vector<Tensor> made;
    for (int p : params) {
      made.push_back(Malloc(facts_.bytes(p), Category::kTransient, {SizeRecipe::kValue, p}));
    }
    for (Tensor& t : made) Free(&t);
  }
  for (int p : params) {
    std::vector<Tensor> made;
    for (int i = 0; i < temps.per_parameter; ++i) {
      made.push_back(Malloc(facts_.bytes(p), Category::kTransient, {SizeRecipe::kValue, p}));
    }
    for (Tensor& t : made) Free(&t);
  }
}

// Pipeline stages: which roots this stage receives (read here, made on another stage; the
// rank also gets nothing else from other stages) and which values it sends (made here, read on
// another stage).
void Sim::FindStageBoundary() {
  if (!staged_) return;
  std::set<int> received, sent;
  for (size_t k = 0; k < g_.nodes.size(); ++k) {
    for (int in : g_.nodes[k].inputs) {
      if (in < 0) continue;
      const int r = facts_.root(in);
      const core::Value& v = g_.value(r);
      if (v.kind != core::ValueKind::kIntermediate || v.producer < 0) continue;
      const bool made_here = OnStage(static_cast<size_t>(v.producer));
      if (OnStage(k) && !made_here) received.insert(r);
      if (!OnStage(k) && made_here) sent.insert(in);
    }
  }
  received_.assign(received.begin(), received.end());
  sent_.assign(sent.begin(), sent.end());
  // A received activation is kept until the micro-batch's backward is done.
  for (int r : received_) ++saved_by_[r];
}

void Sim::ReceiveActivations() {
  for (int r : received_) {
    value_[r] = Malloc(facts_.bytes(r), Category::kActivations, {SizeRecipe::kValue, r});
  }
}

// A stage without the loss starts its backward from the gradients of what it sent: of the sent
// values that lead to the loss (ValueFacts::reaches_loss; the others get none, as on one GPU).
void Sim::ReceiveGradients() {
  if (!staged_ || loss_value_ >= 0) return;
  for (int v : sent_) {
    if (facts_.requires_grad(v) && facts_.reaches_loss(v) && grad_[v] < 0) {
      grad_[v] = Malloc(facts_.bytes(v), Category::kTransient, {SizeRecipe::kValue, v});
    }
  }
}

void Sim::ReleaseReceived() {
  for (int r : received_) {
    if (saved_left_[r] > 0) --saved_left_[r];
    FreeIfDead(r);
  }
}

// The tensors one micro-batch leaves alive after its forward on this stage (its inputs, saved
// activations and extras, AMP weight copies it saved), taken from the first forward.
void Sim::RecordMicroBatch() {
  if (!collect_micro_batch_) return;
  collect_micro_batch_ = false;
  micro_batch_recorded_ = true;
  for (const auto& [t, recipe] : micro_batch_made_) {
    const Live* l = Find(t);
    if (l && (l->category == Category::kActivations || l->category == Category::kWeights)) {
      micro_batch_set_.push_back({l->bytes, l->category, recipe});
    }
  }
  micro_batch_made_ = {};
}

void Sim::HoldOtherMicroBatches() {
  if (!staged_) return;
  for (int i = 1; i < plan_.in_flight(stage_); ++i) {
    for (const MicroBatchTensor& m : micro_batch_set_) {
      other_micro_batches_.push_back(Malloc(m.bytes, m.category, m.recipe));
    }
  }
}

void Sim::ReleaseOtherMicroBatches() {
  for (Tensor& t : other_micro_batches_) Free(&t);
  other_micro_batches_.clear();
}

void Sim::Iteration(int it) {
  iteration_ = it;
  made_ = 0;
  iteration_alloc_peak_ = Stats().allocated;
  phase_ = Phase::kUnknown;
  if (train_) {
    for (Tensor& g : param_grad_) Free(&g);  // zero_grad(set_to_none=True)
    Free(&flat_grads_);
  }
  // Gradient accumulation: micro-batches run forward and backward, .grad accumulates in place
  // (memory-model.md §3.1 AccumulateGrad), then one optimizer step.
  const int64_t micro = train_ ? o_.micro_batches : 1;
  for (int64_t m = 0; m < micro; ++m) {
    collect_micro_batch_ = staged_ && train_ && m == 0 && !micro_batch_recorded_;
    syncs_gradients_ = m + 1 == micro;  // the earlier micro-batches' backward under DDP no_sync()
    // New batch before the old one is released.
    old_inputs_.swap(inputs_);
    inputs_.clear();
    for (int id : g_.data_inputs) {
      if (!plan_.input_on_stage(id, stage_)) continue;
      Tensor t = -1;
      if (!adopted_.empty()) std::swap(t, adopted_[id]);  // the past the prefill left
      if (t < 0) t = Malloc(facts_.bytes(id), Category::kActivations, {SizeRecipe::kValue, id});
      inputs_.push_back(t);
      value_[id] = t;
    }
    if (train_) {
      inputs_.push_back(
          Malloc(loss_tensors_.targets, Category::kActivations, {SizeRecipe::kLossTargets}));
    }
    for (Tensor& t : old_inputs_) Free(&t);
    old_inputs_.clear();
    // DDP's forward broadcasts the buffers when it follows a synchronizing backward: the first
    // micro-batch's (the ones after it run under no_sync()).
    if (train_ && m == 0) {
      phase_ = Phase::kForward;
      BroadcastCoalesced(buffer_broadcast_);
    }
    Forward(it);
    if (train_ && m == 0) {
      RecordMicroBatch();
      HoldOtherMicroBatches();  // 1F1B warm-up: the next forwards run before this backward
    }
    if (train_) {
      Loss();
      Backward();
    } else {
      for (int out : g_.outputs) {
        if (prefill_ && !memory::PastNameOf(g_.value(out).name).empty()) continue;  // the cache
        Free(&value_[facts_.root(out)]);
      }
    }
  }
  ReleaseOtherMicroBatches();  // cool-down
  if (train_) Step(it);
  if (train_ && it == 1) RebuildBuckets();
  sim_.iterations.push_back({it, iteration_alloc_peak_, Stats().reserved});
}

void Sim::PreparePrefill() {
  prefill_ = true;
  train_ = false;
  Prepare();
  PrepareParallel();
}

void Sim::PrefillForward() {
  PreparePrefill();
  AllocateWeights();
  Iteration(1);
  for (Tensor& t : inputs_) Free(&t);  // the prompt's tensors (`del ids`)
}

Result<Simulation> Sim::RunPrefillAlone() {
  PrefillForward();
  return Written();
}

Result<Prefilled> Sim::RunPrefill() {
  PrefillForward();
  if (!alloc_.misuse().ok()) return alloc_.misuse();
  Prefilled out;
  auto keep = [&](const std::string& name, Tensor t, Category c) {
    if (const Live* l = Find(t)) out.kept.push_back({name, l->handle, l->bytes, c});
  };
  for (size_t i = 0; i < g_.values.size(); ++i) {
    if (kind_[i] == core::ValueKind::kInitializer) {
      keep(g_.values[i].name, value_[i], Category::kWeights);
    }
  }
  std::vector<int> roots;
  for (int out : g_.outputs) {
    const std::string past = memory::PastNameOf(g_.value(out).name);
    if (past.empty()) continue;
    const int root = facts_.root(out);
    if (std::find(roots.begin(), roots.end(), root) != roots.end()) {
      return InvalidArgument("the prefill's cache output '" + g_.value(out).name +
                             "' shares its storage with another: it cannot fill two past inputs");
    }
    roots.push_back(root);
    // Counted as the step's data inputs are (Iteration): activations.
    keep(past, value_[root], Category::kActivations);
  }
  if (const Live* l = Find(ws_forward_)) out.workspace = {"", l->handle, l->bytes, l->category};
  if (alloc_.oom()) out.ran_out_at = OutOfMemoryAt();
  out.alloc = std::move(alloc_);
  out.mallocs = mallocs_;
  out.followed = run_next_;
  out.differs_at = run_differs_at_;
  out.state = run_stats_;
  return out;
}

Tensor Sim::Adopt(CachingAllocatorModel::Handle handle, uint64_t bytes, Category c) {
  const Tensor t = NewSlot(bytes, c);
  Live& l = tensors_[SlotOf(t)];
  l.handle = handle;
  l.made_in = 0;  // before the step's first iteration (MadeState reads it)
  NoteLargest(c);
  Record(true, bytes, c);  // a timeline shows it from the start, as the prefill left it
  return t;
}

Status Sim::AdoptPrefill(Prefilled p) {
  alloc_ = std::move(p.alloc);
  prefill_ran_out_at_ = p.ran_out_at;
  adopted_.assign(g_.values.size(), -1);
  for (const Prefilled::Kept& k : p.kept) {
    const int id = g_.FindValue(k.name);
    const Tensor t = Adopt(k.handle, k.bytes, k.category);
    if (id < 0) continue;  // a tensor the step does not read: it stays allocated
    const bool same_size = k.bytes == facts_.bytes(id);
    if (kind_[id] == core::ValueKind::kInitializer && same_size) value_[id] = t;
    if (kind_[id] != core::ValueKind::kDataInput) continue;
    if (!same_size) {
      return InvalidArgument("the prefill leaves " + std::to_string(k.bytes) + " bytes for '" +
                             k.name + "', the step reads " + std::to_string(facts_.bytes(id)) +
                             ": its graphs disagree on the cache's shape or dtype");
    }
    adopted_[id] = t;
  }
  if (p.workspace.handle >= 0) {
    ws_forward_ = Adopt(p.workspace.handle, p.workspace.bytes, p.workspace.category);
  }
  if (o_.prefill->cache_emptied) alloc_.EmptyCache();  // torch.cuda.empty_cache()
  alloc_.ResetPeaks();                                 // torch.cuda.reset_peak_memory_stats()
  mallocs_ = p.mallocs;        // a trace's or a followed run's numbers go on (0 otherwise)
  if (requests_ != nullptr) {  // a trace: the step's requests follow the prefill's
    trace_->prefill_requests = requests_->size();
    trace_->cache_emptied = o_.prefill->cache_emptied;
  }
  if (run_ != nullptr) {  // following a run: the step goes on from where the prefill left it
    run_next_ = p.followed;
    run_differs_at_ = p.differs_at;
    run_stats_ = p.state;
  }
  return Status::Ok();
}

Status Sim::StepModelled() {
  train_ = o_.mode == Mode::kTrain;
  if (staged_ && train_ && !checkpoint_.empty()) {
    return InvalidArgument(
        "the symbolic timeline does not model activation checkpointing together with pipeline "
        "stages (pp " +
        std::to_string(plan_.stages()) + "); the analytical backend does");
  }
  return Status::Ok();
}

Status Sim::PrepareStep() {
  MEMEST_RETURN_IF_ERROR(StepModelled());
  Prepare();
  PrepareParallel();
  return Status::Ok();
}

Status Sim::PrepareSizes() {
  MEMEST_RETURN_IF_ERROR(StepModelled());
  cudnn_workspace_.assign(g_.nodes.size(), kNeitherWorkedOut);
  PrepareLoss();
  return Status::Ok();
}

void Sim::PreparePrefillSizes() {
  prefill_ = true;
  train_ = false;  // no loss, no saves
  cudnn_workspace_.assign(g_.nodes.size(), kNeitherWorkedOut);
}

SimulationKey Sim::PrefillKey(const memory::EstimationContext& prefill) const {
  SimulationKey key = SimulationKey::Of(prefill);
  key.allocator_budget = budget_;
  return key;
}

Result<Simulation> Sim::Run() {
  MEMEST_RETURN_IF_ERROR(PrepareStep());
  // A decode step after its prefill runs once, on what the prefill left; else the loop.
  if (const memory::EstimationContext* prefill = ctx_.prefill()) {
    const SimulationKey key = PrefillKey(*prefill);  // read by reference while the Sim runs
    // In a trace, the prefill's requests go first into the same one; following a run, the
    // prefill follows its first requests and the step the rest.
    Sim before(*prefill, key, /*record=*/false, trace_, most_requests_);
    if (run_ != nullptr) before.Follow(run_);
    MEMEST_ASSIGN_OR_RETURN(Prefilled p, before.RunPrefill());
    MEMEST_RETURN_IF_ERROR(AdoptPrefill(std::move(p)));
    AllocateWeights();
    Iteration(1);
    if (run_ != nullptr) MEMEST_RETURN_IF_ERROR(EndOfRunMade());
  } else {
    AllocateWeights();
    MEMEST_RETURN_IF_ERROR(Loop());
  }
  return Written();
}

StepTrace FirstRequestsOf(const StepTrace& whole, size_t most_requests, TraceKept kept) {
  const bool all = most_requests >= whole.requests.size();
  if (all && kept == TraceKept::kWhole) return whole;
  most_requests = std::min(most_requests, whole.requests.size());
  // The walk stops as its request most_requests is made (TraceIsLongEnough): what it notes at
  // the start of an iteration it did not reach stays unset.
  StepTrace out;
  out.requests.assign(whole.requests.begin(),
                      whole.requests.begin() + static_cast<ptrdiff_t>(most_requests));
  if (kept == TraceKept::kWhole) {
    size_t mallocs = 0;
    for (const AllocatorRequest& r : out.requests) mallocs += r.freed < 0;
    out.recipes.assign(
        whole.recipes.begin(),
        whole.recipes.begin() + static_cast<ptrdiff_t>(std::min(mallocs, whole.recipes.size())));
    out.moments.assign(whole.moments.begin(),
                       whole.moments.begin() +
                           static_cast<ptrdiff_t>(std::min(most_requests, whole.moments.size())));
    for (const TracedRelabel& r : whole.relabels) {
      if (r.before < most_requests) out.relabels.push_back(r);
    }
  }
  // What the trace notes before its request `cut` (with every request: all it notes).
  const size_t cut = all ? SIZE_MAX : most_requests;
  if (whole.previous_begins < cut) out.previous_begins = whole.previous_begins;
  if (whole.last_begins < cut) {
    out.last_begins = whole.last_begins;
    out.loops = whole.loops;
    out.last_repeated = whole.last_repeated;
  }
  if (whole.prefill_requests < cut) {
    out.prefill_requests = whole.prefill_requests;
    out.cache_emptied = whole.cache_emptied;
  }
  return out;
}

std::optional<uint64_t> Sim::SizeOf(const SizeRecipe& r, uint64_t traced) {
  const auto node = static_cast<size_t>(r.a);
  const bool is_node = r.a >= 0 && node < g_.nodes.size();
  const bool is_value = r.a >= 0 && static_cast<size_t>(r.a) < g_.values.size();
  switch (r.kind) {
    case SizeRecipe::kUnknown:
      return std::nullopt;
    case SizeRecipe::kSame:
      return traced;
    case SizeRecipe::kValue:
      return is_value ? std::optional(facts_.bytes(r.a)) : std::nullopt;
    case SizeRecipe::kAmpCast:
      return is_value ? std::optional(facts_.amp_cast_bytes(r.a)) : std::nullopt;
    case SizeRecipe::kWorkspace:
      return is_node ? std::optional(facts_.Workspace(node)) : std::nullopt;
    case SizeRecipe::kBackwardWorkspace:
      return is_node ? std::optional(facts_.BackwardWorkspace(node)) : std::nullopt;
    case SizeRecipe::kCudnnWorkspace:
      return is_node
                 ? std::optional(CudnnWorkspaceOf(node, r.b == 1 ? memory::ConvPass::kWeightGradient
                                                                 : memory::ConvPass::kForward))
                 : std::nullopt;
    case SizeRecipe::kSavedExtra: {
      // The node saves the same extra there (no value of the graph), or the walk there differs.
      if (!is_node) return std::nullopt;
      const std::span<const ops::SavedTensor> saved = StepSaves(node);
      if (r.b < 0 || static_cast<size_t>(r.b) >= saved.size()) return std::nullopt;
      const auto& sv = saved[static_cast<size_t>(r.b)];
      return sv.value < 0 ? std::optional(sv.bytes) : std::nullopt;
    }
    case SizeRecipe::kWeightForward:
      return is_node ? std::optional(weights_.forward_transient(node)) : std::nullopt;
    case SizeRecipe::kWeightBackward:
      return is_node ? std::optional(weights_.backward_transient(node)) : std::nullopt;
    case SizeRecipe::kLossLogProbs:
      return loss_tensors_.log_probs;
    case SizeRecipe::kLossOutputGrad:
      return loss_tensors_.output_grad;
    case SizeRecipe::kLossTargets:
      return loss_tensors_.targets;
    case SizeRecipe::kStateTensor: {
      if (!is_value || r.b < 0) return std::nullopt;
      const memory::StateTensorSizes sizes = StateTensorsOf(r.a);
      if (static_cast<size_t>(r.b) >= sizes.size()) return std::nullopt;
      return *(sizes.begin() + r.b);
    }
  }
  return std::nullopt;
}

Result<StepTrace> Sim::Resized(const StepTrace& traced, size_t most_requests, TraceKept kept) {
  MEMEST_RETURN_IF_ERROR(PrepareSizes());
  // A decode step's trace starts with its prefill's requests, whose sizes the prefill's own
  // context gives (an inference pass's, as Run's prefill is).
  std::optional<Sim> before;
  StepTrace unused;
  SimulationKey prefill_key;
  if (const memory::EstimationContext* prefill = ctx_.prefill()) {
    prefill_key = PrefillKey(*prefill);
    before.emplace(*prefill, prefill_key, /*record=*/false, &unused);
    before->PreparePrefillSizes();
  } else if (traced.prefill_requests > 0) {
    return InvalidArgument("the trace has a prefill's requests and the step no prefill");
  }
  StepTrace out = FirstRequestsOf(traced, most_requests, kept);
  size_t malloc = 0;
  for (size_t i = 0; i < out.requests.size(); ++i) {
    AllocatorRequest& r = out.requests[i];
    if (r.freed >= 0) continue;
    if (malloc >= traced.recipes.size()) {
      return InvalidArgument("the trace has more mallocs than recipes");
    }
    Sim& sizer = before && i < traced.prefill_requests ? *before : *this;
    const std::optional<uint64_t> bytes = sizer.SizeOf(traced.recipes[malloc], r.bytes);
    if (!bytes || *bytes == 0) {
      return InvalidArgument(
          "request " + std::to_string(i) +
          (bytes ? " is no malloc here (its size is 0)" : " has no size here by its recipe"));
    }
    r.bytes = *bytes;
    ++malloc;
  }
  return out;  // its recipes traced's: they read this context's sizes
}

Result<Simulation> Sim::Written() {
  // A free the allocator model refused is a bug in this simulation: never an estimate over it.
  if (!alloc_.misuse().ok()) return alloc_.misuse();
  Estimate& e = sim_.estimate;
  e.backend = "symbolic";
  const AllocatorStats& s = Stats();
  e.peak_allocated = s.peak_allocated;
  e.peak_reserved = s.peak_reserved;
  Breakdown& bd = e.breakdown;
  bd.weights = at_peak_[Category::kWeights];
  bd.gradients = at_peak_[Category::kGradients];
  bd.optimizer_state = at_peak_[Category::kOptimizerState];
  bd.saved_activations = at_peak_[Category::kActivations];
  bd.transient = at_peak_[Category::kTransient];
  bd.collective_buffers = at_peak_[Category::kCollective];
  uint64_t requested = 0;
  for (uint64_t v : at_peak_) requested += v;
  const uint64_t allocated =
      std::clamp(allocated_at_peak_, requested, std::max(requested, s.peak_reserved));
  bd.allocator_overhead = allocated - requested;
  bd.cached_free = s.peak_reserved - std::min(allocated, s.peak_reserved);
  auto largest = [&](Category c) { return Describe(largest_[c]); };
  e.largest = CategoryMaxima{largest(Category::kWeights),        largest(Category::kGradients),
                             largest(Category::kOptimizerState), largest(Category::kActivations),
                             largest(Category::kTransient),      Describe(largest_cached_free_)};
  memory::SetOutsideAllocator(stack_, &bd);
  if (o_.parallel.enabled()) {
    bd.nccl_buffers = memory::NcclBufferBytes(plan_);
    e.host_bytes = rank_.host;
  }
  e.peak_device = bd.Total();
  e.peak_phase = peak_phase_;
  e.peak_node = peak_node_ >= 0 ? g_.node(peak_node_).name : "";
  e.diagnostics.push_back({Severity::kInfo, "iterations", IterationsNote(), "", ""});
  if (!repeat_ && iterations_ == 0 && ctx_.prefill() == nullptr && !prefill_ && !alloc_.oom()) {
    e.diagnostics.push_back(
        {Severity::kWarning, "unsettled",
         "the training loop's allocator state did not repeat within " +
             std::to_string(kMostIterations) +
             " simulated iterations: a later iteration may reach more than this estimate",
         "", ""});
  }
  e.diagnostics.push_back({Severity::kInfo, "allocated_peak",
                           std::string("allocated peak in ") + memest::ToString(alloc_peak_phase_) +
                               " of iteration " + std::to_string(alloc_peak_iteration_),
                           alloc_peak_node_ >= 0 ? g_.node(alloc_peak_node_).name : "", ""});
  return std::move(sim_);
}
}  // namespace internal

using internal::Prefilled;
using internal::Sim;
using internal::TraceIsLongEnough;

namespace {

// `out`, a simulation `sim` ran, with what it saw of its budget (Simulation::budget).
Result<Simulation> WithBudget(const Sim& sim, Result<Simulation> out) {
  if (out.ok()) out->budget = {sim.ran_out(), sim.OutOfMemoryAt(), sim.retries()};
  return out;
}

}  // namespace

Result<Simulation> Simulate(const memory::EstimationContext& ctx, const SimulationKey& key,
                            bool record_events) {
  Sim sim(ctx, key, record_events);
  return WithBudget(sim, sim.Run());
}

Result<Simulation> Simulate(const memory::EstimationContext& ctx, bool record_events) {
  return Simulate(ctx, SimulationKey::Of(ctx), record_events);
}

Result<Simulation> SimulatePrefill(const memory::EstimationContext& ctx, bool record_events) {
  const memory::EstimationContext* prefill = ctx.prefill();
  if (prefill == nullptr) return InvalidArgument("the step has no prefill before it");
  const SimulationKey key = SimulationKey::Of(*prefill);  // the Sim reads it by reference
  Sim sim(*prefill, key, record_events);
  return WithBudget(sim, sim.RunPrefillAlone());
}

namespace {

// Whether `run` can be a step's under `key` in ctx (Simulate's overload that follows it).
Status CheckRunFits(const memory::EstimationContext& ctx, const SimulationKey& key,
                    const AllocatorRun& run) {
  // A decode step after its prefill runs once: its run lists every request, and has no loop.
  const bool once = ctx.prefill() != nullptr;
  if (key.iterations != 0 || run.end.num_ooms > 0 || run.repeat.has_value() == once ||
      run.requests.size() > run.after.size() ||
      (run.requests.size() < run.after.size() && (run.loop_length == 0 || once)) ||
      run.config != StepAllocatorConfig(key.options, key.allocator_budget)) {
    return InvalidArgument(
        "the allocator run is not this step's: another allocator, a run that ran out, or one "
        "whose loop the step does not have");
  }
  return Status::Ok();
}

}  // namespace

Result<Simulation> Simulate(const memory::EstimationContext& ctx, const SimulationKey& key,
                            const AllocatorRun& run) {
  MEMEST_RETURN_IF_ERROR(CheckRunFits(ctx, key, run));
  Sim sim(ctx, key, /*record=*/false);
  sim.Follow(&run);
  return WithBudget(sim, sim.Run());
}

Result<Simulation> SimulateFromTrace(const memory::EstimationContext& ctx, const SimulationKey& key,
                                     const AllocatorRun& run, const StepTrace& first,
                                     const std::vector<uint64_t>& first_shape) {
  MEMEST_RETURN_IF_ERROR(CheckRunFits(ctx, key, run));  // before the trace is resized
  MEMEST_ASSIGN_OR_RETURN(StepTrace sized, ResizeTraceOfShape(ctx, first, first_shape));
  Sim sim(ctx, key, /*record=*/false);
  sim.Follow(&run);
  return WithBudget(sim, sim.Described(sized));
}

AllocatorConfig StepAllocatorConfig(const Options& options, uint64_t budget) {
  return AllocatorConfig{options.allocator.expandable_segments, options.allocator.max_split_size,
                         kLargeBuffer, options.allocator.roundup_power2_divisions, budget};
}

namespace {

// The requests `walk(trace)` makes into a fresh trace through a Sim that stops it after
// `most_requests` of them (TraceIsLongEnough), or all of them.
template <typename Walk>
Result<StepTrace> TraceOf(size_t most_requests, Walk walk) {
  StepTrace trace;
  if (most_requests == 0) return trace;
  try {
    MEMEST_RETURN_IF_ERROR(walk(&trace));
  } catch (const TraceIsLongEnough&) {
    // The first most_requests requests are made.
  }
  // Grown a push at a time, its vectors hold up to twice what they use; a search keeps its first
  // trace to the end, where its memory peaks (the 10k chain's --max-batch 88.3 -> 81.1 MB
  // of heap, valgrind --tool=massif).
  trace.requests.shrink_to_fit();
  trace.recipes.shrink_to_fit();
  trace.moments.shrink_to_fit();
  trace.relabels.shrink_to_fit();
  return trace;
}

}  // namespace

Result<StepTrace> TracePrefillRequests(const memory::EstimationContext& prefill,
                                       size_t most_requests) {
  return TraceOf(most_requests, [&](StepTrace* trace) {
    // As Sim::Run hands it the prefill: its own key, the step trace's (unlimited) budget.
    const SimulationKey key = SimulationKey::Of(prefill);
    return Sim(prefill, key, /*record=*/false, trace, most_requests).RunPrefill().status();
  });
}

Result<StepTrace> ResizeTrace(const memory::EstimationContext& ctx, const StepTrace& traced,
                              size_t most_requests, TraceKept kept) {
  SimulationKey key = SimulationKey::Of(ctx);  // the Sim reads its options by reference
  key.iterations = kTracedIterations;
  StepTrace unused;  // a trace's Sim: no allocator model is set up
  return Sim(ctx, key, /*record=*/false, &unused).Resized(traced, most_requests, kept);
}

Result<StepTrace> TraceRequests(const memory::EstimationContext& ctx, size_t most_requests,
                                TraceWalk walk) {
  return TraceOf(most_requests, [&](StepTrace* trace) {
    SimulationKey key = SimulationKey::Of(ctx);  // the Sim reads its options by reference
    key.iterations = kTracedIterations;
    Sim sim(ctx, key, /*record=*/false, trace, most_requests);
    if (walk == TraceWalk::kEveryIteration) sim.WalkEveryTraced();
    return sim.Run().status();
  });
}

}  // namespace memest::symbolic
