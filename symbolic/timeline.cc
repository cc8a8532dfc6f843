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
//  * A convolution allocates its cuDNN workspace after its outputs in forward, and in backward
//    after its inputs' gradients, and frees it at once (the stack's size, memory/device.h).
//  * Loss on the first output: cross-entropy keeps the log-probs (memory/loss.h), mse the
//    target. The outputs live to the end of backward, unless Options::outputs_held is false: then
//    an output no node saved is freed once the loss exists. Its backward: cross-entropy holds the
//    log-probs' gradient and the logits' gradient at once.
//  * Backward, in reverse order, for nodes with an input that requires grad and an output that has
//    a gradient: allocate one gradient per such input (views pass the gradient buffer through);
//    a parameter's first gradient becomes its .grad (stolen, memory-model.md §3.1), later ones are
//    added in place (freed); fan-out gradients of activations accumulate in place (the new buffer
//    is freed, memory-model.md §3.1); then the node's output gradients and saved tensors are freed
//    (memory-model.md §3.1 release_variables).
//  * Activation checkpointing (Options::checkpoint_segments or checkpoint_blocks; cuts in
//    core/checkpoint.h, EstimationContext::checkpoint()): nodes of a
//    checkpointed segment save nothing in the forward; the segment's inputs are kept until its
//    backward. When backward reaches the segment, its forward runs again (saving as usual, with
//    its own autocast cache), then backward goes through it and the recomputed outputs and the
//    kept inputs are released (torch.utils.checkpoint, reentrant).
//  * Gradient accumulation (Options::micro_batches): k forward/backward passes on batch/k, the
//    later gradients added into .grad in place, then one step.
//  * Optimizer step (memory-model.md §4.1-4.3): iteration 1 creates the state (adam: 2 per
//    parameter, momentum: 1). Foreach (the default): L2 weight decay allocates a gradient-sized
//    copy of all grads, then frees it; adam then allocates the sqrt copy of all exp_avg_sq (one per
//    parameter) and frees it. Single-tensor: per parameter, the L2 copy and adam's sqrt and
//    quotient (memory-model.md §4.3: about 2 x the largest parameter). Fused: no parameter-sized
//    temporaries.
//  * Many GPUs (Options::parallel, memory/parallel.h), one rank of the pipeline stage
//    EstimationContext::stage(): tensor-parallel shares are in the value facts' bytes. DDP
//    allocates its gradient buckets with the model and keeps them. Under ZeRO and FSDP the rank's
//    parameters, gradients and optimizer state are flat buffers of memory::ShardModelStates' sizes
//    (no autocast weight copies: the model computes in its low dtype); a parameter's gradient is
//    written into the gradient buffer and freed. ZeRO-3 and FSDP gather each unit's parameters
//    (ZeRO-3: one module) before its first node in forward and again in backward, FSDP full/hybrid
//    prefetching the next unit; a unit's gathered parameters are freed after its last forward node
//    (kept until its backward under fsdp-grad-op), and in backward the unit's unsharded gradients
//    live from its first backward node until the reduce-scatter after its last; parameters in no
//    unit stay gathered from the start of forward to the end of backward. ZeRO's step allocates its
//    fp32 gradient partition for the step. NCCL's buffers are outside the allocator, like the CUDA
//    context.
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
//  * The loop: iterations run until one starts from the state an earlier one started from -- the
//    same tensors alive between iterations, in the same allocator blocks (IterationStart,
//    symbolic/loop_watch.h) -- at most kMostIterations (else the estimate warns, unsettled). From
//    there the loop repeats itself: what the estimate reports is what every iteration to come
//    reaches. The first iterations need not say it: the caching allocator can take several to
//    settle, and a later one can reserve more than the first three did. When the third iteration
//    starts with the tensors the second did (RequestsStart), every later one makes the second's
//    requests again -- its frees of the first iteration's tensors renamed to the mallocs of its
//    own that took their places between iterations (LoopCarriedRenamed) -- so from the third on
//    they are run through the allocator model without walking the graph (LoopRest), each moment
//    the estimate keeps taken where the walk made the request. Where that renaming fails (a freed
//    tensor with no successor), the third iteration is walked and its requests repeated instead.
//    A trace (TraceRequests) makes its third iteration's requests the same way: the second's
//    again, renamed, unless the renaming fails or it is asked to walk it (TraceWalk).
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
#include <limits>
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

namespace memest::symbolic {

namespace {

// A tensor handle, -1 = none: the slot in Sim::tensors_ in the low 32 bits and the slot's
// generation above them. A freed slot is reused under the next generation, so the simulation holds
// as many slots as tensors alive at once, not one per malloc of the whole run. A copy of a freed
// handle (an input batch is both in inputs_ and value_) names a past generation: freeing it does
// nothing.
using Tensor = int64_t;
uint32_t SlotOf(Tensor t) { return static_cast<uint32_t>(t & 0xffffffff); }
uint32_t GenerationOf(Tensor t) { return static_cast<uint32_t>(static_cast<uint64_t>(t) >> 32); }
Tensor HandleOf(uint32_t slot, uint32_t generation) {
  return static_cast<Tensor>(uint64_t{generation} << 32 | slot);
}

// Sorts v and keeps each element once (the order a std::set would give, without its nodes).
void SortUnique(std::vector<int>* v) {
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
};

// Thrown by a trace that has made the requests it was asked for (TraceRequests' most_requests),
// to leave the walk wherever it is; caught by TraceRequests. Not a std::exception, so that
// nothing on the way mistakes it for an error.
struct TraceIsLongEnough {};

class Sim {
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
        kept_outputs_(memory::KeptOutputs(g_, ctx.kv_cache())),
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

