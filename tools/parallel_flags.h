// tools/parallel_flags.h -- the memest CLI's many-GPU flags (memest::Parallelism, options.h).
#ifndef MEMEST_TOOLS_PARALLEL_FLAGS_H_
#define MEMEST_TOOLS_PARALLEL_FLAGS_H_

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>

#include "memest/options.h"
#include "memest/status.h"

namespace memest::cli {

struct ParallelFlags {
  int64_t world_size = 1;
  int64_t dp = 0;
  int64_t tp = 1;
  int64_t pp = 1;
  std::string zero;  // 0|1|2|3
  std::string fsdp;  // full|grad-op|hybrid|no-shard
  std::string fsdp_unit;
  bool sequence_parallel = false;
  bool offload_optimizer = false;
  bool offload_params = false;
  double bucket_cap_mb = 25.0;
  bool gradient_as_bucket_view = false;
  uint64_t nccl_buffsize = 0;  // 0: the library's default
  int64_t nccl_channels = 0;   // 0: the library's default
  int64_t gpus_per_node = 8;
  bool per_rank = false;
};

// Appends the library's default of the documented options `keys` (memest::DescribeOptions) to a
// help text.
using HelpWith = std::function<std::string(std::string, std::initializer_list<const char*>)>;

// Adds --world-size, --dp, --tp, --pp, --zero, --fsdp, ... and --per-rank to `app`.
void AddParallelFlags(CLI::App& app, ParallelFlags& f, const HelpWith& with);

// Sets options->parallel from the flags. InvalidArgument for --zero and --fsdp together or an
// unknown value; the degrees themselves are checked by memest::Validate.
Status ApplyParallelFlags(const ParallelFlags& f, Options* options);

}  // namespace memest::cli

#endif  // MEMEST_TOOLS_PARALLEL_FLAGS_H_
