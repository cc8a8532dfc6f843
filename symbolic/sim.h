// symbolic/sim.h -- the simulated training step's state (class Sim), inside symbolic/ only:
// symbolic/timeline.cc walks the step (forward, loss, backward, optimizer step, the iteration),
// symbolic/timeline_loop.cc runs the loop until it repeats itself; both state their policies.
// Not part of the library's interface: Simulate and TraceRequests (symbolic/timeline.h) are.
#ifndef MEMEST_SYMBOLIC_SIM_H_
#define MEMEST_SYMBOLIC_SIM_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

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
#include "symbolic/loop_watch.h"
#include "symbolic/timeline.h"

namespace memest::symbolic {
namespace internal {

// A tensor handle, -1 = none: the slot in Sim::tensors_ in the low 32 bits and the slot's
// generation above them. A freed slot is reused under the next generation, so the simulation holds
// as many slots as tensors alive at once, not one per malloc of the whole run. A copy of a freed
// handle (an input batch is both in inputs_ and value_) names a past generation: freeing it does
// nothing.
using Tensor = int64_t;
inline uint32_t SlotOf(Tensor t) { return static_cast<uint32_t>(t & 0xffffffff); }
inline uint32_t GenerationOf(Tensor t) {
  return static_cast<uint32_t>(static_cast<uint64_t>(t) >> 32);
}
inline Tensor HandleOf(uint32_t slot, uint32_t generation) {
  return static_cast<Tensor>(uint64_t{generation} << 32 | slot);
}

// Sorts v and keeps each element once (the order a std::set would give, without its nodes).
inline void SortUnique(std::vector<int>* v) {
  std::sort(v->begin(), v->end());
  v->erase(std::unique(v->begin(), v->end()), v->end());
}

// What a prefill leaves in the process for the decode step after it (Options::prefill): the
// allocator, and the tensors still alive in it -- the parameters, the cache (named as the step's
// past inputs) and the cuBLAS workspace.
struct Prefilled {
  struct Kept {
    std::string name;  // in the step's graph
    CachingAllocatorModel::Handle handle = -1;
    uint64_t bytes = 0;
    Category category = Category::kWeights;
  };
  CachingAllocatorModel alloc;
  std::vector<Kept> kept;
  Kept workspace;                          // handle -1: none
  std::optional<CategoryPeak> ran_out_at;  // the prefill's request that failed for good
  // In a trace, or following a run: the prefill's mallocs (the kept handles are their numbers;
  // the step's mallocs are numbered on from here).
  int64_t mallocs = 0;
  // Following a run: the run's requests the prefill followed, where it first made another, and
  // the allocator's state after the last one it followed.
  size_t followed = 0;
  std::optional<size_t> differs_at;
  AllocatorStats state;
};

// The first `most_requests` requests of `whole` (a whole trace, TraceRequests') as a walk that
// makes no more than those would trace them: what that walk notes where an iteration or the step
// after a prefill begins is unset when it stopped before there. With TraceKept::kRequests, no
// moments, relabels or recipes.
[[nodiscard]] StepTrace FirstRequestsOf(const StepTrace& whole, size_t most_requests,
                                        TraceKept kept = TraceKept::kWhole);

// Thrown by a trace that has made the requests it was asked for (TraceRequests' most_requests),
// to leave the walk wherever it is; caught by TraceRequests. Not a std::exception, so that
// nothing on the way mistakes it for an error.
struct TraceIsLongEnough {};

// Hidden: nothing outside the library calls into Sim. The layers are compiled as position-
// independent code for the shared library, where an exported method could be interposed and would
// not be inlined; hidden, each file's calls to the methods it defines inline as they did while Sim
// had internal linkage (callgrind: the 10k chain's symbolic estimate within 0.3 %).
class __attribute__((visibility("hidden"))) Sim {
 public:
  // Reads the options and the GPU through `key` only (symbolic/simulation_key.h), which must
  // outlive the Sim: it keeps a reference to key.options.
  // With `trace` set, the allocator is left out: every malloc and free is appended to its
  // requests instead (TraceRequests), and the simulation's own estimate is meaningless.
  Sim(const memory::EstimationContext& ctx, const SimulationKey& key, bool record,
      StepTrace* trace = nullptr, size_t most_requests = std::numeric_limits<size_t>::max())
      : ctx_(ctx),
        b_(ctx.bound()),
        g_(*b_.graph),
        o_(key.options),
        cublas_workspace_(key.cublas_workspace),
        stack_(ctx.stack()),
        facts_(ctx.facts()),
        weights_(ctx.weights()),
        kept_root_(KeptRoots(memory::KeptOutputs(g_, ctx.kv_cache()), facts_, g_.values.size())),
        kv_cache_(ctx.kv_cache()),
        checkpoint_(ctx.checkpoint()),
        plan_(ctx.parallel()),
        stage_(key.stage),
        staged_(plan_.stages() > 1),
        record_(record),
        trace_(trace),
        requests_(trace != nullptr ? &trace->requests : nullptr),
        most_requests_(most_requests),
        budget_(key.allocator_budget),
        iterations_(key.iterations),
        alloc_(StepAllocatorConfig(o_, budget_)) {}

