// tests/testing/bundled.h -- the bundled models (datasets/models/) loaded for a test.
#ifndef MEMEST_TESTS_TESTING_BUNDLED_H_
#define MEMEST_TESTS_TESTING_BUNDLED_H_

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "memest/memest.h"

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

}  // namespace memest::testing

#endif  // MEMEST_TESTS_TESTING_BUNDLED_H_
