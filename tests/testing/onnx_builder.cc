#include "testing/onnx_builder.h"

#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace memest::testing {

namespace fs = std::filesystem;

GraphBuilder::GraphBuilder(int64_t opset, int64_t ir_version) {
  model_.set_ir_version(ir_version);
  model_.set_producer_name("memest-tests");
  model_.set_producer_version("0");
  onnx::OperatorSetIdProto* op = model_.add_opset_import();
  op->set_domain("");
  op->set_version(opset);
  model_.mutable_graph()->set_name("test_graph");
}

void SetTensorType(onnx::ValueInfoProto& vi, int32_t elem_type, const std::vector<TestDim>* dims) {
  onnx::TypeProto_Tensor* t = vi.mutable_type()->mutable_tensor_type();
  t->set_elem_type(elem_type);
  if (dims == nullptr) return;
  onnx::TensorShapeProto* shape = t->mutable_shape();
  for (const TestDim& d : *dims) {
    onnx::TensorShapeProto_Dimension* dim = shape->add_dim();
    if (d.value.has_value()) {
      dim->set_dim_value(*d.value);
    } else if (!d.param.empty()) {
      dim->set_dim_param(d.param);
    }  // else: neither value nor param
  }
}

onnx::ValueInfoProto& GraphBuilder::AddInput(const std::string& name, int32_t elem_type,
                                             const std::vector<TestDim>& dims) {
  onnx::ValueInfoProto* vi = graph().add_input();
  vi->set_name(name);
  SetTensorType(*vi, elem_type, &dims);
  return *vi;
}

onnx::ValueInfoProto& GraphBuilder::AddUnrankedInput(const std::string& name, int32_t elem_type) {
  onnx::ValueInfoProto* vi = graph().add_input();
  vi->set_name(name);
  SetTensorType(*vi, elem_type, nullptr);
  return *vi;
}

onnx::ValueInfoProto& GraphBuilder::AddOutput(const std::string& name, int32_t elem_type) {
  onnx::ValueInfoProto* vi = graph().add_output();
  vi->set_name(name);
  SetTensorType(*vi, elem_type, nullptr);
  return *vi;
}

onnx::ValueInfoProto& GraphBuilder::AddOutput(const std::string& name, int32_t elem_type,
                                              const std::vector<TestDim>& dims) {
  onnx::ValueInfoProto* vi = graph().add_output();
  vi->set_name(name);
  SetTensorType(*vi, elem_type, &dims);
  return *vi;
}

onnx::TensorProto& GraphBuilder::AddInitializer(const std::string& name,
                                                const std::vector<int64_t>& dims,
                                                int32_t elem_type) {
  onnx::TensorProto* t = graph().add_initializer();
  t->set_name(name);
  t->set_data_type(elem_type);
  int64_t numel = 1;
  bool small = true;
  for (int64_t d : dims) {
    t->add_dims(d);
    if (d < 0 || d > 4096 || numel * d > 4096) {
      small = false;
    } else {
      numel *= d;
    }
  }
  if (small && elem_type == kFloat) {
    for (int64_t i = 0; i < numel; ++i) t->add_float_data(0.0f);
  } else if (small && elem_type == kInt64) {
    for (int64_t i = 0; i < numel; ++i) t->add_int64_data(0);
  }
  return *t;
}

onnx::TensorProto Int64Tensor(const std::vector<int64_t>& values,
                              std::optional<std::vector<int64_t>> dims) {
  onnx::TensorProto t;
  t.set_data_type(kInt64);
  std::vector<int64_t> shape =
      dims.has_value() ? *dims : std::vector<int64_t>{static_cast<int64_t>(values.size())};
  for (int64_t d : shape) t.add_dims(d);
  for (int64_t v : values) t.add_int64_data(v);
  return t;
}

onnx::TensorProto& GraphBuilder::AddInt64Initializer(const std::string& name,
                                                     const std::vector<int64_t>& values,
                                                     std::optional<std::vector<int64_t>> dims) {
  onnx::TensorProto* t = graph().add_initializer();
  *t = Int64Tensor(values, std::move(dims));
  t->set_name(name);
  return *t;
}

onnx::TensorProto& GraphBuilder::AddExternalInitializer(const std::string& name,
                                                        const std::vector<int64_t>& dims,
                                                        const std::string& location,
                                                        int32_t elem_type) {
  onnx::TensorProto* t = graph().add_initializer();
  t->set_name(name);
  t->set_data_type(elem_type);
  for (int64_t d : dims) t->add_dims(d);
  t->set_data_location(onnx::TensorProto_DataLocation_EXTERNAL);
  onnx::StringStringEntryProto* loc = t->add_external_data();
  loc->set_key("location");
  loc->set_value(location);
  onnx::StringStringEntryProto* offset = t->add_external_data();
  offset->set_key("offset");
  offset->set_value("0");
  return *t;
}

onnx::NodeProto& GraphBuilder::AddNode(const std::string& op_type,
                                       const std::vector<std::string>& inputs,
                                       const std::vector<std::string>& outputs,
                                       const std::string& name, const std::string& domain) {
  onnx::NodeProto* node = graph().add_node();
  node->set_op_type(op_type);
  node->set_name(name.empty() ? op_type + "_" + std::to_string(graph().node_size() - 1) : name);
  if (!domain.empty()) node->set_domain(domain);
  for (const std::string& in : inputs) node->add_input(in);
  for (const std::string& out : outputs) node->add_output(out);
  return *node;
}