  // The storage roots (ValueFacts::root) of `outputs`, per value id of a graph of `values`.
  static std::vector<bool> KeptRoots(const std::vector<int>& outputs, const ops::ValueFacts& facts,
                                     size_t values) {
    std::vector<bool> kept(values, false);
    for (int out : outputs) {
      if (const int r = facts.root(out); r >= 0) kept[static_cast<size_t>(r)] = true;
    }
    return kept;
  }

  Sim(const Sim&) = delete;  // stats_ points into the Sim itself
  Sim& operator=(const Sim&) = delete;

  // A trace walks its last iteration too instead of making the noted one's requests again
  // (TraceRequests' TraceWalk::kEveryIteration).
  void WalkEveryTraced() { walks_every_traced_ = true; }

  Result<Simulation> Run();
  // The forward of a prefill (ctx is Options::prefill's context, memory/context.h): its outputs
  // and inputs are freed but for the cache, which stays with the parameters and the cuBLAS
  // workspace for the step (Prefilled). InvalidArgument when two cache outputs share storage.
  Result<Prefilled> RunPrefill();
  // The same forward, as a simulation of its own: its peaks and their breakdown
  // (SimulatePrefill).
  Result<Simulation> RunPrefillAlone();
  // ResizeTrace (symbolic/timeline.h): `traced`'s first `most_requests` requests (FirstRequestsOf),
  // its mallocs sized in this Sim's context.
  Result<StepTrace> Resized(const StepTrace& traced, size_t most_requests, TraceKept kept);
  // ShapeOfStep (symbolic/step_shape.cc): appends to *words what the walk decides by in this Sim's
  // context besides sizes.
  Status AppendShape(std::vector<uint64_t>* words);
  // SimulateFromTrace (symbolic/estimate_from_trace.cc): the simulation following run_ (Follow),
  // written from `sized` -- the walk's trace in this context, with where it made each request --
  // instead of walking the step.
  Result<Simulation> Described(const StepTrace& sized);
  // Some request failed even after the allocator released its cached segments (PyTorch raises
  // OutOfMemoryError there); where that first happened, and how often a cudaMalloc failed.
  bool ran_out() const { return alloc_.oom(); }
  uint64_t retries() const { return Stats().num_alloc_retries; }
  // Reads the allocator's state after each request from `run` (Simulate's overload) instead of
  // running the allocator model; Run fails when the step's requests are not run's.
  void Follow(const AllocatorRun* run) {
    run_ = run;
    stats_ = &run_stats_;
  }
  CategoryPeak OutOfMemoryAt() const {
    return prefill_ran_out_at_ ? *prefill_ran_out_at_ : Describe(oom_at_);
  }

 private:
  struct Live {
    CachingAllocatorModel::Handle handle = -1;
    uint64_t bytes = 0;
    Category category = Category::kTransient;
    bool alive = false;
    uint32_t generation = 0;  // of the handle that names this slot now (< 2^31)
    int made_in = 0;          // the iteration that allocated it (0: before the first)
    uint32_t made_at = 0;     // its malloc's number within that iteration
  };
  // Where the walk made a request of the iteration the loop's later ones repeat (LoopRest): the
  // tensor's bytes and category (a malloc's, or the freed tensor's then), the node and the phase
  // (in one byte: 16 bytes a request).
  struct LoopWhere {
    uint64_t bytes = 0;
    int node = -1;
    uint8_t phase_byte = 0;
    Category category = Category::kTransient;
    Phase phase() const { return static_cast<Phase>(phase_byte); }
  };
  // A tensor of the noted iteration relabelled before its request `before`: its bytes move from
  // one category to the other.
  struct LoopRelabel {
    uint32_t before = 0;
    Category from = Category::kTransient, to = Category::kTransient;
    uint64_t bytes = 0;
  };
  // Where a category's (or the cached-free bytes') maximum was first reached; the node's name is
  // looked up once, when the estimate is written.
  struct Moment {
    uint64_t bytes = 0;
    Phase phase = Phase::kUnknown;
    int iteration = 0;
    int node = -1;
  };

