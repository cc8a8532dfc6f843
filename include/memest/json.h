// memest/json.h -- memest's options and estimates as JSON text, for programs that talk to memest
// through a C API, a Python module or a pipe (include/memest/memest_c.h).
//
// The vocabulary is the CLI's (docs/json-schema.md): the same keys and enum spellings as the
// "options" object and each element of "results" of a memest.estimate/1 document.
#ifndef MEMEST_JSON_H_
#define MEMEST_JSON_H_

#include <string>
#include <string_view>

#include "memest/estimate.h"
#include "memest/estimator.h"
#include "memest/options.h"
#include "memest/status.h"

namespace memest {

// Options from a JSON object whose keys are those of docs/json-schema.md `options` (mode, batch,
// dims, optimizer, optimizer_impl, weight_decay, micro_batches, checkpoint_segments,
// checkpoint_blocks, precision, loss, gpu, stack, attention, trainable, freeze, weight_dtype,
// fused_kernels, inplace_relu, library_workspaces, allow_unknown_shapes, fit {on, margin_fraction, margin_bytes},
// allocator {expandable_segments, max_split_size, roundup_power2_divisions, memory_fraction},
// parallel {world_size, dp, tp, pp, sharding, sequence_parallel, fsdp_unit, offload_optimizer,
// offload_params, bucket_cap_mb, gradient_as_bucket_view, nccl_buffsize, nccl_channels,
// gpus_per_node}), and for a GPU given at run time "gpu_profile" (one profile object in the
// format of docs/gpu-profiles.md) and
// "capacity" (bytes replacing the profile's memory; Options::custom_gpu); every key optional
// (absent: the default of memest/options.h). "" or "{}" is the default Options. InvalidArgument
// naming the key for an unknown key (never silently ignored), a value of the wrong type, or an
// unknown enum value; the result is then also checked by Validate().
[[nodiscard]] Result<Options> OptionsFromJson(std::string_view json);

// `options` as such an object (every key, defaults included; "parallel" only for a world size
// above 1; a custom_gpu as its name and "capacity"). OptionsFromJson(OptionsToJson(o)) gives back
// o, custom_stack aside and a custom_gpu reduced to a built-in profile with that capacity.
std::string OptionsToJson(const Options& options);

// One estimate as a JSON object: backend, peak {allocated, reserved, device}, breakdown,
// peak_phase, peak_node, interval, ranks and host_bytes (many GPUs only), phases (where the
// backend accounts the step's phases apart), diagnostics, and with
// `fit` its fit {fits, capacity, headroom, judged, on, margin} -- the keys of a memest.estimate/1
// result (docs/json-schema.md) without its max_batch.
std::string EstimateToJson(const Estimate& estimate, const Fit* fit = nullptr);

}  // namespace memest

#endif  // MEMEST_JSON_H_
