// Tests for the shape rules (ops/shape_rules*.cc) and the symbolic pass (core/symbolic_shapes.cc):
// one case per op with a shape rule (a small model, loaded through the real loader, whose output
// types are printed with their symbolic dims), so a rule added without a case fails
// ShapeRulesRegistry.EveryShapeRuleHasACase; then folding of exporter shape sub-graphs, the
// fallback flags, and hostile nodes.
#include "ops/shape_rules.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/dtype.h"
#include "core/bind.h"
#include "core/graph.h"
#include "core/onnx_fallback.h"
#include "core/symbolic_shapes.h"
#include "memest/estimator.h"
#include "memest/model.h"
#include "ops/rules.h"
#include "testing/onnx_builder.h"

namespace memest {
namespace {

using testing::GraphBuilder;
using testing::Int64Tensor;
using testing::kBool;
using testing::kFloat;
using testing::kInt64;
using testing::SetFloatAttr;
using testing::SetIntAttr;
using testing::SetIntsAttr;
using testing::TestDim;

constexpr int32_t kUInt8 = onnx::TensorProto::UINT8;
constexpr int32_t kInt32 = onnx::TensorProto::INT32;

void SetStringAttr(onnx::NodeProto& n, const std::string& name, const std::string& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}

onnx::TensorProto& AddFloats(GraphBuilder& b, const std::string& name, std::vector<float> v,
                             std::optional<std::vector<int64_t>> dims = std::nullopt) {
  onnx::TensorProto& t = *b.graph().add_initializer();
  t.set_name(name);
  t.set_data_type(kFloat);
  for (int64_t d : dims.value_or(std::vector<int64_t>{static_cast<int64_t>(v.size())})) {
    t.add_dims(d);
  }
  for (float f : v) t.add_float_data(f);
  return t;
}

// "float32[N,3]", "int64[2]={N,3}", "?" when the rank is unknown.
std::string Describe(const core::SymTensor& t, const core::DimTable& table) {
  std::string s = t.dtype ? base::DTypeName(t.dtype) : "dtype?";
  if (!t.shape) return s + "?";
  s += "[";
  for (size_t i = 0; i < t.shape->size(); ++i) {
    s += (i ? "," : "") + (*t.shape)[i].ToString(&table);
  }
  s += "]";
  if (t.values) {
    s += "={";
    for (size_t i = 0; i < t.values->size(); ++i) {
      s += (i ? "," : "") + (*t.values)[i].ToString(&table);
    }
    s += "}";
  }
  return s;
}

struct Loaded {
  std::shared_ptr<const Model> model;
  const core::Graph& graph() const { return model->graph(); }
  const core::SymbolicShapes& sym() const { return *graph().symbolic; }
  std::string Type(const std::string& name) const {
    const int id = graph().FindValue(name);
    if (id < 0) return "no value " + name;
    return Describe(sym().types[static_cast<size_t>(id)], sym().table);
  }
  bool Fallback(const std::string& name) const {
    const int id = graph().FindValue(name);
    return id >= 0 && sym().needs_fallback[static_cast<size_t>(id)];
  }
};

Loaded Load(GraphBuilder& b) {
  auto r = LoadModelFromBytes(b.Serialize(), "/tmp", "shape_rules_test");
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return Loaded{r.ok() ? *r : nullptr};
}

// One case: `build` adds inputs, initializers and nodes whose outputs are y0, y1, ...; `want`
// holds the expected type of each.
struct Case {
  std::string op;
  int64_t opset;
  std::function<void(GraphBuilder&)> build;
  std::vector<std::string> want;
  std::string domain = "";  // "" is ai.onnx; "com.microsoft" for ONNX Runtime's contrib ops
};

// "Op" for ai.onnx, "domain::Op" otherwise.
std::string Key(std::string_view domain, std::string_view op) {
  return domain.empty() ? std::string(op) : std::string(domain) + "::" + std::string(op);
}

onnx::NodeProto& Node(GraphBuilder& b, const std::string& op, std::vector<std::string> in,
                      int outputs = 1) {
  std::vector<std::string> out;
  for (int i = 0; i < outputs; ++i) out.push_back("y" + std::to_string(i));
  return b.AddNode(op, in, out, op + "_node");
}

// A com.microsoft contrib node (the domain imported at version 1).
onnx::NodeProto& MsNode(GraphBuilder& b, const std::string& op, std::vector<std::string> in,
                        int outputs = 1) {
  b.AddOpset("com.microsoft", 1);
  std::vector<std::string> out;
  for (int i = 0; i < outputs; ++i) out.push_back("y" + std::to_string(i));
  return b.AddNode(op, in, out, op + "_node", "com.microsoft");
}

// X: float [N, 3, 4].
void X(GraphBuilder& b, std::vector<TestDim> dims = {"N", 3, 4}, int32_t dtype = kFloat) {
  b.AddInput("X", dtype, dims);
}

std::vector<Case> Unaries() {
  std::vector<Case> cases;
  for (const char* op : {"Relu",
                         "Sigmoid",
                         "Tanh",
                         "Exp",
                         "Sqrt",
                         "Reciprocal",
                         "Softmax",
                         "LogSoftmax",
                         "Tan",
                         "Gelu",
                         "Erf",
                         "Log",
                         "Sin",
                         "Cos",
                         "Asin",
                         "Acos",
                         "Atan",
                         "Sinh",
                         "Cosh",
                         "Asinh",
                         "Acosh",
                         "Atanh",
                         "LeakyRelu",
                         "Elu",
                         "Selu",
                         "Celu",
                         "Softplus",
                         "Softsign",
                         "HardSigmoid",
                         "HardSwish",
                         "Mish",
                         "ThresholdedRelu",
                         "Shrink",
                         "Clip",
                         "MeanVarianceNormalization",
                         "LpNormalization",
                         "Trilu",
                         "Hardmax",
                         "Sign",
                         "Floor",
                         "Ceil",
                         "Round",
                         "Neg",
                         "Abs",
                         "Identity"}) {
    cases.push_back({op,
                     17,
                     [op](GraphBuilder& b) {
                       X(b);
                       Node(b, op, {"X"});
                     },
                     {"float32[N,3,4]"}});
  }
  cases.push_back({"LRN",
                   17,
                   [](GraphBuilder& b) {
                     X(b);
                     SetIntAttr(Node(b, "LRN", {"X"}), "size", 3);  // required by the schema
                   },
                   {"float32[N,3,4]"}});
  cases.push_back({"CumSum",
                   14,
                   [](GraphBuilder& b) {
                     X(b);
                     b.AddInt64Initializer("axis", {1}, std::vector<int64_t>{});
                     Node(b, "CumSum", {"X", "axis"});
                   },
                   {"float32[N,3,4]"}});
  cases.push_back({"PRelu",
                   16,
                   [](GraphBuilder& b) {
                     X(b);
                     b.AddInitializer("slope", {3, 1});
                     Node(b, "PRelu", {"X", "slope"});
                   },
                   {"float32[N,3,4]"}});
  for (const char* op : {"InstanceNormalization", "GroupNormalization", "RMSNormalization"}) {
    cases.push_back({op,
                     18,
                     [op](GraphBuilder& b) {
                       X(b);
                       b.AddInitializer("scale", {3});
                       b.AddInitializer("bias", {3});
                       Node(b, op, {"X", "scale", "bias"});
                     },
                     {"float32[N,3,4]"}});
  }
  cases.push_back({"BitwiseNot",
                   18,
                   [](GraphBuilder& b) {
                     X(b, {"N", 3}, kInt32);
                     Node(b, "BitwiseNot", {"X"});
                   },
                   {"int32[N,3]"}});
  for (const char* op : {"IsNaN", "IsInf"}) {
    cases.push_back({op,
                     13,
                     [op](GraphBuilder& b) {
                       X(b);
                       Node(b, op, {"X"});
                     },
                     {"bool[N,3,4]"}});
  }
  cases.push_back({"Not",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"N"}, kBool);
                     Node(b, "Not", {"X"});
                   },
                   {"bool[N]"}});
  return cases;
}