  // In a trace, `recipe` says where `bytes` came from (StepTrace::recipes): SizeOf(recipe) in
  // this context is `bytes`, and in a context bound at another value the walk's size there
  // (ResizeTrace; the BatchTraceTest resize tests compare both on every bundled model).
  Tensor Malloc(uint64_t bytes, Category c, SizeRecipe recipe = {});
  // The allocator's statistics now: the model's, or (following a run) what run_ says.
  const AllocatorStats& Stats() const { return *stats_; }
  // Request r of the step, taken from run_: notes the first that is not run's next request.
  void FollowRequest(const AllocatorRequest& r);
  // Following a run: its state after its next request, taken without comparing the request (past
  // the requests it lists, AllocatorRun::loop_length; or once FollowRequest has).
  void TakeRunState() {
    run_stats_.allocated = run_->after[run_next_].first;
    run_stats_.reserved = run_->after[run_next_].second;
    ++run_next_;
  }
  // Appends a request to *requests_; past most_requests_ the walk is over (TraceIsLongEnough).
  void Trace(AllocatorRequest r) {
    requests_->push_back(r);
    if (requests_->size() >= most_requests_) throw TraceIsLongEnough{};
  }
  // A live slot of `bytes` in category c, with no allocator block yet (Malloc and Adopt give it
  // one). Inlined: every Malloc runs it, and the call alone was 1.3 % of ResNet-50's symbolic
  // max-batch search in instructions (callgrind).
  [[gnu::always_inline]] inline Tensor NewSlot(uint64_t bytes, Category c);
  void Free(Tensor* t);
  // The live tensor behind a handle; nullptr when the handle is -1 or was freed.
  Live* Find(Tensor t);
  // Moves a live tensor's bytes to another category (a gradient stolen into .grad).
  void Relabel(Tensor t, Category c);
  // Records a new maximum of category c / of cached-but-free bytes, if this moment is one.
  void NoteLargest(Category c);
  // What a malloc of a tensor of category c (live_ counting it already) does to the moments the
  // estimate keeps: the largest of c, the reserved and allocated peaks, the iteration's peak.
  // Inline: every malloc of an estimate runs it (a call cost the ResNet-50 estimate 1 % of its
  // instructions).
  void NoteMallocMoments(Category c) {
    NoteLargest(c);
    const AllocatorStats& s = Stats();
    // The device peak is the reserved peak; of the moments at that reservation, the breakdown
    // describes the fullest (most allocated), where the least of it is cached but free.
    if (s.reserved > peak_reserved_seen_ ||
        (s.reserved == peak_reserved_seen_ && s.allocated > allocated_at_peak_)) {
      peak_reserved_seen_ = s.reserved;
      at_peak_ = live_;
      allocated_at_peak_ = s.allocated;
      peak_phase_ = phase_;
      peak_node_ = node_;
    }
    if (s.allocated > alloc_peak_seen_) {
      alloc_peak_seen_ = s.allocated;
      alloc_peak_phase_ = phase_;
      alloc_peak_node_ = node_;
      alloc_peak_iteration_ = iteration_;
    }
    iteration_alloc_peak_ = std::max(iteration_alloc_peak_, s.allocated);
  }
  void NoteCachedFree();
  Moment Here(uint64_t bytes) const;
  // In a trace: where the walk is, for a request of a tensor of category c (StepTrace::moments).
  TracedMoment TracedHere(Category c) const {
    return {node_, static_cast<uint8_t>(phase_), static_cast<uint8_t>(c),
            static_cast<uint16_t>(iteration_)};
  }
  CategoryPeak Describe(const Moment& m) const;
  void Record(bool malloc, uint64_t bytes, Category c);

