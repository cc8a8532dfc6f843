// tests/testing/bundled.h -- the bundled models (datasets/models/) and the language models of
// tests/data/hf loaded for a test, and where datasets/timm-a100's graphs are.
#ifndef MEMEST_TESTS_TESTING_BUNDLED_H_
#define MEMEST_TESTS_TESTING_BUNDLED_H_

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "datasets/zoo/graph_writer.h"
#include "datasets/zoo/hf.h"
#include "memest/memest.h"
#include "testing/onnx_builder.h"

namespace memest::testing {

// datasets/models/<name>.onnx ("resnet18_train"; a name ending in ".onnx" is taken as the file
// name), loaded; a load failure fails the test and gives nullptr.
inline std::shared_ptr<const Model> BundledModel(const std::string& name) {
  const bool has_suffix = name.size() > 5 && name.compare(name.size() - 5, 5, ".onnx") == 0;
  auto m = LoadModel(std::string(MEMEST_SOURCE_DIR) + "/datasets/models/" + name +
                     (has_suffix ? "" : ".onnx"));
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

// The graph of tests/data/hf/<config_name> ("gpt2.json"), built with `options` (by default the
// training graph), serialized, and its architecture (the name it loads under); a failure fails
// the test and leaves the bytes empty.
struct HfGraph {
  std::string bytes, architecture;
};
inline HfGraph HfGraphBytes(const std::string& config_name,
                            const zoo::HfGraphOptions& options = {}) {
  auto config = zoo::LoadHfConfig(std::string(MEMEST_SOURCE_DIR) + "/tests/data/hf/" + config_name);
  EXPECT_TRUE(config.ok()) << config_name;
  if (!config.ok()) return {};
  auto hf = zoo::BuildHfModel(*config, options);
  EXPECT_TRUE(hf.ok()) << hf.status().ToString();
  if (!hf.ok()) return {};
  return {zoo::SerializeModel(hf->model), hf->architecture};
}

// The same graph loaded; a failure fails the test and gives nullptr.
inline std::shared_ptr<const Model> HfModel(const std::string& config_name,
                                            const zoo::HfGraphOptions& options = {}) {
  const HfGraph graph = HfGraphBytes(config_name, options);
  if (graph.bytes.empty()) return nullptr;
  auto m = LoadModelFromBytes(graph.bytes, ".", graph.architecture);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

// A decode step of tests/data/hf/<config_name> and the prefill graph of its past, built as
// `memest --hf-config --phase decode` builds them (the prefill's LM head on the last position, as
// generate() computes it); a failure fails the test and leaves nullptr.
struct HfDecode {
  std::shared_ptr<const Model> step, prefill;
};
inline HfDecode HfDecodeAfterPrefill(const std::string& config_name) {
  zoo::HfGraphOptions decode, before;
  decode.phase = zoo::HfGraphOptions::kDecode;
  before.phase = zoo::HfGraphOptions::kPrefill;
  before.logits_last_only = true;
  return {HfModel(config_name, decode), HfModel(config_name, before)};
}

// The folder of datasets/timm-a100's 81 training graphs: the one datasets/timm-a100/unpack.sh
// unpacked them into, or else `scratch`, where they are unpacked from the tarball (a clean clone
// has only the tarball). A failed unpack fails the test.
inline std::filesystem::path TimmGraphs(const TempDir& scratch) {
  const std::filesystem::path source =
      std::filesystem::path(MEMEST_SOURCE_DIR) / "datasets/timm-a100";
  if (std::filesystem::exists(source / "models/.unpacked")) return source / "models";
  const std::string tar =
      "tar -xJf '" + (source / "models.tar.xz").string() + "' -C '" + scratch.path() + "'";
  EXPECT_EQ(std::system(tar.c_str()), 0) << tar;
  return std::filesystem::path(scratch.path()) / "models";
}

}  // namespace memest::testing

#endif  // MEMEST_TESTS_TESTING_BUNDLED_H_
