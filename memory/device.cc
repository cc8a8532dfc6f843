// memory/device.cc -- see memory/device.h for the policy.
#include "memory/device.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/checked.h"
#include "ops/rules.h"

namespace memest::memory {
namespace {

uint64_t Scale(uint64_t bytes, double factor) {
  const double v = std::ceil(static_cast<double>(bytes) * factor);
  if (!(v > 0)) return 0;
  if (v >= static_cast<double>(std::numeric_limits<uint64_t>::max())) {
    return std::numeric_limits<uint64_t>::max();
  }
  return static_cast<uint64_t>(v);
}

}  // namespace

void SetOutsideAllocator(const StackProfile& stack, Breakdown* bd) {
  bd->cuda_context = stack.cuda_context.bytes;
  bd->library_memory = stack.library_memory.bytes;
}

uint64_t AllocatorBudget(const Options& options, const GpuProfile& gpu, const StackProfile& stack,
                         uint64_t nccl_buffers) {
  const uint64_t usable = gpu.usable_memory.bytes;
  if (usable == 0) return std::numeric_limits<uint64_t>::max();
  Breakdown outside;
  SetOutsideAllocator(stack, &outside);
  outside.nccl_buffers = nccl_buffers;
  const uint64_t taken = base::SatAdd(outside.Total(), options.fit.MarginBytes(usable));
  const uint64_t budget = usable > taken ? usable - taken : 0;
  const std::optional<uint64_t> limit = options.allocator.ReservedLimit(gpu.total_memory.bytes);
  if (!limit) return budget;
  const uint64_t margin = options.fit.MarginBytes(*limit);  // kept free within the limit too
  return std::min(budget, *limit > margin ? *limit - margin : 0);
}

ConvKind ClassifyConv(bool transposed, core::MaybeDims w, int64_t group) {
  if (!w || w->size() < 3) return ConvKind::kSpatial;
  if (std::all_of(w->begin() + 2, w->end(), [](int64_t k) { return k == 1; })) {
    return ConvKind::kPointwise;
  }
  // One input channel per group: C/group == 1 (Conv), C == group (ConvTranspose).
  const bool one_channel_per_group = transposed ? (*w)[0] == group : (*w)[1] == 1;
  return group > 1 && one_channel_per_group ? ConvKind::kDepthwise : ConvKind::kSpatial;
}

uint64_t ConvWorkspaceRule(const StackProfile& stack, const ConvCall& call) {
  const StackCoefficient& c =
      call.kind == ConvKind::kSpatial ? stack.conv_workspace : stack.conv_workspace_pointwise;
  if (c.value <= 0) return 0;
  const uint64_t bytes =
      base::SatAdd(base::SatAdd(call.input_bytes, call.output_bytes), call.weight_bytes);
  const uint64_t ws = Scale(bytes, c.value);
  const bool weight_gradient =
      call.kind == ConvKind::kSpatial && call.pass == ConvPass::kWeightGradient;
  return weight_gradient && ws > 0 ? base::SatAdd(ws, stack.conv_weight_gradient_extra.bytes) : ws;
}

uint64_t RecurrentWorkspaceRule(const StackProfile& stack, const RecurrentCall& call) {
  const double c = stack.rnn_workspace.value;
  if (c <= 0 || call.hidden == 0) return 0;
  constexpr uint64_t kSmallestHidden = 256;  // smaller hidden sizes took as much (policy)
  const double widen = static_cast<double>(std::max(call.hidden, kSmallestHidden)) /
                       static_cast<double>(call.hidden);
  return Scale(call.output_bytes, c * widen);
}

namespace {

uint64_t RecurrentWorkspaceBytes(const StackProfile& stack, const ops::ValueFacts& facts,
                                 const core::Node& node) {
  if (node.inputs.size() < 2 || node.outputs.empty()) return 0;
  const auto dims =
      ops::RecurrentDimsOf(node, facts.dims(node.inputs[0]), facts.dims(node.inputs[1]));
  if (!dims) return 0;
  return RecurrentWorkspaceRule(stack, {facts.bytes(node.outputs[0]), dims->hidden});
}

uint64_t ConvWorkspaceBytes(const StackProfile& stack, const ops::ValueFacts& facts,
                            const core::Node& node, ConvPass pass) {
  const int x = node.inputs.empty() ? -1 : node.inputs[0];
  const int w = node.inputs.size() < 2 ? -1 : node.inputs[1];
  const int y = node.outputs.empty() ? -1 : node.outputs[0];
  ConvCall call;
  call.pass = pass;
  const bool transposed = node.op_type == "ConvTranspose";
  const core::MaybeDims weight = facts.dims(w);
  // The group count decides only a kernel that may hold one input channel per group (ClassifyConv):
  // read then, not for every conv of every estimate (an attribute lookup in the node's proto).
  const bool group_decides = weight && weight->size() >= 3 && (transposed || (*weight)[1] == 1);
  call.kind = ClassifyConv(transposed, weight, group_decides ? ops::IntAttr(node, "group", 1) : 1);
  call.input_bytes = facts.bytes(x);
  call.output_bytes = facts.bytes(y);
  // Under autocast the call reads the weight's low-precision copy (memory-model.md §5.1).
  const uint64_t cast = w >= 0 ? facts.amp_cast_bytes(w) : 0;
  call.weight_bytes = cast > 0 ? cast : facts.bytes(w);
  return ConvWorkspaceRule(stack, call);
}

}  // namespace

uint64_t CudnnWorkspaceBytes(const StackProfile& stack, const ops::ValueFacts& facts,
                             const core::Node& node, size_t index, bool library_workspaces,
                             ConvPass pass) {
  const ops::OpRule* rule = facts.rule(index);
  if (!library_workspaces || rule == nullptr) return 0;
  if (rule->uses_cudnn_conv) return ConvWorkspaceBytes(stack, facts, node, pass);
  if (rule->uses_cudnn_rnn) return RecurrentWorkspaceBytes(stack, facts, node);
  return 0;
}

ops::FusionChoices KernelChoices(const Options& o, const GpuProfile& gpu) {
  ops::FusionChoices c;
  c.fused_kernels = o.fused_kernels;
  c.inplace_relu = o.inplace_relu;
  c.attention.requested = o.attention;
  c.attention.sm_major = gpu.sm_major;
  c.attention.sm_minor = gpu.sm_minor;
  c.attention.half = o.precision != Precision::kFp32;
  c.attention.bf16 = o.precision == Precision::kAmpBf16 || o.precision == Precision::kBf16;
  c.attention.training = o.mode == Mode::kTrain;
  return c;
}

void ApplyResidualBand(const StackProfile& stack, Estimate* e) {
  const ResidualBand* band = stack.band(e->backend);
  if (e->device_low || e->device_high || band == nullptr) return;
  e->device_low = Scale(e->peak_device, 1.0 + band->low);
  e->device_high = std::max(e->peak_device, Scale(e->peak_device, 1.0 + band->high));
}

}  // namespace memest::memory