  void Prepare();
  // The loss's tensors (loss_tensors_), on the stage that computes the loss of a training step.
  void PrepareLoss();
  // Whether the step is training (train_); InvalidArgument for what the timeline does not model.
  Status StepModelled();
  // Run's preparation of the step (StepModelled, Prepare, PrepareParallel).
  Status PrepareStep();
  // Resized's: what SizeOf reads and no more (StepModelled, the loss's tensors, the convolutions'
  // workspaces to be worked out), not the walk's tables.
  Status PrepareSizes();
  // PrefillForward's preparation (an inference pass that keeps its cache).
  void PreparePrefill();
  // Resized's prefill's: what SizeOf reads in an inference pass (PrepareSizes' counterpart).
  void PreparePrefillSizes();
  // The key a decode step's prefill runs under: its own, with this step's allocator budget.
  [[nodiscard]] SimulationKey PrefillKey(const memory::EstimationContext& prefill) const;
  // The size `recipe` reads in this context (after PrepareSizes or Prepare); nullopt for
  // kUnknown. `traced`: the size where it was traced (kSame's). Inline in Resized, its one
  // caller, which asks it for every malloc of a trace.
  [[gnu::always_inline]] inline std::optional<uint64_t> SizeOf(const SizeRecipe& recipe,
                                                               uint64_t traced);
  // RunPrefill's forward: the weights, the forward over the prompt, the prompt freed.
  void PrefillForward();
  // The simulation run so far, written out: the estimate (peaks, breakdown at the device peak,
  // the largest of each category, diagnostics) with the iterations.
  Result<Simulation> Written();
  // kind_ and step_params_, from the graph's values.
  void IndexValues();
  void AllocateWeights();
  // Takes over what the prefill left (Prefilled): the allocator, the parameters, the cache as the
  // step's past inputs (adopted_), the workspace; then empties the cache if the options say so and
  // resets the peaks.
  // InvalidArgument when a past input's size is not the size the prefill left for it.
  Status AdoptPrefill(Prefilled p);
  // A slot for a block already in the allocator, counted in category c.
  Tensor Adopt(CachingAllocatorModel::Handle handle, uint64_t bytes, Category c);
  void Iteration(int it);
  // What an iteration does depends on nothing but the state it starts from: the tensors alive
  // between iterations and the allocator holding them (symbolic/loop_watch.h). Writes that state
  // to *words (replacing them): each such tensor in one fixed order (its block's address and its
  // category; 0 where there is none), then the allocator's layout (AppendLayout, which has each
  // block's bytes). False when a live tensor is not one of them, or an address is too large to
  // share a word with a category: then the state is not compared with any.
  [[nodiscard]] bool IterationStart(std::vector<uint64_t>* words) const;
  // The same without the allocator (a trace, or following a run): each such tensor's bytes and
  // category. What the iteration asks the allocator for depends on nothing else.
  [[nodiscard]] bool RequestsStart(std::vector<uint64_t>* words) const;
  // IterationStart and RequestsStart: each tensor alive between iterations, in one fixed order,
  // as word(tensor) (0 where there is none); false when some live tensor is not one of them.
  template <typename Word>
  [[nodiscard]] bool CarriedTensors(std::vector<uint64_t>* words, Word word) const;
  // The training loop, iteration after iteration: SimulationKey::iterations of them, or else
  // until one starts from the state an earlier one started from (LoopWatch; repeat_), at most
  // kMostIterations. A trace makes kTracedIterations, and notes whether the last one starts as
  // the one before did (RequestsStart; StepTrace::loops); a simulation following a run goes to
  // the run's end (EndOfRun).
  Status Loop();
  // Counts the weights alive as the loop starts (weights_alive_), for CarriedTensors.
  void CountWeights();
  // From iteration `first` on, the noted iteration's requests again: through the allocator model
  // (LoopRest from `start`, the state iteration first - 1 started from, or none), or checked
  // against the run followed (FollowLoopRest, then EndOfRun with `loops`); then LoopAtPeak.
  Status RepeatNoted(int first, const std::vector<uint32_t>& carried, std::vector<uint64_t> start,
                     bool loops);
  // A trace's iteration kTracedIterations without walking it: the noted iteration's requests
  // again (renamed by LoopCarriedRenamed), its mallocs numbered on from the trace's, as the walk
  // would have made them.
  void TraceNoted();
  // Following a run, at its end: Ok when the step (a decode step after its prefill, with the
  // prefill's first) made the run's requests, all of them; the state is then the run's at its
  // end. A decode step, which runs once, ends there.
  Status EndOfRunMade();
  // Following a training loop's run, at its end: EndOfRunMade, and the loop repeats where the
  // run's did, when its last traced iteration started as the one before did (`loops`).
  Status EndOfRun(bool loops);
  // A request of the walked iteration the loop's later ones repeat (loop_requests_): the malloc
  // of t (in the allocator model, or following a run), the free of l.
  void NoteLoopMalloc(const Live& t);
  void NoteLoopFree(const Live& l);
  // After request i of the walked iteration, made again in iteration `it`: the moments Malloc
  // and Free keep, taken where the walk made it (the bytes alive per category are the walked
  // iteration's there, so no category's maximum moves).
  void NoteLoopMoments(size_t i, int it);
  // at_peak_ when the reserved peak's moment is at a noted request's repeat: the bytes alive per
  // category there in the walk, from those at the noted iteration's start and its requests and
  // relabels up to that one.
  void LoopAtPeak();
  // Following a run: its iterations from `first` on, checked against the walked iteration's
  // requests (each malloc numbered on from the iteration before's) without walking the graph, as
  // far as the run lists its requests; past them (AllocatorRun::loop_length), once a whole
  // iteration was checked, only the run's states are read.
  void FollowLoopRest(int first, uint32_t mallocs);
  // LoopStart (symbolic/loop_watch.h) of the walked iteration: the tensors made in iteration
  // `made_in`, the one before it, that are still alive, by their number there.
  void MadeState(int made_in, std::vector<uint64_t>* words) const;
  // The mallocs of the walked iteration that outlive it, when its requests are those every later
  // iteration makes (CarriedMallocs, no older one freed); nullopt otherwise.
  std::optional<std::vector<uint32_t>> LoopCarried() const;
  // Each live tensor as (made_in, made_at) in CarriedTensors' order, with bit 63 set (0: no
  // tensor there); false when some live tensor is not in that order.
  [[nodiscard]] bool MadeWhere(std::vector<uint64_t>* words) const;
  // The walk (or trace) noted iteration kTracedIterations - 1 and the next starts with the tensors
  // it did (RequestsStart): its frees of the iteration before's tensors become frees of its own
  // mallocs that took their places (the same place in CarriedTensors' order; `before`: MadeWhere
  // at its start, `before_mallocs`: the iteration before made so many), so that every later
  // iteration makes its requests again. Then LoopCarried; nullopt when some freed tensor has no
  // such successor.
  std::optional<std::vector<uint32_t>> LoopCarriedRenamed(const std::vector<uint64_t>& before,
                                                          uint32_t before_mallocs);
  // Starts noting the walked iteration's requests (loop_requests_ and its companions), with room
  // for twice as many mallocs as the iteration before made.
  void StartNotingLoop();
  // The loop from iteration `first` on without walking the graph: the walked iteration's
  // requests through the allocator model (loop_requests_), each moment the estimate keeps taken
  // where the walk made that request, until an iteration starts from the state an earlier one did
  // (LoopWatch over LoopStart; `start`: the state iteration first - 1 started from, MadeState's,
  // or empty when that iteration's tensors were numbered otherwise).
  void LoopRest(int first, const std::vector<uint32_t>& carried, std::vector<uint64_t> start);
  // The `iterations` diagnostic: iterations 1 to kTracedIterations, then the most any later one
  // reaches -- whichever iterations were simulated to find that (following a run, or with a
  // fixed number, the loop is seen to repeat elsewhere), the same text.
  std::string IterationsNote() const;
  void Forward(int it);
  // DDP's buckets freed for the rebuilt ones (memory/ddp_buckets.h), after the first step.
  void RebuildBuckets();
  // DDP's broadcasts (memory::MakeDdpBroadcasts, PrepareParallel): each made and freed two in
  // flight.
  void BroadcastCoalesced(const std::vector<uint64_t>& buffers);
  // DDP with gradient_as_bucket_view: the buckets hold the gradients, and the gradients whose
  // last contribution node kk's backward made are copied in and freed; *next walks
  // bucket_copies_ through one backward.
  Category BucketCategory() const {
    return rank_.grads_in_buckets ? Category::kGradients : Category::kCollective;
  }
  void CopyIntoBuckets(size_t kk, size_t* next);
  // One node of the forward (seg = -1) or of segment seg's recomputation in backward.
  void ForwardNode(size_t k, int seg);
  void ClearAutocastCache();
  // A cuDNN convolution or recurrent-layer call's workspace, allocated and freed around the call
  // (memory/device.h): a convolution's forward, data-gradient or weight-gradient call.
  void CudnnWorkspace(size_t k, memory::ConvPass pass = memory::ConvPass::kForward);
  // Its bytes, worked out once per node and call (cudnn_workspace_).
  uint64_t CudnnWorkspaceOf(size_t k, memory::ConvPass pass = memory::ConvPass::kForward);
  // The optimizer's state tensors of parameter p (memory/optimizer.h).
  [[nodiscard]] memory::StateTensorSizes StateTensorsOf(int p) const {
    return memory::StateTensorBytes(o_.optimizer, b_.Numel(p).value_or(0), facts_.bytes(p));
  }
  // Roots of node k's inputs; in a recomputation (seg >= 0) only those the segment makes.
  // Sorted, each root once. They are worked out once, by Prepare (input_roots_); for seg >= 0 the
  // segment's are picked from them into roots_, and the span is valid until the next call.
  std::span<const int> InputRoots(size_t k, int seg);
  // The roots of node k's saved inputs (not parameters); in a recomputation only those the
  // segment makes. Sorted, each once; valid until the next call (it fills saved_roots_).
  const std::vector<int>& SavedRoots(size_t k, int seg);
  void Loss();
  void Backward();
  // The loss's backward: its seed and the gradient of the first output (memory/loss.h).
  void LossBackward();
  // One node of the backward, in reverse order: its input gradients, workspaces, and the
  // release of what it saved.
  void BackwardNode(size_t kk);
  // The gradients of `ins` (ValueFacts::GradInputs(kk)), made from node kk's output gradients.
  void InputGradients(size_t kk, std::span<const int> ins);
  // Accumulates gradient g into input `in`'s gradient (a parameter's .grad, or an activation's).
  void Deliver(int in, Tensor g);
  // release_variables: node kk's saved tensors, AMP weight copies and extras.
  void ReleaseSaved(size_t kk, int seg);
  void Step(int it);
  void Infer();
  // Many GPUs: the rank's sharded states and the units ZeRO-3/FSDP gather (memory/parallel.h).
  void PrepareParallel();
  void GatherForward(size_t k);
  void ReleaseForward(size_t k);
  void GatherBackward(size_t k);
  void ReduceScatter(size_t k);
  void Gather(int unit, Tensor* into);
  // Frees `root` once nothing reads or saved it; a graph output only when `output_dropped` (the
  // loop let go of it, Options::outputs_held), else it lives to the end of the iteration.
  void FreeIfDead(int root, bool output_dropped = false);
  // Pipeline stages.
  bool OnStage(size_t node) const { return !staged_ || plan_.stage_of_node(node) == stage_; }
  // The tensors autograd saves for node k in this step: its value facts' list in a training
  // step, on the node's stage; none otherwise. What Prepare keeps (saved_) and SizeOf reads.
  [[nodiscard]] std::span<const ops::SavedTensor> StepSaves(size_t k) const {
    return train_ && OnStage(k) ? facts_.Saved(k) : std::span<const ops::SavedTensor>();
  }
  void FindStageBoundary();
  void ReceiveActivations();
  void ReceiveGradients();
  void ReleaseReceived();
  void RecordMicroBatch();
  void HoldOtherMicroBatches();
  void ReleaseOtherMicroBatches();
  // Activation checkpointing (Options::checkpoint_segments).
  bool Checkpointed(size_t node) const { return !seg_of_.empty() && seg_of_[node] >= 0; }
  bool MadeIn(int root, int seg) const;
  void Recompute(int seg);
  void ReleaseSegment(int seg);

