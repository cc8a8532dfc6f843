// measurement/plan.h -- a loaded ONNX graph turned into a plain execution plan for the
// measurement harness.
//
// The plan is the boundary between the ONNX side (core/, protobuf) and the LibTorch side
// (measurement/executor.cc): it holds nodes, values, attributes and small constant payloads as
// plain C++ values. This header includes neither protobuf nor LibTorch headers, so both sides can
// use it and the two libraries never meet in one translation unit.
//
// What a plan decides (policy):
//  * Roles. A float initializer the loader marks trainable (core::Value::trainable) is a
//    parameter: the executor creates it with random values and requires_grad. A float
//    initializer that feeds only BatchNormalization inputs 3/4 is a buffer (running statistics).
//    Every other initializer is a constant (its payload is carried when the file kept it).
//  * Shapes. Data inputs get the concrete dims core::Bind gave them (options.batch / dims);
//    initializers keep their declared dims. Intermediate shapes come from binding (memest's shape
//    rules); the executor does not need them (it runs the real ops).
//  * Random integer inputs. An integer data input that feeds the indices of a Gather on an
//    initializer (an embedding table), directly or through Cast/Reshape/Unsqueeze/Squeeze/
//    Flatten/Identity, draws ids in [0, rows of that table); any other integer input in [0, 2).
//
// A Plan is an immutable value once built; it does not refer to the Model it came from.
#ifndef MEMEST_MEASUREMENT_PLAN_H_
#define MEMEST_MEASUREMENT_PLAN_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "memest/estimate.h"
#include "memest/model.h"
#include "memest/options.h"
#include "memest/status.h"

namespace memest::measurement {

// A small constant tensor: a Constant node's value, a tensor attribute, or the payload of a
// small initializer. dtype uses ONNX TensorProto.DataType numbering (base/dtype.h).
struct ConstTensor {
  int32_t dtype = 0;
  std::vector<int64_t> dims;
  bool has_data = false;       // false: the payload is not in the file (stripped weights)
  std::vector<double> floats;  // floating-point payloads (float16/32/64, bfloat16)
  std::vector<int64_t> ints;   // integer and bool payloads
  int64_t Numel() const;
};

// An attribute value. Graph attributes (If/Loop bodies) are not carried: such nodes are reported
// as unsupported by the executor.
using Attribute = std::variant<int64_t, double, std::string, std::vector<int64_t>,
                               std::vector<double>, std::vector<std::string>, ConstTensor>;

struct PlanNode {
  std::string name;  // node name, or "<op_type>_<index>" when unnamed
  std::string op_type;
  std::string domain;        // "" for ai.onnx
  int64_t opset = 0;         // opset version of the node's domain
  std::vector<int> inputs;   // value ids; -1 for an omitted optional input
  std::vector<int> outputs;  // value ids; -1 for an omitted optional output
  std::map<std::string, Attribute, std::less<>> attributes;
  bool has_subgraph = false;  // If/Loop/Scan body present

  // Typed attribute access: nullopt when absent or of another type. Float accepts an int value.
  std::optional<int64_t> Int(std::string_view name) const;
  std::optional<double> Float(std::string_view name) const;
  std::optional<std::string> String(std::string_view name) const;
  std::optional<std::vector<int64_t>> Ints(std::string_view name) const;
  std::optional<std::vector<double>> Floats(std::string_view name) const;
  std::optional<std::vector<std::string>> Strings(std::string_view name) const;
  const ConstTensor* Tensor(std::string_view name) const;
};

enum class ValueRole {
  kIntermediate,  // produced by a node
  kDataInput,     // a graph input that is not an initializer: random data of the bound shape
  kParameter,     // trainable float initializer: random values, requires_grad
  kBuffer,        // BatchNormalization running statistic (updated in place in training)
  kConstant,      // any other initializer
};
const char* ToString(ValueRole role);

struct PlanValue {
  std::string name;
  int32_t dtype = 0;  // ONNX TensorProto.DataType (after inference for intermediates; 0 unknown)
  std::optional<std::vector<int64_t>> dims;  // concrete dims when known
  ValueRole role = ValueRole::kIntermediate;
  std::optional<ConstTensor> data;  // initializer payload when the file kept it
  int64_t index_bound = 2;          // integer data inputs: random ids are drawn in [0, index_bound)
  bool graph_output = false;
  int producer = -1;       // node index
  int last_consumer = -1;  // index of the last node that reads it (-1: none)
};

// A checkpointed segment (Options::checkpoint_segments, cut by core/checkpoint.h): nodes
// [begin, end) run forward without grad and again in backward.
struct PlanSegment {
  int begin = 0, end = 0;
  std::vector<int> inputs;      // non-initializer values read by the segment, made outside it
  std::vector<int> outputs;     // values made in the segment and read after it (or outputs)
  std::vector<int> parameters;  // trainable initializers the segment reads
};

struct Plan {
  std::string model_path;
  std::vector<PlanNode> nodes;  // topological order
  std::vector<PlanValue> values;
  // The node or value with id `id` (0 <= id < size; -1 means none and is never passed).
  const PlanNode& node(int id) const { return nodes[static_cast<size_t>(id)]; }
  const PlanValue& value(int id) const { return values[static_cast<size_t>(id)]; }
  PlanValue& value(int id) { return values[static_cast<size_t>(id)]; }
  std::vector<int> data_inputs;  // value ids, graph-input order
  std::vector<int> parameters;   // value ids, initializer order
  std::vector<int> buffers;
  std::vector<int> constants;
  std::vector<int> outputs;                 // graph outputs; the loss is taken on outputs[0]
  std::map<std::string, int64_t> bindings;  // every symbolic dim -> bound value
  uint64_t parameter_bytes = 0;             // sum of parameter sizes in their file dtype
  std::vector<Diagnostic> diagnostics;      // from binding (unknown shapes, ...)
  std::vector<PlanSegment> checkpoint;      // training with checkpoint_segments > 1
};

// Builds the plan. Errors: those of Validate(options) and core::Bind (UnboundDim, Overflow,
// InvalidArgument), InvalidModel when a data input's shape stays unknown after binding.
Result<Plan> BuildPlan(const Model& model, const Options& options);

}  // namespace memest::measurement

#endif  // MEMEST_MEASUREMENT_PLAN_H_
