// memory/context.h -- what one estimate is computed over, built once per Estimator::Run().
//
// Estimator::Run() (memory/context.cc) is the pipeline every backend shares:
//   1. validate the options (memest::Validate);
//   2. reject the options the backend does not model (Estimator::supports(): an option set to a
//      non-default value that the backend does not declare is InvalidArgument naming the
//      option -- never silently dropped);
//   3. look up the GPU profile and the stack profile (memest/stack.h), bind the graph's dims, size
//   every value (ops::ValueFacts) -- once,
//      here, for every backend and for the backends one backend consults (learned reads the
//      analytical and symbolic results through the same context);
//   4. run the backend (Estimator::EstimateIn);
//   5. add the diagnostics every backend owes the user (binding's notes, ops without a memory
//      rule, control flow counted through its outputs, tensors sized by fallback);
//   6. give the estimate the stack's interval when the backend has none (memory/device.h);
//   7. turn an exception escaping a backend into Internal, naming the backend.
//
// Thread safety: a context belongs to one Run() call; it is not shared.
#ifndef MEMEST_MEMORY_CONTEXT_H_
#define MEMEST_MEMORY_CONTEXT_H_

#include <functional>
#include <memory>

#include "core/bind.h"
#include "core/checkpoint.h"
#include "memest/estimate.h"
#include "memest/gpu_profile.h"
#include "memest/model.h"
#include "memest/options.h"
#include "memest/stack.h"
#include "memest/status.h"
#include "memory/kv_cache.h"
#include "memory/parallel.h"
#include "memory/trainable.h"
#include "memory/weight_storage.h"
#include "ops/value_facts.h"

namespace memest {
class Estimator;  // memest/estimator.h
}  // namespace memest

namespace memest::memory {

class EstimationContext {
 public:
  // Looks up the GPU and stack profiles (options.custom_stack wins over options.stack) and binds
  // the graph (options must already be valid). Held by
  // pointer: the value facts refer to the bound graph, so the context never moves.
  static Result<std::unique_ptr<EstimationContext>> Make(const Model& model,
                                                         const Options& options);

  EstimationContext(const EstimationContext&) = delete;
  EstimationContext& operator=(const EstimationContext&) = delete;

  const Model& model() const { return model_; }
  const Options& options() const { return options_; }
  const GpuProfile& gpu() const { return gpu_; }
  const StackProfile& stack() const { return stack_; }
  // The parameters that train under options.trainable / options.freeze (memory/trainable.h).
  const TrainableSet& trainable() const { return trainable_; }
  // How the parameters that do not train are stored (options.weight_dtype).
  const WeightStorage& weights() const { return weights_; }
  // The graph's key/value cache (options.kv_cache_dtype, options.paged_kv_cache).
  const KvCache& kv_cache() const { return kv_cache_; }
  // The checkpointed segments in training (options.checkpoint_segments or checkpoint_blocks,
  // core/checkpoint.h); empty when there are none.
  const std::vector<core::CheckpointSegment>& checkpoint() const { return checkpoint_; }
  // The graph bound at options' dims; shared with other estimates of the model at the same dims
  // (core/bind_cache.h).
  const core::BoundGraph& bound() const { return *bound_; }
  // The value facts at these dims and options, shared with earlier estimates whose facts read
  // the same inputs (ops::ValueFacts::Shared).
  const ops::ValueFacts& facts() const { return *facts_; }
  // Many GPUs (options.parallel): the plan, and the pipeline stage the backend estimates now
  // (0 on one GPU). Run() estimates every stage in turn (set_stage) and keeps the worst.
  const ParallelPlan& parallel() const { return plan_; }
  int stage() const { return stage_; }
  void set_stage(int stage) { stage_ = stage; }
  // Options::prefill: the prefill's own context (its model, options.dims with its seq dim bound
  // to the step's past and the past dim dropped, no prefill of its own); null when unset.
  const EstimationContext* prefill() const { return prefill_.get(); }

 private:
  EstimationContext(const Model& model, const Options& options, GpuProfile gpu, StackProfile stack,
                    TrainableSet trainable, std::shared_ptr<const core::BoundGraph> bound,
                    WeightStorage weights, KvCache kv_cache, ParallelPlan plan,
                    std::vector<core::CheckpointSegment> checkpoint);

  const Model& model_;
  const Options options_;
  const GpuProfile gpu_;
  const StackProfile stack_;
  const TrainableSet trainable_;
  const std::shared_ptr<const core::BoundGraph> bound_;  // never null
  const WeightStorage weights_;
  const KvCache kv_cache_;
  const ParallelPlan plan_;
  const std::vector<core::CheckpointSegment> checkpoint_;
  const std::shared_ptr<const ops::ValueFacts> facts_;  // never null; reads *bound_
  std::unique_ptr<const EstimationContext> prefill_;
  int stage_ = 0;

  // Sets prefill_ for options_.prefill; InvalidArgument when the step is no decode step whose
  // past the prefill's outputs fill.
  Status MakePrefill();
};

// The options of the prefill before a decode step run under `step` (Options::prefill): the step's,
// its seq dim bound to the step's past, the past dim dropped, no prefill of their own -- what
// EstimationContext::prefill() is made with (over step.prefill->model). InvalidArgument when
// step has no prefill or leaves the past dim unbound.
[[nodiscard]] Result<Options> PrefillOptions(const Options& step);

// The diagnostics of step 5 above, for an estimate made in `ctx`.
void AddCommonDiagnostics(const EstimationContext& ctx, Estimate* estimate);

// Of a pipeline's stages, an estimate keeps the worst: the largest device peak, the first of those
// that tie. Whether `stage` is worse than the worst so far.
[[nodiscard]] inline bool WorseStage(const Estimate& stage, const Estimate& worst) {
  return stage.peak_device > worst.peak_device;
}

// The backend's own estimate of one pipeline stage in a context (ctx.stage(); by default its
// EstimateIn).
using BackendPart = std::function<Result<Estimate>(const EstimationContext&)>;
// Estimator::Run: the options checked, the context made, the backend's part on every pipeline
// stage (`in`, when set, instead of the default: a caller holding part of the work already, or
// keeping more of it, api/max_batch.cc) and the worst stage kept, the result refused past 1 EiB,
// the common diagnostics and the stack's band added, every exception an error. With `kept`, the
// context is handed to *kept once the estimate is made (a caller that may derive more from the
// same bind afterwards: the analytical search's terms, api/max_batch.cc); on an error *kept is
// left as it was.
Result<Estimate> RunEstimate(const Estimator& backend, const Model& model, const Options& options,
                             const BackendPart& in,
                             std::unique_ptr<EstimationContext>* kept = nullptr);

// `part` run again in a context RunEstimate handed to `kept`, on every pipeline stage as
// RunEstimate runs it (the worst stage kept), every exception an error: more derived from the
// same bind (the analytical search's terms, api/max_batch.cc).
Result<Estimate> RunAgainIn(const Estimator& backend, const BackendPart& part,
                            EstimationContext* ctx);

}  // namespace memest::memory

#endif  // MEMEST_MEMORY_CONTEXT_H_