  const memory::EstimationContext& ctx_;
  const core::BoundGraph& b_;
  const core::Graph& g_;
  const Options& o_;
  const uint64_t cublas_workspace_;
  const StackProfile& stack_;
  const ops::ValueFacts& facts_;
  const memory::WeightStorage& weights_;
  // Per value: the storage of a graph output kept to the end (memory/kv_cache.h KeptOutputs).
  const std::vector<bool> kept_root_;
  const memory::KvCache& kv_cache_;  // which data inputs die at their last reader
  const std::vector<core::CheckpointSegment>& checkpoint_;  // Options' segments (core/checkpoint.h)
  const memory::ParallelPlan& plan_;
  const int stage_;
  const bool staged_;  // pp > 1: only stage_'s nodes run here
  bool record_;
  bool prefill_ = false;            // RunPrefill: the cache outputs outlive the iteration
  base::IdVector<Tensor> adopted_;  // per data input: the past the prefill left (-1: none)
  std::optional<CategoryPeak> prefill_ran_out_at_;
  StepTrace* trace_;                         // TraceRequests: what the allocator would be asked
  std::vector<AllocatorRequest>* requests_;  // &trace_->requests
  const size_t most_requests_;               // TraceRequests stops the walk at so many
  bool walks_every_traced_ = false;          // WalkEveryTraced()
  const AllocatorRun* run_ = nullptr;        // Follow: the allocator's run over this step
  size_t run_next_ = 0;                      // requests of run_ followed so far
  std::optional<size_t> run_differs_at_;     // the first request that is not run_'s
  AllocatorStats run_stats_;                 // run_->after of the last request, then run_->end
  int64_t mallocs_ = 0;  // mallocs so far, in a trace or following a run (the number names it)
  uint32_t made_ = 0;    // mallocs so far in this iteration (Live::made_at)
  // The weights (the initializers' tensors, made before the first iteration) alive when the loop
  // starts, and how many tensors made before it were freed or relabelled since: while none was,
  // the weights are where and what they were, and CarriedTensors counts them without listing them.
  size_t weights_alive_ = 0;
  bool weights_counted_ = false;
  uint64_t made_before_changed_ = 0;
  // The walked iteration whose requests the loop's later ones repeat (LoopRest): its requests,
  // where each was made (with the tensor's bytes and category), its relabels, the bytes alive per
  // category as it began, each malloc's block; loop_noted_ok_ false once a request is not one a
  // repeating iteration makes.
  bool noting_loop_ = false, loop_noted_ok_ = true;
  std::vector<LoopRequest> loop_requests_;
  std::vector<LoopWhere> loop_where_;     // by request
  std::vector<SizeRecipe> loop_recipes_;  // a trace's: by malloc
  std::vector<LoopRelabel> loop_relabels_;
  base::IdVector<uint64_t, Category> loop_live_start_{kNumCategories};  // live_ as it began
  // The noted request at whose repeat the reserved peak's moment is, when one is (its bytes alive
  // per category, at_peak_, are the walk's there: LoopAtPeak works them out once, at the end).
  std::optional<size_t> loop_peak_request_;
  std::vector<CachingAllocatorModel::Handle> loop_blocks_;
  const uint64_t budget_;  // the allocator's capacity
  const int iterations_;   // SimulationKey::iterations: 0 for the loop until it repeats itself
  CachingAllocatorModel alloc_;
  const AllocatorStats* stats_ = &alloc_.stats();  // Stats(): the model's, or run_stats_
  bool train_ = true;

