// ops/shape_rules.h -- shape and dtype rules over symbolic dims (the `infer` of an OpRule).
//
// A rule reads the node's attributes and its inputs' symbolic types (core::SymTensor: dtype,
// dims as core::DimExpr, and for small integer tensors their elements) and writes its outputs'
// types, folding shape computations where it can (Shape(x) = [batch, 128]; Gather, Concat,
// Mul on it; Reshape then reads the folded target). Families (unary, broadcasting binary,
// reductions, pooling, ...) make most ops one line in ops/rules.cc.
//
// Contract for a rule:
//  * Never crash, never throw, on any input: omitted inputs, unknown ranks, hostile attributes.
//    Read inputs through the context (nullptr / nullopt when unknown).
//  * Write what is known: a dtype without a shape is fine; a dim that cannot be worked out is
//    ctx.Unknown(); a data-dependent size is ctx.DataDependent(...).
//  * Return an error Status only for a malformed node (ranks that cannot match, an axis out of
//    range): the pass then forgets every output of the node and notes the message.
//  * Follow the ONNX operator spec (onnx/defs) for the semantics; never copy its code.
// Adding an op: one `.Infers(shape::X)` on its entry in ops/rules.cc and one case in
// tests/unit/shape_rules_test.cc.
#ifndef MEMEST_OPS_SHAPE_RULES_H_
#define MEMEST_OPS_SHAPE_RULES_H_

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/graph.h"
#include "core/symbolic_shapes.h"
#include "core/symdim.h"
#include "memest/status.h"

namespace memest::ops {

using core::DimExpr;
using core::SymTensor;

class InferContext {
 public:
  InferContext(const core::Node& node, std::span<const SymTensor* const> inputs,
               std::span<SymTensor> outputs, core::DimTable* table);

  const core::Node& node() const { return node_; }
  // The node's opset; a large number when its domain was not imported (read the newest spec).
  int64_t opset() const;

  size_t num_inputs() const { return inputs_.size(); }
  size_t num_outputs() const { return outputs_.size(); }
  bool has_input(size_t i) const { return i < inputs_.size() && inputs_[i] != nullptr; }
  const SymTensor* input(size_t i) const { return has_input(i) ? inputs_[i] : nullptr; }
  int32_t dtype(size_t i) const { return has_input(i) ? inputs_[i]->dtype : 0; }
  const std::vector<DimExpr>* shape(size_t i) const;   // nullptr when the rank is unknown
  const std::vector<DimExpr>* values(size_t i) const;  // nullptr when the elements are unknown
  std::optional<std::vector<int64_t>> ints(size_t i) const;  // elements, when all constant
  const std::vector<double>* float_values(size_t i) const;

  bool has_output(size_t i) const;
  // Output i's type, to fill in (a scratch value when the output is omitted).
  SymTensor& out(size_t i);
  // Sets output i's dtype and shape (and forgets any elements).
  void Set(size_t i, int32_t dtype, std::vector<DimExpr> shape);

  // Attributes: the default when the node has no proto or the attribute is absent. One of
  // another type than the accessor reads is malformed: the accessor returns the default and
  // mistyped_attribute() names it (the shape pass then rejects the node).
  const onnx::AttributeProto* attr(std::string_view name) const;
  const std::string& mistyped_attribute() const { return mistyped_; }
  int64_t attr_int(std::string_view name, int64_t def) const;
  std::optional<std::vector<int64_t>> attr_ints(std::string_view name) const;
  float attr_float(std::string_view name, float def) const;
  std::optional<std::vector<float>> attr_floats(std::string_view name) const;
  std::string attr_string(std::string_view name, std::string_view def) const;

  // Dim arithmetic that never fails: an overflow gives a fresh unknown.
  core::DimTable& table() { return *table_; }
  DimExpr Add(const DimExpr& a, const DimExpr& b);
  DimExpr Sub(const DimExpr& a, const DimExpr& b);
  DimExpr Mul(const DimExpr& a, const DimExpr& b);
  DimExpr Product(std::span<const DimExpr> dims);
  DimExpr FloorDiv(const DimExpr& a, const DimExpr& b) { return table_->FloorDiv(a, b); }
  DimExpr CeilDiv(const DimExpr& a, const DimExpr& b) { return table_->CeilDiv(a, b); }
  DimExpr ExactDiv(const DimExpr& a, const DimExpr& b) { return table_->ExactDiv(a, b); }
  DimExpr Min(const DimExpr& a, const DimExpr& b) { return table_->Min(a, b); }
  DimExpr Max(const DimExpr& a, const DimExpr& b) { return table_->Max(a, b); }
  // A size this rule cannot work out (binding may fall back on ONNX's inference for it).
  DimExpr Unknown();
  // A size that depends on tensor contents (NonZero's count): no shape pass can know it.
  DimExpr DataDependent(std::string_view what);

 private:
  const core::Node& node_;
  std::span<const SymTensor* const> inputs_;
  std::span<SymTensor> outputs_;
  core::DimTable* table_;
  SymTensor scratch_;
  mutable std::string mistyped_;  // "'axis' is FLOATS, read as INT"

