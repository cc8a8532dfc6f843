// memory/context.cc -- Estimator::Run(), the pipeline every backend shares (policy in context.h),
// and the context it builds once per call.
#include "memory/context.h"

#include <algorithm>
#include <exception>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/bind_cache.h"
#include "memest/estimator.h"
#include "memory/device.h"
#include "memory/optimizer.h"
#include "memory/trainable.h"
#include "ops/attention.h"
#include "ops/rules.h"

namespace memest {
namespace memory {
namespace {

// The first option set to a value `support` says the backend does not model, as
// "<option> <value>"; empty when there is none. Training-only options count in training only.
std::string FirstUnmodelledOption(const Options& o, const OptionSupport& support) {
  const bool train = o.mode == Mode::kTrain;
  if (train && o.micro_batches > 1 && !support.micro_batches) {
    return "micro_batches " + std::to_string(o.micro_batches);
  }
  if (train && o.checkpoint_segments > 1 && !support.checkpoint_segments) {
    return "checkpoint_segments " + std::to_string(o.checkpoint_segments);
  }
  if (train && o.checkpoint_blocks && !support.checkpoint_segments) return "checkpoint_blocks";
  if (train && !o.outputs_held && !support.dropped_outputs) return "outputs_held false";
  if (o.prefill && !support.prefill) return "prefill";
  if (train && o.optimizer_impl == OptimizerImpl::kFused && !support.fused_optimizer) {
    return "optimizer_impl fused";
  }
  const Result<StackProfile> default_stack = ResolveStack("");
  const bool other_stack =
      o.custom_stack || (!o.stack.empty() && default_stack.ok() && FindStackProfile(o.stack).ok() &&
                         FindStackProfile(o.stack)->name != default_stack->name);
  if (!support.stacks && other_stack) {
    return "stack " + (o.custom_stack ? o.custom_stack->name : o.stack);
  }
  if (!support.attention && o.attention != Attention::kEager) {
    return std::string("attention ") + ToString(o.attention);
  }
  if (train && !support.trainable_set && (!o.trainable.empty() || !o.freeze.empty())) {
    return o.freeze.empty() ? "trainable " + o.trainable : "freeze " + o.freeze;
  }
  if (!support.low_bit_storage && o.weight_dtype != WeightDtype::kAuto) {
    return std::string("weight_dtype ") + ToString(o.weight_dtype);
  }
  if (!support.kv_cache && (o.kv_cache_dtype != KvCacheDtype::kAuto || o.paged_kv_cache)) {
    return o.paged_kv_cache ? std::string("paged_kv_cache")
                            : std::string("kv_cache_dtype ") + ToString(o.kv_cache_dtype);
  }
  if (train && !support.low_bit_storage && IsEightBit(o.optimizer)) {
    return std::string("optimizer ") + ToString(o.optimizer);
  }
  if (o.parallel.enabled() && !support.parallelism) {
    return "world_size " + std::to_string(o.parallel.world_size);
  }
  if (!support.allocator_settings) {
    const AllocatorSettings defaults;
    if (o.allocator.expandable_segments != defaults.expandable_segments) {
      return "allocator.expandable_segments true";
    }
    if (o.allocator.max_split_size != defaults.max_split_size) {
      return "allocator.max_split_size " + std::to_string(o.allocator.max_split_size.value_or(0));
    }
    if (o.allocator.roundup_power2_divisions != defaults.roundup_power2_divisions) {
      return "allocator.roundup_power2_divisions " +
             std::to_string(o.allocator.roundup_power2_divisions);
    }
  }
  return "";
}

// What a many-GPU estimate rests on: the degrees, the blocks the pipeline was cut at, the worst
// rank group, and the NCCL rule (memory/parallel.h).
void AddParallelDiagnostics(const EstimationContext& ctx, Estimate* e) {
  const ParallelPlan& plan = ctx.parallel();
  const Parallelism& p = ctx.options().parallel;
  std::string what = "world size " + std::to_string(p.world_size) + " = dp " +
                     std::to_string(p.DataParallel()) + " x tp " + std::to_string(p.tp) + " x pp " +
                     std::to_string(p.pp) + ", sharding " + ToString(p.sharding) +
                     (p.sequence_parallel ? ", sequence parallel" : "");
  if (plan.layers() > 0) {
    what += "; " + std::to_string(plan.layers()) + " blocks ('" + plan.layer_pattern() + "')";
  }
  const auto worst = std::max_element(
      e->ranks.begin(), e->ranks.end(),
      [](const RankPeak& a, const RankPeak& b) { return a.peak_device < b.peak_device; });
  if (worst != e->ranks.end()) {
    what += "; the worst ranks are " + std::to_string(worst->first_rank) + "-" +
            std::to_string(worst->last_rank) + " (stage " + std::to_string(worst->stage) + ")";
  }
  e->diagnostics.push_back({Severity::kInfo, "parallel", what, "", ""});
  if (e->breakdown.nccl_buffers > 0) {
    e->diagnostics.push_back(
        {Severity::kInfo, "nccl_buffers",
         std::to_string(plan.communicators()) + " NCCL communicator(s) x " +
             std::to_string(p.nccl_channels) + " channel(s) x 3 connections x (NCCL_BUFFSIZE " +
             std::to_string(p.nccl_buffsize) +
             " + LL128 + LL buffers, in 2 MiB): a rule from NCCL's source, not measured by "
             "memest (--nccl-channels, --nccl-buffsize)",
         "", ""});
  }
}

// One GPU: the backend's part. Many: the backend's part on every pipeline stage, the
// worst one returned with the table of all (Estimate::ranks).
Result<Estimate> EstimateEveryStage(const BackendPart& part, EstimationContext* ctx) {
  const ParallelPlan& plan = ctx->parallel();
  if (!ctx->options().parallel.enabled()) return part(*ctx);
  std::vector<RankPeak> ranks;
  std::optional<Estimate> worst;
  for (int s = 0; s < plan.stages(); ++s) {
    ctx->set_stage(s);
    MEMEST_ASSIGN_OR_RETURN(Estimate e, part(*ctx));
    RankPeak r;
    r.first_rank = plan.first_rank(s);
    r.last_rank = plan.last_rank(s);
    r.stage = s;
    r.layers = plan.layers_on_stage(s);
    r.in_flight = plan.in_flight(s);
    r.peak_device = e.peak_device;
    r.breakdown = e.breakdown;
    r.peak_phase = e.peak_phase;
    r.peak_node = e.peak_node;
    r.host_bytes = e.host_bytes;
    if (plan.stages() > 1) {
      r.note = s == 0                   ? "first stage: inputs, embedding"
               : s + 1 == plan.stages() ? "last stage: head, loss"
                                        : "";
    }
    ranks.push_back(std::move(r));
    if (!worst || WorseStage(e, *worst)) worst = std::move(e);
  }
  ctx->set_stage(0);
  worst->ranks = std::move(ranks);
  AddParallelDiagnostics(*ctx, &*worst);
  return std::move(*worst);
}

Result<Estimate> RunInContext(const Estimator& backend, const Model& model, const Options& options,
                              const BackendPart& in, std::unique_ptr<EstimationContext>* kept) {
  MEMEST_ASSIGN_OR_RETURN(std::unique_ptr<EstimationContext> ctx,
                          EstimationContext::Make(model, options));
  const BackendPart own = [&backend](const EstimationContext& c) { return backend.EstimateIn(c); };
  MEMEST_ASSIGN_OR_RETURN(Estimate e, EstimateEveryStage(in ? in : own, ctx.get()));
  // A backend's sums of multiples of bounded tensors (core/bind.h) stay below 2^60; beyond it a
  // result could rest on wrapped 64-bit arithmetic, so it is refused, never printed.
  constexpr uint64_t kMaxLevel = uint64_t{1} << 60;
  if (e.peak_allocated >= kMaxLevel || e.peak_reserved >= kMaxLevel || e.peak_device >= kMaxLevel) {
    return Overflow(std::string(backend.name()) +
                    ": the step needs more than 1 EiB at these dims: check the batch and dim "
                    "values");
  }
  AddCommonDiagnostics(*ctx, &e);
  ApplyResidualBand(ctx->stack(), &e);
  if (kept != nullptr) *kept = std::move(ctx);
  return e;
}

// Attention under Options::attention (memory/device.h KernelChoices, ops/attention.h): which
// kernel each attention call runs and why, whenever a kernel was chosen (a fused attention op
// under any option; a chain under sdpa-flash, sdpa-mem-efficient or auto); under a fused option,
// the Softmax nodes shaped like attention that the chain matcher could not classify (costed as
// written), and a graph with no attention at all. Said so that the option is never silently
// without effect, and a kernel choice never silent.
void AddAttentionDiagnostics(const EstimationContext& ctx, Estimate* e) {
  const ops::Fusion& f = ctx.facts().fusion();
  const core::Graph& g = *ctx.bound().graph;
  const std::string option = std::string("--attention ") + ToString(ctx.options().attention);
  const bool fuses = KernelChoices(ctx.options(), ctx.gpu()).attention.FusesChains();
  if (!f.attention_calls().empty()) {
    // Group by (kernel, reason), in order of first appearance.
    struct Group {
      std::string what;
      std::vector<size_t> nodes;
    };
    std::vector<Group> groups;
    for (const ops::AttentionCall& c : f.attention_calls()) {
      std::string what = std::string(ops::ToString(c.kernel)) + " (" + c.reason +
                         (c.as_written ? "; the chain costed as written" : "") + ")";
      auto it = std::find_if(groups.begin(), groups.end(),
                             [&](const Group& gr) { return gr.what == what; });
      if (it == groups.end()) it = groups.insert(groups.end(), Group{what, {}});
      it->nodes.push_back(c.node);
    }
    std::string text = option + " on sm " + std::to_string(ctx.gpu().sm_major) + "." +
                       std::to_string(ctx.gpu().sm_minor) + ": " +
                       std::to_string(f.attention_calls().size()) + " attention call(s)";
    for (const Group& gr : groups) {
      text += "; " + std::to_string(gr.nodes.size()) + " " + gr.what + ": ";
      const size_t shown = std::min<size_t>(gr.nodes.size(), 3);
      for (size_t i = 0; i < shown; ++i)
        text += (i ? ", '" : "'") + g.nodes[gr.nodes[i]].name + "'";
      if (shown < gr.nodes.size()) text += ", ...";
    }
    const core::Node& first = g.nodes[groups.front().nodes.front()];
    e->diagnostics.push_back(
        {Severity::kInfo, "attention_kernel", text, first.name, first.op_type});
  }
  if (!fuses) return;
  if (!f.unmatched_attention().empty()) {
    std::string names;
    const size_t shown = std::min<size_t>(f.unmatched_attention().size(), 5);
    for (size_t i = 0; i < shown; ++i) {
      names += (i ? ", '" : "'") + g.nodes[f.unmatched_attention()[i]].name + "'";
    }
    if (shown < f.unmatched_attention().size()) names += ", ...";
    e->diagnostics.push_back(
        {Severity::kWarning, "attention_unclassified",
         std::to_string(f.unmatched_attention().size()) +
             " Softmax node(s) shaped like attention do not match the chain memest fuses "
             "(MatMul [scale] [mask] [+bias] Softmax [Dropout] MatMul): costed as written "
             "(eager) under " +
             option + ": " + names,
         g.nodes[f.unmatched_attention().front()].name, "Softmax"});
  }
  if (f.attention_calls().empty() && f.unmatched_attention().empty()) {
    e->diagnostics.push_back({Severity::kWarning, "attention_not_found",
                              option + " has no effect: the graph has no attention chain "
                                       "(MatMul, Softmax, MatMul) and no fused attention op",
                              "", ""});
  }
}

}  // namespace

namespace {

// Per value id, the bytes a value is stored in when not as its dtype says: a quantized parameter
// (memory/weight_storage.h) or a KV cache tensor (memory/kv_cache.h).
std::vector<std::optional<uint64_t>> StoredBytes(const WeightStorage& weights, const KvCache& kv,
                                                 size_t values) {
  std::vector<std::optional<uint64_t>> stored(values);
  for (size_t i = 0; i < values && i < weights.stored_bytes().size(); ++i) {
    if (weights.stored_bytes()[i] > 0) stored[i] = weights.stored_bytes()[i];
  }
  for (size_t i = 0; i < values && i < kv.stored_bytes().size(); ++i) {
    if (kv.stored_bytes()[i]) stored[i] = kv.stored_bytes()[i];
  }
  return stored;
}

}  // namespace

EstimationContext::EstimationContext(const Model& model, const Options& options, GpuProfile gpu,
                                     StackProfile stack, TrainableSet trainable,
                                     std::shared_ptr<const core::BoundGraph> bound,
                                     WeightStorage weights, KvCache kv_cache, ParallelPlan plan,
                                     std::vector<core::CheckpointSegment> checkpoint)
    : model_(model),
      options_(options),
      gpu_(std::move(gpu)),
      stack_(std::move(stack)),
      trainable_(std::move(trainable)),
      bound_(std::move(bound)),
      weights_(std::move(weights)),
      kv_cache_(std::move(kv_cache)),
      plan_(std::move(plan)),
      checkpoint_(std::move(checkpoint)),
      facts_(ops::ValueFacts::Shared(
          *bound_, ops::ValueFactsInputs{
                       options.precision, KernelChoices(options, gpu_), trainable_.trainable,
                       StoredBytes(weights_, kv_cache_, bound_->graph->values.size()),
                       plan_.shard_divisor()})) {}

Result<std::unique_ptr<EstimationContext>> EstimationContext::Make(const Model& model,
                                                                   const Options& options) {
  MEMEST_ASSIGN_OR_RETURN(GpuProfile gpu, ResolveGpuProfile(options));
  StackProfile stack;
  if (options.custom_stack) {
    stack = *options.custom_stack;
  } else {
    MEMEST_ASSIGN_OR_RETURN(stack, ResolveStack(options.stack));
  }
  MEMEST_ASSIGN_OR_RETURN(TrainableSet trainable, SelectTrainable(model.graph(), options));
  MEMEST_ASSIGN_OR_RETURN(std::shared_ptr<const core::BoundGraph> bound,
                          model.bind_cache().Get(model.graph(), options));
  MEMEST_ASSIGN_OR_RETURN(WeightStorage weights, WeightStorage::Make(*bound, trainable, options));
  MEMEST_ASSIGN_OR_RETURN(KvCache kv_cache, KvCache::Make(*bound, options));
  MEMEST_ASSIGN_OR_RETURN(ParallelPlan plan, ParallelPlan::Make(*bound, options));
  MEMEST_ASSIGN_OR_RETURN(std::vector<core::CheckpointSegment> checkpoint,
                          core::CheckpointSegmentsFor(model.graph(), options));
  auto ctx = std::unique_ptr<EstimationContext>(new EstimationContext(
      model, options, std::move(gpu), std::move(stack), std::move(trainable), std::move(bound),
      std::move(weights), std::move(kv_cache), std::move(plan), std::move(checkpoint)));
  // A kernel --attention forces that cannot run a call: PyTorch raises "No available kernel"
  // (sdp_utils.cpp select_sdp_backend), so there is no number to give (ops/attention.h). Not
  // under a paged KV cache: that is vLLM's forward (memest/serving.h), whose own flash kernel
  // applies the causal mask itself, not PyTorch's dispatcher.
  for (const ops::AttentionCall& c : ctx->facts().fusion().attention_calls()) {
    if (options.paged_kv_cache) break;
    if (c.refusal.empty()) continue;
    const core::Node& n = model.graph().nodes[c.node];
    return InvalidArgument("--attention " + std::string(ToString(options.attention)) +
                           " cannot run node '" + n.name + "' (" + n.op_type + "): " + c.refusal +
                           "; PyTorch would raise \"No available kernel\" (use --attention auto)");
  }
  if (options.prefill) MEMEST_RETURN_IF_ERROR(ctx->MakePrefill());
  return ctx;
}

Status EstimationContext::MakePrefill() {
  const DecodePrefill& p = *options_.prefill;
  if (!kv_cache_.releases_any() || kv_cache_.paged()) {
    return InvalidArgument(
        "a prefill before the step needs a decode step: past_key_values.<i>.key/value inputs "
        "that the step releases (not a paged cache)");
  }
  MEMEST_ASSIGN_OR_RETURN(const Options o, PrefillOptions(options_));
  MEMEST_ASSIGN_OR_RETURN(std::unique_ptr<EstimationContext> ctx, Make(*p.model, o));
  // Every past input of the step is a present output of the prefill.
  const core::Graph& step = model_.graph();
  const core::Graph& prefill = p.model->graph();
  std::vector<std::string> filled;  // the past input each present output fills, sorted
  for (int out : prefill.outputs) {
    if (out < 0) continue;
    if (std::string past = PastNameOf(prefill.value(out).name); !past.empty()) {
      filled.push_back(std::move(past));
    }
  }
  std::sort(filled.begin(), filled.end());
  for (int id : kv_cache_.values()) {
    if (!kv_cache_.released_at_last_use(id)) continue;
    const std::string& name = step.value(id).name;
    if (!std::binary_search(filled.begin(), filled.end(), name)) {
      return InvalidArgument("the prefill graph has no output present." +
                             name.substr(std::string_view("past_key_values.").size()) +
                             " to fill the step's input '" + name + "'");
    }
  }
  prefill_ = std::move(ctx);
  return Status::Ok();
}

Result<Options> PrefillOptions(const Options& step) {
  if (!step.prefill) return InvalidArgument("the step has no prefill before it");
  const DecodePrefill& p = *step.prefill;
  const auto past = step.dims.find(p.past_dim);
  if (past == step.dims.end()) {
    return InvalidArgument("the prefill fills the step's past: bind the dim '" + p.past_dim +
                           "' (--dim " + p.past_dim + "=N)");
  }
  Options o = step;
  o.prefill.reset();
  o.dims.erase(p.past_dim);
  o.dims[p.seq_dim] = past->second;
  return o;
}

// Recurrent layers in a training step: the LSTM/GRU rules (ops/rules.cc, SaveRecurrent; the
// stack's rnn_workspace, memory/device.h) are measured on one software stack and one GPU, and
// scored on 91 generated RNNs there; the warning gives those figures, and says when the stack in
// use has no measured workspace (the estimate then leaves it out).
void AddRecurrentDiagnostics(const EstimationContext& ctx, Estimate* e) {
  if (ctx.options().mode != Mode::kTrain) return;
  const core::Graph& g = *ctx.bound().graph;
  const auto recurrent = std::count_if(g.nodes.begin(), g.nodes.end(), [](const core::Node& n) {
    return n.op_type == "LSTM" || n.op_type == "GRU" || n.op_type == "RNN";
  });
  if (recurrent == 0) return;
  std::string message =
      std::to_string(recurrent) +
      " LSTM/GRU/RNN node(s) in a training step: cuDNN's reserve and workspace for them are "
      "measured on one stack (h200-pytorch2.11-lazy: an H200, PyTorch 2.11, cuDNN 9.19; "
      "docs/memory-model.md section 2.6). Under it, the device peak of 91 generated RNNs measured "
      "0.50 to 1.80 times the symbolic estimate (median 0.99; under on 44 of them; "
      "datasets/measured/gpu-h200.jsonl).";
  if (ctx.stack().rnn_workspace.value <= 0) {
    message += " The stack in use (" + ctx.stack().name +
               ") has no measured recurrent-layer workspace, so the estimate leaves it out (up to "
               "9 times a layer's output on the H200).";
  }
  message += " Keep a margin (--safety-margin) or measure (memest-measure)";
  e->diagnostics.push_back({Severity::kWarning, "recurrent_layers", message, "", ""});
}

// Trainable parameters that backward does not reach from a loss on the first output get no
// gradient and no optimizer state (ops/value_facts.h gets_gradient, memory-model.md §4.2): right
// for a loop whose loss reads that output alone, low by their gradients and state for one whose
// loss reads the others too. Said, with the first such parameter's name.
void AddParametersWithoutGradient(const EstimationContext& ctx, Estimate* e) {
  const std::vector<int>& without = ctx.facts().ParametersWithoutGradient();
  if (without.empty()) return;
  const core::BoundGraph& b = ctx.bound();
  uint64_t elements = 0;
  for (int id : without) elements += b.Numel(id).value_or(0);
  const core::Graph& g = *b.graph;
  const std::string first_output =
      g.outputs.empty() ? "" : std::string(g.value(g.outputs.front()).name);
  const Parallelism& p = ctx.options().parallel;
  const bool ddp = p.sharding == Sharding::kNone && p.DataParallel() > 1;
  e->diagnostics.push_back(
      {Severity::kWarning, "parameters_without_gradient",
       std::to_string(without.size()) + " trainable parameter tensor(s) (" +
           std::to_string(elements) + " elements, e.g. '" + std::string(g.value(without[0]).name) +
           "') do not reach the first graph output ('" + first_output +
           "'), where the training loss is taken: backward gives them no gradient, so torch.optim "
           "makes no state for them, and the estimate counts neither" +
           (ddp ? " (DDP's gradient buckets still hold room for them; PyTorch's DDP raises at the "
                  "next iteration unless find_unused_parameters=True)"
                : "") +
           ". If the training loss reads other outputs too (an auxiliary head), their gradients "
           "and state are missing from it",
       "", ""});
}

void AddCommonDiagnostics(const EstimationContext& ctx, Estimate* e) {
  const core::BoundGraph& b = ctx.bound();
  const core::Graph& g = *b.graph;
  e->diagnostics.insert(e->diagnostics.end(), b.diagnostics.begin(), b.diagnostics.end());
  std::map<std::string, int> unknown_ops;  // "domain::Op" -> nodes
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const core::Node& n = g.nodes[k];
    if (!ctx.facts().rule(k)) ++unknown_ops[(n.domain.empty() ? "" : n.domain + "::") + n.op_type];
  }
  for (const auto& [op, count] : unknown_ops) {
    e->diagnostics.push_back({Severity::kWarning, "unknown_op",
                              "no memory rule for op " + op + " (" + std::to_string(count) +
                                  " node(s)): every input and output is counted as saved",
                              "", op});
  }
  for (const core::Node& n : g.nodes) {
    if (n.subgraph_nodes > 0) {
      e->diagnostics.push_back({Severity::kWarning, "control_flow",
                                "subgraph of " + std::to_string(n.subgraph_nodes) +
                                    " node(s) is counted through its outputs only",
                                n.name, n.op_type});
    }
  }
  if (!ctx.facts().fusion().chains().empty()) {
    std::map<std::string, int> kinds;
    for (const ops::FusedChain& c : ctx.facts().fusion().chains()) ++kinds[ops::ToString(c.kind)];
    std::string list;
    for (const auto& [kind, count] : kinds) {
      list += (list.empty() ? "" : ", ") + std::to_string(count) + " " + kind;
    }
    e->diagnostics.push_back({Severity::kInfo, "fused_kernels",
                              "exported op chains costed as PyTorch's fused kernels: " + list, "",
                              ""});
  }
  AddAttentionDiagnostics(ctx, e);
  AddRecurrentDiagnostics(ctx, e);
  const TrainableSet& t = ctx.trainable();
  const Options& o = ctx.options();
  if (o.mode == Mode::kTrain && (!o.trainable.empty() || !o.freeze.empty())) {
    const std::string what = std::to_string(t.trained) + " of " + std::to_string(t.parameters) +
                             " parameter tensors train (" + std::to_string(t.trained_elements) +
                             " of " + std::to_string(t.parameter_elements) + " elements)";
    if (t.trained == 0) {
      e->diagnostics.push_back({Severity::kWarning, "nothing_trains",
                                "--trainable/--freeze leave no parameter to train: " + what, "",
                                ""});
    } else {
      e->diagnostics.push_back({Severity::kInfo, "trainable", what, "", ""});
    }
  }
  // ZeRO's and FSDP's flat shards hold every parameter that requires grad (memory/parallel.h).
  if (o.mode == Mode::kTrain && !StepsAFlatShard(o)) AddParametersWithoutGradient(ctx, e);
  const WeightStorage& w = ctx.weights();
  if (w.tensors() > 0) {
    e->diagnostics.push_back({Severity::kInfo, "weight_storage",
                              std::to_string(w.tensors()) + " parameter tensor(s) (" +
                                  std::to_string(w.elements()) + " elements) stored as " +
                                  ToString(o.weight_dtype) + ": " +
                                  std::to_string(w.bytes_after()) + " bytes instead of " +
                                  std::to_string(w.bytes_before()),
                              "", ""});
  }
  if (o.mode == Mode::kInfer && ctx.kv_cache().reads_past() && !ctx.kv_cache().paged()) {
    if (const EstimationContext* prefill = ctx.prefill()) {
      const DecodePrefill& p = *o.prefill;
      e->diagnostics.push_back(
          {Severity::kInfo, "decode_after_prefill",
           "the decode step runs after the prefill of its past (" + p.seq_dim + " " +
               std::to_string(prefill->options().dims.at(p.seq_dim)) +
               ") on the same caching allocator, " +
               (p.cache_emptied ? "with the cache emptied between them" : "nothing released") +
               (std::any_of(e->diagnostics.begin(), e->diagnostics.end(),
                            [](const Diagnostic& d) { return d.code == "prefill_out_of_memory"; })
                    ? "; the peaks are the prefill's, which runs out of memory"
                    : "; its peaks are the step's (reset after the prefill)"),
           "", ""});
    } else {
      e->diagnostics.push_back(
          {Severity::kWarning, "decode_after_prefill",
           "a decode step is estimated alone, on an allocator that has run nothing before it; "
           "run after a prefill of the past in the same process, the step's device memory "
           "measured up to 1.34 times such an estimate (gpt2-medium, 64 x 1,000 cached tokens; "
           "datasets/h100-lm-torch211 calls 11, 18, 21): the prefill's segments stay partly "
           "used by the cache. The symbolic backend simulates the prefill first "
           "(Options::prefill; memest --hf-config --backend symbolic does by default); else keep a "
           "margin (--safety-margin)",
           "", ""});
    }
  }
  const StackProfile& stack = ctx.stack();
  if (!stack.HoldsOn(ctx.gpu().name)) {
    e->diagnostics.push_back({Severity::kWarning, "stack_gpu_mismatch",
                              "stack '" + stack.name + "' was calibrated on " + stack.gpu +
                                  ", not on " + ctx.gpu().name +
                                  ": its fixed costs and band may not hold here",
                              "", ""});
  }
  if (ctx.gpu().is_mig()) {
    e->diagnostics.push_back(
        {Severity::kInfo, "mig_slice",
         "MIG " + ctx.gpu().mig_profile + " of " + ctx.gpu().mig_parent + ": the capacity is the " +
             "slice's memory as nvidia-smi reports it; the process still creates its own CUDA " +
             "context and library memory inside the slice",
         "", ""});
  }
  if (!ctx.facts().fallback_ops().empty()) {
    std::string ops;
    for (const auto& op : ctx.facts().fallback_ops()) ops += (ops.empty() ? "" : ", ") + op;
    e->diagnostics.push_back({Severity::kWarning, "size_fallback",
                              "tensors of unknown size (from " + ops +
                                  ") were sized like the largest tensor their node touches",
                              "", ""});
  }
}

namespace {

// `run` with every exception an error named after the backend.
template <typename Run>
Result<Estimate> Guarded(const Estimator& backend, const Run& run) {
  try {
    return run();
  } catch (const std::bad_alloc&) {
    return Internal(std::string(backend.name()) + ": out of memory");
  } catch (const std::exception& e) {
    return Internal(std::string(backend.name()) + ": unexpected error: " + e.what());
  }
}

}  // namespace

Result<Estimate> RunEstimate(const Estimator& backend, const Model& model, const Options& options,
                             const BackendPart& in, std::unique_ptr<EstimationContext>* kept) {
  MEMEST_RETURN_IF_ERROR(Validate(options));
  const std::string unmodelled = FirstUnmodelledOption(options, backend.supports());
  if (!unmodelled.empty()) {
    return InvalidArgument(
        "the " + std::string(backend.name()) + " backend does not model option " + unmodelled +
        "; leave it at its default or use a backend that does (--list-backends)");
  }
  return Guarded(backend, [&] { return RunInContext(backend, model, options, in, kept); });
}

Result<Estimate> RunAgainIn(const Estimator& backend, const BackendPart& part,
                            EstimationContext* ctx) {
  return Guarded(backend, [&] { return EstimateEveryStage(part, ctx); });
}

}  // namespace memory

Result<Estimate> Estimator::Run(const Model& model, const Options& options) const {
  return memory::RunEstimate(*this, model, options, nullptr);
}

}  // namespace memest