std::vector<Case> Elementwise() {
  std::vector<Case> cases;
  // Value folding on shape vectors.
  cases.push_back({"Neg",
                   13,
                   [](GraphBuilder& b) {
                     X(b);
                     b.AddNode("Shape", {"X"}, {"s"});
                     Node(b, "Neg", {"s"});
                   },
                   {"int64[3]={-N,-3,-4}"}});
  cases.push_back({"Abs",
                   13,
                   [](GraphBuilder& b) {
                     b.AddInt64Initializer("v", {-2, 3});
                     Node(b, "Abs", {"v"});
                   },
                   {"int64[2]={2,3}"}});
  cases.push_back({"Identity",
                   13,
                   [](GraphBuilder& b) {
                     X(b);
                     b.AddNode("Shape", {"X"}, {"s"});
                     Node(b, "Identity", {"s"});
                   },
                   {"int64[3]={N,3,4}"}});
  cases.push_back({"Dropout",
                   13,
                   [](GraphBuilder& b) {
                     X(b);
                     Node(b, "Dropout", {"X"}, 2);
                   },
                   {"float32[N,3,4]", "bool[N,3,4]"}});
  cases.push_back({"Cast",
                   13,
                   [](GraphBuilder& b) {
                     X(b);
                     b.AddNode("Shape", {"X"}, {"s"});
                     SetIntAttr(Node(b, "Cast", {"s"}), "to", kFloat);
                   },
                   {"float32[3]={N,3,4}"}});
  cases.push_back({"CastLike",
                   15,
                   [](GraphBuilder& b) {
                     X(b);
                     b.AddInt64Initializer("like", {0});
                     Node(b, "CastLike", {"X", "like"});
                   },
                   {"int64[N,3,4]"}});
  for (const char* op : {"RandomNormalLike", "RandomUniformLike", "Bernoulli"}) {
    cases.push_back({op,
                     15,
                     [op](GraphBuilder& b) {
                       X(b);
                       Node(b, op, {"X"});
                     },
                     {"float32[N,3,4]"}});
  }
  cases.push_back({"EyeLike",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {4, 4});
                     SetIntAttr(Node(b, "EyeLike", {"X"}), "dtype", kInt64);
                   },
                   {"int64[4,4]"}});
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow", "Mod"}) {
    cases.push_back({op,
                     13,
                     [op](GraphBuilder& b) {
                       X(b, {"N", 1, 4});
                       b.AddInitializer("B", {3, 1});
                       auto& n = Node(b, op, {"X", "B"});
                       if (std::string(op) == "Mod") SetIntAttr(n, "fmod", 1);
                     },
                     {"float32[N,3,4]"}});
  }
  // Folding: [N,3,4] with Add/Sub/Mul/Div by [2,2,2] and Mod by 3.
  const std::map<std::string, std::string> folded = {{"Add", "{N + 2,5,6}"},
                                                     {"Sub", "{N - 2,1,2}"},
                                                     {"Mul", "{2*N,6,8}"},
                                                     {"Div", "{floor((N)/(2)),1,2}"},
                                                     {"Mod", "{((N) mod (2)),1,0}"}};
  for (const auto& [op, values] : folded) {
    cases.push_back({op,
                     13,
                     [op](GraphBuilder& b) {
                       X(b);
                       b.AddNode("Shape", {"X"}, {"s"});
                       b.AddInt64Initializer("two", {2, 2, 2});
                       Node(b, op, {"s", "two"});
                     },
                     {"int64[3]=" + values}});
  }
  for (const char* op : {"BitShift"}) {
    cases.push_back({op,
                     13,
                     [op](GraphBuilder& b) {
                       X(b, {"N", 4}, kUInt8);
                       b.AddInput("S", kUInt8, {4});
                       SetStringAttr(Node(b, op, {"X", "S"}), "direction", "LEFT");
                     },
                     {"uint8[N,4]"}});
  }
  for (const char* op : {"BitwiseAnd", "BitwiseOr", "BitwiseXor"}) {
    cases.push_back({op,
                     18,
                     [op](GraphBuilder& b) {
                       X(b, {"N", 1}, kInt32);
                       b.AddInput("S", kInt32, {3});
                       Node(b, op, {"X", "S"});
                     },
                     {"int32[N,3]"}});
  }
  // Comparisons decide what sign analysis proves: N >= 0, so N != -1 and N > -1.
  const std::map<std::string, std::string> compared = {{"Equal", "{0,0,1}"},
                                                       {"Less", "{0,0,0}"},
                                                       {"LessOrEqual", "{0,0,1}"},
                                                       {"Greater", "{1,1,0}"},
                                                       {"GreaterOrEqual", "{1,1,1}"}};
  for (const auto& [op, values] : compared) {
    cases.push_back({op,
                     16,
                     [op](GraphBuilder& b) {
                       X(b);
                       b.AddNode("Shape", {"X"}, {"s"});
                       b.AddInt64Initializer("c", {-1, -1, 4});
                       Node(b, op, {"s", "c"});
                     },
                     {"bool[3]=" + values}});
  }
  for (const char* op : {"And", "Or", "Xor"}) {
    cases.push_back({op,
                     13,
                     [op](GraphBuilder& b) {
                       X(b, {"N", 1}, kBool);
                       b.AddInput("S", kBool, {3});
                       Node(b, op, {"X", "S"});
                     },
                     {"bool[N,3]"}});
  }
  for (const char* op : {"Sum", "Mean", "Max", "Min"}) {
    cases.push_back({op,
                     13,
                     [op](GraphBuilder& b) {
                       X(b, {"N", 1, 1});
                       b.AddInitializer("B", {3, 1});
                       b.AddInitializer("C", {4});
                       Node(b, op, {"X", "B", "C"});
                     },
                     {"float32[N,3,4]"}});
  }
  cases.push_back({"Max",
                   13,
                   [](GraphBuilder& b) {
                     X(b);
                     b.AddNode("Shape", {"X"}, {"s"});
                     b.AddInt64Initializer("c", {0, 5, 1});
                     Node(b, "Max", {"s", "c"});
                   },
                   {"int64[3]={N,5,4}"}});
  cases.push_back({"Where",
                   16,
                   [](GraphBuilder& b) {
                     X(b, {"N", 1}, kBool);
                     b.AddInitializer("A", {3});
                     b.AddInitializer("B", {1});
                     Node(b, "Where", {"X", "A", "B"});
                   },
                   {"float32[N,3]"}});
  // Exporters' Expand target: Where(Equal(shape, -1), ones, shape).
  cases.push_back({"Where",
                   16,
                   [](GraphBuilder& b) {
                     X(b);
                     b.AddNode("Shape", {"X"}, {"s"});
                     b.AddInt64Initializer("m1", {-1});
                     b.AddInt64Initializer("ones", {1, 1, 1});
                     b.AddNode("Equal", {"s", "m1"}, {"eq"});
                     Node(b, "Where", {"eq", "ones", "s"});
                   },
                   {"int64[3]={N,3,4}"}});
  return cases;
}

std::vector<Case> Reductions() {
  std::vector<Case> cases;
  for (const char* op : {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                         "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"}) {
    cases.push_back({op,
                     13,
                     [op](GraphBuilder& b) {
                       X(b);
                       SetIntsAttr(Node(b, op, {"X"}), "axes", {1});
                     },
                     {"float32[N,1,4]"}});
  }
  cases.push_back({"ReduceSum",
                   13,
                   [](GraphBuilder& b) {
                     X(b);
                     b.AddInt64Initializer("axes", {-1, 1});
                     SetIntAttr(Node(b, "ReduceSum", {"X", "axes"}), "keepdims", 0);
                   },
                   {"float32[N]"}});
  cases.push_back({"ReduceMean",
                   18,
                   [](GraphBuilder& b) {
                     X(b);
                     Node(b, "ReduceMean", {"X"});
                   },
                   {"float32[1,1,1]"}});
  // x.numel() as exporters write it.
  cases.push_back({"ReduceProd",
                   13,
                   [](GraphBuilder& b) {
                     X(b);
                     b.AddNode("Shape", {"X"}, {"s"});
                     SetIntAttr(Node(b, "ReduceProd", {"s"}), "keepdims", 0);
                   },
                   {"int64[]={12*N}"}});
  for (const char* op : {"ArgMax", "ArgMin"}) {
    cases.push_back({op,
                     13,
                     [op](GraphBuilder& b) {
                       X(b);
                       auto& n = Node(b, op, {"X"});
                       SetIntAttr(n, "axis", -2);
                       SetIntAttr(n, "keepdims", 0);
                     },
                     {"int64[N,4]"}});
  }
  return cases;
}

