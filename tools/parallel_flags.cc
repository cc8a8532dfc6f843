// tools/parallel_flags.cc -- see parallel_flags.h.
#include "tools/parallel_flags.h"

namespace memest::cli {

void AddParallelFlags(CLI::App& app, ParallelFlags& f, const HelpWith& with) {
  const char* group = "Many GPUs (training; the estimate is the worst rank's)";
  app.add_option("--world-size", f.world_size,
                 with("GPUs of the job: dp x tp x pp", {"world_size"}))
      ->type_name("N")
      ->group(group);
  app.add_option("--dp", f.dp, with("data-parallel degree", {"dp / tp / pp"}))
      ->type_name("N")
      ->group(group);
  app.add_option("--tp", f.tp,
                 "tensor-parallel degree: Megatron column/row splits of Linear layers, "
                 "attention heads and vocabulary")
      ->type_name("N")
      ->group(group);
  app.add_option("--pp", f.pp,
                 "pipeline stages, 1F1B over --micro-batches micro-batches; the graph's "
                 "repeated blocks are cut evenly")
      ->type_name("N")
      ->group(group);
  app.add_option("--zero", f.zero,
                 with("DeepSpeed ZeRO stage: 1 optimizer state, 2 + gradients, 3 + parameters "
                      "partitioned over the data-parallel ranks (0: DDP)",
                      {"sharding"}))
      ->type_name("0|1|2|3")
      ->group(group);
  app.add_option("--fsdp", f.fsdp,
                 "PyTorch FSDP2 sharding: full (reshard after forward), grad-op (keep "
                 "parameters unsharded until backward), hybrid (shard within a node), no-shard")
      ->type_name("full|grad-op|hybrid|no-shard")
      ->group(group);
  app.add_option("--fsdp-unit", f.fsdp_unit,
                 "FSDP wrap unit: the text this regular expression matches in a parameter's "
                 "name names its unit (default: the graph's repeated blocks)")
      ->type_name("REGEX")
      ->group(group);
  app.add_flag("--sequence-parallel", f.sequence_parallel,
               with("Megatron sequence parallelism (with --tp)", {"sequence_parallel"}))
      ->group(group);
  app.add_flag("--offload-optimizer", f.offload_optimizer,
               with("optimizer state, master weights and gradient partitions in host memory",
                    {"offload_optimizer / offload_params"}))
      ->group(group);
  app.add_flag("--offload-params", f.offload_params,
               "parameter shards in host memory (--zero 3 or --fsdp)")
      ->group(group);
  app.add_option("--bucket-cap-mb", f.bucket_cap_mb,
                 with("DDP gradient bucket size in MiB", {"bucket_cap_mb"}))
      ->type_name("MB")
      ->group(group);
  app.add_flag("--gradient-as-bucket-view", f.gradient_as_bucket_view,
               "DDP gradients are views into the buckets (no second copy)")
      ->group(group);
  app.add_option("--nccl-buffsize", f.nccl_buffsize,
                 with("NCCL_BUFFSIZE in bytes, per channel and communicator (with "
                      "--nccl-channels)",
                      {"nccl_buffsize x channels"}))
      ->type_name("BYTES")
      ->group(group);
  app.add_option("--nccl-channels", f.nccl_channels, "NCCL channels per communicator")
      ->type_name("N")
      ->group(group);
  app.add_option("--gpus-per-node", f.gpus_per_node,
                 "GPUs per node: the shard group of --fsdp hybrid (default: 8)")
      ->type_name("N")
      ->group(group);
  app.add_flag("--per-rank", f.per_rank,
               "print one row per group of ranks that hold the same memory (pipeline stage)")
      ->group(group);
}

Status ApplyParallelFlags(const ParallelFlags& f, Options* options) {
  Parallelism& p = options->parallel;
  p.world_size = f.world_size;
  p.dp = f.dp;
  p.tp = f.tp;
  p.pp = f.pp;
  if (!f.zero.empty() && !f.fsdp.empty()) {
    return InvalidArgument("--zero and --fsdp are two ways to shard: give one");
  }
  if (!f.zero.empty()) {
    const std::string names[] = {"none", "zero1", "zero2", "zero3"};
    if (f.zero.size() != 1 || f.zero[0] < '0' || f.zero[0] > '3') {
      return InvalidArgument("--zero " + f.zero + ": expected 0, 1, 2 or 3");
    }
    MEMEST_ASSIGN_OR_RETURN(p.sharding, ParseSharding(names[f.zero[0] - '0']));
  }
  if (!f.fsdp.empty()) {
    Result<Sharding> s = ParseSharding("fsdp-" + f.fsdp);
    if (!s.ok()) {
      return InvalidArgument("--fsdp " + f.fsdp + ": expected full, grad-op, hybrid or no-shard");
    }
    p.sharding = *s;
  }
  p.fsdp_unit = f.fsdp_unit;
  p.sequence_parallel = f.sequence_parallel;
  p.offload_optimizer = f.offload_optimizer;
  p.offload_params = f.offload_params;
  p.bucket_cap_mb = f.bucket_cap_mb;
  p.gradient_as_bucket_view = f.gradient_as_bucket_view;
  if (f.nccl_buffsize > 0) p.nccl_buffsize = f.nccl_buffsize;
  if (f.nccl_channels != 0) p.nccl_channels = f.nccl_channels;
  p.gpus_per_node = f.gpus_per_node;
  const bool sharded_flags = !f.zero.empty() || !f.fsdp.empty() || f.tp > 1 || f.pp > 1 ||
                             f.dp > 0 || f.sequence_parallel || f.offload_optimizer ||
                             f.offload_params || f.per_rank;
  if (sharded_flags && f.world_size == 1 && (f.dp > 1 || f.tp > 1 || f.pp > 1)) {
    return InvalidArgument(
        "dp x tp x pp must equal the world size: " + std::to_string(f.dp > 0 ? f.dp : 1) + " x " +
        std::to_string(f.tp) + " x " + std::to_string(f.pp) + " != 1 (give --world-size)");
  }
  if (f.world_size == 1 && sharded_flags) {
    return InvalidArgument(
        "the many-GPU flags (--zero, --fsdp, --tp, --pp, --dp, --sequence-parallel, --offload-*, "
        "--per-rank) need --world-size > 1");
  }
  return Status::Ok();
}

}  // namespace memest::cli