void GraphBuilder::AddOpset(const std::string& domain, int64_t version) {
  onnx::OperatorSetIdProto* op = model_.add_opset_import();
  op->set_domain(domain);
  op->set_version(version);
}

std::string GraphBuilder::Serialize() const {
  std::string bytes;
  if (!model_.SerializeToString(&bytes)) throw std::runtime_error("cannot serialize test model");
  return bytes;
}

void SetIntAttr(onnx::NodeProto& node, const std::string& name, int64_t value) {
  onnx::AttributeProto* a = node.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto_AttributeType_INT);
  a->set_i(value);
}

void SetIntsAttr(onnx::NodeProto& node, const std::string& name,
                 const std::vector<int64_t>& values) {
  onnx::AttributeProto* a = node.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto_AttributeType_INTS);
  for (int64_t v : values) a->add_ints(v);
}

void SetFloatAttr(onnx::NodeProto& node, const std::string& name, float value) {
  onnx::AttributeProto* a = node.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto_AttributeType_FLOAT);
  a->set_f(value);
}

void SetTensorAttr(onnx::NodeProto& node, const std::string& name, const onnx::TensorProto& t) {
  onnx::AttributeProto* a = node.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto_AttributeType_TENSOR);
  *a->mutable_t() = t;
}

void SetGraphAttr(onnx::NodeProto& node, const std::string& name, const onnx::GraphProto& g) {
  onnx::AttributeProto* a = node.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto_AttributeType_GRAPH);
  *a->mutable_g() = g;
}

GraphBuilder SmallMlp(int64_t opset) {
  GraphBuilder b(opset);
  b.AddInput("X", kFloat, {"N", 16});
  b.AddInitializer("W1", {16, 32});
  b.AddInitializer("B1", {32});
  b.AddInitializer("W2", {32, 4});
  b.AddInitializer("B2", {4});
  b.AddNode("MatMul", {"X", "W1"}, {"h0"}, "fc1");
  b.AddNode("Add", {"h0", "B1"}, {"h1"}, "fc1_bias");
  b.AddNode("Relu", {"h1"}, {"h2"}, "relu");
  b.AddNode("MatMul", {"h2", "W2"}, {"h3"}, "fc2");
  b.AddNode("Add", {"h3", "B2"}, {"Y"}, "fc2_bias");
  b.AddOutput("Y", kFloat, {"N", 4});
  return b;
}

GraphBuilder LinearStack(int layers, int64_t width, bool relu) {
  GraphBuilder b(17);
  b.AddInput("x", kFloat, {"N", width});
  std::string x = "x";
  for (int i = 0; i < layers; ++i) {
    const std::string p = "layers." + std::to_string(i);
    b.AddInitializer(p + ".weight", {width, width});
    b.AddInitializer(p + ".bias", {width});
    b.AddNode("MatMul", {x, p + ".weight"}, {p + ".mm"}, "/" + p + "/MatMul");
    b.AddNode("Add", {p + ".mm", p + ".bias"}, {p + ".out"}, "/" + p + "/Add");
    x = p + ".out";
    if (relu) {
      b.AddNode("Relu", {x}, {p + ".relu"}, "/" + p + "/Relu");
      x = p + ".relu";
    }
  }
  b.AddOutput(x, kFloat, {"N", width});
  return b;
}

GraphBuilder SelfAttention() {
  GraphBuilder b(17);
  b.AddInput("x", kFloat, {"N", "seq", 64});
  for (const char* w : {"wq", "wk", "wv"}) b.AddInitializer(w, {64, 64});
  b.AddNode("MatMul", {"x", "wq"}, {"q"});
  b.AddNode("MatMul", {"x", "wk"}, {"k"});
  b.AddNode("MatMul", {"x", "wv"}, {"v"});
  SetIntsAttr(b.AddNode("Transpose", {"k"}, {"kt"}), "perm", {0, 2, 1});
  b.AddNode("MatMul", {"q", "kt"}, {"scores"});
  SetIntAttr(b.AddNode("Softmax", {"scores"}, {"p"}), "axis", -1);
  b.AddNode("MatMul", {"p", "v"}, {"y"});
  b.AddOutput("y", kFloat, {"N", "seq", 64});
  return b;
}

TempDir::TempDir() {
  std::string templ = (fs::temp_directory_path() / "memest_test_XXXXXX").string();
  if (mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = templ;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string TempDir::WriteFile(const std::string& relative, const std::string& bytes) const {
  fs::path full = fs::path(path_) / relative;
  fs::create_directories(full.parent_path());
  std::ofstream out(full, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) throw std::runtime_error("cannot write " + full.string());
  return full.string();
}

std::string TempDir::WriteModel(const std::string& relative, const onnx::ModelProto& model) const {
  std::string bytes;
  if (!model.SerializeToString(&bytes)) throw std::runtime_error("cannot serialize test model");
  return WriteFile(relative, bytes);
}

std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace memest::testing