std::vector<Case> ConvPool() {
  std::vector<Case> cases;
  cases.push_back({"Conv",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"N", 3, 224, 224});
                     b.AddInitializer("W", {64, 3, 7, 7});
                     auto& n = Node(b, "Conv", {"X", "W"});
                     SetIntsAttr(n, "strides", {2, 2});
                     SetIntsAttr(n, "pads", {3, 3, 3, 3});
                   },
                   {"float32[N,64,112,112]"}});
  cases.push_back({"Conv",
                   13,
                   [](GraphBuilder& b) {  // symbolic spatial dims
                     X(b, {"N", 3, "H", "W"});
                     b.AddInitializer("Wt", {8, 3, 3, 3});
                     auto& n = Node(b, "Conv", {"X", "Wt"});
                     SetIntsAttr(n, "strides", {1, 2});
                     SetIntsAttr(n, "pads", {1, 1, 1, 1});
                   },
                   {"float32[N,8,H,floor((W + 1)/(2))]"}});
  cases.push_back({"Conv",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"N", 3, "H", 10});
                     b.AddInitializer("Wt", {8, 3, 3, 3});
                     auto& n = Node(b, "Conv", {"X", "Wt"});
                     SetIntsAttr(n, "strides", {2, 2});
                     SetStringAttr(n, "auto_pad", "SAME_UPPER");
                   },
                   {"float32[N,8,H - floor((H)/(2)),5]"}});
  cases.push_back({"ConvInteger",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"N", 3, 8, 8}, kUInt8);
                     b.AddInitializer("W", {4, 3, 3, 3}, kUInt8);
                     Node(b, "ConvInteger", {"X", "W"});
                   },
                   {"int32[N,4,6,6]"}});
  cases.push_back({"QLinearConv",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"N", 3, 8, 8}, kUInt8);
                     AddFloats(b, "xs", {1}, std::vector<int64_t>{});
                     b.AddInitializer("xz", {}, kUInt8);
                     b.AddInitializer("W", {4, 3, 3, 3}, kUInt8);
                     b.AddInitializer("wz", {}, kUInt8);
                     b.AddInitializer("yz", {}, kUInt8);
                     Node(b, "QLinearConv", {"X", "xs", "xz", "W", "xs", "wz", "xs", "yz"});
                   },
                   {"uint8[N,4,6,6]"}});
  cases.push_back({"ConvTranspose",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"N", 8, 5, "W"});
                     b.AddInitializer("Wt", {8, 4, 3, 3});
                     auto& n = Node(b, "ConvTranspose", {"X", "Wt"});
                     SetIntsAttr(n, "strides", {2, 2});
                     SetIntAttr(n, "group", 2);
                   },
                   {"float32[N,8,11,2*W + 1]"}});
  for (const char* op : {"AveragePool", "LpPool"}) {
    cases.push_back({op,
                     13,
                     [op](GraphBuilder& b) {
                       X(b, {"N", 64, 112, 112});
                       auto& n = Node(b, op, {"X"});
                       SetIntsAttr(n, "kernel_shape", {3, 3});
                       SetIntsAttr(n, "strides", {2, 2});
                       SetIntsAttr(n, "pads", {1, 1, 1, 1});
                     },
                     {"float32[N,64,56,56]"}});
  }
  cases.push_back({"MaxPool",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"N", 64, 7, 7});
                     auto& n = Node(b, "MaxPool", {"X"}, 2);
                     SetIntsAttr(n, "kernel_shape", {2, 2});
                     SetIntsAttr(n, "strides", {2, 2});
                     SetIntAttr(n, "ceil_mode", 1);
                   },
                   {"float32[N,64,4,4]", "int64[N,64,4,4]"}});
  // MaxUnpool: (D - 1) * stride + kernel - pads; with output_shape, its elements.
  cases.push_back({"MaxUnpool",
                   11,
                   [](GraphBuilder& b) {
                     X(b, {"N", 64, 4, 4});
                     b.AddInput("I", kInt64, {"N", 64, 4, 4});
                     auto& n = Node(b, "MaxUnpool", {"X", "I"});
                     SetIntsAttr(n, "kernel_shape", {2, 2});
                     SetIntsAttr(n, "strides", {2, 2});
                     SetIntsAttr(n, "pads", {1, 0, 0, 1});
                   },
                   {"float32[N,64,7,7]"}});
  cases.push_back(
      {"MaxUnpool",
       11,
       [](GraphBuilder& b) {
         X(b, {"N", 64, 4, 4});
         b.AddInput("I", kInt64, {"N", 64, 4, 4});
         b.AddInput("Z", kFloat, {"N", 64, 9, 9});
         b.AddNode("Shape", {"Z"}, {"z_shape"});
         SetIntsAttr(Node(b, "MaxUnpool", {"X", "I", "z_shape"}), "kernel_shape", {2, 2});
       },
       {"float32[N,64,9,9]"}});
  cases.push_back({"RoiAlign",
                   16,
                   [](GraphBuilder& b) {
                     X(b, {"N", 256, 14, 14});
                     b.AddInput("R", kFloat, {"rois", 4});
                     b.AddInput("I", kInt64, {"rois"});
                     auto& n = Node(b, "RoiAlign", {"X", "R", "I"});
                     SetIntAttr(n, "output_height", 7);
                     SetIntAttr(n, "output_width", 5);
                   },
                   {"float32[rois,256,7,5]"}});
  cases.push_back({"MaxRoiPool",
                   1,
                   [](GraphBuilder& b) {
                     X(b, {"N", 64, 14, 14});
                     b.AddInput("R", kFloat, {"rois", 5});
                     SetIntsAttr(Node(b, "MaxRoiPool", {"X", "R"}), "pooled_shape", {3, 2});
                   },
                   {"float32[rois,64,3,2]"}});
  cases.push_back({"ReverseSequence",
                   10,
                   [](GraphBuilder& b) {
                     X(b, {"T", "N", 8});
                     b.AddInput("L", kInt64, {"N"});
                     auto& n = Node(b, "ReverseSequence", {"X", "L"});
                     SetIntAttr(n, "batch_axis", 1);
                     SetIntAttr(n, "time_axis", 0);
                   },
                   {"float32[T,N,8]"}});
  for (const char* op : {"GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"}) {
    cases.push_back({op,
                     13,
                     [op](GraphBuilder& b) {
                       X(b, {"N", 64, 7, 7});
                       Node(b, op, {"X"});
                     },
                     {"float32[N,64,1,1]"}});
  }
  return cases;
}

std::vector<Case> Products() {
  std::vector<Case> cases;
  cases.push_back({"MatMul",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"N", "S", 64});
                     b.AddInitializer("W", {64, 32});
                     Node(b, "MatMul", {"X", "W"});
                   },
                   {"float32[N,S,32]"}});
  cases.push_back({"MatMul",
                   13,
                   [](GraphBuilder& b) {  // vector operands
                     X(b, {"N", 5, 64});
                     b.AddInitializer("v", {64});
                     Node(b, "MatMul", {"X", "v"});
                   },
                   {"float32[N,5]"}});
  cases.push_back({"MatMulInteger",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"N", 4}, kUInt8);
                     b.AddInitializer("W", {4, 5}, kUInt8);
                     Node(b, "MatMulInteger", {"X", "W"});
                   },
                   {"int32[N,5]"}});
  cases.push_back({"QLinearMatMul",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"N", 4}, kUInt8);
                     AddFloats(b, "s", {1}, std::vector<int64_t>{});
                     b.AddInitializer("z", {}, kUInt8);
                     b.AddInitializer("W", {4, 5}, kUInt8);
                     Node(b, "QLinearMatMul", {"X", "s", "z", "W", "s", "z", "s", "z"});
                   },
                   {"uint8[N,5]"}});
  cases.push_back({"Gemm",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"N", 16});
                     b.AddInitializer("W", {32, 16});
                     b.AddInitializer("B", {32});
                     SetIntAttr(Node(b, "Gemm", {"X", "W", "B"}), "transB", 1);
                   },
                   {"float32[N,32]"}});
  cases.push_back({"Einsum",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"N", 3, 4});
                     b.AddInput("Y", kFloat, {"N", 4, 5});
                     SetStringAttr(Node(b, "Einsum", {"X", "Y"}), "equation", "bij, bjk -> bik");
                   },
                   {"float32[N,3,5]"}});
  cases.push_back({"Einsum",
                   13,
                   [](GraphBuilder& b) {  // implicit output, ellipsis
                     X(b, {"N", 7, 3, 4});
                     b.AddInput("Y", kFloat, {4, 5});
                     SetStringAttr(Node(b, "Einsum", {"X", "Y"}), "equation", "...ij,jk");
                   },
                   {"float32[N,7,3,5]"}});
  return cases;
}

