// ops/load_model.cc -- the public LoadModel (memest/model.h): the loader (core/loader.h), then
// the shape pass over the op rules (ops/shape_pass.h), once per model. Composed here, the lowest
// layer that has both, so that the loader never reaches up to the rules.
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <utility>

#include "core/loader.h"
#include "memest/model.h"
#include "ops/rules.h"
#include "ops/shape_pass.h"

namespace memest {
namespace {

// Every error names the model (its path or display name) and is about the model.
Status AboutTheModel(const Status& s, const std::string& display_name) {
  const bool named = s.message().find(display_name) != std::string::npos;
  return (named ? s : s.WithContext(display_name)).About(Subject::kModel);
}

Result<std::shared_ptr<const Model>> WithShapes(Result<std::unique_ptr<core::Graph>> loaded,
                                                const std::string& display_name) {
  if (!loaded.ok()) return AboutTheModel(loaded.status(), display_name);
  std::unique_ptr<core::Graph> graph = std::move(loaded).value();
  ops::ResolveRules(graph.get());  // each node's rule, once per model
  try {
    // Shapes over symbolic dims, once per model: binding dims later only evaluates them.
    graph->symbolic = ops::InferSymbolicShapes(*graph);
  } catch (const std::bad_alloc&) {
    return Internal(display_name + ": out of memory while inferring shapes").About(Subject::kModel);
  } catch (const std::exception& e) {
    return Internal(display_name + ": unexpected error while inferring shapes: " + e.what())
        .About(Subject::kModel);
  }
  return std::shared_ptr<const Model>(std::make_shared<Model>(std::move(graph)));
}

}  // namespace

Result<std::shared_ptr<const Model>> LoadModelFromBytes(std::string_view bytes,
                                                        const std::string& base_dir,
                                                        const std::string& display_name) {
  return WithShapes(core::LoadGraphFromBytes(bytes, base_dir, display_name), display_name);
}

Result<std::shared_ptr<const Model>> LoadModel(const std::string& path) {
  return WithShapes(core::LoadGraph(path), path);
}

}  // namespace memest