  std::vector<Live> tensors_;                                // by slot
  std::vector<uint32_t> free_slots_;                         // slots of freed tensors, reused first
  base::IdVector<uint64_t, Category> live_{kNumCategories};  // requested bytes per category
  Phase phase_ = Phase::kUnknown;
  int node_ = -1;
  int iteration_ = 0;

  // Static facts.
  // Per value: its kind, read on every release (a byte each, where core::Value is a large
  // struct the walk would otherwise pull into cache for one field).
  base::IdVector<core::ValueKind> kind_;
  std::vector<int> step_params_;  // the parameters the optimizer steps on this rank, in order
  base::IdVector<std::span<const ops::SavedTensor>> saved_;  // per node (the facts hold them)
  base::IdVector<int> uses_;        // per root: forward uses by nodes (all aliases)
  base::IdVector<int> saved_by_;    // per root: nodes that save it
  base::IdVector<int> cast_saves_;  // per parameter: lower-precision nodes that save its AMP copy
  std::vector<int> seg_of_;         // per node: index into checkpoint_, -1 when not checkpointed
  int loss_value_ = -1;
  memory::LossTensors loss_tensors_;
  std::vector<int> roots_, saved_roots_;  // scratch of InputRoots and SavedRoots
  // Per node, the roots of its inputs (InputRoots at seg -1): node k's are
  // input_roots_[input_roots_at_[k] .. input_roots_at_[k + 1]). The forward of every iteration
  // reads them.
  std::vector<int> input_roots_;
  std::vector<size_t> input_roots_at_;
  // Per node, its cuDNN workspace bytes (CudnnWorkspace), once worked out; kNotWorkedOut before.
  // [k][1]: a convolution's weight-gradient call; [k][0]: any other call (the forward and the
  // data-gradient calls take the same, memory/device.h).
  static constexpr uint64_t kNotWorkedOut = ~uint64_t{0};
  static constexpr std::array<uint64_t, 2> kNeitherWorkedOut = {kNotWorkedOut, kNotWorkedOut};
  std::vector<std::array<uint64_t, 2>> cudnn_workspace_;
  std::vector<std::pair<int, Tensor>> made_gradients_;  // scratch of InputGradients
  std::vector<int> released_;  // scratch of ReleaseSaved: the roots it released