std::vector<Case> ShapeOps() {
  std::vector<Case> cases;
  cases.push_back({"Reshape",
                   13,
                   [](GraphBuilder& b) {  // exporter style
                     X(b);
                     b.AddInt64Initializer("zero", {0}, std::vector<int64_t>{});
                     b.AddInt64Initializer("axes0", {0});
                     b.AddInt64Initializer("m1", {-1});
                     b.AddNode("Shape", {"X"}, {"s"});
                     SetIntAttr(b.AddNode("Gather", {"s", "zero"}, {"n"}), "axis", 0);
                     b.AddNode("Unsqueeze", {"n", "axes0"}, {"n1"});
                     SetIntAttr(b.AddNode("Concat", {"n1", "m1"}, {"target"}), "axis", 0);
                     Node(b, "Reshape", {"X", "target"});
                   },
                   {"float32[N,12]"}});
  cases.push_back({"Reshape",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"B", "S", 64});
                     b.AddInt64Initializer("t", {0, 0, 8, -1});
                     Node(b, "Reshape", {"X", "t"});
                   },
                   {"float32[B,S,8,8]"}});
  cases.push_back({"Reshape",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"B", "S", 64});
                     b.AddInt64Initializer("t", {-1, 64});
                     Node(b, "Reshape", {"X", "t"});
                   },
                   {"float32[B*S,64]"}});
  cases.push_back({"Flatten",
                   13,
                   [](GraphBuilder& b) {
                     X(b);
                     Node(b, "Flatten", {"X"});
                   },
                   {"float32[N,12]"}});
  cases.push_back({"Squeeze",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"N", 1, 4});
                     b.AddInt64Initializer("axes", {1});
                     Node(b, "Squeeze", {"X", "axes"});
                   },
                   {"float32[N,4]"}});
  cases.push_back({"Unsqueeze",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"N", 4});
                     b.AddInt64Initializer("axes", {0, -1});
                     Node(b, "Unsqueeze", {"X", "axes"});
                   },
                   {"float32[1,N,4,1]"}});
  cases.push_back({"Unsqueeze",
                   11,
                   [](GraphBuilder& b) {  // axes attribute (opset < 13)
                     X(b, {"N", 4});
                     SetIntsAttr(Node(b, "Unsqueeze", {"X"}), "axes", {1});
                   },
                   {"float32[N,1,4]"}});
  cases.push_back({"Transpose",
                   13,
                   [](GraphBuilder& b) {
                     X(b);
                     SetIntsAttr(Node(b, "Transpose", {"X"}), "perm", {0, 2, 1});
                   },
                   {"float32[N,4,3]"}});
  cases.push_back({"Expand",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {1, 4});
                     b.AddInput("Y", kFloat, {"N", 1});
                     b.AddNode("Shape", {"Y"}, {"s"});
                     Node(b, "Expand", {"X", "s"});
                   },
                   {"float32[N,4]"}});
  cases.push_back({"Tile",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"N", 3});
                     b.AddInt64Initializer("r", {2, 2});
                     Node(b, "Tile", {"X", "r"});
                   },
                   {"float32[2*N,6]"}});
  cases.push_back({"Pad",
                   13,
                   [](GraphBuilder& b) {
                     X(b);
                     b.AddInt64Initializer("p", {0, 0, 1, 0, 0, 2});
                     Node(b, "Pad", {"X", "p"});
                   },
                   {"float32[N,3,7]"}});
  cases.push_back({"Resize",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"N", 3, "H", 8});
                     AddFloats(b, "roi", {});
                     AddFloats(b, "scales", {1, 1, 2, 0.5});
                     Node(b, "Resize", {"X", "roi", "scales"});
                   },
                   {"float32[N,3,2*H,4]"}});
  cases.push_back({"Resize",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"N", 3, 8, 8});
                     b.AddInt64Initializer("sizes", {2, 3, 5, 6});
                     b.AddNode("Shape", {"X"}, {"s"});
                     Node(b, "Resize", {"X", "", "", "sizes"});
                   },
                   {"float32[2,3,5,6]"}});
  cases.push_back({"Upsample",
                   9,
                   [](GraphBuilder& b) {
                     X(b, {"N", 3, 4, 4});
                     AddFloats(b, "scales", {1, 1, 2, 3});
                     Node(b, "Upsample", {"X", "scales"});
                   },
                   {"float32[N,3,8,12]"}});
  cases.push_back({"DepthToSpace",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"N", 8, 2, 3});
                     SetIntAttr(Node(b, "DepthToSpace", {"X"}), "blocksize", 2);
                   },
                   {"float32[N,2,4,6]"}});
  cases.push_back({"SpaceToDepth",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"N", 2, 4, 6});
                     SetIntAttr(Node(b, "SpaceToDepth", {"X"}), "blocksize", 2);
                   },
                   {"float32[N,8,2,3]"}});
  cases.push_back({"Concat",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"N", 3});
                     b.AddInput("Y", kFloat, {"N", "K"});
                     SetIntAttr(Node(b, "Concat", {"X", "Y"}), "axis", -1);
                   },
                   {"float32[N,K + 3]"}});
  cases.push_back({"Split",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"N", 6});
                     b.AddInt64Initializer("split", {2, 4});
                     SetIntAttr(Node(b, "Split", {"X", "split"}, 2), "axis", 1);
                   },
                   {"float32[N,2]", "float32[N,4]"}});
  cases.push_back({"Split",
                   13,
                   [](GraphBuilder& b) {  // equal parts of a symbolic dim
                     X(b, {"N", "S"});
                     SetIntAttr(Node(b, "Split", {"X"}, 3), "axis", 1);
                   },
                   {"float32[N,((S)/(3))]", "float32[N,((S)/(3))]", "float32[N,((S)/(3))]"}});
  cases.push_back({"Slice",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"N", 10});
                     b.AddInt64Initializer("starts", {1});
                     b.AddInt64Initializer("ends", {-1});
                     b.AddInt64Initializer("axes", {1});
                     Node(b, "Slice", {"X", "starts", "ends", "axes"});
                   },
                   {"float32[N,8]"}});
  cases.push_back({"Slice",
                   13,
                   [](GraphBuilder& b) {  // to the end of a symbolic dim
                     X(b, {"N", "S"});
                     b.AddInt64Initializer("starts", {0});
                     b.AddInt64Initializer("ends", {std::numeric_limits<int64_t>::max()});
                     b.AddInt64Initializer("axes", {1});
                     Node(b, "Slice", {"X", "starts", "ends", "axes"});
                   },
                   {"float32[N,S]"}});
  cases.push_back({"Slice",
                   13,
                   [](GraphBuilder& b) {  // shape vector elements
                     X(b);
                     b.AddNode("Shape", {"X"}, {"s"});
                     b.AddInt64Initializer("starts", {-2});
                     b.AddInt64Initializer("ends", {std::numeric_limits<int64_t>::max()});
                     Node(b, "Slice", {"s", "starts", "ends"});
                   },
                   {"int64[2]={3,4}"}});
  cases.push_back({"Slice",
                   9,
                   [](GraphBuilder& b) {  // attributes (opset < 10)
                     X(b, {"N", 10});
                     auto& n = Node(b, "Slice", {"X"});
                     SetIntsAttr(n, "starts", {2});
                     SetIntsAttr(n, "ends", {5});
                     SetIntsAttr(n, "axes", {1});
                   },
                   {"float32[N,3]"}});
  cases.push_back({"Gather",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"N", 5, 6});
                     b.AddInput("I", kInt64, {2, 3});
                     SetIntAttr(Node(b, "Gather", {"X", "I"}), "axis", 1);
                   },
                   {"float32[N,2,3,6]"}});
  cases.push_back({"Gather",
                   13,
                   [](GraphBuilder& b) {
                     X(b);
                     b.AddNode("Shape", {"X"}, {"s"});
                     b.AddInt64Initializer("i", {-1, 0});
                     Node(b, "Gather", {"s", "i"});
                   },
                   {"int64[2]={4,N}"}});
  cases.push_back({"GatherElements",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"N", 4});
                     b.AddInput("I", kInt64, {"N", 2});
                     SetIntAttr(Node(b, "GatherElements", {"X", "I"}), "axis", 1);
                   },
                   {"float32[N,2]"}});
  cases.push_back({"GatherND",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"N", 4, 5});
                     b.AddInput("I", kInt64, {"N", 3, 1});
                     SetIntAttr(Node(b, "GatherND", {"X", "I"}), "batch_dims", 1);
                   },
                   {"float32[N,3,5]"}});
  for (const char* op : {"Scatter", "ScatterElements", "ScatterND"}) {
    cases.push_back({op,
                     op == std::string("Scatter") ? 9 : 13,
                     [op](GraphBuilder& b) {
                       X(b, {"N", 4});
                       b.AddInput("I", kInt64, {"N", 1});
                       b.AddInput("U", kFloat, {"N", 1});
                       Node(b, op, {"X", "I", "U"});
                     },
                     {"float32[N,4]"}});
  }
  cases.push_back({"Compress",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"N", 4});
                     onnx::TensorProto& t = *b.graph().add_initializer();
                     t.set_name("cond");
                     t.set_data_type(kBool);
                     t.add_dims(4);
                     for (int v : {1, 0, 1, 1}) t.add_int32_data(v);
                     SetIntAttr(Node(b, "Compress", {"X", "cond"}), "axis", 1);
                   },
                   {"float32[N,3]"}});
  return cases;
}

std::vector<Case> Generators() {
  std::vector<Case> cases;
  cases.push_back({"Shape",
                   15,
                   [](GraphBuilder& b) {
                     X(b);
                     SetIntAttr(Node(b, "Shape", {"X"}), "start", -2);
                   },
                   {"int64[2]={3,4}"}});
  cases.push_back({"Size",
                   13,
                   [](GraphBuilder& b) {
                     X(b);
                     Node(b, "Size", {"X"});
                   },
                   {"int64[]={12*N}"}});
  cases.push_back({"Constant",
                   13,
                   [](GraphBuilder& b) {
                     SetIntsAttr(Node(b, "Constant", {}), "value_ints", {1, 2, 3});
                   },
                   {"int64[3]={1,2,3}"}});
  cases.push_back({"Constant",
                   13,
                   [](GraphBuilder& b) {
                     testing::SetTensorAttr(Node(b, "Constant", {}), "value",
                                            Int64Tensor({5, 6}, std::vector<int64_t>{2, 1}));
                   },
                   {"int64[2,1]={5,6}"}});
  cases.push_back({"ConstantOfShape",
                   13,
                   [](GraphBuilder& b) {
                     X(b);
                     b.AddNode("Shape", {"X"}, {"s"});
                     Node(b, "ConstantOfShape", {"s"});
                   },
                   {"float32[N,3,4]"}});
  cases.push_back({"ConstantOfShape",
                   13,
                   [](GraphBuilder& b) {
                     b.AddInt64Initializer("s", {3});
                     testing::SetTensorAttr(Node(b, "ConstantOfShape", {"s"}), "value",
                                            Int64Tensor({7}));
                   },
                   {"int64[3]={7,7,7}"}});
  cases.push_back({"Range",
                   13,
                   [](GraphBuilder& b) {
                     b.AddInt64Initializer("a", {0}, std::vector<int64_t>{});
                     b.AddInt64Initializer("l", {10}, std::vector<int64_t>{});
                     b.AddInt64Initializer("d", {3}, std::vector<int64_t>{});
                     Node(b, "Range", {"a", "l", "d"});
                   },
                   {"int64[4]={0,3,6,9}"}});
  cases.push_back({"Range",
                   13,
                   [](GraphBuilder& b) {  // torch.arange(x.size(1))
                     X(b, {"N", "S"});
                     b.AddNode("Shape", {"X"}, {"s"});
                     b.AddInt64Initializer("one", {1}, std::vector<int64_t>{});
                     b.AddInt64Initializer("zero", {0}, std::vector<int64_t>{});
                     b.AddNode("Gather", {"s", "one"}, {"len"});
                     Node(b, "Range", {"zero", "len", "one"});
                   },
                   {"int64[S]"}});
  cases.push_back({"OneHot",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"N", 3}, kInt64);
                     b.AddInt64Initializer("depth", {10});
                     AddFloats(b, "values", {0, 1});
                     Node(b, "OneHot", {"X", "depth", "values"});
                   },
                   {"float32[N,3,10]"}});
  for (const char* op : {"RandomNormal", "RandomUniform"}) {
    cases.push_back({op,
                     13,
                     [op](GraphBuilder& b) {
                       SetIntsAttr(Node(b, op, {}), "shape", {2, 3});
                     },
                     {"float32[2,3]"}});
  }
  cases.push_back({"Multinomial",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"N", 10});
                     SetIntAttr(Node(b, "Multinomial", {"X"}), "sample_size", 5);
                   },
                   {"int32[N,5]"}});
  return cases;
}

