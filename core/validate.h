// core/validate.h -- structural validation of an untrusted ONNX ModelProto.
//
// memest reads model files that users upload; ONNX's own inference functions (core/onnx_fallback.h)
// trust what they read and crash on malformed input. ValidateModelProto() runs on the parsed
// proto before anything else looks at it, and checks what no later stage re-checks:
//
//  * Versions: 1 <= ir_version <= kMaxIrVersion; every opset version in [1, kMaxOpsetVersion].
//  * Tensors (initializers, sparse initializers, tensor attributes, Constant values, in every
//    graph and subgraph): a known element type, dims >= 0, an element count that fits 64 bits,
//    and a payload whose length matches dims x dtype (raw_data bytes, or the count of the typed
//    field the dtype is stored in). A tensor with no payload (weightless export, external data)
//    is accepted.
//  * Attributes: every attribute has a name, once per node; a typed attribute carries the field
//    its type names (GRAPH -> g, TENSOR -> t, ...); If, Loop and Scan carry their bodies.
//    Attribute types are checked where they are read: by memest's shape rules (a mistyped
//    attribute rejects the node, ops/shape_rules.h) and, for nodes handed to ONNX's inference,
//    against the ONNX schema (core/onnx_fallback.h). ONNX's schema registry is not loaded here:
//    building it costs tens of milliseconds, more than loading a ResNet.
//  * Subgraphs (If/Loop/Scan bodies, at any depth up to kMaxSubgraphDepth): every node input is
//    produced inside the body or visible from an enclosing scope, no name is produced twice, and
//    the body's nodes are acyclic (a node reading its own output is a cycle).
//  * Bounds: at most kMaxTotalNodes nodes over all graphs, ranks of at most kMaxRank, attribute
//    lists of at most kMaxAttributeElements elements.
//
// Every rejection is an InvalidModel (or Overflow) Status naming the node, tensor or attribute.
// The top-level graph's references and cycles are checked by the loader itself (core/loader.cc).
#ifndef MEMEST_CORE_VALIDATE_H_
#define MEMEST_CORE_VALIDATE_H_

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/payload_filter.h"
#include "memest/status.h"

namespace memest::core {

inline constexpr int64_t kMaxIrVersion = 64;
inline constexpr int64_t kMaxOpsetVersion = 1000;
inline constexpr int kMaxSubgraphDepth = 64;
inline constexpr int64_t kMaxTotalNodes = 1'000'000;
inline constexpr int64_t kMaxAttributeElements = 1 << 24;

// Checks `model` as described above. Never throws. `left_out`: by the top-level graph's
// initializers, what the payload filter left out of each (core/payload_filter.h), checked as
// the payloads they were.
[[nodiscard]] Status ValidateModelProto(const onnx::ModelProto& model,
                                        std::span<const LeftOutPayload> left_out = {});

// Checks one tensor's element type, dims and payload length; `what` names it in errors.
[[nodiscard]] Status ValidateTensor(const onnx::TensorProto& tensor, const std::string& what);
// The same, naming the tensor "<kind> '<its name>'" in errors (a name made only for one).
[[nodiscard]] Status ValidateNamedTensor(const onnx::TensorProto& tensor, std::string_view kind);

}  // namespace memest::core

#endif  // MEMEST_CORE_VALIDATE_H_
