// core/loader.h -- ONNX bytes or file -> a validated core::Graph, without shapes.
//
// The loader's policy (what it accepts and rejects) is at the top of core/loader.cc. Shapes are
// inferred a layer above, by the op rules (ops/shape_pass.h): the public LoadModel
// (memest/model.h, implemented in ops/load_model.cc) is these functions followed by that pass.
// Nothing else should call them.
#ifndef MEMEST_CORE_LOADER_H_
#define MEMEST_CORE_LOADER_H_

#include <memory>
#include <string>
#include <string_view>

#include "core/graph.h"
#include "memest/status.h"

namespace memest::core {

// Parses and validates `bytes`. `base_dir` is the folder external-data locations are relative to
// (checked, never opened); `display_name` prefixes every error. Never throws: an exception from
// protobuf or libonnx becomes Internal.
[[nodiscard]] Result<std::unique_ptr<Graph>> LoadGraphFromBytes(std::string_view bytes,
                                                                const std::string& base_dir,
                                                                const std::string& display_name);

// Reads `path` (a regular file under 2 GiB) and loads it as above. NotFound for a missing or
// unreadable file, InvalidModel for a directory, pipe or device.
[[nodiscard]] Result<std::unique_ptr<Graph>> LoadGraph(const std::string& path);

}  // namespace memest::core

#endif  // MEMEST_CORE_LOADER_H_
