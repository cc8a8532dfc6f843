// measurement/torch_ops.h -- ONNX ops as ATen calls, for the measurement executor.
//
// Internal to the two LibTorch translation units of measurement/ (torch_ops.cc, executor.cc):
// it includes ATen. Everything else uses measurement/executor.h, which does not.
//
// Policy: each ONNX op runs as the ATen call PyTorch eager code makes for the module or function
// the exporter turned into that op (Gemm with transB -> at::linear like nn.Linear, Conv ->
// at::convolution, BatchNormalization -> at::batch_norm updating the running statistics in place,
// Dropout -> at::dropout, Gather on a parameter -> at::embedding, Reshape/Transpose/Squeeze/
// Unsqueeze/Split/Slice/Expand -> views, ...), so autograd saves what it saves in eager training.
// Values never matter for memory, only shapes, dtypes and the op chosen: where an ONNX
// attribute changes only the numbers (activation coefficients, gate order of LSTM/GRU weights,
// coordinate modes of Resize), the op runs with PyTorch's layout and the same shapes.
#ifndef MEMEST_MEASUREMENT_TORCH_OPS_H_
#define MEMEST_MEASUREMENT_TORCH_OPS_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "measurement/plan.h"

namespace memest::measurement {

// A node the op table cannot run as written (unsupported attribute value, missing payload).
// Thrown inside torch_ops.cc / executor.cc only; the executor turns it into a Status.
struct OpError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct OpContext {
  const PlanNode& node;
  const std::vector<at::Tensor>& in;       // by input position; undefined when omitted
  bool training = true;                    // train mode: batch statistics, active dropout
  at::ScalarType float_type = at::kFloat;  // what float32 constants and casts become
  at::Device device = at::kCPU;            // the run's device (big generated tensors go there)
  uint32_t needed_outputs = ~0u;           // bit i: output i is read by a node or is a graph output

  bool has(size_t i) const { return i < in.size() && in[i].defined(); }
  bool needs(size_t i) const { return i < 32 && ((needed_outputs >> i) & 1u) != 0; }
};

using OpFn = std::vector<at::Tensor> (*)(const OpContext&);

struct OpDef {
  std::string_view op_type;
  OpFn fn = nullptr;
  // Bit i: input i is read as host data (shape, axes, pads, scalar bounds), never moved to the
  // device and never an autograd input.
  uint32_t host_inputs = 0;
};

// The op for (domain, op_type), or nullptr. Only the default ai.onnx domain is covered.
const OpDef* FindOp(std::string_view domain, std::string_view op_type);
// Every supported op type, sorted.
std::vector<std::string> SupportedOpTypes();

// ONNX TensorProto.DataType -> ATen dtype; throws OpError for types ATen has no match for.
at::ScalarType ToScalarType(int32_t onnx_dtype);
// A host tensor from a plan constant. Float payloads become `float_type` when the constant is
// float32; a constant without payload becomes zeros of its shape.
at::Tensor ConstToTensor(const ConstTensor& c, at::ScalarType float_type);

}  // namespace memest::measurement

#endif  // MEMEST_MEASUREMENT_TORCH_OPS_H_