std::vector<Case> Others() {
  std::vector<Case> cases;
  cases.push_back({"TopK",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"N", 10});
                     b.AddInt64Initializer("k", {3});
                     Node(b, "TopK", {"X", "k"}, 2);
                   },
                   {"float32[N,3]", "int64[N,3]"}});
  cases.push_back({"NonZero",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"N", 3});
                     Node(b, "NonZero", {"X"});
                   },
                   {"int64[2,?NonZero_node:nonzero]"}});
  cases.push_back({"Unique",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"N"});
                     Node(b, "Unique", {"X"}, 4);
                   },
                   {"float32[?Unique_node:unique]", "int64[?Unique_node:unique]", "int64[N]",
                    "int64[?Unique_node:unique]"}});
  cases.push_back({"NonMaxSuppression",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {1, 6, 4});
                     b.AddInput("S", kFloat, {1, 1, 6});
                     Node(b, "NonMaxSuppression", {"X", "S"});
                   },
                   {"int64[?NonMaxSuppression_node:selected,3]"}});
  cases.push_back({"BatchNormalization",
                   15,
                   [](GraphBuilder& b) {
                     X(b, {"N", 16, 8, 8});
                     for (const char* p : {"s", "bb", "m", "v"}) b.AddInitializer(p, {16});
                     SetIntAttr(Node(b, "BatchNormalization", {"X", "s", "bb", "m", "v"}, 3),
                                "training_mode", 1);
                   },
                   {"float32[N,16,8,8]", "float32[16]", "float32[16]"}});
  cases.push_back({"LayerNormalization",
                   17,
                   [](GraphBuilder& b) {
                     X(b, {"N", "S", 64});
                     b.AddInitializer("g", {64});
                     Node(b, "LayerNormalization", {"X", "g"}, 3);
                   },
                   {"float32[N,S,64]", "float32[N,S,1]", "float32[N,S,1]"}});
  cases.push_back({"SoftmaxCrossEntropyLoss",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"N", 10});
                     b.AddInput("L", kInt64, {"N"});
                     Node(b, "SoftmaxCrossEntropyLoss", {"X", "L"}, 2);
                   },
                   {"float32[]", "float32[N,10]"}});
  cases.push_back(
      {"NegativeLogLikelihoodLoss",
       13,
       [](GraphBuilder& b) {
         X(b, {"N", 10, 7});
         b.AddInput("L", kInt64, {"N", 7});
         SetStringAttr(Node(b, "NegativeLogLikelihoodLoss", {"X", "L"}), "reduction", "none");
       },
       {"float32[N,7]"}});
  for (const auto& [op, gates, outs] : std::vector<std::tuple<const char*, int, int>>{
           {"LSTM", 4, 3}, {"GRU", 3, 2}, {"RNN", 1, 2}}) {
    std::vector<std::string> want{"float32[S,2,N,16]", "float32[2,N,16]"};
    if (outs == 3) want.push_back("float32[2,N,16]");
    cases.push_back({op, 14,
                     [op = op, gates = gates, outs = outs](GraphBuilder& b) {
                       X(b, {"S", "N", 8});
                       b.AddInitializer("W", {2, gates * 16, 8});
                       b.AddInitializer("R", {2, gates * 16, 16});
                       auto& n = Node(b, op, {"X", "W", "R"}, outs);
                       SetIntAttr(n, "hidden_size", 16);
                       SetStringAttr(n, "direction", "bidirectional");
                     },
                     want});
  }
  cases.push_back({"Attention",
                   23,
                   [](GraphBuilder& b) {
                     X(b, {"B", 8, "L", 64});
                     b.AddInput("K", kFloat, {"B", 2, "T", 64});
                     b.AddInput("V", kFloat, {"B", 2, "T", 32});
                     Node(b, "Attention", {"X", "K", "V"});
                   },
                   {"float32[B,8,L,32]"}});
  cases.push_back({"Attention",
                   23,
                   [](GraphBuilder& b) {  // 3-D with heads, and a past
                     X(b, {"B", "L", 512});
                     b.AddInput("K", kFloat, {"B", "T", 128});
                     b.AddInput("V", kFloat, {"B", "T", 128});
                     b.AddInput("PK", kFloat, {"B", 2, "P", 64});
                     b.AddInput("PV", kFloat, {"B", 2, "P", 64});
                     auto& n = Node(b, "Attention", {"X", "K", "V", "", "PK", "PV"}, 4);
                     SetIntAttr(n, "q_num_heads", 8);
                     SetIntAttr(n, "kv_num_heads", 2);
                   },
                   {"float32[B,L,512]", "float32[B,2,T + P,64]", "float32[B,2,T + P,64]",
                    "float32[B,8,L,T + P]"}});
  // ONNX Runtime's contrib attention ops (onnxruntime/core/graph/contrib_ops/bert_defs.cc).
  cases.push_back(
      {"Attention",
       17,
       [](GraphBuilder& b) {  // packed QKV weights, a past: present grows by L
         X(b, {"B", "L", 64});
         b.AddInitializer("W", {64, 192});
         b.AddInitializer("Bias", {192});
         b.AddInput("M", kInt32, {"B", "T"});
         b.AddInput("Past", kFloat, {2, "B", 4, "P", 16});
         SetIntAttr(MsNode(b, "Attention", {"X", "W", "Bias", "M", "Past"}, 2), "num_heads", 4);
       },
       {"float32[B,L,64]", "float32[2,B,4,L + P,16]"},
       "com.microsoft"});
  cases.push_back({"Attention",
                   17,
                   [](GraphBuilder& b) {  // qkv_hidden_sizes, no past: present of L
                     X(b, {"B", "L", 64});
                     b.AddInitializer("W", {64, 160});
                     auto& n = MsNode(b, "Attention", {"X", "W"}, 2);
                     SetIntAttr(n, "num_heads", 4);
                     SetIntsAttr(n, "qkv_hidden_sizes", {64, 64, 32});
                   },
                   {"float32[B,L,32]", "float32[2,B,4,L,16]"},
                   "com.microsoft"});
  cases.push_back(
      {"MultiHeadAttention",
       17,
       [](GraphBuilder& b) {  // self attention with a past
         X(b, {"B", "L", 64});
         b.AddInput("K", kFloat, {"B", "L", 64});
         b.AddInput("V", kFloat, {"B", "L", 32});
         b.AddInput("PK", kFloat, {"B", 4, "P", 16});
         b.AddInput("PV", kFloat, {"B", 4, "P", 8});
         SetIntAttr(MsNode(b, "MultiHeadAttention", {"X", "K", "V", "", "", "", "PK", "PV"}, 4),
                    "num_heads", 4);
       },
       {"float32[B,L,32]", "float32[B,4,L + P,16]", "float32[B,4,L + P,8]", "float32[B,4,L,L + P]"},
       "com.microsoft"});
  cases.push_back({"MultiHeadAttention",
                   17,
                   [](GraphBuilder& b) {  // packed QKV
                     X(b, {"B", "L", 4, 3, 16});
                     SetIntAttr(MsNode(b, "MultiHeadAttention", {"X"}, 3), "num_heads", 4);
                   },
                   {"float32[B,L,64]", "float32[B,4,L,16]", "float32[B,4,L,16]"},
                   "com.microsoft"});
  cases.push_back({"GroupQueryAttention",
                   17,
                   [](GraphBuilder& b) {  // decode: a past of P, present of P + L, fp16 cache
                     X(b, {"B", "L", 256}, onnx::TensorProto::FLOAT16);
                     b.AddInput("K", onnx::TensorProto::FLOAT16, {"B", "L", 64});
                     b.AddInput("V", onnx::TensorProto::FLOAT16, {"B", "L", 64});
                     b.AddInput("PK", onnx::TensorProto::FLOAT16, {"B", 2, "P", 32});
                     b.AddInput("PV", onnx::TensorProto::FLOAT16, {"B", 2, "P", 32});
                     b.AddInput("SeqLens", kInt32, {"B"});
                     b.AddInput("Total", kInt32, {});
                     auto& n = MsNode(b, "GroupQueryAttention",
                                      {"X", "K", "V", "PK", "PV", "SeqLens", "Total"}, 3);
                     SetIntAttr(n, "num_heads", 8);
                     SetIntAttr(n, "kv_num_heads", 2);
                   },
                   {"float16[B,L,256]", "float16[B,2,L + P,32]", "float16[B,2,L + P,32]"},
                   "com.microsoft"});
  cases.push_back(
      {"GroupQueryAttention",
       17,
       [](GraphBuilder& b) {  // packed QKV, a known total length, no past
         X(b, {"B", 16, 384});
         b.AddInput("SeqLens", kInt32, {"B"});
         onnx::TensorProto& total = b.AddInitializer("Total", {}, kInt32);
         total.add_int32_data(16);
         auto& n = MsNode(b, "GroupQueryAttention", {"X", "", "", "", "", "SeqLens", "Total"}, 3);
         SetIntAttr(n, "num_heads", 8);
         SetIntAttr(n, "kv_num_heads", 2);
       },
       {"float32[B,16,256]", "float32[B,2,16,32]", "float32[B,2,16,32]"},
       "com.microsoft"});
  cases.push_back(
      {"GroupQueryAttention",
       17,
       [](GraphBuilder& b) {  // a past and a known total: max(P, total)
         X(b, {"B", 1, 256});
         b.AddInput("K", kFloat, {"B", 1, 64});
         b.AddInput("V", kFloat, {"B", 1, 64});
         b.AddInput("PK", kFloat, {"B", 2, 128, 32});
         b.AddInput("PV", kFloat, {"B", 2, 128, 32});
         b.AddInput("SeqLens", kInt32, {"B"});
         onnx::TensorProto& total = b.AddInitializer("Total", {}, kInt32);
         total.add_int32_data(200);
         auto& n =
             MsNode(b, "GroupQueryAttention", {"X", "K", "V", "PK", "PV", "SeqLens", "Total"}, 4);
         SetIntAttr(n, "num_heads", 8);
         SetIntAttr(n, "kv_num_heads", 2);
       },
       {"float32[B,1,256]", "float32[B,2,200,32]", "float32[B,2,200,32]", "float32[B,8,1,200]"},
       "com.microsoft"});
  cases.push_back({"GridSample",
                   16,
                   [](GraphBuilder& b) {
                     X(b, {"N", 3, 8, 8});
                     b.AddInput("G", kFloat, {"N", 4, 5, 2});
                     Node(b, "GridSample", {"X", "G"});
                   },
                   {"float32[N,3,4,5]"}});
  cases.push_back({"QuantizeLinear",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"N", 4});
                     AddFloats(b, "s", {1}, std::vector<int64_t>{});
                     b.AddInitializer("z", {}, kUInt8);
                     Node(b, "QuantizeLinear", {"X", "s", "z"});
                   },
                   {"uint8[N,4]"}});
  cases.push_back({"DequantizeLinear",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"N", 4}, kUInt8);
                     AddFloats(b, "s", {1}, std::vector<int64_t>{});
                     Node(b, "DequantizeLinear", {"X", "s"});
                   },
                   {"float32[N,4]"}});
  cases.push_back({"DynamicQuantizeLinear",
                   13,
                   [](GraphBuilder& b) {
                     X(b, {"N", 4});
                     Node(b, "DynamicQuantizeLinear", {"X"}, 3);
                   },
                   {"uint8[N,4]", "float32[]", "uint8[]"}});
  return cases;
}

