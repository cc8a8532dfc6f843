// tests/testing/onnx_builder.h -- building small ONNX models in tests, and a scratch folder.
//
// GraphBuilder wraps an onnx::ModelProto and adds inputs, outputs, initializers and nodes with one
// call each; every Add* returns the proto so a test can damage it afterwards (a bad dtype, a
// negative dim, ...). TempDir is a fresh folder under /tmp (mkdtemp) that is removed, with its
// contents, when the object goes out of scope: tests never write into the working directory.
#ifndef MEMEST_TESTS_TESTING_ONNX_BUILDER_H_
#define MEMEST_TESTS_TESTING_ONNX_BUILDER_H_

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace memest::testing {

// One dim of a declared input/output shape: a value (4), a name ("N"), or neither (Unknown()).
struct TestDim {
  TestDim(int64_t v) : value(v) {}             // NOLINT(google-explicit-constructor)
  TestDim(int v) : value(v) {}                 // NOLINT(google-explicit-constructor)
  TestDim(const char* p) : param(p) {}         // NOLINT(google-explicit-constructor)
  TestDim(const std::string& p) : param(p) {}  // NOLINT(google-explicit-constructor)
  static TestDim Unknown() { return TestDim(); }

  std::optional<int64_t> value;
  std::string param;

 private:
  TestDim() = default;
};

inline constexpr int32_t kFloat = onnx::TensorProto_DataType_FLOAT;
inline constexpr int32_t kInt64 = onnx::TensorProto_DataType_INT64;
inline constexpr int32_t kBool = onnx::TensorProto_DataType_BOOL;

class GraphBuilder {
 public:
  // A model importing the default domain ("") at `opset`. ir_version 8 fits opsets up to 17.
  explicit GraphBuilder(int64_t opset = 13, int64_t ir_version = 8);

  // A graph input with a tensor type of the given dims ({} for a scalar).
  onnx::ValueInfoProto& AddInput(const std::string& name, int32_t elem_type,
                                 const std::vector<TestDim>& dims);
  // A graph input whose tensor type has no shape (rank unknown).
  onnx::ValueInfoProto& AddUnrankedInput(const std::string& name, int32_t elem_type);
  // A graph output, with or without a declared shape.
  onnx::ValueInfoProto& AddOutput(const std::string& name, int32_t elem_type);
  onnx::ValueInfoProto& AddOutput(const std::string& name, int32_t elem_type,
                                  const std::vector<TestDim>& dims);
  // A float initializer of the given dims, zero-filled when small (<= 4096 elements) and
  // declared without data otherwise (raw_data left empty: the loader never reads weights).
  onnx::TensorProto& AddInitializer(const std::string& name, const std::vector<int64_t>& dims,
                                    int32_t elem_type = kFloat);
  // An int64 initializer holding `values` with the given dims (1-D of values.size() by default).
  onnx::TensorProto& AddInt64Initializer(const std::string& name,
                                         const std::vector<int64_t>& values,
                                         std::optional<std::vector<int64_t>> dims = std::nullopt);
  // An initializer stored in external data at `location` (relative to the model's folder).
  onnx::TensorProto& AddExternalInitializer(const std::string& name,
                                            const std::vector<int64_t>& dims,
                                            const std::string& location,
                                            int32_t elem_type = kFloat);
  // A node; its name defaults to "<op_type>_<index>".
  onnx::NodeProto& AddNode(const std::string& op_type, const std::vector<std::string>& inputs,
                           const std::vector<std::string>& outputs, const std::string& name = "",
                           const std::string& domain = "");
  // Imports an extra operator domain (e.g. "com.microsoft").
  void AddOpset(const std::string& domain, int64_t version);

  onnx::ModelProto& model() { return model_; }
  const onnx::ModelProto& model() const { return model_; }
  onnx::GraphProto& graph() { return *model_.mutable_graph(); }
  std::string Serialize() const;

 private:
  onnx::ModelProto model_;
};

// Attribute helpers.
void SetIntAttr(onnx::NodeProto& node, const std::string& name, int64_t value);
void SetIntsAttr(onnx::NodeProto& node, const std::string& name,
                 const std::vector<int64_t>& values);
void SetFloatAttr(onnx::NodeProto& node, const std::string& name, float value);
void SetTensorAttr(onnx::NodeProto& node, const std::string& name, const onnx::TensorProto& t);
void SetGraphAttr(onnx::NodeProto& node, const std::string& name, const onnx::GraphProto& g);

// Fills `vi` with a tensor type of `elem_type` and (when given) `dims`.
void SetTensorType(onnx::ValueInfoProto& vi, int32_t elem_type, const std::vector<TestDim>* dims);
// An int64 TensorProto (for Constant nodes).
onnx::TensorProto Int64Tensor(const std::vector<int64_t>& values,
                              std::optional<std::vector<int64_t>> dims = std::nullopt);

// A two-layer perceptron: X[N,16] -MatMul W1[16,32] -Add B1 -Relu -MatMul W2[32,4] -Add B2->
// Y[N,4].
GraphBuilder SmallMlp(int64_t opset = 13);

// Single-head self-attention over x[N, seq, 64]: q, k, v projections, softmax(q k^T) v -- an
// [N, seq, seq] score matrix, so the peak grows with the square of `seq`.
GraphBuilder SelfAttention();

// `layers` Linear layers over x[N, width] (fp32 layers.i.weight [width, width] and layers.i.bias
// [width]: MatMul "/layers.i/MatMul", then Add "/layers.i/Add", then Relu "/layers.i/Relu" when
// `relu`), the last one's output the graph's.
GraphBuilder LinearStack(int layers, int64_t width, bool relu);

// A scratch folder under /tmp, removed (recursively) by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // Writes `bytes` to path()/relative (creating sub-folders) and returns the full path.
  std::string WriteFile(const std::string& relative, const std::string& bytes) const;
  std::string WriteModel(const std::string& relative, const onnx::ModelProto& model) const;

 private:
  std::string path_;
};

// The contents of a file ("" when it cannot be read).
std::string ReadFileBytes(const std::string& path);

}  // namespace memest::testing

#endif  // MEMEST_TESTS_TESTING_ONNX_BUILDER_H_