  Tensor Malloc(uint64_t bytes, Category c);
  // The allocator's statistics now: the model's, or (following a run) what run_ says.
  const AllocatorStats& Stats() const { return *stats_; }
  // Request r of the step, taken from run_: notes the first that is not run's next request.
  void FollowRequest(const AllocatorRequest& r);
  // Appends a request to *requests_; past most_requests_ the walk is over (TraceIsLongEnough).
  void Trace(AllocatorRequest r) {
    requests_->push_back(r);
    if (requests_->size() >= most_requests_) throw TraceIsLongEnough{};
  }
  // A live slot of `bytes` in category c, with no allocator block yet (Malloc and Adopt give it
  // one). Inlined: every Malloc runs it, and the call alone was 1.3 % of ResNet-50's symbolic
  // max-batch search in instructions (callgrind).
  [[gnu::always_inline]] Tensor NewSlot(uint64_t bytes, Category c);
  void Free(Tensor* t);
  // The live tensor behind a handle; nullptr when the handle is -1 or was freed.
  Live* Find(Tensor t);
  // Moves a live tensor's bytes to another category (a gradient stolen into .grad).
  void Relabel(Tensor t, Category c);
  // Records a new maximum of category c / of cached-but-free bytes, if this moment is one.
  void NoteLargest(Category c);
  void NoteCachedFree();
  Moment Here(uint64_t bytes) const;
  CategoryPeak Describe(const Moment& m) const;
  void Record(bool malloc, uint64_t bytes, Category c);

  void Prepare();
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
  // Following a run, at its end: the loop repeats where the run's did, when the step made the
  // run's requests and its last traced iteration started as the one before did (`loops`).
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
  // requests (each malloc numbered on from the iteration before's) without walking the graph.
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
  // One node of the forward (seg = -1) or of segment seg's recomputation in backward.
  void ForwardNode(size_t k, int seg);
  void ClearAutocastCache();
  // A cuDNN convolution call's workspace, allocated and freed around the call (memory/device.h).
  void ConvWorkspace(size_t k);
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
  // The inputs node kk's backward makes gradients for: its own inputs; for the last node of a
  // fused chain (ops/fusion.h) the chain's inputs from outside (FusedChain::inputs), as the fused
  // kernel's backward makes them in one call; for the chain's other nodes none.
  std::span<const int> GradInputs(size_t kk) const;
  // The gradients of `ins` (GradInputs(kk)), made from node kk's output gradients.
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
  const std::vector<int> kept_outputs_;  // graph outputs kept to the end (memory/kv_cache.h)
  const memory::KvCache& kv_cache_;      // which data inputs die at their last reader
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
  size_t run_next_ = 0;                      // run_->requests of the step so far
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
  std::vector<LoopWhere> loop_where_;  // by request
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
  // Per node, its cuDNN workspace bytes (ConvWorkspace), once worked out; kNotWorkedOut before.
  static constexpr uint64_t kNotWorkedOut = ~uint64_t{0};
  std::vector<uint64_t> conv_workspace_;
  std::vector<int> released_;  // scratch of ReleaseSaved: the roots it released

