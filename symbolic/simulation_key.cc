// symbolic/simulation_key.cc -- SimulationKey (policy in the header).
#include "symbolic/simulation_key.h"

#include <tuple>

#include "memory/device.h"

namespace memest::symbolic {
namespace {

// A field added to one of these structs changes its size: compare it below, then update the size.
static_assert(sizeof(Options) == 608, "Options changed: compare the new field in OptionFields");
static_assert(sizeof(Parallelism) == 128, "Parallelism changed: compare it in ParallelFields");
static_assert(sizeof(AllocatorSettings) == 48, "AllocatorSettings changed: compare it below");
static_assert(sizeof(FitPolicy) == 24, "FitPolicy changed: compare it in OptionFields");

auto ParallelFields(const Parallelism& p) {
  return std::tie(p.world_size, p.dp, p.tp, p.pp, p.sharding, p.sequence_parallel, p.fsdp_unit,
                  p.gpus_per_node, p.offload_optimizer, p.offload_params, p.bucket_cap_mb,
                  p.gradient_as_bucket_view, p.nccl_buffsize, p.nccl_channels,
                  p.zero_sub_group_size);
}

auto OptionFields(const Options& o) {
  return std::tuple_cat(
      std::tie(o.mode, o.batch, o.dims, o.optimizer, o.optimizer_impl, o.weight_decay, o.precision,
               o.loss, o.gpu, o.custom_gpu, o.stack, o.custom_stack, o.fit.on,
               o.fit.margin_fraction, o.fit.margin_bytes, o.allocator.expandable_segments,
               o.allocator.max_split_size, o.allocator.roundup_power2_divisions,
               o.allocator.memory_fraction, o.micro_batches, o.checkpoint_segments,
               o.checkpoint_blocks, o.outputs_held, o.library_workspaces, o.fused_kernels, o.inplace_relu,
               o.attention, o.trainable, o.freeze, o.weight_dtype, o.kv_cache_dtype,
               o.paged_kv_cache, o.prefill, o.allow_unknown_shapes),
      ParallelFields(o.parallel));
}

}  // namespace

SimulationKey SimulationKey::Of(const memory::EstimationContext& ctx) {
  SimulationKey key;
  key.options = ctx.options();
  key.options.gpu.clear();
  key.options.custom_gpu.reset();
  key.options.fit = FitPolicy{};
  key.options.allocator.memory_fraction.reset();
  key.kernels = memory::KernelChoices(ctx.options(), ctx.gpu());
  // The compute capability only picks attention kernels, call by call (ops/fusion.cc): where
  // the graph has no attention call, it changed nothing the facts hold, and GPUs of other
  // generations simulate alike.
  if (ctx.facts().fusion().attention_calls().empty()) {
    key.kernels.attention.sm_major = 0;
    key.kernels.attention.sm_minor = 0;
  }
  key.cublas_workspace = ctx.gpu().cublas_workspace.bytes;
  key.stage = ctx.stage();
  return key;
}

bool SimulationKey::operator==(const SimulationKey& other) const {
  return OptionFields(options) == OptionFields(other.options) && kernels == other.kernels &&
         cublas_workspace == other.cublas_workspace && stage == other.stage &&
         allocator_budget == other.allocator_budget && iterations == other.iterations;
}

}  // namespace memest::symbolic
