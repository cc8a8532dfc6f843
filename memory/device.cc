// memory/device.cc -- see memory/device.h for the policy.
#include "memory/device.h"

#include <algorithm>
#include <cmath>
#include <limits>

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

uint64_t ConvWorkspaceBytes(const StackProfile& stack, const ops::ValueFacts& facts,
                            const core::Node& node, size_t index, bool library_workspaces) {
  const ops::OpRule* rule = facts.rule(index);
  if (!library_workspaces || rule == nullptr || !rule->uses_cudnn_conv ||
      stack.conv_workspace.value <= 0) {
    return 0;
  }
  uint64_t largest = 0;
  if (!node.inputs.empty()) largest = facts.bytes(node.inputs[0]);
  if (!node.outputs.empty()) largest = std::max(largest, facts.bytes(node.outputs[0]));
  return Scale(largest, stack.conv_workspace.value);
}

ops::FusionChoices KernelChoices(const Options& o, const GpuProfile& gpu) {
  ops::FusionChoices c;
  c.fused_kernels = o.fused_kernels;
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