std::vector<Case> AllCases() {
  std::vector<Case> all;
  for (auto family :
       {Unaries, Elementwise, Reductions, ConvPool, Products, ShapeOps, Generators, Others}) {
    for (Case& c : family()) all.push_back(std::move(c));
  }
  return all;
}

TEST(ShapeRulesRegistry, EveryShapeRuleHasACase) {
  std::set<std::string> tested;
  for (const Case& c : AllCases()) tested.insert(Key(c.domain, c.op));
  int with_infer = 0;
  for (const ops::OpRule& r : ops::AllRules()) {
    if (r.infer == nullptr) continue;
    ++with_infer;
    EXPECT_TRUE(tested.count(Key(r.domain, r.op_type)))
        << "shape rule without a case: " << Key(r.domain, r.op_type);
  }
  for (const Case& c : AllCases()) {
    const ops::OpRule* r = ops::FindRule(c.domain, c.op);
    EXPECT_TRUE(r != nullptr && r->infer != nullptr)
        << "case for an op without a rule: " << Key(c.domain, c.op);
  }
  EXPECT_GE(with_infer, 150);
  RecordProperty("ops_with_shape_rule", with_infer);
}

TEST(ShapeRules, EveryCaseInfersTheExpectedTypes) {
  const std::vector<Case> cases = AllCases();
  EXPECT_GE(cases.size(), 180u);
  for (const Case& c : cases) {
    GraphBuilder b(c.opset);
    c.build(b);
    for (size_t i = 0; i < c.want.size(); ++i) b.AddOutput("y" + std::to_string(i), 0);
    Loaded m = Load(b);
    if (m.model == nullptr) {
      ADD_FAILURE() << c.op << ": did not load";
      continue;
    }
    const std::string op = Key(c.domain, c.op);
    EXPECT_EQ(m.sym().rule_failures, 0)
        << op << ": " << (m.sym().failure_examples.empty() ? "" : m.sym().failure_examples[0]);
    for (size_t i = 0; i < c.want.size(); ++i) {
      const std::string y = "y" + std::to_string(i);
      EXPECT_EQ(m.Type(y), c.want[i]) << op << " (opset " << c.opset << ") output " << y;
      EXPECT_FALSE(m.Fallback(y)) << op << " output " << y;
    }
  }
}

TEST(ShapeRulesRegistry, OpsWithoutRulesListsOnnxOperatorsTheTableLacks) {
  const OpCoverage c = ops::OpsWithoutRules();
  EXPECT_GE(c.onnx_ops.size(), 150u);
  auto has = [](const std::vector<std::string>& v, const std::string& op) {
    return std::find(v.begin(), v.end(), op) != v.end();
  };
  EXPECT_TRUE(has(c.onnx_ops, "Relu"));
  EXPECT_FALSE(has(c.without_rule, "Relu"));
  EXPECT_FALSE(has(c.without_shape_rule, "Reshape"));
  EXPECT_TRUE(has(c.without_rule, "Det"));  // no rule at all yet
  EXPECT_TRUE(has(c.without_shape_rule, "Det"));
  EXPECT_TRUE(std::is_sorted(c.without_shape_rule.begin(), c.without_shape_rule.end()));
  for (const std::string& op : c.without_rule) EXPECT_TRUE(has(c.without_shape_rule, op)) << op;
  std::cout << "ONNX " << c.onnx_ops.size() << " ops; without a rule: " << c.without_rule.size()
            << "; without a shape rule: " << c.without_shape_rule.size() << ":";
  for (const std::string& op : c.without_shape_rule) std::cout << " " << op;
  std::cout << "\n";
  RecordProperty("onnx_ops", static_cast<int>(c.onnx_ops.size()));
  RecordProperty("onnx_ops_without_shape_rule", static_cast<int>(c.without_shape_rule.size()));
}

// ---------------------------------------------------------------------------------------------
// The pass: symbols, fallback flags, declared types.

TEST(SymbolicShapes, InputSymbolsShareTheBatchAndNameInnerUnknowns) {
  GraphBuilder b(13);
  b.AddInput("A", kFloat, {TestDim::Unknown(), 4});
  b.AddInput("B", kFloat, {TestDim::Unknown(), TestDim::Unknown()});
  b.AddInput("C", kFloat, {"batch", 2});  // a dim_param named like the batch symbol
  SetIntAttr(b.AddNode("Concat", {"A", "B"}, {"y0"}), "axis", 1);
  b.AddOutput("y0", 0);
  Loaded m = Load(b);
  ASSERT_NE(m.model, nullptr);
  EXPECT_EQ(m.sym().batch_symbol, "batch_");
  EXPECT_EQ(m.Type("A"), "float32[batch_,4]");
  EXPECT_EQ(m.Type("B"), "float32[batch_,unk_B_1]");
  EXPECT_EQ(m.Type("C"), "float32[batch,2]");
  EXPECT_EQ(m.Type("y0"), "float32[batch_,unk_B_1 + 4]");
}

TEST(SymbolicShapes, OpsWithoutRulesAreFlaggedForTheOnnxFallbackOnly) {
  GraphBuilder b(13);
  b.AddOpset("com.example", 1);
  X(b, {"N", 4});
  b.AddNode("Det", {"X"}, {"det"});  // ONNX could infer it, but Det is not vetted for ONNX
  b.AddNode("Relu", {"det"}, {"after"});
  b.AddNode("Custom", {"X"}, {"custom"}, "custom", "com.example");  // nobody can infer it
  b.AddNode("Relu", {"custom"}, {"after_custom"});
  onnx::ValueInfoProto* vi = b.graph().add_value_info();
  vi->set_name("custom");
  std::vector<TestDim> dims{"N", 7};
  testing::SetTensorType(*vi, kFloat, &dims);
  b.AddNode("NonZero", {"X"}, {"nz"});
  for (const char* o : {"after", "after_custom", "nz"}) b.AddOutput(o, 0);
  Loaded m = Load(b);
  ASSERT_NE(m.model, nullptr);
  // Only If, Loop and Scan go to ONNX without a memest rule (core/onnx_fallback.h): Det stays
  // unknown, and so does what follows it.
  EXPECT_FALSE(m.Fallback("det"));
  EXPECT_FALSE(m.Fallback("after"));
  EXPECT_FALSE(m.sym().any_fallback);
  // A custom op: its declared type seeds the pass; nothing to fall back on.
  EXPECT_EQ(m.Type("custom"), "float32[N,7]");
  EXPECT_EQ(m.Type("after_custom"), "float32[N,7]");
  EXPECT_FALSE(m.Fallback("after_custom"));
  // Data-dependent sizes never ask for the fallback.
  EXPECT_FALSE(m.Fallback("nz"));
  EXPECT_EQ(m.sym().ops_without_rule, (std::vector<std::string>{"Det", "com.example::Custom"}));
}

