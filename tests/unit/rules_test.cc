// Tests for ops/rules.{h,cc}: the registry itself, one signature per registered
// op (so a rule added without a test fails
// RulesRegistry.EveryRuleHasASignature), and exact saved bytes for each family
// on small hand-built graphs.
#include "ops/rules.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/dtype.h"
#include "core/graph.h"
#include "memest/memest.h"
#include "ops/attention.h"
#include "ops/value_facts.h"

namespace memest::ops {
namespace {

using core::ValueKind;
using Shape = std::optional<std::vector<int64_t>>;

uint64_t TestElemSize(int32_t dtype) {
  switch (dtype) {
    case base::kFloat:
    case base::kInt32:
      return 4;
    case base::kInt64:
    case base::kDouble:
      return 8;
    case base::kFloat16:
    case base::kBFloat16:
      return 2;
    case base::kBool:
    case base::kUInt8:
    case base::kInt8:
      return 1;
    default:
      return 0;
  }
}

// Builds a core::Graph and its core::BoundGraph by hand. Not copyable: nodes
// point into proto.
class GraphBuilder {
 public:
  GraphBuilder() { bound_.graph = &graph_; }
  GraphBuilder(const GraphBuilder&) = delete;
  GraphBuilder& operator=(const GraphBuilder&) = delete;

  int AddValue(const std::string& name, int32_t dtype, Shape shape,
               ValueKind kind = ValueKind::kIntermediate, bool trainable = false) {
    core::Value v;
    v.name = name;
    v.dtype = dtype;
    v.kind = kind;
    v.trainable = trainable;
    v.has_shape = shape.has_value();
    const int id = static_cast<int>(graph_.values.size());
    graph_.values.push_back(v);
    graph_.value_index.Insert(name, id);
    bound_.dtypes.push_back(dtype);
    std::optional<uint64_t> bytes;
    if (shape) {
      uint64_t n = 1;
      for (int64_t d : *shape) n *= static_cast<uint64_t>(d);
      bytes = n * TestElemSize(dtype);
    }
    bound_.shapes.Add(shape ? core::MaybeDims(*shape) : std::nullopt);
    bound_.bytes.push_back(bytes);
    return id;
  }
  int Param(const std::string& name, std::vector<int64_t> dims) {
    return AddValue(name, base::kFloat, dims, ValueKind::kInitializer,
                    /*trainable=*/true);
  }
  int Data(const std::string& name, int32_t dtype, std::vector<int64_t> dims) {
    const int id = AddValue(name, dtype, dims, ValueKind::kDataInput);
    graph_.data_inputs.push_back(id);
    return id;
  }
  int Const(const std::string& name, int32_t dtype, std::vector<int64_t> dims,
            std::optional<std::vector<int64_t>> int_data = std::nullopt) {
    const int id = AddValue(name, dtype, dims, ValueKind::kInitializer);
    graph_.value(id).int_data = std::move(int_data);
    return id;
  }
  int Tensor(const std::string& name, int32_t dtype, Shape shape) {
    return AddValue(name, dtype, std::move(shape));
  }
  // A float32 intermediate that requires grad: param + data, both of `dims`.
  int Activation(const std::string& name, std::vector<int64_t> dims) {
    const int p = Param(name + "_p", dims);
    const int x = Data(name + "_x", base::kFloat, dims);
    const int h = Tensor(name, base::kFloat, dims);
    AddNode("Add", {x, p}, {h});
    return h;
  }

  int AddNode(const std::string& op, std::vector<int> inputs, std::vector<int> outputs,
              int64_t opset = 17, const std::string& domain = "") {
    onnx::NodeProto* proto = graph_.proto->mutable_graph()->add_node();
    proto->set_op_type(op);
    proto->set_domain(domain);
    core::Node n;
    n.op_type = op;
    n.domain = domain;
    n.name = op + "_" + std::to_string(graph_.nodes.size());
    n.inputs.assign(inputs.begin(), inputs.end());
    n.outputs.assign(outputs.begin(), outputs.end());
    n.proto = proto;
    n.opset = opset;
    const int id = static_cast<int>(graph_.nodes.size());
    for (int v : n.inputs) {
      if (v >= 0) graph_.value(v).consumers.push_back(id);
    }
    for (int v : n.outputs) {
      if (v >= 0) graph_.value(v).producer = id;
    }
    graph_.nodes.push_back(std::move(n));
    return id;
  }
  void SetInt(int node, const std::string& name, int64_t value) {
    onnx::AttributeProto* a = Proto(node)->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(value);
  }
  void SetInts(int node, const std::string& name, const std::vector<int64_t>& values) {
    onnx::AttributeProto* a = Proto(node)->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t v : values) a->add_ints(v);
  }
  void SetString(int node, const std::string& name, const std::string& value) {
    onnx::AttributeProto* a = Proto(node)->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(value);
  }

  std::vector<bool> Rg() const { return RequiresGrad(bound_); }
  std::vector<SavedTensor> Saved(int node) const {
    return SavedTensors(graph_.node(node), bound_, Rg());
  }
  // What the saved list costs beyond resident weights: saved values that are
  // not initializers plus extra tensors.
  uint64_t ActivationBytes(const std::vector<SavedTensor>& saved) const {
    uint64_t total = 0;
    for (const SavedTensor& s : saved) {
      if (s.value < 0) {
        total += s.bytes;
      } else if (graph_.value(s.value).kind != ValueKind::kInitializer) {
        total += bound_.Bytes(s.value);
      }
    }
    return total;
  }
  uint64_t Bytes(int id) const { return bound_.Bytes(id); }

  core::Graph& graph() { return graph_; }
  core::BoundGraph& bound() { return bound_; }

