// memory/device.h -- device level: what a process holds besides the caching allocator's
// reserve, the cuDNN convolution and recurrent-layer workspaces, and the interval; stated once
// for every backend.
//
//   peak_device = CUDA context + library memory (outside the allocator; the stack's values)
//               + peak reserved (the backend's; it includes the workspaces below)
//
// Policy (docs/memory-model.md §2, docs/stacks.md):
//  * The CUDA context and the library memory come from the stack profile (memest/stack.h), never
//    from the GPU profile: they depend on the software (lazy module loading, cuDNN/cuBLAS
//    versions), not on the GPU alone.
//  * A cuDNN convolution call (forward; in backward, the data and the weight gradients, one call
//    at a time) allocates its plan's workspace through the caching allocator and frees it when
//    the call returns (aten/src/ATen/native/cudnn/Conv_v8.cpp, run_conv_plan). The rule, stated
//    here once for every backend (ConvWorkspaceRule):
//      workspace = coefficient(kind) x (input + output + weight bytes of the call)
//    with kind = pointwise (every kernel dimension 1) or depthwise (one input channel per group):
//    the stack's conv_workspace_pointwise; otherwise spatial (grouped convolutions included): the
//    stack's conv_workspace. Measured on an H200 with cuDNN 9.19, benchmark off
//    (datasets/h200-torch211, kind=conv; tests/unit/conv_workspace_test.cc): spatial 1, pointwise
//    and depthwise 0 -- the workspace of converting input, output and weight to the layout the
//    chosen kernel reads (memory-model.md §2.5). A spatial convolution's weight-gradient call
//    takes the stack's conv_weight_gradient_extra more (measured: 8.1 MB at the median, 0 to
//    22.8 MB by layer whatever the batch), so it never fits the block its forward call freed; the
//    forward and data-gradient calls take the rule's size. A ConvTranspose's weight gradient is
//    the same cuDNN call (ConvShared.cpp, cudnn_convolution_transpose_backward_weight) and takes
//    the extra too; its data gradient is a forward convolution. benchmark=True probing (a
//    first-call spike) is not modelled. An uncalibrated stack has 0.
//  * A cuDNN recurrent layer (ONNX LSTM, GRU, RNN) likewise: its forward call and its backward
//    each allocate a workspace through the caching allocator and free it when the call returns
//    (aten/src/ATen/native/cudnn/RNN.cpp, _cudnn_rnn and _cudnn_rnn_backward; cuDNN gives the
//    size, cudnnGetRNNTempSpaceSizes). The rule (RecurrentWorkspaceRule):
//      workspace = rnn_workspace x output bytes x max(hidden, 256) / hidden
//    the output being Y, [steps, directions, batch, hidden] in the layer's run-time precision.
//    Measured on an H200 with cuDNN 9.19 (datasets/h200-torch211/rnn-truth.jsonl;
//    tests/unit/recurrent_rule_test.cc): 9.1, the largest ratio over calls of 64 MiB or more;
//    hidden sizes below 256 took as much as 256. What the layer keeps for its backward (cuDNN's
//    reserve) is a saved tensor of the op rule (ops/rules.cc, SaveRecurrent), not a workspace.
//  * The interval: a backend that has its own (learned) keeps it; otherwise, when the stack has
//    a residual band measured for this backend on held-out rows, device_low/high =
//    peak_device x (1 + band). A band is never borrowed from another backend.
#ifndef MEMEST_MEMORY_DEVICE_H_
#define MEMEST_MEMORY_DEVICE_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "core/graph.h"
#include "memest/estimate.h"
#include "memest/gpu_profile.h"
#include "memest/options.h"
#include "memest/stack.h"
#include "ops/value_facts.h"

namespace memest::memory {

// Sets breakdown.cuda_context and breakdown.library_memory from the stack.
void SetOutsideAllocator(const StackProfile& stack, Breakdown* breakdown);

// The bytes the caching allocator can reserve before a cudaMalloc fails (memory-model.md §1.5):
// the GPU's usable memory less what lives outside the allocator (the stack's CUDA context and
// library memory, `nccl_buffers`) and the fit policy's margin -- "fits" keeps the margin free,
// so the allocator is taken to meet the limit there -- and at most
// options.allocator.memory_fraction of the GPU's total memory less the margin on that limit
// (FitPolicy::MarginBytes of it: the process's share is the GPU it sees). Unlimited (UINT64_MAX)
// when the GPU profile gives no usable memory.
[[nodiscard]] uint64_t AllocatorBudget(const Options& options, const GpuProfile& gpu,
                                       const StackProfile& stack, uint64_t nccl_buffers);

// What a convolution's workspace follows (policy above).
enum class ConvKind { kSpatial, kPointwise, kDepthwise };

// The kind from the weight's dims ([M, C/group, k...] for Conv, [C, M/group, k...] for
// ConvTranspose) and the `group` attribute; spatial when the dims are unknown (the larger
// workspace).
ConvKind ClassifyConv(bool transposed, core::MaybeDims weight_dims, int64_t group);

// Which of a convolution's cuDNN calls: the forward, or in backward the data gradient and then
// the weight gradient (aten/src/ATen/native/cudnn/ConvShared.cpp, cudnn_convolution_backward).
enum class ConvPass { kForward, kDataGradient, kWeightGradient };

// One cuDNN convolution call, as the rule sees it.
struct ConvCall {
  ConvKind kind = ConvKind::kSpatial;
  uint64_t input_bytes = 0;
  uint64_t output_bytes = 0;
  uint64_t weight_bytes = 0;
  ConvPass pass = ConvPass::kForward;
};

// The rule: the workspace one call allocates under `stack` (policy above).
uint64_t ConvWorkspaceRule(const StackProfile& stack, const ConvCall& call);

// One cuDNN recurrent-layer call, as the rule sees it.
struct RecurrentCall {
  uint64_t output_bytes = 0;  // Y at run-time precision
  uint64_t hidden = 0;
};

// The rule: the workspace one recurrent-layer call allocates under `stack` (policy above).
uint64_t RecurrentWorkspaceRule(const StackProfile& stack, const RecurrentCall& call);

// The workspace one cuDNN call of node `node` allocates: a convolution's `pass`
// (ConvWorkspaceRule) or a recurrent layer's (RecurrentWorkspaceRule; one call each way, whatever
// the pass); 0 for any other node, when the stack's coefficient is 0, when a size is unknown, or
// when workspaces are off.
uint64_t CudnnWorkspaceBytes(const StackProfile& stack, const ops::ValueFacts& facts,
                             const core::Node& node, size_t index, bool library_workspaces,
                             ConvPass pass = ConvPass::kForward);

// Which exported chains run as fused kernels under these options on this GPU (memest/options.h:
// fused_kernels, Attention; ops/fusion.h), and the attention policy every attention call's kernel
// is chosen by (ops/attention.h).
ops::FusionChoices KernelChoices(const Options& options, const GpuProfile& gpu);

// device_low/high from the stack's band for estimate->backend, when the estimate has no interval
// of its own.
void ApplyResidualBand(const StackProfile& stack, Estimate* estimate);

}  // namespace memest::memory

#endif  // MEMEST_MEMORY_DEVICE_H_