  // Per-iteration state.
  base::IdVector<Tensor> value_;  // per root: live storage
  base::IdVector<int> uses_left_, saved_left_;
  base::IdVector<Tensor> grad_;  // per value: gradient buffer
  // Per value: .grad of parameters (persist until zero_grad; under DDP's gradient_as_bucket_view,
  // freed once copied into the buckets).
  base::IdVector<Tensor> param_grad_;
  base::IdVector<Tensor> cast_;  // per parameter: AMP copy
  base::IdVector<int> cast_left_;
  base::IdVector<std::vector<Tensor>> extras_;  // per node: extra saved tensors
  std::vector<Tensor> inputs_, old_inputs_;
  Tensor log_probs_ = -1, loss_ = -1;
  std::vector<Tensor> state_;
  Tensor ws_forward_ = -1, ws_backward_ = -1;

  // Many GPUs.
  bool sharded_ = false;  // ZeRO / FSDP: flat state buffers (memory::RankStates)
  memory::RankStates rank_;
  base::IdVector<int> unit_of_node_;            // per node: the gathered unit it reads, -1 none
  base::IdVector<uint64_t> unit_bytes_;         // per unit: gathered parameter bytes
  base::IdVector<uint64_t> unit_grad_bytes_;    // per unit: unsharded gradient bytes
  base::IdVector<int> unit_first_, unit_last_;  // per unit: first / last forward node
  std::vector<int> unit_order_;                 // units by first forward node
  uint64_t root_bytes_ = 0;                     // parameters in no unit, gathered throughout
  base::IdVector<Tensor> gathered_, unit_grads_;
  Tensor root_gathered_ = -1, flat_weights_ = -1, flat_grads_ = -1, flat_state_ = -1;
  std::vector<Tensor> buckets_;
  // DDP's broadcasts (memory/ddp_buckets.h BroadcastBuffers): the flat buffers of the
  // parameters and buffers when the model is wrapped, and of the buffers before a forward.
  std::vector<uint64_t> wrap_broadcast_, buffer_broadcast_;
  std::vector<std::pair<int, int>> bucket_copies_;  // (node, parameter), by node descending
  bool syncs_gradients_ = true;  // this backward all-reduces (the last micro-batch's)
  // Pipeline stages: roots read here but made on another stage; values made here and read on
  // another; one micro-batch's tensors (bytes, category, where the bytes came from) that outlive
  // its forward; the copies of the other micro-batches in flight.
  struct MicroBatchTensor {
    uint64_t bytes = 0;
    Category category = Category::kActivations;
    SizeRecipe recipe;
  };
  std::vector<int> received_, sent_;
  std::vector<MicroBatchTensor> micro_batch_set_;
  bool micro_batch_recorded_ = false;
  bool collect_micro_batch_ = false;  // the first micro-batch's forward is running
  // What it allocated, in order, with where each size came from.
  std::vector<std::pair<Tensor, SizeRecipe>> micro_batch_made_;
  std::vector<Tensor> other_micro_batches_;

  // Results.
  uint64_t peak_reserved_seen_ = 0;
  base::IdVector<uint64_t, Category> at_peak_{kNumCategories};
  uint64_t allocated_at_peak_ = 0;
  base::IdVector<Moment, Category> largest_{kNumCategories};
  Moment largest_cached_free_;
  Phase peak_phase_ = Phase::kUnknown;
  int peak_node_ = -1;
  uint64_t alloc_peak_seen_ = 0;
  Phase alloc_peak_phase_ = Phase::kUnknown;
  int alloc_peak_node_ = -1;
  int alloc_peak_iteration_ = 0;
  uint64_t iteration_alloc_peak_ = 0;
  Moment oom_at_;  // the first request that failed for good (bytes: its size)
  // Where the loop repeats itself, once seen (Loop; following a run, the run's).
  std::optional<LoopRepeat> repeat_;
  Simulation sim_;
};

}  // namespace internal
}  // namespace memest::symbolic

#endif  // MEMEST_SYMBOLIC_SIM_H_
