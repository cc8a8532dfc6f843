// datasets/zoo/graph_writer.cc -- see graph_writer.h for the policy.
#include "datasets/zoo/graph_writer.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <cstring>
#include <utility>

namespace memest::zoo {
namespace {

void SetType(onnx::ValueInfoProto* vi, int32_t elem_type, const std::vector<int64_t>& dims) {
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem_type);
  auto* shape = tt->mutable_shape();
  for (int64_t d : dims) {
    auto* dim = shape->add_dim();
    if (d == kBatch) {
      dim->set_dim_param("batch");
    } else {
      dim->set_dim_value(d);
    }
  }
}

void SetType(onnx::ValueInfoProto* vi, int32_t elem_type, const std::vector<IoDim>& dims) {
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem_type);
  auto* shape = tt->mutable_shape();
  for (const IoDim& d : dims) {
    auto* dim = shape->add_dim();
    if (!d.param.empty()) {
      dim->set_dim_param(d.param);
    } else if (d.value == kBatch) {
      dim->set_dim_param("batch");
    } else {
      dim->set_dim_value(d.value);
    }
  }
}

}  // namespace

Attribute Attr(const std::string& name, int64_t value) {
  Attribute a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::INT);
  a.set_i(value);
  return a;
}

Attribute Attr(const std::string& name, float value) {
  Attribute a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::FLOAT);
  a.set_f(value);
  return a;
}

Attribute Attr(const std::string& name, const std::vector<int64_t>& values) {
  Attribute a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::INTS);
  for (int64_t v : values) a.add_ints(v);
  return a;
}

Attribute Attr(const std::string& name, const std::string& value) {
  Attribute a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::STRING);
  a.set_s(value);
  return a;
}

Attribute Attr(const std::string& name, const onnx::TensorProto& value) {
  Attribute a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::TENSOR);
  *a.mutable_t() = value;
  return a;
}

GraphWriter::GraphWriter(std::string model_name) : model_name_(std::move(model_name)) {
  model_.set_ir_version(kIrVersion);
  model_.set_producer_name(kZooProducer);
  model_.set_producer_version(kZooVersion);
  auto* op = model_.add_opset_import();
  op->set_domain("");
  op->set_version(kOpset);
  model_.mutable_graph()->set_name(model_name_);
}

std::string GraphWriter::UniqueName(const std::string& base) {
  int& n = name_counts_[base];
  std::string name = n == 0 ? base : base + "_" + std::to_string(n);
  ++n;
  return name;
}

std::string GraphWriter::Input(const std::string& name, int32_t elem_type,
                               const std::vector<int64_t>& dims) {
  auto* vi = model_.mutable_graph()->add_input();
  vi->set_name(name);
  SetType(vi, elem_type, dims);
  ++name_counts_[name];
  return name;
}

std::string GraphWriter::SymbolicInput(const std::string& name, int32_t elem_type,
                                       const std::vector<IoDim>& dims) {
  auto* vi = model_.mutable_graph()->add_input();
  vi->set_name(name);
  SetType(vi, elem_type, dims);
  ++name_counts_[name];
  return name;
}

void GraphWriter::SymbolicOutput(const std::string& value, int32_t elem_type,
                                 const std::vector<IoDim>& dims) {
  auto* vi = model_.mutable_graph()->add_output();
  vi->set_name(value);
  SetType(vi, elem_type, dims);
}

std::string GraphWriter::Rename(const std::string& value, const std::string& name) {
  for (auto& n : *model_.mutable_graph()->mutable_node()) {
    for (auto& in : *n.mutable_input()) {
      if (in == value) in = name;
    }
    for (auto& out : *n.mutable_output()) {
      if (out == value) out = name;
    }
  }
  ++name_counts_[name];
  return name;
}

void GraphWriter::Output(const std::string& value, int32_t elem_type,
                         const std::vector<int64_t>& dims) {
  auto* vi = model_.mutable_graph()->add_output();
  vi->set_name(value);
  SetType(vi, elem_type, dims);
}

