// memory/device.h -- device level: what a process holds besides the caching allocator's
// reserve, the cuDNN convolution workspaces, and the interval; stated once for every backend.
//
//   peak_device = CUDA context + library memory (outside the allocator; the stack's values)
//               + peak reserved (the backend's; it includes the workspaces below)
//
// Policy (docs/memory-model.md §2, docs/stacks.md):
//  * The CUDA context and the library memory come from the stack profile (memest/stack.h), never
//    from the GPU profile: they depend on the software (lazy module loading, cuDNN/cuBLAS
//    versions), not on the GPU alone.
//  * A cuDNN convolution call (forward; in backward, the data and the weight gradients, one call
//    at a time) allocates its algorithm's workspace through the caching allocator and frees it
//    when the call returns (aten/src/ATen/native/cudnn/Conv_v8.cpp, run_conv_plan). Its size is
//    the stack's coefficient times the larger of the call's input and output activation bytes:
//    the shape the workspaces of implicit-GEMM and FFT algorithms grow with. The coefficient is
//    fitted per stack from device-level measurements (memest calibrate); 0 in an uncalibrated
//    stack.
//  * The interval: a backend that has its own (learned) keeps it; otherwise, when the stack has
//    a residual band measured for this backend on held-out rows, device_low/high =
//    peak_device x (1 + band). A band is never borrowed from another backend.
#ifndef MEMEST_MEMORY_DEVICE_H_
#define MEMEST_MEMORY_DEVICE_H_

#include <cstdint>

#include "core/graph.h"
#include "memest/estimate.h"
#include "memest/gpu_profile.h"
#include "memest/options.h"
#include "memest/stack.h"
#include "ops/value_facts.h"

namespace memest::memory {

// Sets breakdown.cuda_context and breakdown.library_memory from the stack.
void SetOutsideAllocator(const StackProfile& stack, Breakdown* breakdown);

// The workspace one cuDNN call of convolution node `node` allocates (0 when the node is not a
// convolution, the stack has no coefficient, or workspaces are off).
uint64_t ConvWorkspaceBytes(const StackProfile& stack, const ops::ValueFacts& facts,
                            const core::Node& node, size_t index, bool library_workspaces);

// Which exported chains run as fused kernels under these options on this GPU (memest/options.h:
// fused_kernels, Attention; ops/fusion.h), and the attention policy every attention call's kernel
// is chosen by (ops/attention.h).
ops::FusionChoices KernelChoices(const Options& options, const GpuProfile& gpu);

// device_low/high from the stack's band for estimate->backend, when the estimate has no interval
// of its own.
void ApplyResidualBand(const StackProfile& stack, Estimate* estimate);

}  // namespace memest::memory

#endif  // MEMEST_MEMORY_DEVICE_H_
