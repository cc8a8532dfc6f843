// memest/model.h -- loading an ONNX model once, for every backend.
//
// LoadModel parses the file with libonnx/protobuf, validates it (dtypes, dims, opsets, cycles,
// external-data paths) and keeps only what estimation needs: the graph structure, tensor dtypes
// and dims, attribute values and small integer constants. Weights are never read; external data
// is never opened (a location that would leave the model's folder is rejected all the same).
//
// A Model is immutable after loading. It is safe to estimate one Model from many threads at once;
// share it through std::shared_ptr<const Model>. The one thing it changes after loading is a
// bounded, locked cache of the graphs bound at its last few dims (core/bind_cache.h), which
// estimates at the same dims share, each with the value facts derived from it under the last
// few option sets and the last symbolic simulations (core/derived_cache.h); it never changes an
// estimate.
#ifndef MEMEST_MODEL_H_
#define MEMEST_MODEL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "memest/estimate.h"
#include "memest/status.h"

namespace memest {

namespace core {
struct Graph;     // internal representation (core/graph.h)
class BindCache;  // bound graphs of recent estimates (core/bind_cache.h)
}  // namespace core

// A dim as written in the file: a value, a name (dim_param), or neither (unknown).
struct DimInfo {
  int64_t value = -1;  // >= 0 when known
  std::string param;   // non-empty when symbolic
};

struct InputInfo {
  std::string name;
  std::string dtype;          // "float32", "int64", ...
  std::vector<DimInfo> dims;  // empty for a scalar
};

struct ModelSummary {
  std::string path;
  std::string producer;  // producer_name producer_version
  int64_t ir_version = 0;
  std::map<std::string, int64_t> opsets;  // domain ("" = ai.onnx) -> version
  int64_t node_count = 0;  // top-level graph nodes, with the copies core/merged_nodes.h makes
  int64_t subgraph_node_count = 0;  // nodes inside If/Loop/Scan bodies
  int64_t parameter_count = 0;      // elements of trainable float initializers
  uint64_t parameter_bytes = 0;
  std::vector<InputInfo> data_inputs;      // graph inputs that are not initializers
  std::vector<std::string> symbolic_dims;  // every dim_param name on data inputs, sorted
  std::vector<std::string> op_types;       // distinct op types, sorted ("domain::Op" off ai.onnx)
  std::vector<Diagnostic> diagnostics;     // e.g. non-default domains, eval-mode signs
};

class Model {
 public:
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelSummary& summary() const;
  // Internal graph, for backends inside memest. Not part of the stable API.
  const core::Graph& graph() const;
  // The graph bound at recent estimates' dims, shared by later estimates at the same dims
  // (core/bind_cache.h; thread-safe). Internal, like graph().
  core::BindCache& bind_cache() const;

  // For LoadModel (ops/load_model.cc) only.
  explicit Model(std::unique_ptr<core::Graph> graph);

 private:
  std::unique_ptr<core::Graph> graph_;
  std::unique_ptr<core::BindCache> bind_cache_;  // never null
};

// Loads and validates `path`. Errors: NotFound (missing file), InvalidModel (not ONNX, truncated,
// no opset, unknown dtype, negative dims, cycles, escaping external data), Overflow.
Result<std::shared_ptr<const Model>> LoadModel(const std::string& path);

// Same, from bytes in memory. `base_dir` is the folder external-data locations are relative to
// (used only to validate them; they are never opened). `display_name` names the model in errors.
Result<std::shared_ptr<const Model>> LoadModelFromBytes(std::string_view bytes,
                                                        const std::string& base_dir,
                                                        const std::string& display_name);

}  // namespace memest

#endif  // MEMEST_MODEL_H_
