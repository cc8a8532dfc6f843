// datasets/zoo/chain.cc -- see chain.h.
#include "datasets/zoo/chain.h"

#include <onnx/onnx_pb.h>

#include <initializer_list>

namespace memest::zoo {

std::string ChainModel(int blocks) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("memest_bench");
  auto* opset = m.add_opset_import();
  opset->set_domain("");
  opset->set_version(17);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("chain");
  auto tensor_type = [](onnx::ValueInfoProto* vi, const char* batch) {
    auto* t = vi->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    t->mutable_shape()->add_dim()->set_dim_param(batch);
    t->mutable_shape()->add_dim()->set_dim_value(64);
  };
  onnx::ValueInfoProto* in = g->add_input();
  in->set_name("X");
  tensor_type(in, "batch");
  auto weight = [&](const std::string& name, std::initializer_list<int64_t> dims) {
    onnx::TensorProto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
  };
  auto node = [&](const char* op, std::initializer_list<std::string> ins, const std::string& out) {
    onnx::NodeProto* n = g->add_node();
    n->set_op_type(op);
    for (const std::string& i : ins) n->add_input(i);
    n->add_output(out);
  };
  std::string cur = "X";
  for (int i = 0; i < blocks; ++i) {
    const std::string k = std::to_string(i);
    weight("W" + k, {64, 64});
    weight("b" + k, {64});
    weight("g" + k, {64});
    weight("beta" + k, {64});
    node("MatMul", {cur, "W" + k}, "mm" + k);
    node("Add", {"mm" + k, "b" + k}, "add" + k);
    node("Relu", {"add" + k}, "relu" + k);
    node("LayerNormalization", {"relu" + k, "g" + k, "beta" + k}, "ln" + k);
    cur = "ln" + k;
  }
  onnx::ValueInfoProto* out = g->add_output();
  out->set_name(cur);
  tensor_type(out, "batch");
  return m.SerializeAsString();
}

}  // namespace memest::zoo