  // Per-iteration state.
  base::IdVector<Tensor> value_;  // per root: live storage
  base::IdVector<int> uses_left_, saved_left_;
  base::IdVector<Tensor> grad_;        // per value: gradient buffer
  base::IdVector<Tensor> param_grad_;  // per value: .grad of parameters (persist until zero_grad)
  base::IdVector<Tensor> cast_;        // per parameter: AMP copy
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
  // Pipeline stages: roots read here but made on another stage; values made here and read on
  // another; one micro-batch's tensors (bytes, category) that outlive its forward; the copies of
  // the other micro-batches in flight.
  std::vector<int> received_, sent_;
  std::vector<std::pair<uint64_t, Category>> micro_batch_set_;
  bool micro_batch_recorded_ = false;
  bool collect_micro_batch_ = false;      // the first micro-batch's forward is running
  std::vector<Tensor> micro_batch_made_;  // what it allocated, in order
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

Tensor Sim::Malloc(uint64_t bytes, Category c) {
  if (bytes == 0) return -1;
  const Tensor handle = NewSlot(bytes, c);
  Live& t = tensors_[SlotOf(handle)];
  t.made_in = iteration_;
  t.made_at = made_++;
  if (collect_micro_batch_) micro_batch_made_.push_back(handle);
  if (requests_ != nullptr) {  // a trace: the request is what it keeps (no allocator, no peaks)
    t.handle = mallocs_++;
    if (noting_loop_) NoteLoopMalloc(t);
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
  run_stats_.allocated = run_->after[run_next_].first;
  run_stats_.reserved = run_->after[run_next_].second;
  ++run_next_;
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
    if (facts_.trainable(i) && !v.consumers.empty() && plan_.parameter_on_stage(i, stage_)) {
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
  for (size_t k = 0; k < nn; ++k) {
    roots_.clear();
    for (int in : g_.nodes[k].inputs) {
      if (in >= 0) roots_.push_back(facts_.root(in));
    }
    SortUnique(&roots_);
    input_roots_.insert(input_roots_.end(), roots_.begin(), roots_.end());
    input_roots_at_[k + 1] = input_roots_.size();
  }
  conv_workspace_.assign(nn, kNotWorkedOut);
  for (size_t k = 0; k < nn; ++k) {
    if (!OnStage(k)) continue;
    for (int r : InputRoots(k, -1)) ++uses_[r];
    if (!train_) continue;
    saved_[k] = facts_.Saved(k);
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
  // The loss is computed on the stage that makes the first output (the last for a graph input).
  const int producer = g_.outputs.empty() ? -1 : g_.value(g_.outputs.front()).producer;
  const bool loss_here =
      producer < 0 ? stage_ == plan_.stages() - 1 : OnStage(static_cast<size_t>(producer));
  if (train_ && !g_.outputs.empty() && loss_here) {
    loss_value_ = g_.outputs.front();
    loss_tensors_ = memory::LossTensorsFor(b_, facts_, o_, loss_value_);
  }
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

void Sim::AllocateWeights() {
  phase_ = Phase::kUnknown;
  for (size_t i = 0; i < g_.values.size(); ++i) {
    const core::Value& v = g_.values[i];
    if (v.kind != core::ValueKind::kInitializer || v.consumers.empty()) continue;
    if (!plan_.parameter_on_stage(static_cast<int>(i), stage_)) continue;  // another stage's
    if (sharded_ && v.trainable) continue;  // in the flat buffer below
    if (value_[i] >= 0) continue;           // the prefill's (AdoptPrefill)
    value_[i] = Malloc(facts_.bytes(static_cast<int>(i)), Category::kWeights);
  }
  if (sharded_) flat_weights_ = Malloc(rank_.weights, Category::kWeights);
  // DDP's reducer allocates its buckets when the model is wrapped, and keeps them.
  for (uint64_t size : memory::BucketSizes(rank_.buckets, o_.parallel)) {
    buckets_.push_back(Malloc(size, Category::kCollective));
  }
  if (train_) {
    const auto k = static_cast<uint64_t>(memory::StateTensorsPerParameter(o_.optimizer));
    state_.reserve(k * g_.values.size());
  }
}

std::span<const int> Sim::GradInputs(size_t kk) const {
  const ops::FusedChain* c = facts_.fusion().chain_of(kk);
  if (c == nullptr) return core::Span(g_.nodes[kk].inputs);
  if (c->nodes.back() != kk) return {};
  return c->inputs;
}

void Sim::PrepareParallel() {
  if (!o_.parallel.enabled()) return;
  const std::vector<memory::ParameterShare> params =
      memory::RankParameters(b_, facts_, plan_, stage_);
  rank_ = memory::ShardModelStates(params, o_);
  sharded_ = !rank_.unsharded;
  unit_of_node_.assign(g_.nodes.size(), -1);
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

void Sim::Gather(int unit, Tensor* into) {
  if (*into < 0) *into = Malloc(unit_bytes_[unit], Category::kCollective);
}

// FSDP full/hybrid issue the next unit's all-gather while the current one computes (implicit
// prefetch); ZeRO-3 and grad-op are modelled without it.
bool Prefetches(const Parallelism& p) {
  return p.sharding == Sharding::kFsdpFull || p.sharding == Sharding::kFsdpHybrid;
}

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
    unit_grads_[u] = Malloc(unit_grad_bytes_[u], Category::kCollective);
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
  for (int out : kept_outputs_) {
    if (facts_.root(out) == root && !output_dropped) return;
  }
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
        cast_[in] = Malloc(facts_.amp_cast_bytes(in), Category::kWeights);
      }
    }
  }
  // A quantized weight is dequantized (int8: the input quantized) for the call, then dropped
  // (memory/weight_storage.h).
  Tensor dequantized = Malloc(weights_.forward_transient(k), Category::kTransient);
  for (int out : n.outputs) {
    if (out < 0 || facts_.root(out) != out) continue;  // views allocate nothing
    if (seg >= 0 && value_[out] >= 0) continue;
    value_[out] = Malloc(facts_.bytes(out),
                         saved_left_[out] > 0 ? Category::kActivations : Category::kTransient);
  }
  Free(&dequantized);
  // The rule's workspace (a fused attention kernel's scores) lives while the kernel writes what it
  // keeps: freed after the saved extras exist.
  Tensor ws = Malloc(facts_.Workspace(k), Category::kTransient);
  ConvWorkspace(k);
  if (train_ && (seg >= 0 || !Checkpointed(k))) {
    for (const auto& sv : saved_[k]) {
      if (sv.value < 0) {
        extras_[k].push_back(Malloc(sv.bytes, Category::kActivations));
      } else if (seg >= 0 && lower && kind_[sv.value] == core::ValueKind::kInitializer &&
                 facts_.amp_cast_bytes(sv.value) > 0) {
        ++cast_left_[sv.value];
      }
    }
  }
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

void Sim::ConvWorkspace(size_t k) {
  uint64_t& bytes = conv_workspace_[k];
  if (bytes == kNotWorkedOut) {
    bytes = memory::ConvWorkspaceBytes(stack_, facts_, g_.nodes[k], k, o_.library_workspaces);
  }
  if (bytes == 0) return;
  Tensor ws = Malloc(bytes, Category::kTransient);
  Free(&ws);
}

void Sim::Forward(int it) {
  phase_ = train_ ? Phase::kForward : Phase::kInference;
  uses_left_ = uses_;
  saved_left_ = saved_by_;
  cast_left_ = cast_saves_;
  if (train_ && root_bytes_ > 0 && root_gathered_ < 0) {
    root_gathered_ = Malloc(root_bytes_, Category::kCollective);
  }
  ReceiveActivations();
  for (size_t k = 0; k < g_.nodes.size(); ++k) {
    if (!OnStage(k)) continue;
    node_ = static_cast<int>(k);
    const ops::OpRule* rule = facts_.rule(k);
    if (o_.library_workspaces && ws_forward_ < 0 && rule && rule->uses_cublas) {
      ws_forward_ = Malloc(cublas_workspace_, Category::kTransient);
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
    log_probs_ = Malloc(loss_tensors_.log_probs, Category::kActivations);
  }
  loss_ = Malloc(4, Category::kTransient);
  // A loop that drops the outputs once the loss exists frees an output nothing saved
  // (Options::outputs_held).
  if (!o_.outputs_held) {
    for (int out : g_.outputs) FreeIfDead(facts_.root(out), /*output_dropped=*/true);
  }
}

void Sim::LossBackward() {
  if (loss_value_ < 0) return;
  Tensor seed = Malloc(4, Category::kTransient);  // ones_like(loss)
  // memory/loss.h: cross-entropy's gradient of the log-probs, then of the output while both
  // are alive (the first dies with NllLossBackward's release_variables); MSE's one gradient.
  // Measured on the CPU harness, datasets/measured/cpu/bundled.jsonl.
  Tensor grad_log_probs =
      loss_tensors_.cross_entropy ? Malloc(loss_tensors_.log_probs, Category::kTransient) : -1;
  if (loss_tensors_.cross_entropy) Free(&seed);
  grad_[loss_value_] = Malloc(loss_tensors_.output_grad, Category::kTransient);
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
                           ? Malloc(weights_.backward_transient(kk), Category::kTransient)
                           : -1;
  // An attention kernel's backward buffers (ops/attention.h), alive while the input gradients
  // are made.
  Tensor bws = Malloc(facts_.BackwardWorkspace(kk), Category::kTransient);
  for (int in : ins) {
    if (!facts_.requires_grad(in)) continue;
    Deliver(in, Malloc(facts_.bytes(in), Category::kTransient));
  }
  Free(&bws);
  Free(&dequantized);
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
  const std::span<const int> ins = GradInputs(kk);
  for (int in : ins) needs = needs || facts_.requires_grad(in);
  for (int out : n.outputs) has_out_grad = has_out_grad || (out >= 0 && grad_[out] >= 0);
  if (needs && has_out_grad) {
    if (o_.library_workspaces && ws_backward_ < 0 && rule && rule->uses_cublas) {
      ws_backward_ = Malloc(cublas_workspace_, Category::kTransient);
    }
    InputGradients(kk, ins);
    // cuDNN's backward calls run while the output's and the inputs' gradients are alive.
    ConvWorkspace(kk);
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
  if (sharded_ && flat_grads_ < 0) flat_grads_ = Malloc(rank_.gradients, Category::kGradients);
  LossBackward();
  ReceiveGradients();
  for (size_t kk = g_.nodes.size(); kk-- > 0;) {
    if (OnStage(kk)) BackwardNode(kk);
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
    if (it == 1) flat_state_ = Malloc(rank_.optimizer_state, Category::kOptimizerState);
    Tensor fp32_grads = Malloc(rank_.fp32_grad_buffer, Category::kGradients);
    for (int i = 0; i < memory::StepTemporariesFor(o_).lists; ++i) {
      Tensor t = Malloc(rank_.gradients, Category::kTransient);
      Free(&t);
    }
    Free(&fp32_grads);
    return;
  }
  const std::vector<int>& params = step_params_;
  if (it == 1) {  // lazily created state (memory-model.md §4.2, memory/optimizer.h)
    if (const uint64_t shared = memory::SharedStateBytes(o_.optimizer); shared > 0) {
      state_.push_back(Malloc(shared, Category::kOptimizerState));
    }
    for (int p : params) {
      for (uint64_t bytes :
           memory::StateTensorBytes(o_.optimizer, b_.Numel(p).value_or(0), facts_.bytes(p))) {
        state_.push_back(Malloc(bytes, Category::kOptimizerState));
      }
    }
  }
  // memory/optimizer.h: foreach makes whole lists one after another (the L2 copy of the
  // gradients, then Adam's sqrt of the second moments), each one temporary per parameter;
  // single-tensor holds its copies of one parameter at a time.
  const memory::StepTemporaries temps = memory::StepTemporariesFor(o_);
  for (int list = 0; list < temps.lists; ++list) {
    std::vector<Tensor> made;
    for (int p : params) made.push_back(Malloc(facts_.bytes(p), Category::kTransient));
    for (Tensor& t : made) Free(&t);
  }
  for (int p : params) {
    std::vector<Tensor> made;
    for (int i = 0; i < temps.per_parameter; ++i) {
      made.push_back(Malloc(facts_.bytes(p), Category::kTransient));
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
    value_[r] = Malloc(facts_.bytes(r), Category::kActivations);
  }
}

// A stage without the loss starts its backward from the gradients of what it sent.
void Sim::ReceiveGradients() {
  if (!staged_ || loss_value_ >= 0) return;
  for (int v : sent_) {
    if (facts_.requires_grad(v) && grad_[v] < 0) {
      grad_[v] = Malloc(facts_.bytes(v), Category::kTransient);
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
  for (Tensor t : micro_batch_made_) {
    const Live* l = Find(t);
    if (l && (l->category == Category::kActivations || l->category == Category::kWeights)) {
      micro_batch_set_.emplace_back(l->bytes, l->category);
    }
  }
  micro_batch_made_ = {};
}

void Sim::HoldOtherMicroBatches() {
  if (!staged_) return;
  for (int i = 1; i < plan_.in_flight(stage_); ++i) {
    for (const auto& [bytes, category] : micro_batch_set_) {
      other_micro_batches_.push_back(Malloc(bytes, category));
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
    // New batch before the old one is released.
    old_inputs_.swap(inputs_);
    inputs_.clear();
    for (int id : g_.data_inputs) {
      if (!plan_.input_on_stage(id, stage_)) continue;
      Tensor t = -1;
      if (!adopted_.empty()) std::swap(t, adopted_[id]);  // the past the prefill left
      if (t < 0) t = Malloc(facts_.bytes(id), Category::kActivations);
      inputs_.push_back(t);
      value_[id] = t;
    }
    if (train_) inputs_.push_back(Malloc(loss_tensors_.targets, Category::kActivations));
    for (Tensor& t : old_inputs_) Free(&t);
    old_inputs_.clear();
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
  sim_.iterations.push_back({it, iteration_alloc_peak_, Stats().reserved});
}

template <typename Word>
bool Sim::CarriedTensors(std::vector<uint64_t>* words, Word word) const {
  words->clear();
  size_t alive = 0;
  bool fits = true;
  auto add = [&](Tensor t) {
    const Live* l = t < 0 ? nullptr : &tensors_[SlotOf(t)];
    if (l == nullptr || !l->alive || l->generation != GenerationOf(t)) {
      words->push_back(0);
      return;
    }
    ++alive;
    const std::optional<uint64_t> w = word(*l);
    fits = fits && w.has_value();
    words->push_back(w.value_or(0));
  };
  constexpr uint64_t kWeightsAsMade = 1, kWeightsListed = 2;
  if (weights_counted_ && made_before_changed_ == 0) {
    words->push_back(kWeightsAsMade);
    alive += weights_alive_;
  } else {
    words->push_back(kWeightsListed);
    for (size_t i = 0; i < g_.values.size(); ++i) {
      if (kind_[i] == core::ValueKind::kInitializer) add(value_[i]);
    }
  }
  for (int p : step_params_) add(param_grad_[p]);
  for (const std::vector<Tensor>* ts : {&inputs_, &state_, &buckets_, &other_micro_batches_}) {
    words->push_back(ts->size());
    for (Tensor t : *ts) add(t);
  }
  for (const base::IdVector<Tensor>* ts : {&gathered_, &unit_grads_}) {
    for (Tensor t : *ts) add(t);
  }
  for (Tensor t : {ws_forward_, ws_backward_, log_probs_, loss_, root_gathered_, flat_weights_,
                   flat_grads_, flat_state_}) {
    add(t);
  }
  return fits && alive == tensors_.size() - free_slots_.size();
}

// A tensor as one word: a value below 2^56 and its category above it (a handful of values).
std::optional<uint64_t> WithCategory(uint64_t value, Category c) {
  if (value == 0 || value >= (uint64_t{1} << 56)) return std::nullopt;
  return value | uint64_t{static_cast<uint8_t>(c)} << 56;
}

bool Sim::IterationStart(std::vector<uint64_t>* words) const {
  const bool known = CarriedTensors(words, [this](const Live& l) {
    return WithCategory(alloc_.Address(l.handle), l.category);  // > 0: segments start at 2 MiB
  });
  if (known) alloc_.AppendLayout(words);
  return known;
}

bool Sim::RequestsStart(std::vector<uint64_t>* words) const {
  return CarriedTensors(words, [](const Live& l) { return WithCategory(l.bytes, l.category); });
}

void Sim::CountWeights() {
  weights_alive_ = 0;
  weights_counted_ = true;  // unless some weight was made otherwise: then they are listed
  for (size_t i = 0; i < g_.values.size(); ++i) {
    const Live* w = kind_[i] == core::ValueKind::kInitializer ? Find(value_[i]) : nullptr;
    if (w == nullptr) continue;
    ++weights_alive_;
    weights_counted_ = weights_counted_ && w->made_in == 0;
  }
  made_before_changed_ = 0;
}

void Sim::TraceNoted() {
  trace_->last_repeated = true;
  const int64_t own = mallocs_;
  const int64_t previous = own - static_cast<int64_t>(loop_blocks_.size());
  for (size_t i = 0; i < loop_requests_.size(); ++i) {
    Trace(StepRequest(loop_requests_[i], loop_where_[i].bytes, own, previous));
  }
  mallocs_ += loop_blocks_.size();
}

Status Sim::RepeatNoted(int first, const std::vector<uint32_t>& carried,
                        std::vector<uint64_t> start, bool loops) {
  if (run_ != nullptr) {
    FollowLoopRest(first, static_cast<uint32_t>(loop_blocks_.size()));
    LoopAtPeak();
    return EndOfRun(loops);
  }
  LoopRest(first, carried, std::move(start));
  LoopAtPeak();
  return Status::Ok();
}

Status Sim::Loop() {
  CountWeights();
  LoopWatch watch;
  std::vector<uint64_t> start;
  const bool fixed = iterations_ > 0;                          // exactly so many, never repeating
  const bool walks = requests_ == nullptr && run_ == nullptr;  // through the allocator model
  // RequestsStart() at the start of the last two traced iterations: whether the last starts as
  // the one before did. A trace notes it (StepTrace::loops) and makes its last iteration without
  // walking (TraceNoted); a run followed, or a walk looking for the loop's repeat, goes on
  // without walking (FollowLoopRest, LoopRest).
  const bool compares_requests = !walks || (!fixed && !record_);
  std::vector<uint64_t> requests_start[2];
  bool known[2] = {false, false};
  const int before_last = kTracedIterations - 1;
  // A walk, a run followed or a trace notes iteration before_last, whose requests every later one
  // makes again when the next starts as it did (LoopCarriedRenamed); where that fails, a walk or
  // a run followed notes iteration kTracedIterations instead, and a trace walks it. A trace asked
  // to walk every iteration (WalkEveryTraced) notes nothing.
  const bool notes_early = compares_requests && !walks_every_traced_;
  std::vector<uint64_t> made_where;  // MadeWhere at the start of iteration before_last
  std::vector<uint64_t> made_start;  // MadeState at the start of iteration kTracedIterations
  uint32_t previous_mallocs = 0;     // the iteration before the noted one made so many
  const int most = fixed ? iterations_ : kMostIterations + 1;
  // A step limited by a budget that ran out is not an estimate (symbolic/symbolic.cc keeps the
  // unlimited one), so it stops at the end of that iteration.
  for (int it = 1; it <= most && !alloc_.oom(); ++it) {
    if (compares_requests && (it == before_last || it == kTracedIterations)) {
      const int i = it - before_last;
      known[i] = RequestsStart(&requests_start[i]);
      if (trace_ != nullptr) {
        (i == 0 ? trace_->previous_begins : trace_->last_begins) = requests_->size();
      }
    }
    const bool loops = known[0] && known[1] && requests_start[0] == requests_start[1];
    if (trace_ != nullptr && it == kTracedIterations) trace_->loops = loops;
    if (noting_loop_ && it == kTracedIterations + 1) {
      noting_loop_ = false;
      // The noted iteration's mallocs are numbered as the iteration before's were.
      const auto carried = loop_blocks_.size() == previous_mallocs && !loop_requests_.empty()
                               ? LoopCarried()
                               : std::nullopt;
      if (carried) return RepeatNoted(it, *carried, std::move(made_start), loops);
    }
    if (run_ != nullptr && it > kTracedIterations && run_next_ == run_->requests.size()) {
      return EndOfRun(loops);
    }
    // A walk that notes iteration before_last goes on without the walk from the next one, which
    // LoopRest's own watch compares with the later ones: the states before it are not taken (an
    // iteration that starts as before_last did is then seen one iteration later, as the next
    // repeated), and a walk that cannot go on without the walk compares from the one after.
    const bool watched = it > (notes_early ? kTracedIterations : 1);
    if (walks && watched && !fixed && IterationStart(&start)) {
      repeat_ = watch.Starts(it, &start);
      if (repeat_) return Status::Ok();
    }
    if (notes_early && it == kTracedIterations) {
      noting_loop_ = false;
      if (const auto carried =
              loops ? LoopCarriedRenamed(made_where, previous_mallocs) : std::nullopt) {
        if (trace_ != nullptr) {
          TraceNoted();
          return Status::Ok();
        }
        return RepeatNoted(it, *carried, {}, loops);
      }
    }
    // Noting the iteration about to be walked.
    if (notes_early && it == before_last) {
      previous_mallocs = made_;
      noting_loop_ = MadeWhere(&made_where);
      if (noting_loop_) StartNotingLoop();
    } else if (compares_requests && requests_ == nullptr && it == kTracedIterations) {
      previous_mallocs = made_;
      noting_loop_ = loops;
      if (noting_loop_) {
        if (walks) MadeState(it - 1, &made_start);
        StartNotingLoop();
      }
    }
    if (!fixed && it > kMostIterations) break;
    Iteration(it);
  }
  if (run_ != nullptr) return EndOfRun(false);  // a run longer than any loop is simulated
  return Status::Ok();                          // a trace, or unsettled (Run warns)
}

void Sim::StartNotingLoop() {
  loop_noted_ok_ = true;
  loop_requests_.clear();
  loop_where_.clear();
  loop_relabels_.clear();
  loop_live_start_ = live_;
  loop_peak_request_.reset();
  loop_blocks_.clear();
  loop_requests_.reserve(2 * size_t{made_});  // as many as the iteration before made
  loop_where_.reserve(2 * size_t{made_});
  loop_blocks_.reserve(made_);
}

void Sim::NoteLoopMalloc(const Live& t) {
  loop_requests_.push_back({LoopRequest::kMalloc, t.made_at});
  loop_where_.push_back({t.bytes, node_, static_cast<uint8_t>(phase_), t.category});
  loop_blocks_.push_back(t.handle);
}

void Sim::NoteLoopFree(const Live& l) {
  LoopRequest q{LoopRequest::kFreeOwn, l.made_at};
  if (l.made_in == iteration_ - 1) {
    q.kind = LoopRequest::kFreePrevious;
  } else if (l.made_in != iteration_) {
    loop_noted_ok_ = false;  // an older tensor: not an iteration that repeats
  }
  loop_requests_.push_back(q);
  loop_where_.push_back({l.bytes, node_, static_cast<uint8_t>(phase_), l.category});
}

void Sim::NoteLoopMoments(size_t i, int it) {
  const LoopRequest& q = loop_requests_[i];
  const LoopWhere& where = loop_where_[i];
  const AllocatorStats& s = Stats();
  if (q.kind != LoopRequest::kMalloc) {
    const uint64_t cached = s.reserved > s.allocated ? s.reserved - s.allocated : 0;
    if (cached > largest_cached_free_.bytes) {
      largest_cached_free_ = {cached, where.phase(), it, where.node};
    }
    return;
  }
  if (s.reserved > peak_reserved_seen_ ||
      (s.reserved == peak_reserved_seen_ && s.allocated > allocated_at_peak_)) {
    peak_reserved_seen_ = s.reserved;
    loop_peak_request_ = i;
    allocated_at_peak_ = s.allocated;
    peak_phase_ = where.phase();
    peak_node_ = where.node;
  }
  if (s.allocated > alloc_peak_seen_) {
    alloc_peak_seen_ = s.allocated;
    alloc_peak_phase_ = where.phase();
    alloc_peak_node_ = where.node;
    alloc_peak_iteration_ = it;
  }
  iteration_alloc_peak_ = std::max(iteration_alloc_peak_, s.allocated);
}

void Sim::LoopAtPeak() {
  if (!loop_peak_request_) return;
  base::IdVector<uint64_t, Category> live = loop_live_start_;
  auto relabel = loop_relabels_.begin();
  for (size_t k = 0; k <= *loop_peak_request_; ++k) {
    for (; relabel != loop_relabels_.end() && relabel->before <= k; ++relabel) {
      live[relabel->from] -= relabel->bytes;
      live[relabel->to] += relabel->bytes;
    }
    const LoopWhere& w = loop_where_[k];
    if (loop_requests_[k].kind == LoopRequest::kMalloc) {
      live[w.category] += w.bytes;
    } else {
      live[w.category] -= w.bytes;
    }
  }
  at_peak_ = live;
  loop_peak_request_.reset();
}

void Sim::FollowLoopRest(int first, uint32_t mallocs) {
  int64_t previous = mallocs_ - mallocs, own = mallocs_;  // the iterations' first malloc numbers
  for (int it = first; it <= kMostIterations && run_next_ < run_->requests.size(); ++it) {
    iteration_ = it;
    iteration_alloc_peak_ = Stats().allocated;
    for (size_t i = 0; i < loop_requests_.size(); ++i) {
      FollowRequest(StepRequest(loop_requests_[i], loop_where_[i].bytes, own, previous));
      if (run_differs_at_) return;
      NoteLoopMoments(i, it);
    }
    sim_.iterations.push_back({it, iteration_alloc_peak_, Stats().reserved, /*walked=*/false});
    previous = own;
    own += mallocs;
  }
}

void Sim::MadeState(int made_in, std::vector<uint64_t>* words) const {
  std::vector<CachingAllocatorModel::Handle> made(made_, -1);  // by number (made_: made_in's)
  std::vector<uint32_t> alive;
  for (const Live& l : tensors_) {
    if (!l.alive || l.made_in != made_in) continue;
    made[l.made_at] = l.handle;
    alive.push_back(l.made_at);
  }
  std::sort(alive.begin(), alive.end());
  LoopStart(alloc_, made, alive, words);
}

std::optional<std::vector<uint32_t>> Sim::LoopCarried() const {
  if (!loop_noted_ok_ || alloc_.oom()) return std::nullopt;
  return CarriedMallocs(loop_requests_, loop_blocks_.size());
}

namespace {
constexpr uint64_t kMadeFlag = uint64_t{1} << 63;  // a MadeWhere word that names a tensor
}  // namespace

bool Sim::MadeWhere(std::vector<uint64_t>* words) const {
  return CarriedTensors(words, [](const Live& l) -> std::optional<uint64_t> {
    return kMadeFlag | uint64_t(static_cast<uint32_t>(l.made_in)) << 32 | l.made_at;
  });
}

std::optional<std::vector<uint32_t>> Sim::LoopCarriedRenamed(const std::vector<uint64_t>& before,
                                                             uint32_t before_mallocs) {
  std::vector<uint64_t> now;
  if (!loop_noted_ok_ || loop_requests_.empty() || !MadeWhere(&now) ||
      now.size() != before.size()) {
    return std::nullopt;
  }
  // The noted iteration's malloc that took the place of each of the iteration before's.
  const auto made_in = [](uint64_t w) { return static_cast<int>((w & ~kMadeFlag) >> 32); };
  const auto made_at = [](uint64_t w) { return static_cast<uint32_t>(w); };
  const int noted = iteration_;
  std::vector<int64_t> successor(before_mallocs, -1);
  for (size_t i = 0; i < now.size(); ++i) {
    const uint64_t was = before[i], is = now[i];
    if ((was & kMadeFlag) == 0 || made_in(was) != noted - 1 || made_at(was) >= before_mallocs) {
      continue;
    }
    if ((is & kMadeFlag) != 0 && made_in(is) == noted) successor[made_at(was)] = made_at(is);
  }
  for (LoopRequest& q : loop_requests_) {
    if (q.kind != LoopRequest::kFreePrevious) continue;
    if (q.r >= successor.size() || successor[q.r] < 0) return std::nullopt;
    q.r = static_cast<uint32_t>(successor[q.r]);
  }
  return LoopCarried();
}

void Sim::LoopRest(int first, const std::vector<uint32_t>& carried, std::vector<uint64_t> start) {
  LoopWatch watch;
  if (!start.empty()) (void)watch.Starts(first - 1, &start);
  std::vector<CachingAllocatorModel::Handle> previous = loop_blocks_, own(previous.size(), -1);
  std::vector<uint64_t> state;
  for (int it = first; it <= kMostIterations + 1; ++it) {
    LoopStart(alloc_, previous, carried, &state);
    repeat_ = watch.Starts(it, &state);
    if (repeat_ || it > kMostIterations) return;
    iteration_ = it;
    iteration_alloc_peak_ = Stats().allocated;
    for (size_t i = 0; i < loop_requests_.size(); ++i) {
      const LoopRequest& q = loop_requests_[i];
      if (q.kind == LoopRequest::kMalloc) {
        own[q.r] = alloc_.Malloc(loop_where_[i].bytes);
        if (alloc_.oom()) {
          oom_at_ = {loop_where_[i].bytes, loop_where_[i].phase(), it, loop_where_[i].node};
          return;
        }
      } else {
        alloc_.Free(q.kind == LoopRequest::kFreeOwn ? own[q.r] : previous[q.r]);
      }
      NoteLoopMoments(i, it);
    }
    sim_.iterations.push_back({it, iteration_alloc_peak_, Stats().reserved, /*walked=*/false});
    std::swap(previous, own);
  }
}

Status Sim::EndOfRun(bool loops) {
  if (run_differs_at_ || run_next_ != run_->requests.size()) {
    return InvalidArgument("the step's request " +
                           std::to_string(run_differs_at_.value_or(run_next_)) +
                           " is not the allocator run's");
  }
  if (!loops || !run_->repeat) {
    return InvalidArgument(
        "following an allocator run: the step does not repeat its iterations as traced, or the "
        "run did not see the loop repeat itself");
  }
  repeat_ = run_->repeat;
  run_stats_ = run_->end;
  return Status::Ok();
}

std::string Sim::IterationsNote() const {
  auto mib = [](uint64_t b) { return std::to_string(b >> 20) + " MiB"; };
  const int simulated = static_cast<int>(sim_.iterations.size());
  // Iteration i's figures; past the simulated ones, those of the iteration it repeats.
  auto figures = [&](int i) -> const IterationPeak& {
    if (i > simulated && repeat_)
      i = repeat_->from + (i - repeat_->from) % (repeat_->at - repeat_->from);
    return sim_.iterations[static_cast<size_t>(i - 1)];
  };
  auto text = [&](const IterationPeak& f) {
    return "allocated peak " + mib(f.allocated) + ", reserved " + mib(f.reserved);
  };
  std::string note;
  for (int i = 1; i <= kTracedIterations && (repeat_ || i <= simulated); ++i) {
    note +=
        (note.empty() ? "" : "; ") + ("iteration " + std::to_string(i) + ": ") + text(figures(i));
  }
  // Later iterations: those simulated past kTracedIterations, and every repeating one (each comes
  // again later).
  IterationPeak later;
  bool any = false;
  auto take = [&](const IterationPeak& f) {
    any = true;
    later.allocated = std::max(later.allocated, f.allocated);
    later.reserved = std::max(later.reserved, f.reserved);
  };
  const int last = repeat_ ? repeat_->at - 1 : simulated;
  for (int i = kTracedIterations + 1; i <= last; ++i) take(figures(i));
  if (repeat_) {
    for (int i = repeat_->from; i < repeat_->at; ++i) take(figures(i));
  }
  if (any) {
    note += "; later iterations: " + text(later) +
            (repeat_ ? " (simulated until an iteration started as an earlier one had)"
                     : " (the most of those simulated)");
  }
  return note;
}

Result<Prefilled> Sim::RunPrefill() {
  prefill_ = true;
  train_ = false;
  Prepare();
  PrepareParallel();
  AllocateWeights();
  Iteration(1);
  for (Tensor& t : inputs_) Free(&t);  // the prompt's tensors (`del ids`)
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
  return Status::Ok();
}

Result<Simulation> Sim::Run() {
  train_ = o_.mode == Mode::kTrain;
  if (staged_ && train_ && !checkpoint_.empty()) {
    return InvalidArgument(
        "the symbolic timeline does not model activation checkpointing together with pipeline "
        "stages (pp " +
        std::to_string(plan_.stages()) + "); the analytical backend does");
  }
  Prepare();
  PrepareParallel();
  // A decode step after its prefill runs once, on what the prefill left; else the loop.
  if (const memory::EstimationContext* prefill = ctx_.prefill()) {
    SimulationKey key = SimulationKey::Of(*prefill);  // read by reference while the Sim runs
    key.allocator_budget = budget_;
    MEMEST_ASSIGN_OR_RETURN(Prefilled p, Sim(*prefill, key, /*record=*/false).RunPrefill());
    MEMEST_RETURN_IF_ERROR(AdoptPrefill(std::move(p)));
    AllocateWeights();
    Iteration(1);
  } else {
    AllocateWeights();
    MEMEST_RETURN_IF_ERROR(Loop());
  }

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
  if (!repeat_ && iterations_ == 0 && ctx_.prefill() == nullptr && !alloc_.oom()) {
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

}  // namespace

Result<Simulation> Simulate(const memory::EstimationContext& ctx, const SimulationKey& key,
                            bool record_events) {
  Sim sim(ctx, key, record_events);
  MEMEST_ASSIGN_OR_RETURN(Simulation out, sim.Run());
  out.budget = {sim.ran_out(), sim.OutOfMemoryAt(), sim.retries()};
  return out;
}

Result<Simulation> Simulate(const memory::EstimationContext& ctx, bool record_events) {
  return Simulate(ctx, SimulationKey::Of(ctx), record_events);
}

Result<Simulation> Simulate(const memory::EstimationContext& ctx, const SimulationKey& key,
                            const AllocatorRun& run) {
  if (ctx.prefill() != nullptr || key.iterations != 0 || run.end.num_ooms > 0 || !run.repeat ||
      run.after.size() != run.requests.size() ||
      run.config != StepAllocatorConfig(key.options, key.allocator_budget)) {
    return InvalidArgument(
        "the allocator run is not this step's: another allocator, a prefill, "
        "or a run that ran out");
  }
  Sim sim(ctx, key, /*record=*/false);
  sim.Follow(&run);
  MEMEST_ASSIGN_OR_RETURN(Simulation out, sim.Run());
  out.budget = {sim.ran_out(), sim.OutOfMemoryAt(), sim.retries()};
  return out;
}

AllocatorConfig StepAllocatorConfig(const Options& options, uint64_t budget) {
  return AllocatorConfig{options.allocator.expandable_segments, options.allocator.max_split_size,
                         kLargeBuffer, options.allocator.roundup_power2_divisions, budget};
}

Result<StepTrace> TraceRequests(const memory::EstimationContext& ctx, size_t most_requests,
                                TraceWalk walk) {
  if (ctx.prefill() != nullptr) {
    return InvalidArgument("a trace holds one graph's requests, not a prefill's and a step's");
  }
  StepTrace trace;
  if (most_requests == 0) return trace;
  SimulationKey key = SimulationKey::Of(ctx);  // the Sim reads its options by reference
  key.iterations = kTracedIterations;
  Sim sim(ctx, key, /*record=*/false, &trace, most_requests);
  if (walk == TraceWalk::kEveryIteration) sim.WalkEveryTraced();
  try {
    MEMEST_RETURN_IF_ERROR(sim.Run().status());
  } catch (const TraceIsLongEnough&) {
    // The first most_requests requests are made.
  }
  return trace;
}

}  // namespace memest::symbolic