TEST(SymbolicShapes, EvaluateShapesBindsSymbolsByName) {
  GraphBuilder b(13);
  X(b, {"N", "S", 64});
  b.AddInt64Initializer("t", {-1, 64});
  b.AddNode("Reshape", {"X", "t"}, {"y0"});
  b.AddOutput("y0", 0);
  Loaded m = Load(b);
  ASSERT_NE(m.model, nullptr);
  auto s = core::EvaluateShapes(m.graph(), m.sym(), {{"N", 3}, {"S", 5}});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const int y = m.graph().FindValue("y0");
  ASSERT_TRUE(s->shapes[static_cast<size_t>(y)].has_value());
  EXPECT_EQ(*s->shapes[static_cast<size_t>(y)], (std::vector<int64_t>{15, 64}));
  EXPECT_EQ(s->dtypes[static_cast<size_t>(y)], kFloat);
  auto partial = core::EvaluateShapes(m.graph(), m.sym(), {{"N", 3}});
  ASSERT_TRUE(partial.ok());
  EXPECT_FALSE(partial->shapes[static_cast<size_t>(y)].has_value());
  auto huge =
      core::EvaluateShapes(m.graph(), m.sym(), {{"N", int64_t{1} << 40}, {"S", int64_t{1} << 40}});
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), ErrorCode::kOverflow);
}

TEST(SymbolicShapes, MalformedNodesAreCountedNeverReachOnnxAndFailBinding) {
  GraphBuilder b(13);
  X(b);
  b.AddInput("Y", kFloat, {"N", 3});
  SetIntAttr(b.AddNode("Concat", {"X", "Y"}, {"y0"}), "axis", 1);  // ranks differ
  b.AddOutput("y0", kFloat);
  Loaded m = Load(b);
  ASSERT_NE(m.model, nullptr);
  EXPECT_EQ(m.sym().rule_failures, 1);
  ASSERT_EQ(m.sym().failure_examples.size(), 1u);
  EXPECT_NE(m.sym().failure_examples[0].find("Concat"), std::string::npos);
  EXPECT_EQ(m.Type("y0"), "float32?");
  EXPECT_FALSE(m.Fallback("y0"));  // a node memest's rule rejects is never handed to ONNX
  Options o;
  o.batch = 2;
  auto bound = core::Bind(m.graph(), o);
  ASSERT_FALSE(bound.ok());
  EXPECT_EQ(bound.status().code(), ErrorCode::kInvalidModel);
  EXPECT_NE(bound.status().message().find("(Concat)"), std::string::npos)
      << bound.status().ToString();
}

// Attention nodes whose attributes ask for what no scaled_dot_product_attention call computes
// (or that break their schema) are refused by their rule, naming the node, never costed as a
// plain attention call.
TEST(SymbolicShapes, AttentionOpsWithUnmodelledAttributesAreRefusedNamingTheNode) {
  struct Refused {
    std::string what;  // expected in the message
    std::function<void(GraphBuilder&)> build;
    int64_t opset = 17;
  };
  constexpr int32_t kInt8 = onnx::TensorProto::INT8;
  auto qkv = [](GraphBuilder& b, int64_t heads_dim = 64) {
    X(b, {"B", 4, 256});
    b.AddInput("K", kFloat, {"B", 4, heads_dim});
    b.AddInput("V", kFloat, {"B", 4, heads_dim});
    b.AddInput("SeqLens", kInt32, {"B"});
    b.AddInput("Total", kInt32, {});
  };
  auto gqa = [](GraphBuilder& b, std::vector<std::string> in = {"X", "K", "V", "", "", "SeqLens",
                                                                "Total"}) -> onnx::NodeProto& {
    auto& n = MsNode(b, "GroupQueryAttention", in, 3);
    SetIntAttr(n, "num_heads", 8);
    SetIntAttr(n, "kv_num_heads", 2);
    return n;
  };
  const std::vector<Refused> cases = {
      {"softcap",
       [](GraphBuilder& b) {
         X(b, {"B", 2, 8, 16});
         SetFloatAttr(Node(b, "Attention", {"X", "X", "X"}), "softcap", 30.0f);
       },
       23},
      {"past_key and past_value",
       [](GraphBuilder& b) {
         X(b, {"B", 2, 8, 16});
         b.AddInput("P", kFloat, {"B", 2, 4, 16});
         Node(b, "Attention", {"X", "X", "X", "", "P"}, 2);
       },
       23},
      {"multiple of kv_num_heads",
       [](GraphBuilder& b) {
         X(b, {"B", 8, 48});
         auto& n = Node(b, "Attention", {"X", "X", "X"});
         SetIntAttr(n, "q_num_heads", 3);
         SetIntAttr(n, "kv_num_heads", 2);
       },
       23},
      {"num_heads",
       [](GraphBuilder& b) {
         X(b, {"B", 8, 32});
         b.AddInitializer("W", {32, 96});
         MsNode(b, "Attention", {"X", "W"});
       }},
      {"same hidden size",
       [](GraphBuilder& b) {
         X(b, {"B", 8, 32});
         b.AddInitializer("W", {32, 96});
         auto& n = MsNode(b, "Attention", {"X", "W"});
         SetIntAttr(n, "num_heads", 4);
         SetIntsAttr(n, "qkv_hidden_sizes", {32, 48, 16});
       }},
      {"cache_indirection",
       [](GraphBuilder& b) {
         X(b, {"B", 8, 32});
         b.AddInput("I", kInt32, {"B", 1, 16});
         SetIntAttr(MsNode(b, "MultiHeadAttention", {"X", "X", "X", "", "", "", "", "", "", "I"}),
                    "num_heads", 4);
       }},
      {"softcap",
       [&](GraphBuilder& b) {
         qkv(b);
         SetFloatAttr(gqa(b), "softcap", 50.0f);
       }},
      {"smooth_softmax",
       [&](GraphBuilder& b) {
         qkv(b);
         SetIntAttr(gqa(b), "smooth_softmax", 1);
       }},
      {"local_window_size",
       [&](GraphBuilder& b) {
         qkv(b);
         SetIntAttr(gqa(b), "local_window_size", 4096);
       }},
      {"quantized KV cache",
       [&](GraphBuilder& b) {
         qkv(b);
         b.AddInput("PK", kInt8, {"B", 2, 16, 32});
         b.AddInput("PV", kInt8, {"B", 2, 16, 32});
         gqa(b, {"X", "K", "V", "PK", "PV", "SeqLens", "Total"});
       }},
  };
  for (const Refused& r : cases) {
    SCOPED_TRACE(r.what);
    GraphBuilder b(r.opset);
    r.build(b);
    b.AddOutput("y0", kFloat);
    Loaded m = Load(b);
    ASSERT_NE(m.model, nullptr);
    EXPECT_EQ(m.sym().rule_failures, 1);
    Options o;
    o.dims["B"] = 2;
    auto bound = core::Bind(m.graph(), o);
    ASSERT_FALSE(bound.ok());
    EXPECT_EQ(bound.status().code(), ErrorCode::kInvalidModel) << bound.status().ToString();
    EXPECT_NE(bound.status().message().find("_node"), std::string::npos)
        << bound.status().ToString();
    EXPECT_NE(bound.status().message().find(r.what), std::string::npos)
        << bound.status().ToString();
  }
}

// ONNX 1.12's MaxUnpool inference reads the indices' dim 1 unchecked (a fuzzer crash on rank-1
// indices): memest's own rule rejects the node, which never reaches ONNX.
TEST(SymbolicShapes, MaxUnpoolWithRankOneIndicesIsRejectedByMemestsRule) {
  GraphBuilder b(11);
  X(b, {1, 1, 2, 2});
  b.AddInput("I", kInt64, {2});
  auto& n = b.AddNode("MaxUnpool", {"X", "I"}, {"y0"});
  SetIntsAttr(n, "kernel_shape", {2, 2});
  b.AddOutput("y0", kFloat);
  Loaded m = Load(b);
  ASSERT_NE(m.model, nullptr);
  EXPECT_EQ(m.sym().rule_failures, 1);
  EXPECT_FALSE(m.Fallback("y0"));
  auto bound = core::Bind(m.graph(), Options{});
  ASSERT_FALSE(bound.ok());
  EXPECT_EQ(bound.status().code(), ErrorCode::kInvalidModel);
  EXPECT_NE(bound.status().message().find("indices rank"), std::string::npos)
      << bound.status().ToString();
}

// Without a memest rule, only If, Loop and Scan are handed to ONNX's inference
// (core/onnx_fallback.h; those are covered by the conformance tests on test_loop11, test_scan_sum,
// test_if). ai.onnx.ml's Binarizer is not, so its output stays unknown and the estimate is refused
// naming it, though ONNX has an inference function for it.
TEST(SymbolicShapes, OnlyVettedOpsWithoutARuleAreSizedByOnnx) {
  EXPECT_TRUE(core::OnnxMayInfer("", "Loop"));
  EXPECT_TRUE(core::OnnxMayInfer("ai.onnx", "Scan"));
  EXPECT_FALSE(core::OnnxMayInfer("", "STFT"));       // fuzzer crash in its ONNX inference
  EXPECT_FALSE(core::OnnxMayInfer("", "MaxUnpool"));  // likewise (memest has a rule now)

  GraphBuilder ml(13);
  ml.AddOpset("ai.onnx.ml", 1);
  X(ml, {"N", 4});
  ml.AddNode("Binarizer", {"X"}, {"y0"}, "binarize", "ai.onnx.ml");
  ml.AddOutput("y0", kFloat);
  Loaded m = Load(ml);
  ASSERT_NE(m.model, nullptr);
  EXPECT_FALSE(m.Fallback("y0"));
  auto est = MakeEstimator("symbolic");
  ASSERT_TRUE(est.ok());
  Options o;
  o.batch = 2;
  auto e = (*est)->Run(*m.model, o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), ErrorCode::kUnsupported) << e.status().ToString();
  EXPECT_NE(e.status().message().find("Binarizer"), std::string::npos) << e.status().ToString();
}