std::string GraphWriter::Weight(const std::string& what, const std::vector<int64_t>& dims,
                                bool trainable) {
  const std::string name = UniqueName(scope_.empty() ? what : scope_ + "/" + what);
  auto* t = model_.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(kFloat);
  int64_t numel = 1;
  for (int64_t d : dims) {
    t->add_dims(d);
    numel *= d;
  }
  const int64_t length = numel * 4;
  t->set_data_location(onnx::TensorProto::EXTERNAL);
  auto add = [&](const char* key, const std::string& value) {
    auto* kv = t->add_external_data();
    kv->set_key(key);
    kv->set_value(value);
  };
  add("location", model_name_ + ".weights");
  add("offset", std::to_string(next_offset_));
  add("length", std::to_string(length));
  next_offset_ += length;
  weight_elements_ += numel;
  if (trainable) parameter_elements_ += numel;
  return name;
}

std::string GraphWriter::Int64s(const std::vector<int64_t>& values) {
  std::string key = "i64[";
  for (int64_t v : values) key += std::to_string(v) + ",";
  key += "]";
  auto it = constants_.find(key);
  if (it != constants_.end()) return it->second;
  const std::string name = UniqueName("const_i64");
  auto* t = model_.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(kInt64);
  t->add_dims(static_cast<int64_t>(values.size()));
  for (int64_t v : values) t->add_int64_data(v);
  constants_[key] = name;
  return name;
}

std::string GraphWriter::Int64Scalar(int64_t value) {
  const std::string key = "i64(" + std::to_string(value) + ")";
  auto it = constants_.find(key);
  if (it != constants_.end()) return it->second;
  const std::string name = UniqueName("const_i64_scalar");
  auto* t = model_.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(kInt64);
  t->add_int64_data(value);
  constants_[key] = name;
  return name;
}

std::string GraphWriter::FloatScalar(float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  const std::string key = "f32(" + std::to_string(bits) + ")";
  auto it = constants_.find(key);
  if (it != constants_.end()) return it->second;
  const std::string name = UniqueName("const_f32");
  auto* t = model_.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(kFloat);
  t->add_float_data(value);
  constants_[key] = name;
  return name;
}

std::string GraphWriter::BoolScalar(bool value) {
  const std::string key = value ? "bool(1)" : "bool(0)";
  auto it = constants_.find(key);
  if (it != constants_.end()) return it->second;
  const std::string name = UniqueName(value ? "const_true" : "const_false");
  auto* t = model_.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(kBool);
  t->add_int32_data(value ? 1 : 0);
  constants_[key] = name;
  return name;
}

std::vector<std::string> GraphWriter::Node(const std::string& op_type,
                                           const std::vector<std::string>& inputs, int num_outputs,
                                           const std::vector<Attribute>& attrs) {
  const std::string name = UniqueName(scope_.empty() ? op_type : scope_ + "/" + op_type);
  auto* n = model_.mutable_graph()->add_node();
  n->set_name(name);
  n->set_op_type(op_type);
  for (const auto& in : inputs) n->add_input(in);
  std::vector<std::string> outs;
  for (int k = 0; k < num_outputs; ++k) {
    outs.push_back(name + ":" + std::to_string(k));
    n->add_output(outs.back());
  }
  for (const auto& a : attrs) *n->add_attribute() = a;
  return outs;
}

std::string GraphWriter::OpNamed(const std::string& output, const std::string& op_type,
                                 const std::vector<std::string>& inputs,
                                 const std::vector<Attribute>& attrs) {
  const std::string name = UniqueName(scope_.empty() ? op_type : scope_ + "/" + op_type);
  auto* n = model_.mutable_graph()->add_node();
  n->set_name(name);
  n->set_op_type(op_type);
  for (const auto& in : inputs) n->add_input(in);
  n->add_output(output);
  ++name_counts_[output];
  for (const auto& a : attrs) *n->add_attribute() = a;
  return output;
}

onnx::ModelProto GraphWriter::Finish() const& { return model_; }

onnx::ModelProto GraphWriter::Finish() && { return std::move(model_); }

std::string SerializeModel(const onnx::ModelProto& model) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    model.SerializeToCodedStream(&coded);
  }
  return out;
}

}  // namespace memest::zoo
