// datasets/zoo/graph_writer.h -- building weightless training-form ONNX graphs, deterministically.
//
// Policy (what every graph written through GraphWriter looks like):
//  * ir_version 8, one opset import: ai.onnx 17. producer_name "memest-zoo", producer_version
//    kZooVersion. No doc strings, no timestamps: the bytes depend on the calls alone.
//  * Data inputs have dim_param "batch" as dim 0 (pass kBatch); every other dim is concrete.
//  * Weights (Weight()) are float initializers with dims and dtype only: data_location EXTERNAL,
//    external_data {location: "<model name>.weights", offset, length}. Offsets are the running
//    sum of the lengths in creation order. The weights file is never written; memest never
//    reads weights.
//  * Small constants that shape inference or the op needs (Reshape targets, axes, split sizes,
//    Dropout ratio, training_mode, Clip bounds, GELU coefficients) are inline initializers,
//    de-duplicated by value. Float scalars are not parameters for memest (one element).
//  * Names: nodes "<scope>/<Op>_<n>", outputs "<node name>:<k>", weights "<scope>/<what>".
//    Scopes are set by the family builders (e.g. "layer3/attn").
// GraphWriter is a plain single-threaded builder; it never throws (misuse is a programming error
// caught by the checker in tests).
#ifndef MEMEST_DATASETS_ZOO_GRAPH_WRITER_H_
#define MEMEST_DATASETS_ZOO_GRAPH_WRITER_H_

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace memest::zoo {

inline constexpr const char* kZooProducer = "memest-zoo";
inline constexpr const char* kZooVersion = "0.1.0";
inline constexpr int64_t kOpset = 17;
inline constexpr int64_t kIrVersion = 8;
// A dim value that stands for the dynamic batch dim ("batch") in Input()/Output().
inline constexpr int64_t kBatch = -1;

// A dim of a graph input or output for SymbolicInput()/SymbolicOutput(): a concrete value
// (kBatch: dim_param "batch"), or a dim_param name ("seq", "past").
struct IoDim {
  IoDim(int64_t v) : value(v) {}                 // NOLINT(google-explicit-constructor)
  IoDim(const char* p) : param(p) {}             // NOLINT(google-explicit-constructor)
  IoDim(std::string p) : param(std::move(p)) {}  // NOLINT(google-explicit-constructor)
  int64_t value = 0;
  std::string param;  // non-empty: a dim_param
};

inline constexpr int32_t kFloat = onnx::TensorProto_DataType_FLOAT;
inline constexpr int32_t kInt64 = onnx::TensorProto_DataType_INT64;
inline constexpr int32_t kBool = onnx::TensorProto_DataType_BOOL;

// One node attribute; build with the Attr() overloads.
using Attribute = onnx::AttributeProto;
Attribute Attr(const std::string& name, int64_t value);
Attribute Attr(const std::string& name, float value);
Attribute Attr(const std::string& name, const std::vector<int64_t>& values);
Attribute Attr(const std::string& name, const std::string& value);
Attribute Attr(const std::string& name, const onnx::TensorProto& value);

class GraphWriter {
 public:
  // `model_name` names the graph and the (never written) weights file "<model_name>.weights".
  explicit GraphWriter(std::string model_name);

  // Scope prefix for the names of nodes and weights created next ("" = none).
  void SetScope(std::string scope) { scope_ = std::move(scope); }
  const std::string& scope() const { return scope_; }

  // A graph input; kBatch in `dims` becomes dim_param "batch".
  std::string Input(const std::string& name, int32_t elem_type, const std::vector<int64_t>& dims);
  // Renames tensor `value` (a node output) to `name` everywhere; returns `name`.
  std::string Rename(const std::string& value, const std::string& name);
  // Marks `value` as a graph output with the given type (kBatch allowed in `dims`).
  void Output(const std::string& value, int32_t elem_type, const std::vector<int64_t>& dims);
  // The same with named dims anywhere (dim_param), e.g. {kBatch, "seq"}.
  std::string SymbolicInput(const std::string& name, int32_t elem_type,
                            const std::vector<IoDim>& dims);
  void SymbolicOutput(const std::string& value, int32_t elem_type, const std::vector<IoDim>& dims);

  // A weightless external float initializer "<scope>/<what>": a parameter, or a buffer (BatchNorm
  // running statistics) when `trainable` is false.
  std::string Weight(const std::string& what, const std::vector<int64_t>& dims,
                     bool trainable = true);
  // Inline constants, shared by value.
  std::string Int64s(const std::vector<int64_t>& values);  // 1-D
  std::string Int64Scalar(int64_t value);                  // rank 0
  std::string FloatScalar(float value);                    // rank 0
  std::string BoolScalar(bool value);                      // rank 0

  // Adds a node; returns its `num_outputs` output names. An empty input name is an omitted
  // optional input.
  std::vector<std::string> Node(const std::string& op_type, const std::vector<std::string>& inputs,
                                int num_outputs = 1, const std::vector<Attribute>& attrs = {});
  // A one-output node whose output is named `output` (a graph output name, e.g. "present.0.key").
  std::string OpNamed(const std::string& output, const std::string& op_type,
                      const std::vector<std::string>& inputs,
                      const std::vector<Attribute>& attrs = {});
  // One-output shorthand.
  std::string Op(const std::string& op_type, const std::vector<std::string>& inputs,
                 const std::vector<Attribute>& attrs = {}) {
    return Node(op_type, inputs, 1, attrs)[0];
  }

  // Elements of all Weight() tensors so far, and of the trainable ones (what PyTorch's
  // sum(p.numel() for p in model.parameters()) gives).
  int64_t weight_elements() const { return weight_elements_; }
  int64_t parameter_elements() const { return parameter_elements_; }

  // The finished model, copied: the writer may keep being used.
  onnx::ModelProto Finish() const&;
  // The same, moved out of a writer that is done with (`std::move(w).Finish()`; its model is left
  // empty): no copy of the graph, and none to destroy (a language model's graph is tens of
  // thousands of messages, and copying and destroying it cost more than its load).
  onnx::ModelProto Finish() &&;

 private:
  std::string UniqueName(const std::string& base);

  std::string model_name_;
  std::string scope_;
  onnx::ModelProto model_;
  std::map<std::string, int> name_counts_;
  std::map<std::string, std::string> constants_;  // value key -> initializer name
  int64_t next_offset_ = 0;
  int64_t weight_elements_ = 0;
  int64_t parameter_elements_ = 0;
};

// Deterministic serialization of a model (protobuf's deterministic mode).
std::string SerializeModel(const onnx::ModelProto& model);

}  // namespace memest::zoo

#endif  // MEMEST_DATASETS_ZOO_GRAPH_WRITER_H_