 private:
  onnx::NodeProto* Proto(int node) { return const_cast<onnx::NodeProto*>(graph_.node(node).proto); }
  core::Graph graph_;
  core::BoundGraph bound_;
};

std::vector<int> SavedIds(std::span<const SavedTensor> saved) {
  std::vector<int> ids;
  for (const SavedTensor& s : saved) ids.push_back(s.value);
  return ids;
}

uint64_t ExtraBytes(std::span<const SavedTensor> saved) {
  uint64_t total = 0;
  for (const SavedTensor& s : saved) {
    if (s.value < 0) total += s.bytes;
  }
  return total;
}

// -----------------------------------------------------------------------------
// Registry.

TEST(RulesRegistry, EveryRuleHasACite) {
  for (const OpRule& r : AllRules()) {
    EXPECT_FALSE(r.cite.empty()) << r.op_type;
    EXPECT_FALSE(r.op_type.empty());
  }
}

// "Op" for ai.onnx, "domain::Op" otherwise.
std::string Key(const OpRule& r) {
  return r.domain.empty() ? std::string(r.op_type)
                          : std::string(r.domain) + "::" + std::string(r.op_type);
}

// No invented workspace constants: the only workspaces are the fused attention ops', sized
// from the node by the chosen kernel (ops/attention.h).
TEST(RulesRegistry, OnlyFusedAttentionOpsHaveAWorkspace) {
  std::set<std::string> with;
  for (const OpRule& r : AllRules()) {
    if (r.workspace != nullptr) with.insert(Key(r));
    EXPECT_EQ(r.workspace != nullptr, r.attention_site != nullptr) << Key(r);
  }
  EXPECT_EQ(with, (std::set<std::string>{"Attention", "com.microsoft::Attention",
                                         "com.microsoft::GroupQueryAttention",
                                         "com.microsoft::MultiHeadAttention"}));
}

TEST(RulesRegistry, SortedUniqueAndLargeEnough) {
  const auto rules = AllRules();
  EXPECT_GE(rules.size(), 120u);
  for (size_t i = 1; i < rules.size(); ++i) {
    const auto& a = rules[i - 1];
    const auto& b = rules[i];
    EXPECT_TRUE(a.domain < b.domain || (a.domain == b.domain && a.op_type < b.op_type))
        << a.op_type << " / " << b.op_type;
  }
}

TEST(RulesRegistry, FindRuleTreatsAiOnnxAsDefaultDomain) {
  const OpRule* relu = FindRule("", "Relu");
  ASSERT_NE(relu, nullptr);
  EXPECT_EQ(FindRule("ai.onnx", "Relu"), relu);
  EXPECT_EQ(relu->op_type, "Relu");
  EXPECT_EQ(FindRule("com.example", "Relu"), nullptr);
  EXPECT_EQ(FindRule("", "NoSuchOp"), nullptr);
  EXPECT_EQ(FindRule("", ""), nullptr);
  for (const OpRule& r : AllRules()) EXPECT_EQ(FindRule(r.domain, r.op_type), &r);
}

// LoadModel resolves every node's rule once (core::Node::rule); RuleOf gives what FindRule gives,
// without a lookup by name, and still looks up a node nobody resolved.
TEST(RulesRegistry, LoadModelResolvesEachNodesRuleOnce) {
  auto model = LoadModel(std::string(MEMEST_SOURCE_DIR) + "/datasets/models/gpt2_tiny_train.onnx");
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const core::Graph& g = (*model)->graph();
  ASSERT_FALSE(g.nodes.empty());
  for (const core::Node& n : g.nodes) {
    EXPECT_NE(n.rule, core::Node::kRuleUnresolved) << n.Describe();
    EXPECT_EQ(RuleOf(n), FindRule(n.domain, n.op_type)) << n.Describe();
  }
  core::Node fresh;
  fresh.op_type = "Relu";
  EXPECT_EQ(RuleOf(fresh), FindRule("", "Relu"));
  fresh.op_type = "NoSuchOp";
  EXPECT_EQ(RuleOf(fresh), nullptr);
  core::Graph graph;
  graph.nodes.push_back(fresh);
  ResolveRules(&graph);
  EXPECT_EQ(graph.nodes[0].rule, core::Node::kNoRule);
  EXPECT_EQ(RuleOf(graph.nodes[0]), nullptr);
}

TEST(RulesRegistry, AmpPolicies) {
  EXPECT_EQ(FindRule("", "Conv")->amp, AmpPolicy::kLowerPrecision);
  EXPECT_EQ(FindRule("", "MatMul")->amp, AmpPolicy::kLowerPrecision);
  EXPECT_EQ(FindRule("", "Gemm")->amp, AmpPolicy::kLowerPrecision);
  EXPECT_EQ(FindRule("", "LSTM")->amp, AmpPolicy::kLowerPrecision);
  EXPECT_EQ(FindRule("", "Softmax")->amp, AmpPolicy::kFp32);
  EXPECT_EQ(FindRule("", "LayerNormalization")->amp, AmpPolicy::kFp32);
  EXPECT_EQ(FindRule("", "Exp")->amp, AmpPolicy::kFp32);
  EXPECT_EQ(FindRule("", "Pow")->amp, AmpPolicy::kFp32);
  EXPECT_EQ(FindRule("", "Sqrt")->amp,
            AmpPolicy::kPassThrough);  // rsqrt is listed, sqrt not
  EXPECT_EQ(FindRule("", "Relu")->amp, AmpPolicy::kPassThrough);
  EXPECT_EQ(FindRule("", "BatchNormalization")->amp, AmpPolicy::kPassThrough);
  EXPECT_EQ(FindRule("", "Dropout")->amp, AmpPolicy::kPassThrough);
}

// Runs a rule on a generic node: three float inputs and one float output of
// [2,3,4,5], every input requiring grad, no attributes. Signature: "nograd" /
// "view" flags, then one token per saved tensor: iN (input N), oN (output N), x
// (extra tensor).
std::string Signature(const OpRule& rule) {
  GraphBuilder b;
  const std::vector<int64_t> dims{2, 3, 4, 5};
  std::vector<int> in;
  for (int i = 0; i < 3; ++i) in.push_back(b.Tensor("in" + std::to_string(i), base::kFloat, dims));
  const int out = b.Tensor("out0", base::kFloat, dims);
  const int node = b.AddNode(std::string(rule.op_type), in, {out}, 17, std::string(rule.domain));
  std::vector<bool> rg(b.graph().values.size(), true);
  std::vector<SavedTensor> saved;
  if (rule.saved != nullptr) {
    rule.saved(RuleContext{b.graph().node(node), b.bound(), rg}, &saved);
  }
  std::string sig;
  auto add = [&](const std::string& t) { sig += (sig.empty() ? "" : " ") + t; };
  if (!rule.differentiable) add("nograd");
  if (rule.view) add("view");
  for (const SavedTensor& s : saved) {
    if (s.value < 0) {
      EXPECT_GT(s.bytes, 0u) << rule.op_type << " " << s.what;
      add("x");
    } else if (s.value == out) {
      add("o0");
    } else {
      for (int i = 0; i < 3; ++i) {
        if (s.value == in[static_cast<size_t>(i)]) add("i" + std::to_string(i));
      }
    }
  }
  return sig;
}

// Which ops run on cuBLAS is stated once, on the rule (the workspace's creator, §2.3): the
// GEMM-shaped ops, not every lower-precision autocast op (convolutions use cuDNN, PReLU is
// elementwise).
TEST(RulesRegistry, CublasUsersAreTheGemmShapedOps) {
  std::set<std::string> users;
  for (const OpRule& r : AllRules()) {
    if (r.uses_cublas) users.insert(Key(r));
  }
  // com.microsoft Attention projects its input with its packed QKV weights first.
  EXPECT_EQ(users, (std::set<std::string>{"Einsum", "GRU", "Gemm", "LSTM", "MatMul", "RNN",
                                          "com.microsoft::Attention"}));
}

TEST(RulesRegistry, EveryRuleHasASignature) {
  // One line per op: adding a rule without adding it here fails this test.
  // Signature -> ops with it, one word per op.
  const std::vector<std::pair<std::string, std::string>> kExpected = {
      {"o0",
       "Relu Sigmoid Tanh Exp Sqrt Reciprocal Softmax LogSoftmax Tan "
       "ReduceLogSum"},
      {"i0",
       "Gelu Erf Log Sin Cos Asin Acos Atan Sinh Cosh Asinh Acosh Atanh Abs "
       "LeakyRelu Elu Selu Celu Softplus Softsign HardSigmoid HardSwish Mish "
       "ThresholdedRelu Shrink Clip AveragePool MeanVarianceNormalization "
       "ReduceL1 ReduceSumSquare Where"},
      {"i0 o0",
       "ReduceMax ReduceMin ReduceProd ReduceL2 ReduceLogSumExp "
       "LpNormalization LRN LpPool GlobalLpPool Pow"},
      {"",
       "Add Sub Neg Sum Mean ReduceSum ReduceMean Concat Cast CastLike "
       "GlobalAveragePool Tile Trilu CumSum DepthToSpace SpaceToDepth Mod "
       "Resize Upsample Pad TopK"},
      {"view",
       "Reshape Flatten Squeeze Unsqueeze Transpose Expand Identity Slice "
       "Split"},
      {"i0 i1",
       "Mul MatMul Gemm Div Conv ConvTranspose PRelu GridSample "
       "BatchNormalization GroupNormalization"},
      {"i0 i1 i2", "Einsum Max Min NegativeLogLikelihoodLoss"},
      {"i0 i1 i2 o0 x", "LSTM GRU RNN"},  // the weight buffer; the reserve needs a rank-3 W
      {"i1",
       "Gather GatherElements GatherND ScatterElements Scatter ScatterND "
       "Compress ReverseSequence MaxUnpool"},
      {"i1 i2", "RoiAlign"},
      {"i1 x", "MaxRoiPool"},
      {"x i1 i2", "SoftmaxCrossEntropyLoss"},
      {"i0 x", "MaxPool GlobalMaxPool"},
      {"i0 i1 x x", "InstanceNormalization"},
      {"i0 i1 i2 x x", "LayerNormalization"},
      {"i0 i1 x", "RMSNormalization"},
      {"x", "Dropout"},  // training_mode input of unknown value: training
      // Fused attention ops under the default policy (the math composite): new q and k
      // copies, v, the probabilities. The contrib ops' generic 4-D inputs are not their
      // layouts: only the graph values they name are kept.
      {"x x i2 x", "Attention"},
      {"i0 i1", "com.microsoft::Attention"},
      {"i2", "com.microsoft::GroupQueryAttention"},
      {"", "com.microsoft::MultiHeadAttention"},
      {"nograd",
       "Shape Size Equal Less LessOrEqual Greater GreaterOrEqual And Or Xor "
       "Not IsNaN IsInf NonZero ArgMax ArgMin Unique NonMaxSuppression "
       "BitShift BitwiseAnd BitwiseOr BitwiseXor BitwiseNot Hardmax Floor "
       "Ceil Round Sign Range ConstantOfShape Constant OneHot EyeLike "
       "RandomNormal RandomNormalLike RandomUniform RandomUniformLike "
       "Bernoulli Multinomial QuantizeLinear DequantizeLinear "
       "DynamicQuantizeLinear MatMulInteger ConvInteger QLinearConv "
       "QLinearMatMul"},
  };
  std::map<std::string, std::string> expected;
  for (const auto& [sig, ops] : kExpected) {
    std::istringstream words(ops);
    for (std::string op; words >> op;) {
      EXPECT_TRUE(expected.emplace(op, sig).second) << "listed twice: " << op;
    }
  }
  std::set<std::string> seen;
  for (const OpRule& r : AllRules()) {
    const std::string op = Key(r);
    seen.insert(op);
    auto it = expected.find(op);
    if (it == expected.end()) {
      ADD_FAILURE() << "rule without a test: " << op << " (signature: " << Signature(r) << ")";
      continue;
    }
    EXPECT_EQ(Signature(r), it->second) << op;
  }
  for (const auto& [op, sig] : expected) EXPECT_TRUE(seen.count(op)) << "no rule for " << op;
}

// Unknown shapes, omitted inputs/outputs and out-of-range attributes never
// crash a rule, and extra tensors that cannot be sized are left out.
TEST(RulesRegistry, EveryRuleDegradesWithoutShapes) {
  for (const OpRule& r : AllRules()) {
    if (r.saved == nullptr) continue;
    {
      GraphBuilder b;
      std::vector<int> in;
      for (int i = 0; i < 3; ++i) in.push_back(b.Tensor("in" + std::to_string(i), 0, std::nullopt));
      const int out = b.Tensor("out", 0, std::nullopt);
      const int node = b.AddNode(std::string(r.op_type), in, {out, -1}, 17, std::string(r.domain));
      b.SetInt(node, "axis", 99);
      std::vector<bool> rg(b.graph().values.size(), true);
      std::vector<SavedTensor> saved;
      r.saved(RuleContext{b.graph().nodes[0], b.bound(), rg}, &saved);
      for (const SavedTensor& s : saved) EXPECT_GE(s.value, 0) << r.op_type << " " << s.what;
    }
    {
      GraphBuilder b;
      const int node =
          b.AddNode(std::string(r.op_type), {-1, -1, -1}, {-1, -1}, 17, std::string(r.domain));
      std::vector<bool> rg;  // shorter than the value table on purpose
      std::vector<SavedTensor> saved;
      r.saved(RuleContext{b.graph().node(node), b.bound(), rg}, &saved);
      EXPECT_TRUE(saved.empty()) << r.op_type;
    }
  }
}

// -----------------------------------------------------------------------------
// Families, exact bytes.

TEST(RulesSaved, ReluSavesItsOutput) {
  GraphBuilder b;
  const int h = b.Activation("h", {8, 16});
  const int y = b.Tensor("y", base::kFloat, std::vector<int64_t>{8, 16});
  const int relu = b.AddNode("Relu", {h}, {y});
  const auto saved = b.Saved(relu);
  EXPECT_EQ(SavedIds(saved), std::vector<int>{y});
  EXPECT_EQ(b.ActivationBytes(saved), 8u * 16 * 4);
  // The Add that produced h saves nothing.
  EXPECT_TRUE(b.Saved(b.graph().value(h).producer).empty());
}

TEST(RulesSaved, GeluAndErfSaveTheirInput) {
  GraphBuilder b;
  const int h = b.Activation("h", {4, 10});
  const int g = b.Tensor("g", base::kFloat, std::vector<int64_t>{4, 10});
  const int e = b.Tensor("e", base::kFloat, std::vector<int64_t>{4, 10});
  const int gelu = b.AddNode("Gelu", {h}, {g}, 20);
  const int erf = b.AddNode("Erf", {g}, {e});
  EXPECT_EQ(SavedIds(b.Saved(gelu)), std::vector<int>{h});
  EXPECT_EQ(SavedIds(b.Saved(erf)), std::vector<int>{g});
  EXPECT_EQ(b.ActivationBytes(b.Saved(erf)), 160u);
}

TEST(RulesSaved, NothingRecordedWhenNoInputRequiresGrad) {
  GraphBuilder b;
  const int x = b.Data("x", base::kFloat, {8, 16});
  const int y = b.Tensor("y", base::kFloat, std::vector<int64_t>{8, 16});
  const int relu = b.AddNode("Relu", {x}, {y});
  EXPECT_TRUE(b.Saved(relu).empty());
  EXPECT_FALSE(b.Rg()[static_cast<size_t>(y)]);
}

TEST(RulesSaved, ViewsSaveNothing) {
  GraphBuilder b;
  const int h = b.Activation("h", {2, 3, 4});
  const int shape = b.Const("shape", base::kInt64, {2}, std::vector<int64_t>{6, 4});
  const int r = b.Tensor("r", base::kFloat, std::vector<int64_t>{6, 4});
  const int node = b.AddNode("Reshape", {h, shape}, {r});
  EXPECT_TRUE(FindRule("", "Reshape")->view);
  EXPECT_TRUE(b.Saved(node).empty());
  EXPECT_TRUE(b.Rg()[static_cast<size_t>(r)]);
}

TEST(RulesSaved, DropoutTrainingSavesBoolMask) {
  GraphBuilder b;
  const std::vector<int64_t> dims{4, 32, 8};
  const uint64_t numel = 4 * 32 * 8;
  const int h = b.Activation("h", dims);
  // Opset 12+: explicit training_mode = true, no mask output -> extra mask
  // tensor.
  const int ratio = b.Const("ratio", base::kFloat, {});
  const int on = b.Const("on", base::kBool, {}, std::vector<int64_t>{1});
  const int y1 = b.Tensor("y1", base::kFloat, dims);
  const int d1 = b.AddNode("Dropout", {h, ratio, on}, {y1}, 13);
  const auto s1 = b.Saved(d1);
  ASSERT_EQ(s1.size(), 1u);
  EXPECT_EQ(s1[0].value, -1);
  EXPECT_EQ(s1[0].bytes, numel);  // 1 byte per element
  // Mask output present -> the mask output itself is the saved tensor.
  const int y2 = b.Tensor("y2", base::kFloat, dims);
  const int mask = b.Tensor("mask", base::kBool, dims);
  const int d2 = b.AddNode("Dropout", {h, ratio}, {y2, mask}, 13);
  EXPECT_EQ(SavedIds(b.Saved(d2)), std::vector<int>{mask});
  EXPECT_EQ(b.ActivationBytes(b.Saved(d2)), numel);
  // training_mode known false, or no mask and no training_mode: inference,
  // nothing saved.
  const int off = b.Const("off", base::kBool, {}, std::vector<int64_t>{0});
  const int y3 = b.Tensor("y3", base::kFloat, dims);
  const int d3 = b.AddNode("Dropout", {h, ratio, off}, {y3}, 13);
  EXPECT_TRUE(b.Saved(d3).empty());
  const int y4 = b.Tensor("y4", base::kFloat, dims);
  const int d4 = b.AddNode("Dropout", {h}, {y4}, 11);
  EXPECT_TRUE(b.Saved(d4).empty());
}

TEST(RulesSaved, MaxPoolSavesInputAndInt64Indices) {
  GraphBuilder b;
  const int h = b.Activation("h", {2, 3, 8, 8});
  const int y = b.Tensor("y", base::kFloat, std::vector<int64_t>{2, 3, 4, 4});
  const int pool = b.AddNode("MaxPool", {h}, {y});
  const auto saved = b.Saved(pool);
  ASSERT_EQ(saved.size(), 2u);
  EXPECT_EQ(saved[0].value, h);
  EXPECT_EQ(saved[1].value, -1);
  EXPECT_EQ(saved[1].bytes, 8u * 2 * 3 * 4 * 4);
  EXPECT_EQ(b.ActivationBytes(saved), 2u * 3 * 8 * 8 * 4 + 8u * 2 * 3 * 4 * 4);
  // Indices exposed as output 1: saved by id.
  const int y2 = b.Tensor("y2", base::kFloat, std::vector<int64_t>{2, 3, 4, 4});
  const int idx = b.Tensor("idx", base::kInt64, std::vector<int64_t>{2, 3, 4, 4});
  const int pool2 = b.AddNode("MaxPool", {h}, {y2, idx});
  EXPECT_EQ(SavedIds(b.Saved(pool2)), (std::vector<int>{h, idx}));
  // Unknown output shape: the indices cannot be sized and are left out.
  const int y3 = b.Tensor("y3", base::kFloat, std::nullopt);
  const int pool3 = b.AddNode("MaxPool", {h}, {y3});
  EXPECT_EQ(SavedIds(b.Saved(pool3)), std::vector<int>{h});
}

TEST(RulesSaved, AveragePoolsSaveInputOrNothing) {
  GraphBuilder b;
  const int h = b.Activation("h", {2, 3, 8, 8});
  const int y = b.Tensor("y", base::kFloat, std::vector<int64_t>{2, 3, 4, 4});
  const int g = b.Tensor("g", base::kFloat, std::vector<int64_t>{2, 3, 1, 1});
  EXPECT_EQ(SavedIds(b.Saved(b.AddNode("AveragePool", {h}, {y}))), std::vector<int>{h});
  EXPECT_TRUE(b.Saved(b.AddNode("GlobalAveragePool", {h}, {g})).empty());
}

TEST(RulesSaved, BatchNormTrainingSavesInputAndFp32Stats) {
  GraphBuilder b;
  const std::vector<int64_t> dims{4, 8, 5, 5};
  const uint64_t x_bytes = 4 * 8 * 5 * 5 * 4;
  const int h = b.Activation("h", dims);
  const int scale = b.Param("scale", {8});
  const int bias = b.Param("bias", {8});
  const int mean = b.Const("mean", base::kFloat, {8});
  const int var = b.Const("var", base::kFloat, {8});
  // Opset 15, training_mode = 1.
  const int y = b.Tensor("y", base::kFloat, dims);
  const int rm = b.Tensor("rm", base::kFloat, std::vector<int64_t>{8});
  const int rv = b.Tensor("rv", base::kFloat, std::vector<int64_t>{8});
  const int bn = b.AddNode("BatchNormalization", {h, scale, bias, mean, var}, {y, rm, rv}, 15);
  b.SetInt(bn, "training_mode", 1);
  const auto saved = b.Saved(bn);
  EXPECT_EQ(ExtraBytes(saved), 2u * 8 * 4);
  EXPECT_EQ(b.ActivationBytes(saved), x_bytes + 2u * 8 * 4);
  // Opset 9 training export: 5 outputs, saved_mean / saved_var are outputs 3
  // and 4.
  const int y9 = b.Tensor("y9", base::kFloat, dims);
  const int sm = b.Tensor("sm", base::kFloat, std::vector<int64_t>{8});
  const int sv = b.Tensor("sv", base::kFloat, std::vector<int64_t>{8});
  const int rm9 = b.Tensor("rm9", base::kFloat, std::vector<int64_t>{8});
  const int rv9 = b.Tensor("rv9", base::kFloat, std::vector<int64_t>{8});
  const int bn9 =
      b.AddNode("BatchNormalization", {h, scale, bias, mean, var}, {y9, rm9, rv9, sm, sv}, 9);
  EXPECT_EQ(SavedIds(b.Saved(bn9)), (std::vector<int>{h, scale, sm, sv}));
  EXPECT_EQ(b.ActivationBytes(b.Saved(bn9)), x_bytes + 2u * 8 * 4);
}

TEST(RulesSaved, BatchNormInferenceSavesInputOnly) {
  GraphBuilder b;
  const std::vector<int64_t> dims{4, 8, 5, 5};
  const int h = b.Activation("h", dims);
  const int scale = b.Param("scale", {8});
  const int bias = b.Param("bias", {8});
  const int mean = b.Const("mean", base::kFloat, {8});
  const int var = b.Const("var", base::kFloat, {8});
  const int y = b.Tensor("y", base::kFloat, dims);
  const int bn = b.AddNode("BatchNormalization", {h, scale, bias, mean, var}, {y}, 15);
  const auto saved = b.Saved(bn);
  EXPECT_EQ(ExtraBytes(saved), 0u);
  EXPECT_EQ(b.ActivationBytes(saved), 4u * 8 * 5 * 5 * 4);
  EXPECT_TRUE(b.Rg()[static_cast<size_t>(y)]);
}

TEST(RulesSaved, LayerNormSavesInputAndFp32MeanRstd) {
  GraphBuilder b;
  const std::vector<int64_t> dims{2, 5, 16};
  const int h = b.Activation("h", dims);
  const int w = b.Param("w", {16});
  const int bias = b.Param("bias", {16});
  const int y = b.Tensor("y", base::kFloat, dims);
  const int ln = b.AddNode("LayerNormalization", {h, w, bias}, {y});
  const auto saved = b.Saved(ln);
  EXPECT_EQ(ExtraBytes(saved), 2u * 10 * 4);  // M = 2 * 5
  EXPECT_EQ(b.ActivationBytes(saved), 2u * 5 * 16 * 4 + 2u * 10 * 4);
  // axis = 1: M = 2.
  const int y1 = b.Tensor("y1", base::kFloat, dims);
  const int ln1 = b.AddNode("LayerNormalization", {h, w, bias}, {y1});
  b.SetInt(ln1, "axis", 1);
  EXPECT_EQ(ExtraBytes(b.Saved(ln1)), 2u * 2 * 4);
  // fp16 input: the statistics stay fp32.
  const int h16 = b.Tensor("h16", base::kFloat16, dims);
  b.AddNode("Cast", {h}, {h16});
  const int y16 = b.Tensor("y16", base::kFloat16, dims);
  const int ln16 = b.AddNode("LayerNormalization", {h16, w, bias}, {y16});
  EXPECT_EQ(b.ActivationBytes(b.Saved(ln16)), 2u * 5 * 16 * 2 + 2u * 10 * 4);
  // Overflowing dims: the statistics cannot be sized and are left out, no
  // crash.
  const std::vector<int64_t> huge{int64_t{1} << 40, int64_t{1} << 40, 8};
  const int hh = b.Tensor("hh", base::kFloat, huge);
  b.AddNode("Add", {h, w}, {hh});
  const int yh = b.Tensor("yh", base::kFloat, huge);
  const int lnh = b.AddNode("LayerNormalization", {hh, w, bias}, {yh});
  EXPECT_EQ(ExtraBytes(b.Saved(lnh)), 0u);
}

TEST(RulesSaved, MatMulSavesEachOperandOnlyForTheOther) {
  GraphBuilder b;
  const int x = b.Data("x", base::kFloat, {4, 8});
  const int w1 = b.Param("w1", {8, 16});
  const int w2 = b.Param("w2", {16, 2});
  const int h = b.Tensor("h", base::kFloat, std::vector<int64_t>{4, 16});
  const int y = b.Tensor("y", base::kFloat, std::vector<int64_t>{4, 2});
  const int mm1 = b.AddNode("MatMul", {x, w1}, {h});
  const int mm2 = b.AddNode("MatMul", {h, w2}, {y});
  // x does not require grad: W1 is not saved; x is (W1 requires grad).
  EXPECT_EQ(SavedIds(b.Saved(mm1)), std::vector<int>{x});
  EXPECT_EQ(SavedIds(b.Saved(mm2)), (std::vector<int>{h, w2}));
  EXPECT_EQ(b.ActivationBytes(b.Saved(mm2)), 4u * 16 * 4);
  // Mul by a constant: only the constant (a resident initializer) is kept.
  const int half = b.Const("half", base::kFloat, {});
  const int m = b.Tensor("m", base::kFloat, std::vector<int64_t>{4, 2});
  EXPECT_EQ(SavedIds(b.Saved(b.AddNode("Mul", {y, half}, {m}))), std::vector<int>{half});
  // x * x holds one storage.
  const int sq = b.Tensor("sq", base::kFloat, std::vector<int64_t>{4, 2});
  EXPECT_EQ(SavedIds(b.Saved(b.AddNode("Mul", {y, y}, {sq}))), std::vector<int>{y});
}

// A saved tensor's description: the rule's literal, the operand's index after "in"/"out", and
// what ops::ValueFacts made of it.
TEST(RulesSaved, SavedTensorsDescribeThemselves) {
  GraphBuilder b;
  const int h = b.Activation("h", {4, 8});
  const int w = b.Param("w", {8, 16});
  const int y = b.Tensor("y", base::kFloat, std::vector<int64_t>{4, 16});
  std::vector<std::string> mm;
  for (const SavedTensor& s : b.Saved(b.AddNode("MatMul", {h, w}, {y}))) mm.push_back(s.Describe());
  EXPECT_EQ(mm, (std::vector<std::string>{"in0", "in1"}));
  const int bias = b.Param("bias", {16});
  const int z = b.Tensor("z", base::kFloat, std::vector<int64_t>{4, 16});
  std::vector<std::string> ln;
  for (const SavedTensor& s : b.Saved(b.AddNode("LayerNormalization", {y, w, bias}, {z}))) {
    ln.push_back(s.Describe());
  }
  EXPECT_EQ(ln, (std::vector<std::string>{"x", "W", "b", "mean(fp32)", "rstd(fp32)"}));
  SavedTensor copy{-1, 64, "in", 12, SavedTensor::Copy::kAutocast};
  EXPECT_EQ(copy.Describe(), "in12 (autocast copy)");
  copy.copy = SavedTensor::Copy::kContiguous;
  copy.operand = -1;
  EXPECT_EQ(copy.Describe(), "in (contiguous copy)");
}

TEST(RulesSaved, GemmDoesNotSaveBias) {
  GraphBuilder b;
  const int h = b.Activation("h", {4, 8});
  const int w = b.Param("w", {16, 8});
  const int c = b.Param("c", {16});
  const int y = b.Tensor("y", base::kFloat, std::vector<int64_t>{4, 16});
  const int gemm = b.AddNode("Gemm", {h, w, c}, {y});
  EXPECT_EQ(SavedIds(b.Saved(gemm)), (std::vector<int>{h, w}));
}

TEST(RulesSaved, DivSavesDenominatorAlways) {
  GraphBuilder b;
  const int h = b.Activation("h", {4, 8});
  const int k = b.Const("k", base::kFloat, {});
  const int q1 = b.Tensor("q1", base::kFloat, std::vector<int64_t>{4, 8});
  const int q2 = b.Tensor("q2", base::kFloat, std::vector<int64_t>{4, 8});
  EXPECT_EQ(SavedIds(b.Saved(b.AddNode("Div", {h, k}, {q1}))), std::vector<int>{k});
  EXPECT_EQ(SavedIds(b.Saved(b.AddNode("Div", {k, h}, {q2}))), (std::vector<int>{k, h}));
}

TEST(RulesSaved, ConvSavesInputAndWeight) {
  GraphBuilder b;
  const int x = b.Data("x", base::kFloat, {2, 3, 8, 8});
  const int w = b.Param("w", {4, 3, 3, 3});
  const int bias = b.Param("bias", {4});
  const int y = b.Tensor("y", base::kFloat, std::vector<int64_t>{2, 4, 6, 6});
  const int conv = b.AddNode("Conv", {x, w, bias}, {y});
  const auto saved = b.Saved(conv);
  EXPECT_EQ(SavedIds(saved), (std::vector<int>{x, w}));
  EXPECT_EQ(b.ActivationBytes(saved), b.Bytes(x));
}

TEST(RulesSaved, GatherEmbeddingSavesIndices) {
  GraphBuilder b;
  const int table = b.Param("table", {100, 16});
  const int ids = b.Data("ids", base::kInt64, {4, 7});
  const int e = b.Tensor("e", base::kFloat, std::vector<int64_t>{4, 7, 16});
  const int gather = b.AddNode("Gather", {table, ids}, {e});
  EXPECT_EQ(SavedIds(b.Saved(gather)), std::vector<int>{ids});
  EXPECT_EQ(b.ActivationBytes(b.Saved(gather)), 4u * 7 * 8);
  EXPECT_TRUE(b.Rg()[static_cast<size_t>(e)]);
}

TEST(RulesSaved, WhereSavesCondition) {
  GraphBuilder b;
  const int h = b.Activation("h", {4, 8});
  const int cond = b.Data("cond", base::kBool, {4, 8});
  const int fill = b.Const("fill", base::kFloat, {});
  const int y = b.Tensor("y", base::kFloat, std::vector<int64_t>{4, 8});
  const int where = b.AddNode("Where", {cond, h, fill}, {y});
  EXPECT_EQ(SavedIds(b.Saved(where)), std::vector<int>{cond});
  EXPECT_EQ(b.ActivationBytes(b.Saved(where)), 32u);
}

TEST(RulesSaved, PadSavesInputOnlyForNonConstantModes) {
  GraphBuilder b;
  const int h = b.Activation("h", {1, 2, 4, 4});
  const int pads = b.Const("pads", base::kInt64, {8}, std::vector<int64_t>(8, 1));
  const int y1 = b.Tensor("y1", base::kFloat, std::vector<int64_t>{3, 4, 6, 6});
  const int y2 = b.Tensor("y2", base::kFloat, std::vector<int64_t>{3, 4, 6, 6});
  EXPECT_TRUE(b.Saved(b.AddNode("Pad", {h, pads}, {y1})).empty());
  const int reflect = b.AddNode("Pad", {h, pads}, {y2});
  b.SetString(reflect, "mode", "reflect");
  EXPECT_EQ(SavedIds(b.Saved(reflect)), std::vector<int>{h});
}

// cuDNN's reserve, (5 x seq + 2) x batch x directions x hidden elements for an LSTM
// (memory-model.md §2.6), and a copy of W and R (the weight buffer).
TEST(RulesSaved, LstmSavesEverythingPlusReserveAndWeightBuffer) {
  GraphBuilder b;
  const int seq = 5, batch = 2, input = 3, hidden = 4;
  const int x = b.Activation("x", {seq, batch, input});
  const int w = b.Param("W", {1, 4 * hidden, input});
  const int r = b.Param("R", {1, 4 * hidden, hidden});
  const int y = b.Tensor("Y", base::kFloat, std::vector<int64_t>{seq, 1, batch, hidden});
  const int yh = b.Tensor("Y_h", base::kFloat, std::vector<int64_t>{1, batch, hidden});
  const int lstm = b.AddNode("LSTM", {x, w, r}, {y, yh, -1});
  const auto saved = b.Saved(lstm);
  EXPECT_EQ(SavedIds(saved), (std::vector<int>{x, w, r, y, yh, -1, -1}));
  const uint64_t weights = (4 * hidden * input + 4 * hidden * hidden) * 4;
  EXPECT_EQ(ExtraBytes(saved), uint64_t{5 * seq + 2} * batch * hidden * 4 + weights);
}

// Batch-first (layout 1): x is [batch, seq, input]; a GRU keeps 6 per step + 1.
TEST(RulesSaved, GruReserveFollowsTheLayout) {
  GraphBuilder b;
  const int seq = 5, batch = 2, input = 3, hidden = 4;
  const int x = b.Activation("x", {batch, seq, input});
  const int w = b.Param("W", {2, 3 * hidden, input});
  const int r = b.Param("R", {2, 3 * hidden, hidden});
  const int y = b.Tensor("Y", base::kFloat, std::vector<int64_t>{batch, seq, 2, hidden});
  const int gru = b.AddNode("GRU", {x, w, r}, {y});
  b.SetInt(gru, "layout", 1);
  const uint64_t weights = (3 * hidden * input + 3 * hidden * hidden) * 2 * 4;
  EXPECT_EQ(ExtraBytes(b.Saved(gru)), uint64_t{6 * seq + 1} * batch * 2 * hidden * 4 + weights);
}

TEST(RulesRequiresGrad, ShapeIsNotDifferentiableAndStopsGrad) {
  GraphBuilder b;
  const int h = b.Activation("h", {4, 8});
  const int s = b.Tensor("s", base::kInt64, std::vector<int64_t>{2});
  const int shape = b.AddNode("Shape", {h}, {s});
  const int sf = b.Tensor("sf", base::kFloat, std::vector<int64_t>{2});
  b.AddNode("Cast", {s}, {sf});
  const int fl = b.Tensor("fl", base::kFloat, std::vector<int64_t>{4, 8});
  const int floor = b.AddNode("Floor", {h}, {fl});
  const int eq = b.Tensor("eq", base::kBool, std::vector<int64_t>{4, 8});
  b.AddNode("Equal", {h, fl}, {eq});
  EXPECT_FALSE(FindRule("", "Shape")->differentiable);
  const auto rg = b.Rg();
  EXPECT_TRUE(rg[static_cast<size_t>(h)]);
  EXPECT_FALSE(rg[static_cast<size_t>(s)]);
  EXPECT_FALSE(rg[static_cast<size_t>(sf)]);
  EXPECT_FALSE(rg[static_cast<size_t>(fl)]);
  EXPECT_FALSE(rg[static_cast<size_t>(eq)]);
  EXPECT_TRUE(b.Saved(shape).empty());
  EXPECT_TRUE(b.Saved(floor).empty());
}

TEST(RulesRequiresGrad, ParametersDataAndDtypes) {
  GraphBuilder b;
  const int w = b.Param("w", {4});
  const int running = b.Const("running_mean", base::kFloat, {4});
  const int x = b.Data("x", base::kFloat, {4});
  const int y = b.Tensor("y", base::kFloat, std::vector<int64_t>{4});
  b.AddNode("Add", {x, running}, {y});
  const int argmax = b.Tensor("am", base::kInt64, std::vector<int64_t>{1});
  b.AddNode("ArgMax", {w}, {argmax});
  const int i = b.Tensor("i", base::kInt64, std::vector<int64_t>{4});
  b.AddNode("Cast", {w}, {i});  // cast to an integer type: no grad
  const int u = b.Tensor("u", 0, std::nullopt);
  b.AddNode("Relu", {w}, {u});  // unknown dtype: assumed float
  const auto rg = b.Rg();
  EXPECT_TRUE(rg[static_cast<size_t>(w)]);
  EXPECT_FALSE(rg[static_cast<size_t>(running)]);
  EXPECT_FALSE(rg[static_cast<size_t>(x)]);
  EXPECT_FALSE(rg[static_cast<size_t>(y)]);
  EXPECT_FALSE(rg[static_cast<size_t>(argmax)]);
  EXPECT_FALSE(rg[static_cast<size_t>(i)]);
  EXPECT_TRUE(rg[static_cast<size_t>(u)]);
}

TEST(RulesRequiresGrad, ControlFlowBodiesAreAssumedToCaptureGrad) {
  GraphBuilder b;
  b.Param("w", {4});  // read inside the body, not listed as an input
  const int cond = b.Data("cond", base::kBool, {});
  const int y = b.Tensor("y", base::kFloat, std::vector<int64_t>{4});
  const int node = b.AddNode("If", {cond}, {y});
  b.graph().node(node).subgraph_nodes = 3;
  EXPECT_TRUE(b.Rg()[static_cast<size_t>(y)]);
}

TEST(RulesSaved, UnknownOpIsConservative) {
  GraphBuilder b;
  const int h = b.Activation("h", {4, 8});
  const int ids = b.Data("ids", base::kInt64, {4});
  const int y = b.Tensor("y", base::kFloat, std::vector<int64_t>{4, 8});
  const int z = b.Tensor("z", base::kInt64, std::vector<int64_t>{4});
  const int node = b.AddNode("FancyOp", {h, ids}, {y, z}, 1, "com.example");
  ASSERT_EQ(FindRule("com.example", "FancyOp"), nullptr);
  const auto rg = b.Rg();
  EXPECT_TRUE(rg[static_cast<size_t>(y)]);
  EXPECT_FALSE(rg[static_cast<size_t>(z)]);
  const auto saved = b.Saved(node);
  EXPECT_EQ(SavedIds(saved), (std::vector<int>{h, y}));
  std::vector<SavedTensor> direct;
  ConservativeSaved(RuleContext{b.graph().node(node), b.bound(), rg}, &direct);
  EXPECT_EQ(SavedIds(direct), SavedIds(saved));
}

// Layout (ops/value_facts.h): attention as exporters write it. The head split is a view, the
// transposes are views, the batched MatMuls save contiguous copies of their non-contiguous
// operands, and merging the heads back (Transpose -> Reshape) copies.
TEST(RulesLayout, TransposedOperandsOfBatchedMatMulAreSavedAsCopies) {
  GraphBuilder b;
  const int64_t B = 2, S = 8, H = 4, D = 16;
  const int qkv = b.Activation("qkv", {B, S, 3 * H * D});
  const int q = b.Tensor("q", base::kFloat, std::vector<int64_t>{B, S, H * D});
  const int k = b.Tensor("k", base::kFloat, std::vector<int64_t>{B, S, H * D});
  const int v = b.Tensor("v", base::kFloat, std::vector<int64_t>{B, S, H * D});
  const int split = b.AddNode("Split", {qkv}, {q, k, v});
  b.SetInt(split, "axis", 2);
  auto heads = [&](int x, const std::string& name, std::vector<int64_t> perm,
                   std::vector<int64_t> out) {
    const int r = b.Tensor(name + "_r", base::kFloat, std::vector<int64_t>{B, S, H, D});
    b.AddNode("Reshape", {x, b.Const(name + "_shape", base::kInt64, {4})}, {r});
    const int t = b.Tensor(name + "_t", base::kFloat, out);
    b.SetInts(b.AddNode("Transpose", {r}, {t}), "perm", perm);
    return t;
  };
  const int qh = heads(q, "q", {0, 2, 1, 3}, {B, H, S, D});
  const int kh = heads(k, "k", {0, 2, 3, 1}, {B, H, D, S});
  const int vh = heads(v, "v", {0, 2, 1, 3}, {B, H, S, D});
  const int scores = b.Tensor("scores", base::kFloat, std::vector<int64_t>{B, H, S, S});
  const int mm1 = b.AddNode("MatMul", {qh, kh}, {scores});
  const int probs = b.Tensor("probs", base::kFloat, std::vector<int64_t>{B, H, S, S});
  b.AddNode("Softmax", {scores}, {probs});
  const int ctx = b.Tensor("ctx", base::kFloat, std::vector<int64_t>{B, H, S, D});
  const int mm2 = b.AddNode("MatMul", {probs, vh}, {ctx});
  const int ctx_t = b.Tensor("ctx_t", base::kFloat, std::vector<int64_t>{B, S, H, D});
  b.SetInts(b.AddNode("Transpose", {ctx}, {ctx_t}), "perm", {0, 2, 1, 3});
  const int merged = b.Tensor("merged", base::kFloat, std::vector<int64_t>{B, S, H * D});
  const int merge = b.AddNode("Reshape", {ctx_t, b.Const("m_shape", base::kInt64, {3})}, {merged});

  const ValueFacts facts(b.bound(), Precision::kFp32);
  // Splitting the last dim into heads is a view of the Split output; so are the transposes.
  EXPECT_EQ(facts.root(qh), qkv);
  EXPECT_EQ(facts.root(kh), qkv);
  EXPECT_FALSE(facts.contiguous(q));
  EXPECT_FALSE(facts.contiguous(qh));
  EXPECT_TRUE(facts.contiguous(scores));
  // Each non-contiguous rank-4 operand is saved as a copy of its bytes, not as the view.
  const uint64_t head_bytes = 4u * B * H * S * D;
  const auto s1 = facts.Saved(static_cast<size_t>(mm1));
  EXPECT_EQ(SavedIds(s1), (std::vector<int>{-1, -1}));
  EXPECT_EQ(ExtraBytes(s1), 2 * head_bytes);
  const auto s2 = facts.Saved(static_cast<size_t>(mm2));
  EXPECT_EQ(SavedIds(s2), (std::vector<int>{probs, -1}));  // probs is contiguous: saved as is
  EXPECT_EQ(ExtraBytes(s2), head_bytes);
  // Merging the heads: Transpose is a view, the Reshape of it copies (a new tensor).
  EXPECT_EQ(facts.root(ctx_t), ctx);
  EXPECT_FALSE(facts.is_view(static_cast<size_t>(merge)));
  EXPECT_EQ(facts.root(merged), merged);
  EXPECT_TRUE(facts.contiguous(merged));
}

TEST(RulesLayout, ReshapesOfContiguousTensorsStayViews) {
  GraphBuilder b;
  const int x = b.Activation("x", {2, 3, 4});
  const int y = b.Tensor("y", base::kFloat, std::vector<int64_t>{6, 4});
  const int r = b.AddNode("Reshape", {x, b.Const("shape", base::kInt64, {2})}, {y});
  const ValueFacts facts(b.bound(), Precision::kFp32);
  EXPECT_TRUE(facts.is_view(static_cast<size_t>(r)));
  EXPECT_EQ(facts.root(y), x);
  EXPECT_TRUE(facts.contiguous(y));
}

// A ReLU right after a convolution or a batch norm, its input's only reader, writes into that
// input (FusionChoices::inplace_relu, as torchvision's and timm's nn.ReLU(inplace=True) do): one
// storage for both. Not after an Add, not on an input something else reads, not a LeakyReLU, and
// not at all without the choice.
TEST(RulesLayout, AReluAfterAConvOrABatchNormWritesIntoItsInput) {
  GraphBuilder b;
  const std::vector<int64_t> dims = {2, 4, 3, 3};
  const int x = b.Activation("x", dims);
  const int w = b.Param("w", {4, 4, 1, 1});
  auto node = [&](const std::string& op, std::vector<int> in, const std::string& name) {
    const int out = b.Tensor(name, base::kFloat, dims);
    b.AddNode(op, std::move(in), {out});
    return out;
  };
  auto bn = [&](int in, const std::string& name) {
    std::vector<int> ins = {in};
    for (const char* p : {"_scale", "_bias", "_mean", "_var"})
      ins.push_back(b.Param(name + p, {4}));
    return node("BatchNormalization", ins, name);
  };
  const int c1 = node("Conv", {x, w}, "c1");
  const int r1 = node("Relu", {c1}, "r1");  // after a Conv
  const int n2 = bn(r1, "n2");
  const int r2 = node("Relu", {n2}, "r2");  // after a BatchNormalization
  const int a3 = node("Add", {r2, x}, "a3");
  const int r3 = node("Relu", {a3}, "r3");  // after an Add: out of place
  const int c4 = node("Conv", {r3, w}, "c4");
  const int r4 = node("Relu", {c4}, "r4");  // c4 has another reader
  node("Sigmoid", {c4}, "s4");
  const int n5 = bn(r4, "n5");
  const int l5 = node("LeakyRelu", {n5}, "l5");  // not a ReLU
  ops::FusionChoices in_place;
  in_place.inplace_relu = true;
  const ValueFacts facts(b.bound(), Precision::kFp32, in_place);
  EXPECT_EQ(facts.root(r1), c1);
  EXPECT_EQ(facts.root(r2), n2);
  EXPECT_FALSE(facts.is_view(static_cast<size_t>(b.graph().value(r1).producer)));
  for (const int own : {r3, r4, l5}) EXPECT_EQ(facts.root(own), own) << b.graph().value(own).name;
  const ValueFacts as_written(b.bound(), Precision::kFp32);
  for (const int own : {r1, r2}) EXPECT_EQ(as_written.root(own), own);
}

// -----------------------------------------------------------------------------
// Fused attention ops (ops/attention.h): the kernel Options::attention picks decides what is
// kept and what the call allocates.

AttentionPolicy Policy(Attention a, bool half = false, bool training = true) {
  AttentionPolicy p;
  p.requested = a;
  p.sm_major = 9;  // an H100
  p.half = half;
  p.training = training;
  return p;
}

// The call of fused attention node `node` under `policy`, as ops/fusion.h decides it.
AttentionCall CallUnder(GraphBuilder& b, int node, const AttentionPolicy& policy) {
  const core::Node& n = b.graph().node(node);
  const OpRule* rule = FindRule(n.domain, n.op_type);
  AttentionCall call;
  call.node = static_cast<size_t>(node);
  const std::vector<bool> rg = b.Rg();
  if (rule == nullptr || rule->attention_site == nullptr) {
    ADD_FAILURE() << n.op_type << " is not a fused attention op";
    return call;
  }
  rule->attention_site(RuleContext{n, b.bound(), rg}, &call.site);
  call.site.training = policy.training;
  if (policy.half) call.site.elem = 2;
  call.kernel = ChooseAttentionKernel(policy, call.site, &call.reason);
  return call;
}

std::vector<SavedTensor> SavedUnder(GraphBuilder& b, int node, const AttentionCall& call) {
  return SavedTensors(b.graph().node(node), b.bound(), b.Rg(), &call);
}

uint64_t WorkspaceUnder(GraphBuilder& b, int node, const AttentionCall& call) {
  const core::Node& n = b.graph().node(node);
  const std::vector<bool> rg = b.Rg();
  return FindRule(n.domain, n.op_type)->workspace(RuleContext{n, b.bound(), rg, &call});
}

// ONNX Attention (opset 23) on q, k, v [2, 4, 8, 16]: B=2, H=4, L=S=8, D=16.
TEST(RulesSaved, OnnxAttentionKeepsWhatItsKernelKeeps) {
  GraphBuilder b;
  const std::vector<int64_t> dims{2, 4, 8, 16};
  const int q = b.Activation("q", dims), k = b.Activation("k", dims), v = b.Activation("v", dims);
  const int y = b.Tensor("y", base::kFloat, dims);
  const int node = b.AddNode("Attention", {q, k, v}, {y}, 23);

  // Math (eager, and auto below flash on fp32 with odd head dims): q and k^T scaled by
  // sqrt(scale) are new fp32 tensors, v is kept as it is, and the [2, 4, 8, 8] probabilities.
  AttentionCall math = CallUnder(b, node, Policy(Attention::kEager));
  EXPECT_EQ(math.kernel, AttentionKernel::kMath);
  auto saved = SavedUnder(b, node, math);
  EXPECT_EQ(SavedIds(saved), (std::vector<int>{-1, -1, v, -1}));
  EXPECT_EQ(ExtraBytes(saved), 2u * 4096 + 2 * 4 * 8 * 8 * 4);
  // Its workspace: the scores before the softmax (the probabilities are kept) and
  // _safe_softmax's bool scores.eq(-inf) [2, 4, 8, 8]; without autograd also the probabilities
  // and the scaled q.
  EXPECT_EQ(WorkspaceUnder(b, node, math), 2048u + 512);
  AttentionCall math_infer = CallUnder(b, node, Policy(Attention::kEager, false, false));
  EXPECT_TRUE(AttentionKernelSaved(math_infer.kernel, math_infer.site).empty());
  EXPECT_EQ(WorkspaceUnder(b, node, math_infer), 2048u + 512 + 2048 + 4096);

  // Flash (bf16 autocast): q, k, v and the output, two small RNG tensors on the device and an
  // fp32 logsumexp [2, 4, 8].
  AttentionCall flash = CallUnder(b, node, Policy(Attention::kAuto, /*half=*/true));
  EXPECT_EQ(flash.kernel, AttentionKernel::kFlash) << flash.reason;
  saved = SavedUnder(b, node, flash);
  EXPECT_EQ(SavedIds(saved), (std::vector<int>{q, k, v, y, -1, -1, -1}));
  EXPECT_EQ(ExtraBytes(saved), 16u + 8 + 2 * 4 * 8 * 4);
  EXPECT_EQ(WorkspaceUnder(b, node, flash), 0u);

  // Memory-efficient (fp32 under auto): the logsumexp rows padded to 32, the seed and offset.
  AttentionCall me = CallUnder(b, node, Policy(Attention::kAuto));
  EXPECT_EQ(me.kernel, AttentionKernel::kMemEfficient) << me.reason;
  EXPECT_NE(me.reason.find("fp32"), std::string::npos) << me.reason;
  saved = SavedUnder(b, node, me);
  EXPECT_EQ(SavedIds(saved), (std::vector<int>{q, k, v, y, -1, -1, -1}));
  EXPECT_EQ(ExtraBytes(saved), 8u + 8 + 2 * 4 * 32 * 4);
}

// An explicit mask rules flash out under auto; the memory-efficient kernel keeps it converted
// to q's dtype (a bool mask [2, 1, 8, 6]: 6 keys, padded to 8).
TEST(RulesSaved, OnnxAttentionWithAMaskRunsMemoryEfficientUnderAuto) {
  GraphBuilder b;
  const int q = b.Activation("q", {2, 4, 8, 16});
  const int k = b.Activation("k", {2, 4, 6, 16});
  const int v = b.Activation("v", {2, 4, 6, 16});
  const int mask = b.Data("mask", base::kBool, {2, 1, 8, 6});
  const int y = b.Tensor("y", base::kFloat, std::vector<int64_t>{2, 4, 8, 16});
  const int node = b.AddNode("Attention", {q, k, v, mask}, {y}, 23);
  const AttentionCall call = CallUnder(b, node, Policy(Attention::kAuto, /*half=*/true));
  EXPECT_EQ(call.kernel, AttentionKernel::kMemEfficient);
  EXPECT_NE(call.reason.find("explicit attention mask"), std::string::npos) << call.reason;
  const auto saved = SavedUnder(b, node, call);
  EXPECT_EQ(SavedIds(saved), (std::vector<int>{q, k, v, y, -1, -1, -1, -1}));
  // The mask in fp16 with its last dim padded to 8, the seed and offset, the logsumexp.
  EXPECT_EQ(ExtraBytes(saved), 2u * 8 * 8 * 2 + 16 + 2 * 4 * 32 * 4);
  // Without the mask: flash.
  GraphBuilder b2;
  const int q2 = b2.Activation("q", {2, 4, 8, 16});
  const int k2 = b2.Activation("k", {2, 4, 6, 16});
  const int v2 = b2.Activation("v", {2, 4, 6, 16});
  const int y2 = b2.Tensor("y", base::kFloat, std::vector<int64_t>{2, 4, 8, 16});
  const int n2 = b2.AddNode("Attention", {q2, k2, v2}, {y2}, 23);
  EXPECT_EQ(CallUnder(b2, n2, Policy(Attention::kAuto, true)).kernel, AttentionKernel::kFlash);
}

// com.microsoft Attention: x [2, 8, 32] times W [32, 96] inside the op (4 heads of 8); the
// present [2, 2, 4, 8, 8] holds k and v.
TEST(RulesSaved, MsAttentionKeepsItsInputWeightsAndTheKernelsList) {
  GraphBuilder b;
  const int x = b.Activation("x", {2, 8, 32});
  const int w = b.Param("W", {32, 96});
  const int bias = b.Param("bias", {96});
  const int y = b.Tensor("y", base::kFloat, std::vector<int64_t>{2, 8, 32});
  const int present = b.Tensor("present", base::kFloat, std::vector<int64_t>{2, 2, 4, 8, 8});
  const int node = b.AddNode("Attention", {x, w, bias}, {y, present}, 1, "com.microsoft");
  b.SetInt(node, "num_heads", 4);
  const AttentionCall flash = CallUnder(b, node, Policy(Attention::kSdpaFlash, true));
  const auto saved = SavedUnder(b, node, flash);
  // x, W, the projected q (2 x 4 x 8 x 8 in fp16), the present (k and v, once), the output.
  EXPECT_EQ(SavedIds(saved), (std::vector<int>{x, w, -1, present, y, -1, -1, -1}));
  EXPECT_EQ(ExtraBytes(saved), 2u * 4 * 8 * 8 * 2 + 24 + 2 * 4 * 8 * 4);
}

// com.microsoft MultiHeadAttention: query, key, value [2, 8, 32], 4 heads; a bias makes q, k and
// v new tensors.
TEST(RulesSaved, MultiHeadAttentionKeepsItsInputsOrTheirBiasedCopies) {
  for (bool with_bias : {false, true}) {
    GraphBuilder b;
    const int q = b.Activation("q", {2, 8, 32});
    const int k = b.Activation("k", {2, 8, 32});
    const int v = b.Activation("v", {2, 8, 32});
    std::vector<int> in{q, k, v};
    if (with_bias) in.push_back(b.Param("bias", {96}));
    const int y = b.Tensor("y", base::kFloat, std::vector<int64_t>{2, 8, 32});
    const int node = b.AddNode("MultiHeadAttention", in, {y}, 1, "com.microsoft");
    b.SetInt(node, "num_heads", 4);
    const AttentionCall me = CallUnder(b, node, Policy(Attention::kSdpaMemEfficient));
    const auto saved = SavedUnder(b, node, me);
    const uint64_t lse = 2u * 4 * 32 * 4, seeds = 16;
    if (!with_bias) {
      EXPECT_EQ(SavedIds(saved), (std::vector<int>{q, k, v, y, -1, -1, -1}));
      EXPECT_EQ(ExtraBytes(saved), seeds + lse);
    } else {
      EXPECT_EQ(SavedIds(saved), (std::vector<int>{-1, -1, -1, y, -1, -1, -1}));
      EXPECT_EQ(ExtraBytes(saved), 3u * 2 * 8 * 32 * 4 + seeds + lse);
    }
  }
}

// com.microsoft GroupQueryAttention decoding 4 tokens: query [1, 4, 64] (8 heads of 8), key and
// value [1, 4, 16] (2 kv heads), a past of 12, the present [1, 2, 16, 8] attended over.
TEST(RulesSaved, GroupQueryAttentionRepeatsKvOnlyInTheMathKernel) {
  GraphBuilder b;
  const int q = b.Activation("q", {1, 4, 64});
  const int k = b.Activation("k", {1, 4, 16});
  const int v = b.Activation("v", {1, 4, 16});
  const int pk = b.Data("past_k", base::kFloat, {1, 2, 12, 8});
  const int pv = b.Data("past_v", base::kFloat, {1, 2, 12, 8});
  const int seqlens = b.Data("seqlens_k", base::kInt32, {1});
  const int total = b.Data("total", base::kInt32, {});
  const int y = b.Tensor("y", base::kFloat, std::vector<int64_t>{1, 4, 64});
  const int present_k = b.Tensor("present_k", base::kFloat, std::vector<int64_t>{1, 2, 16, 8});
  const int present_v = b.Tensor("present_v", base::kFloat, std::vector<int64_t>{1, 2, 16, 8});
  const int node = b.AddNode("GroupQueryAttention", {q, k, v, pk, pv, seqlens, total},
                             {y, present_k, present_v}, 1, "com.microsoft");
  b.SetInt(node, "num_heads", 8);
  b.SetInt(node, "kv_num_heads", 2);
  // Math: q and k scaled, v repeated to 8 heads (fp32), the [1, 8, 4, 16] probabilities.
  const AttentionCall math = CallUnder(b, node, Policy(Attention::kEager));
  auto saved = SavedUnder(b, node, math);
  EXPECT_EQ(SavedIds(saved), (std::vector<int>{-1, -1, -1, -1}));
  EXPECT_EQ(ExtraBytes(saved), (8u * 4 * 8 + 8 * 16 * 8 + 8 * 16 * 8 + 8 * 4 * 16) * 4);
  // Flash in fp16: the query, the present cache (grouped: not repeated), the output.
  const AttentionCall flash = CallUnder(b, node, Policy(Attention::kAuto, true));
  EXPECT_EQ(flash.kernel, AttentionKernel::kMemEfficient) << flash.reason;  // causal, 4 x 16
  const AttentionCall forced = CallUnder(b, node, Policy(Attention::kSdpaFlash, true));
  saved = SavedUnder(b, node, forced);
  EXPECT_EQ(SavedIds(saved), (std::vector<int>{q, present_k, present_v, y, -1, -1, -1}));
  EXPECT_EQ(ExtraBytes(saved), 24u + 8 * 4 * 4);
}

// What each kernel's backward allocates beyond the gradients (memory-model.md §3.5), on q [2, 4,
// 100, 80], k and v [2, 2, 300, 80] (grouped queries: 4 query heads over 2 key/value heads).
TEST(RulesSaved, EachAttentionKernelsBackwardAllocatesWhatItsSourceShows) {
  AttentionSite s;
  s.known = true;
  s.batch = 2;
  s.q_heads = 4;
  s.kv_heads = 2;
  s.q_len = 100;
  s.kv_len = 300;
  s.head_dim = s.v_head_dim = 80;
  s.elem = 2;
  s.training = true;
  // Math: the gradients of the probabilities and of the scores, fp32 [2, 4, 100, 300] each.
  EXPECT_EQ(AttentionKernelBackwardWorkspace(AttentionKernel::kMath, s),
            2u * 2 * 4 * 100 * 300 * 4);
  // Flash: softmax_d [2, 4, 128] and dq_accum [2, 128, 4, 96] in fp32 (100 rows rounded to 128,
  // a head dim of 80 to 96), dk and dv expanded to the 4 query heads in fp16.
  EXPECT_EQ(AttentionKernelBackwardWorkspace(AttentionKernel::kFlash, s),
            2u * 4 * 128 * 4 + 2u * 128 * 4 * 96 * 4 + 2 * (2u * 4 * 300 * 80 * 2));
  // Memory-efficient: delta, fp32 [2, 4, 100].
  EXPECT_EQ(AttentionKernelBackwardWorkspace(AttentionKernel::kMemEfficient, s), 2u * 4 * 100 * 4);
  // A head dim over 192 pads dq_accum's to 256; without grouped queries nothing is expanded.
  s.kv_heads = 4;
  s.head_dim = s.v_head_dim = 200;
  EXPECT_EQ(AttentionKernelBackwardWorkspace(AttentionKernel::kFlash, s),
            2u * 4 * 128 * 4 + 2u * 128 * 4 * 256 * 4);
  // No autograd, or unknown dims: nothing.
  s.training = false;
  EXPECT_EQ(AttentionKernelBackwardWorkspace(AttentionKernel::kMath, s), 0u);
  s.training = true;
  s.known = false;
  EXPECT_EQ(AttentionKernelBackwardWorkspace(AttentionKernel::kFlash, s), 0u);
}

// An op that returns its scores runs the math composite under every option; a forced kernel
// that cannot run a call is refused with the reason auto would give.
TEST(RulesSaved, ScoresOutputsForceTheMathCompositeAndForcedKernelsCanBeRefused) {
  GraphBuilder b;
  const std::vector<int64_t> dims{2, 4, 8, 16};
  const int q = b.Activation("q", dims), k = b.Activation("k", dims), v = b.Activation("v", dims);
  const int mask = b.Data("mask", base::kBool, {2, 1, 8, 8});
  const int y = b.Tensor("y", base::kFloat, dims);
  const int qk = b.Tensor("qk", base::kFloat, std::vector<int64_t>{2, 4, 8, 8});
  const int node = b.AddNode("Attention", {q, k, v, mask}, {y, -1, -1, qk}, 23);
  for (Attention a : {Attention::kSdpaFlash, Attention::kSdpaMemEfficient, Attention::kAuto}) {
    const AttentionCall call = CallUnder(b, node, Policy(a, /*half=*/true));
    EXPECT_TRUE(call.site.scores_output);
    EXPECT_EQ(call.kernel, AttentionKernel::kMath) << ToString(a);
    EXPECT_NE(call.reason.find("returns the attention scores"), std::string::npos) << call.reason;
    EXPECT_EQ(ForcedRefusal(Policy(a, true), call.site), "");
  }
  GraphBuilder b2;
  const int q2 = b2.Activation("q", dims), k2 = b2.Activation("k", dims);
  const int v2 = b2.Activation("v", dims);
  const int mask2 = b2.Data("mask", base::kBool, {2, 1, 8, 8});
  const int y2 = b2.Tensor("y", base::kFloat, dims);
  const int n2 = b2.AddNode("Attention", {q2, k2, v2, mask2}, {y2}, 23);
  const AttentionCall forced = CallUnder(b2, n2, Policy(Attention::kSdpaFlash, true));
  EXPECT_NE(ForcedRefusal(Policy(Attention::kSdpaFlash, true), forced.site).find("mask"),
            std::string::npos);
  EXPECT_EQ(ForcedRefusal(Policy(Attention::kSdpaMemEfficient, true), forced.site), "");
  EXPECT_EQ(ForcedRefusal(Policy(Attention::kAuto, true), forced.site), "");
  // The memory-efficient kernel needs head dims that are multiples of 4 in fp32 from sm 8.0.
  AttentionSite odd = forced.site;
  odd.elem = 4;
  odd.head_dim = odd.v_head_dim = 18;
  EXPECT_NE(ForcedRefusal(Policy(Attention::kSdpaMemEfficient), odd).find("multiples of 4"),
            std::string::npos);
}

}  // namespace
}  // namespace memest::ops