  // The attribute `name` when present with `type`; records a mismatch.
  const onnx::AttributeProto* typed_attr(std::string_view name,
                                         onnx::AttributeProto::AttributeType type) const;
};

using InferFn = Status (*)(InferContext&);

// The type of a constant tensor (initializer or Constant node): dtype, dims, and its elements
// when small and stored inline.
SymTensor ConstantType(const onnx::TensorProto& t);

// Shape rules, by family. Each follows the ONNX spec of the ops that name it in ops/rules.cc.
namespace shape {
// Elementwise, one input.
Status Unary(InferContext& c);          // output 0 = input 0's dtype and shape
Status Identity(InferContext& c);       // Unary, elements too
Status Neg(InferContext& c);            // Unary, elements negated
Status Rounding(InferContext& c);       // Floor/Ceil/Round: Unary, integer elements kept
Status Clip(InferContext& c);           // Unary, elements folded with known bounds
Status Abs(InferContext& c);            // Unary, non-negative elements kept
Status BoolUnary(InferContext& c);      // IsNaN/IsInf: bool, input 0's shape
Status Not(InferContext& c);            // bool, elements negated
Status Dropout(InferContext& c);        // output, bool mask
Status Cast(InferContext& c);           // `to`
Status CastLike(InferContext& c);       // input 1's dtype
Status LikeWithDtype(InferContext& c);  // input 0's shape, `dtype` attr or input 0's dtype
// Broadcasting.
Status Arith(InferContext& c);  // input 0's dtype, broadcast shape (Pow, bitwise, ...)
Status Add(InferContext& c);    // Arith, elements added
Status Sub(InferContext& c);
Status Mul(InferContext& c);
Status Div(InferContext& c);
Status Mod(InferContext& c);
Status Compare(InferContext& c);   // bool; Equal/Less/... decided when provable
Status Logical(InferContext& c);   // bool: And/Or/Xor
Status Variadic(InferContext& c);  // Sum/Mean/Max/Min: broadcast of every input
Status Where(InferContext& c);
// Reductions.
Status Reduce(InferContext& c);     // axes attribute or input 1, keepdims
Status ArgReduce(InferContext& c);  // ArgMax/ArgMin: int64
// Convolution and pooling.
Status Conv(InferContext& c);
Status ConvInteger(InferContext& c);
Status QLinearConv(InferContext& c);
Status ConvTranspose(InferContext& c);
Status Pool(InferContext& c);  // Average/Lp/MaxPool (MaxPool's int64 indices)
Status MaxUnpool(InferContext& c);
Status GlobalPool(InferContext& c);
Status RoiAlign(InferContext& c);  // RoiAlign, MaxRoiPool
// Products.
Status MatMul(InferContext& c);
Status MatMulInteger(InferContext& c);
Status QLinearMatMul(InferContext& c);
Status Gemm(InferContext& c);
Status Einsum(InferContext& c);
// Shape manipulation.
Status Reshape(InferContext& c);
Status Flatten(InferContext& c);
Status Squeeze(InferContext& c);
Status Unsqueeze(InferContext& c);
Status Transpose(InferContext& c);
Status Expand(InferContext& c);
Status Tile(InferContext& c);
Status Pad(InferContext& c);
Status Resize(InferContext& c);  // Resize and Upsample
Status DepthToSpace(InferContext& c);
Status SpaceToDepth(InferContext& c);
Status Concat(InferContext& c);
Status Split(InferContext& c);
Status Slice(InferContext& c);
Status Gather(InferContext& c);
Status GatherElements(InferContext& c);
Status GatherND(InferContext& c);
Status Scatter(InferContext& c);  // Scatter, ScatterElements, ScatterND: data's type
Status Compress(InferContext& c);
// Shape values and generators.
Status Shape(InferContext& c);
Status Size(InferContext& c);
Status Constant(InferContext& c);
Status ConstantOfShape(InferContext& c);
Status Range(InferContext& c);
Status OneHot(InferContext& c);
Status RandomShape(InferContext& c);  // RandomNormal/RandomUniform: `shape`, `dtype`
Status Multinomial(InferContext& c);
// Selection.
Status TopK(InferContext& c);
Status NonZero(InferContext& c);
Status Unique(InferContext& c);
Status NonMaxSuppression(InferContext& c);
// Normalization, losses, recurrent, attention.
Status BatchNorm(InferContext& c);
Status LayerNorm(InferContext& c);
Status SoftmaxCrossEntropyLoss(InferContext& c);
Status NegativeLogLikelihoodLoss(InferContext& c);
Status Recurrent(InferContext& c);  // LSTM, GRU, RNN
Status Attention(InferContext& c);
// ONNX Runtime contrib ops (com.microsoft; onnxruntime/core/graph/contrib_ops/bert_defs.cc).
Status MsAttention(InferContext& c);  // Attention: packed QKV weights, past/present [2, B, H, T, D]
Status MultiHeadAttention(InferContext& c);
Status GroupQueryAttention(InferContext& c);
Status GridSample(InferContext& c);
// Quantization.
Status QuantizeLinear(InferContext& c);
Status DequantizeLinear(InferContext& c);
Status DynamicQuantizeLinear(InferContext& c);
}  // namespace shape

}  // namespace memest::ops

#endif  // MEMEST_OPS_SHAPE_RULES_H_
