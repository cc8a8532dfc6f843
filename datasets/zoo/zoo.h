// datasets/zoo/zoo.h -- the memest_zoo library: seeded, deterministic model-family generation and
// validation of weightless training-form ONNX graphs.
//
// Contract:
//  * Generate(family, index, seed) is a pure function: the same arguments give the same
//    configuration and byte-identical serialized ONNX on every platform (integer-only sampling,
//    see families.h; deterministic protobuf serialization; no timestamps). Model i of a family
//    does not depend on how many models are generated, nor on the other families.
//  * File names: "<family>_s<seed>_<index, 4 digits>.onnx" ("<family>_tiny_s<seed>_..." at
//    Scale::kTiny); the graph name is the file stem and
//    weights point at "<stem>.weights", which is never written.
//  * Validate() runs ONNX's checker, strict shape inference, and a full-shape check after binding
//    the batch; it returns a Status (never throws).
// Thread safety: free functions without shared state; safe to call concurrently.
#ifndef MEMEST_DATASETS_ZOO_ZOO_H_
#define MEMEST_DATASETS_ZOO_ZOO_H_

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "datasets/zoo/families.h"
#include "memest/status.h"

namespace memest::zoo {

enum class Family { kMlp, kCnn, kTransformer, kRnn };
const std::vector<Family>& AllFamilies();
const char* FamilyName(Family f);
Result<Family> ParseFamily(std::string_view name);
const char* ScaleName(Scale s);  // "full" | "tiny"
Result<Scale> ParseScale(std::string_view name);

struct GeneratedModel {
  std::string name;  // file stem, e.g. "cnn_s1_0003"
  Family family = Family::kMlp;
  Scale scale = Scale::kFull;
  std::string arch;  // variant inside the family ("resnet", "decoder", "lstm", ...)
  nlohmann::json config;
  int64_t parameters = 0;           // PyTorch-style parameter count
  std::vector<int64_t> input_dims;  // -1 = the dynamic batch dim
  std::string input_dtype;
  onnx::ModelProto model;
  std::string bytes;   // deterministic serialization of `model`
  std::string sha256;  // of `bytes`
};

// Model `index` of `family` for `seed` at `scale`.
GeneratedModel Generate(Family family, int64_t index, uint64_t seed, Scale scale = Scale::kFull);

// One index.jsonl object: file, family, arch, config, params, sha256, bytes, input.
nlohmann::json IndexEntry(const GeneratedModel& m);

// Checks, in order:
//  1. onnx::checker::check_model on a copy whose EXTERNAL initializers are turned into graph
//     inputs of the same type and shape (ONNX 1.12's checker stat()s external data files, which
//     weightless models do not have; every other check is kept). Other initializers stay.
//  2. onnx::shape_inference::InferShapes, strict (check_type, error_mode 1, data propagation).
//  3. After binding every dim_param of the data inputs to `batch`, strict inference again, and
//     every node output must have an inferred type with a full static shape.
// Returns InvalidModel with the first failure.
Status Validate(const onnx::ModelProto& model, int64_t batch = 4);

// Checks 1 and 2 only, over the model's symbolic dims: for graphs whose sizes come from Shape()
// of an input through ops ONNX's data propagation does not follow (Range over a computed bound),
// such as the Hugging Face graphs of hf.h.
Status ValidateStructure(const onnx::ModelProto& model);

// Writes `bytes` to `path` (binary, truncating). Errors as Status.
Status WriteFile(const std::string& path, std::string_view bytes);

}  // namespace memest::zoo

#endif  // MEMEST_DATASETS_ZOO_ZOO_H_
