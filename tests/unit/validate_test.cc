// core/validate.h: what the loader refuses before any inference function sees the model, each
// with the node or tensor it names. One test per rule of the policy.
#include "core/validate.h"

#include <gtest/gtest.h>

#include <string>

#include "core/symbolic_shapes.h"
#include "memest/memest.h"
#include "testing/onnx_builder.h"

namespace memest {
namespace {

using testing::GraphBuilder;
using testing::kFloat;
using testing::kInt64;
using testing::SetGraphAttr;
using testing::SetIntAttr;

// Loads `b` and expects an InvalidModel error containing `needle`.
void ExpectRejected(const GraphBuilder& b, const std::string& needle) {
  auto r = LoadModelFromBytes(b.Serialize(), "/tmp", "validate_test");
  ASSERT_FALSE(r.ok()) << "accepted; wanted an error containing: " << needle;
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidModel) << r.status().ToString();
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().ToString();
}

// Loads `b` (which must load) and expects every estimate to fail with InvalidModel containing
// `needle`: what only a node's rule or ONNX's schema can judge is judged when shapes are bound.
void ExpectEstimateRejected(const GraphBuilder& b, const std::string& needle) {
  auto r = LoadModelFromBytes(b.Serialize(), "/tmp", "validate_test");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto est = MakeEstimator("symbolic");
  ASSERT_TRUE(est.ok());
  Options o;
  o.batch = 2;
  auto e = (*est)->Run(**r, o);
  ASSERT_FALSE(e.ok()) << "estimated; wanted an error containing: " << needle;
  EXPECT_EQ(e.status().code(), ErrorCode::kInvalidModel) << e.status().ToString();
  EXPECT_NE(e.status().message().find(needle), std::string::npos) << e.status().ToString();
}

onnx::AttributeProto* AddAttribute(onnx::NodeProto& node, const std::string& name,
                                   onnx::AttributeProto::AttributeType type) {
  auto* a = node.add_attribute();
  a->set_name(name);
  a->set_type(type);
  return a;
}

GraphBuilder Relu() {
  GraphBuilder b(17);
  b.AddInput("x", kFloat, {"N", 4});
  b.AddNode("Relu", {"x"}, {"y"});
  b.AddOutput("y", kFloat);
  return b;
}

// An If whose then-branch is `body` and else-branch a Constant.
GraphBuilder IfWithBody(const onnx::GraphProto& body) {
  GraphBuilder b(17);
  b.AddInput("cond", testing::kBool, {});
  b.AddInput("x", kFloat, {2});
  auto& node = b.AddNode("If", {"cond"}, {"r"});
  SetGraphAttr(node, "then_branch", body);
  onnx::GraphProto other = body;
  SetGraphAttr(node, "else_branch", other);
  b.AddOutput("r", kFloat);
  return b;
}

onnx::GraphProto Body(const std::vector<std::pair<std::string, std::string>>& relus) {
  onnx::GraphProto g;
  g.set_name("body");
  for (const auto& [in, out] : relus) {
    auto* n = g.add_node();
    n->set_op_type("Relu");
    n->add_input(in);
    n->add_output(out);
  }
  g.add_output()->set_name(relus.back().second);
  return g;
}

TEST(Validate, AWellFormedModelPasses) {
  auto r = LoadModelFromBytes(Relu().Serialize(), "/tmp", "ok");
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  auto body =
      LoadModelFromBytes(IfWithBody(Body({{"x", "a"}, {"a", "b"}})).Serialize(), "/tmp", "if_ok");
  EXPECT_TRUE(body.ok()) << body.status().ToString();
}

TEST(Validate, IrAndOpsetVersionsInRange) {
  GraphBuilder ir = Relu();
  ir.model().set_ir_version(0);
  ExpectRejected(ir, "ir_version 0");
  GraphBuilder high = Relu();
  high.model().set_ir_version(core::kMaxIrVersion + 1);
  ExpectRejected(high, "ir_version");
  GraphBuilder opset = Relu();
  opset.model().mutable_opset_import(0)->set_version(core::kMaxOpsetVersion + 1);
  ExpectRejected(opset, "has version");
}

TEST(Validate, RawDataLengthMatchesDimsAndDtype) {
  GraphBuilder b = Relu();
  auto& t = b.AddInt64Initializer("k", {1, 2});
  t.clear_int64_data();
  t.set_raw_data(std::string(15, '\0'));  // 2 x int64 = 16 bytes
  ExpectRejected(b, "initializer 'k' holds 15 bytes of raw_data");
}

TEST(Validate, TypedFieldCountMatchesDims) {
  GraphBuilder b = Relu();
  auto& t = b.AddInt64Initializer("k", {1, 2, 3});
  t.clear_dims();
  t.add_dims(4);
  ExpectRejected(b, "holds 3 int64_data entries where its dims and int64 need 4");
}

TEST(Validate, TensorAttributesAreCheckedToo) {
  GraphBuilder b(17);
  auto& c = b.AddNode("Constant", {}, {"c"});
  onnx::TensorProto t;
  t.set_data_type(kFloat);
  t.add_dims(3);
  t.set_raw_data(std::string(8, '\0'));  // 3 floats need 12
  testing::SetTensorAttr(c, "value", t);
  b.AddOutput("c", kFloat);
  ExpectRejected(b, "attribute 'value' holds 8 bytes of raw_data");
}

TEST(Validate, AMistypedAttributeRejectsTheNode) {
  GraphBuilder b(17);
  b.AddInput("x", kFloat, {"N", 4});
  AddAttribute(b.AddNode("Flatten", {"x"}, {"y"}), "axis", onnx::AttributeProto::FLOAT)
      ->set_f(1.0F);
  b.AddOutput("y", kFloat);
  ExpectEstimateRejected(b, "attribute 'axis' has type FLOAT where INT is expected");
}

TEST(Validate, ATypedAttributeCarriesItsValue) {
  GraphBuilder b = Relu();
  AddAttribute(*b.graph().mutable_node(0), "g", onnx::AttributeProto::GRAPH);
  ExpectRejected(b, "declares a type but carries no value");
}

TEST(Validate, AnAttributeCarriesOnlyTheValueItsTypeNames) {
  GraphBuilder b = Relu();
  auto* a = AddAttribute(*b.graph().mutable_node(0), "k", onnx::AttributeProto::INTS);
  a->add_ints(2);
  a->mutable_g()->set_name("stray");
  ExpectRejected(b, "attribute 'k' has type INTS but also carries a GRAPH value");
  GraphBuilder untyped = Relu();
  auto* u = untyped.graph().mutable_node(0)->add_attribute();
  u->set_name("u");
  u->set_i(1);
  u->set_f(1.0F);
  ExpectRejected(untyped, "carries values of several types");
}

// Each attribute has a name, and no name comes twice: among a node's few attributes (compared
// one by one) and among many (a set past 16).
TEST(Validate, AnAttributeIsNamedOnce) {
  GraphBuilder nameless = Relu();
  AddAttribute(*nameless.graph().mutable_node(0), "", onnx::AttributeProto::INT)->set_i(1);
  ExpectRejected(nameless, "node 'Relu_0' (Relu) has an attribute without a name");
  for (const int count : {3, 40}) {
    GraphBuilder b = Relu();
    onnx::NodeProto& node = *b.graph().mutable_node(0);
    for (int i = 0; i < count; ++i) {
      AddAttribute(node, "a" + std::to_string(i), onnx::AttributeProto::INT)->set_i(i);
    }
    auto load = LoadModelFromBytes(b.Serialize(), "/tmp", "distinct");
    EXPECT_TRUE(load.ok()) << count << ": " << load.status().ToString();
    AddAttribute(node, "a1", onnx::AttributeProto::INT)->set_i(0);
    ExpectRejected(b, "node 'Relu_0' (Relu) has attribute 'a1' twice");
  }
}

TEST(Validate, RequiredAttributesArePresentAtAnyDepth) {
  GraphBuilder top(17);
  top.AddInput("x", kFloat, {"N", 4});
  top.AddNode("Cast", {"x"}, {"y"});  // Cast needs `to`: memest's rule rejects it
  top.AddOutput("y", kFloat);
  ExpectEstimateRejected(top, "(Cast): Cast: unknown 'to' type");
  // In a body ONNX's inference will run: checked against the ONNX schema first.
  onnx::GraphProto body = Body({{"x", "a"}});
  body.mutable_node(0)->set_op_type("Cast");
  ExpectEstimateRejected(IfWithBody(body), "Required attribute 'to' is missing");
}

TEST(Validate, BodiesAreAcyclicAndResolved) {
  // A self-cycle inside a body: rejected like one at the top level.
  ExpectRejected(IfWithBody(Body({{"a", "a"}})), "has a cycle through node 'Relu_0' (Relu)");
  ExpectRejected(IfWithBody(Body({{"b", "a"}, {"a", "b"}})), "has a cycle");
  ExpectRejected(IfWithBody(Body({{"nowhere", "a"}})), "reads tensor 'nowhere'");
  ExpectRejected(IfWithBody(Body({{"x", "a"}, {"x", "a"}})), "produces tensor 'a'");
}

TEST(Validate, ScanWithoutBodyIsRejected) {
  GraphBuilder b(17);
  b.AddInput("s", kFloat, {2});
  b.AddInput("x", kFloat, {3, 2});
  SetIntAttr(b.AddNode("Scan", {"s", "x"}, {"y"}), "num_scan_inputs", 1);
  b.AddOutput("y", kFloat);
  ExpectRejected(b, "node 'Scan_0' (Scan) lacks its required attribute 'body'");
  // In a body, the error names the node and the attribute of the node it lies in.
  onnx::GraphProto body = Body({{"x", "a"}});
  onnx::NodeProto& scan = *body.mutable_node(0);
  scan.set_op_type("Scan");
  scan.add_input("x");
  SetIntAttr(scan, "num_scan_inputs", 1);
  ExpectRejected(IfWithBody(body),
                 "node 'Scan_0' (Scan) in node 'If_0' (If) attribute 'then_branch' lacks its "
                 "required attribute 'body'");
}

TEST(Validate, RankIsBounded) {
  GraphBuilder b(17);
  std::vector<testing::TestDim> dims(core::kMaxRank + 1, testing::TestDim(1));
  b.AddInput("x", kFloat, dims);
  b.AddNode("Relu", {"x"}, {"y"});
  b.AddOutput("y", kFloat);
  ExpectRejected(b, "has rank 65");
}

TEST(Validate, ScanCountsAreCheckedBeforeOnnxRunsIt) {
  // Scan has no memest shape rule: ONNX's inference sizes it, after the range checks.
  GraphBuilder b(17);
  b.AddInput("s", kFloat, {2});
  b.AddInput("x", kFloat, {"N", 2});
  onnx::GraphProto body;
  body.set_name("scan_body");
  const std::vector<testing::TestDim> two = {2};
  for (const char* in : {"s_in", "x_in"}) {
    auto* vi = body.add_input();
    vi->set_name(in);
    testing::SetTensorType(*vi, kFloat, &two);
  }
  auto* add = body.add_node();
  add->set_op_type("Add");
  add->add_input("s_in");
  add->add_input("x_in");
  add->add_output("s_out");
  auto* id = body.add_node();
  id->set_op_type("Identity");
  id->add_input("s_out");
  id->add_output("y_out");
  for (const char* out : {"s_out", "y_out"}) {
    auto* vi = body.add_output();
    vi->set_name(out);
    testing::SetTensorType(*vi, kFloat, &two);
  }
  auto& scan = b.AddNode("Scan", {"s", "x"}, {"s_final", "ys"});
  SetGraphAttr(scan, "body", body);
  SetIntAttr(scan, "num_scan_inputs", 1);
  b.AddOutput("ys", kFloat);
  auto ok = LoadModelFromBytes(b.Serialize(), "/tmp", "scan_ok");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  auto est = MakeEstimator("symbolic");
  ASSERT_TRUE(est.ok());
  Options o;
  o.batch = 5;
  o.mode = Mode::kInfer;
  auto e = (*est)->Run(**ok, o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();

  for (auto& a : *b.graph().mutable_node(0)->mutable_attribute()) {
    if (a.name() == "num_scan_inputs") a.set_i(7);
  }
  auto bad = LoadModelFromBytes(b.Serialize(), "/tmp", "scan_bad");
  ASSERT_TRUE(bad.ok()) << bad.status().ToString();
  auto r = (*est)->Run(**bad, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidModel);
  EXPECT_NE(r.status().message().find("num_scan_inputs 7"), std::string::npos)
      << r.status().ToString();
}

}  // namespace
}  // namespace memest

namespace memest {
namespace {

// The documented bounds (docs/robustness.md, Bounds): just over each one is a clear error, not
// an allocation that grows with the input.
TEST(ValidateBounds, NodeCountAboveTheBoundIsRefused) {
  GraphBuilder b = Relu();
  for (int64_t i = 0; i < core::kMaxTotalNodes; ++i) b.graph().add_node()->set_op_type("Relu");
  ExpectRejected(b, "more than 1000000 nodes");
}

TEST(ValidateBounds, AttributeListAboveTheBoundIsRefused) {
  GraphBuilder b(17);
  b.AddInput("x", kFloat, {"N", 4});
  AddAttribute(b.AddNode("Transpose", {"x"}, {"y"}), "perm", onnx::AttributeProto::INTS)
      ->mutable_ints()
      ->Resize(static_cast<int>(core::kMaxAttributeElements + 1), 0);
  b.AddOutput("y", kFloat);
  ExpectRejected(b, "above memest's bound");
}

}  // namespace
}  // namespace memest