// Hostile attributes and inputs: every rule returns (ok or an error), never crashes.
TEST(ShapeRules, EveryRuleSurvivesHostileNodes) {
  core::DimTable table;
  onnx::NodeProto proto;
  auto add_int = [&](const char* name, int64_t v) { SetIntAttr(proto, name, v); };
  auto add_ints = [&](const char* name, std::vector<int64_t> v) { SetIntsAttr(proto, name, v); };
  for (const char* a :
       {"axis", "to", "dtype", "blocksize", "group", "k", "hidden_size", "sample_size",
        "batch_dims", "start", "end", "q_num_heads", "kv_num_heads", "stash_type", "keepdims",
        "num_outputs", "num_heads", "past_present_share_buffer", "sliding_window_cache"}) {
    add_int(a, std::numeric_limits<int64_t>::min());
  }
  for (const char* a :
       {"axes", "perm", "kernel_shape", "strides", "pads", "dilations", "output_shape",
        "output_padding", "shape", "starts", "ends", "split", "value_ints", "qkv_hidden_sizes"}) {
    add_ints(a, {std::numeric_limits<int64_t>::max(), -7, 0});
  }
  SetStringAttr(proto, "equation", "...a...,->...zz");
  SetStringAttr(proto, "auto_pad", "SAME_LOWER");
  for (const ops::OpRule& r : ops::AllRules()) {
    if (r.infer == nullptr) continue;
    core::Node node;
    node.name = "hostile";
    node.op_type = std::string(r.op_type);
    node.opset = 13;
    node.proto = &proto;
    node.inputs = {0, 1, 2, 3, 4, 5, 6, 7};
    node.outputs = {0, 1, 2, 3};
    // Omitted inputs; absurd dims; a shape vector of absurd values; an unknown dtype, rank 0.
    for (int variant = 0; variant < 4; ++variant) {
      std::vector<core::SymTensor> in(8);
      const core::DimExpr big(int64_t{1} << 62);
      for (auto& t : in) {
        t.dtype = variant == 3 ? 99 : base::kInt64;
        if (variant == 1) t.shape = std::vector<core::DimExpr>{big, big};
        if (variant == 2) {
          t.shape = std::vector<core::DimExpr>{3};
          t.values = std::vector<core::DimExpr>{big, -5, table.FreshExpr("u", false, false)};
        }
        if (variant == 3) t.shape = std::vector<core::DimExpr>{};
      }
      std::vector<const core::SymTensor*> ptrs;
      for (auto& t : in) ptrs.push_back(variant == 0 ? nullptr : &t);
      std::vector<core::SymTensor> out(4);
      ops::InferContext ctx(node, ptrs, out, &table);
      Status s = r.infer(ctx);
      (void)s;  // an error is fine; a crash is not
    }
  }
}

}  // namespace
}  // namespace memest

namespace memest {
namespace {

// PyTorch exports F.pad and TF-style "same" padding as shape arithmetic in floating point
// (Cast, Div, Ceil, Clip) feeding Concat -> Reshape[-1,2] -> Slice(step -1) -> Transpose ->
// Reshape[-1]. Every step folds, so Pad's output is known (timm's tf_* and efficientvit models).
TEST(ShapeFolding, TorchPadExportChainFoldsToConstantPads) {
  GraphBuilder b(15);
  b.AddInput("X", kFloat, {"N", 3, 7, 7});
  auto constant = [&](const std::string& name, onnx::TensorProto t) {
    testing::SetTensorAttr(b.AddNode("Constant", {}, {name}), "value", t);
  };
  auto scalar_float = [](float v) {
    onnx::TensorProto t;
    t.set_data_type(kFloat);
    t.add_float_data(v);
    return t;
  };
  constant("two", scalar_float(2.0F));
  constant("one", scalar_float(1.0F));
  constant("three", scalar_float(3.0F));
  constant("zero", scalar_float(0.0F));
  constant("axis2", Int64Tensor({2}, std::vector<int64_t>{}));
  b.AddNode("Shape", {"X"}, {"s"});
  b.AddNode("Gather", {"s", "axis2"}, {"h"});
  SetIntAttr(b.AddNode("Cast", {"h"}, {"hf"}), "to", kFloat);
  b.AddNode("Div", {"hf", "two"}, {"q"});  // 3.5
  b.AddNode("Ceil", {"q"}, {"ce"});        // 4
  b.AddNode("Sub", {"ce", "one"}, {"c1"});
  b.AddNode("Mul", {"c1", "two"}, {"c2"});
  b.AddNode("Add", {"c2", "three"}, {"c3"});
  b.AddNode("Sub", {"c3", "hf"}, {"total"});    // (4 - 1) * 2 + 3 - 7 = 2
  b.AddNode("Add", {"total", "one"}, {"odd"});  // 3: halves are 1.5 and 1.5
  b.AddNode("Clip", {"odd", "zero"}, {"cl"});
  b.AddNode("Div", {"cl", "two"}, {"half"});
  SetIntAttr(b.AddNode("Cast", {"half"}, {"lo"}), "to", kInt64);  // trunc(1.5) = 1
  SetIntAttr(b.AddNode("Cast", {"cl"}, {"cl_i"}), "to", kInt64);
  b.AddNode("Sub", {"cl_i", "lo"}, {"hi"});  // 2
  constant("ax0", Int64Tensor({0}));
  b.AddNode("Unsqueeze", {"lo", "ax0"}, {"lo1"});
  b.AddNode("Unsqueeze", {"hi", "ax0"}, {"hi1"});
  constant("six", Int64Tensor({6}));
  b.AddNode("ConstantOfShape", {"six"}, {"zeros"});
  auto& zeros = *b.graph().mutable_node(b.graph().node_size() - 1);
  testing::SetTensorAttr(zeros, "value", Int64Tensor({0}));
  SetIntAttr(b.AddNode("Concat", {"lo1", "hi1", "zeros"}, {"flat"}), "axis", 0);
  constant("pairs", Int64Tensor({-1, 2}));
  b.AddNode("Reshape", {"flat", "pairs"}, {"rows"});  // [[1,2],[0,0],[0,0],[0,0]]
  constant("start", Int64Tensor({-1}));
  constant("end", Int64Tensor({std::numeric_limits<int64_t>::min()}));
  constant("step", Int64Tensor({-1}));
  b.AddNode("Slice", {"rows", "start", "end", "ax0", "step"}, {"reversed"});
  SetIntsAttr(b.AddNode("Transpose", {"reversed"}, {"cols"}), "perm", {1, 0});
  constant("minus1", Int64Tensor({-1}));
  b.AddNode("Reshape", {"cols", "minus1"}, {"pads"});  // [0,0,0,1,0,0,0,2]
  b.AddNode("Pad", {"X", "pads"}, {"y"});
  b.AddOutput("y", kFloat);
  Loaded m = Load(b);
  ASSERT_NE(m.model, nullptr);
  const auto& q = m.sym().types[static_cast<size_t>(m.graph().FindValue("q"))];
  ASSERT_TRUE(q.float_values.has_value());
  EXPECT_EQ(*q.float_values, std::vector<double>{3.5});
  EXPECT_FALSE(q.values.has_value());  // 3.5 is no integer
  EXPECT_EQ(m.Type("ce"), "float32[]={4}");
  EXPECT_EQ(m.Type("rows"), "int64[4,2]={1,2,0,0,0,0,0,0}");
  EXPECT_EQ(m.Type("reversed"), "int64[4,2]={0,0,0,0,0,0,1,2}");
  EXPECT_EQ(m.Type("pads"), "int64[8]={0,0,0,1,0,0,0,2}");
  EXPECT_EQ(m.Type("y"), "float32[N,3,7,10]");
}

}  // namespace
}  // namespace memest

namespace memest {
namespace {

// A dim the model cannot take is an error naming the node, never an estimate over unknown
// shapes: a 128-long position table added to a seq-long input takes seq = 1 or 128 only.
TEST(SymbolicShapes, DimsTheModelCannotTakeFailBindingNamingTheNode) {
  GraphBuilder b(17);
  b.AddInput("x", kFloat, {"batch", "seq", 16});
  b.AddInitializer("pos", {128, 16}, kFloat);
  b.AddInput("y", kFloat, {"batch", "len"});
  b.AddInput("z", kFloat, {"batch", "width"});
  b.AddNode("Add", {"x", "pos"}, {"h"}).set_name("add_pos");
  b.AddNode("Mul", {"y", "z"}, {"yz"}).set_name("mul_yz");
  b.AddOutput("h", kFloat);
  b.AddOutput("yz", kFloat);
  Loaded m = Load(b);
  ASSERT_NE(m.model, nullptr);
  auto bind = [&](int64_t seq, int64_t len, int64_t width) {
    Options o;
    o.batch = 2;
    o.dims = {{"seq", seq}, {"len", len}, {"width", width}};
    return core::Bind(m.graph(), o);
  };
  EXPECT_TRUE(bind(128, 5, 5).ok());
  EXPECT_TRUE(bind(1, 5, 1).ok());
  auto pos = bind(256, 5, 5);
  ASSERT_FALSE(pos.ok());
  EXPECT_EQ(pos.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(pos.status().message().find("node 'add_pos' (Add)"), std::string::npos)
      << pos.status().ToString();
  EXPECT_NE(pos.status().message().find("256"), std::string::npos) << pos.status().ToString();
  auto sym = bind(128, 3, 4);
  ASSERT_FALSE(sym.ok());
  EXPECT_EQ(sym.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(sym.status().message().find("node 'mul_yz' (Mul)"), std::string::npos)
      << sym.status().ToString();
}

}  // namespace
}  // namespace memest
