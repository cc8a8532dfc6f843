// Hostile models (tests/data/crashers/, see its README): each file once crashed, hung or blew up
// memest. Each must now load and estimate to a clear error naming what is wrong, or to an
// estimate -- through every estimator, train and infer, batch 1 and 64, and the max-batch search.
// A crash here kills the test binary, which ctest reports as a failure.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "memest/memest.h"

namespace memest {
namespace {

namespace fs = std::filesystem;

struct Expected {
  const char* file;
  const char* error;  // a substring of the error; nullptr: the model estimates
};

// The minimized reproducers; *.fuzz-original.onnx mutants beside them are run by
// AllFilesInTheCorpus.
const Expected kExpected[] = {
    {"segv_broadcast_then_shape.onnx", "'Add_0' (Add)"},
    {"segv_scan_node_without_body_in_if_branch.onnx", "lacks its required attribute 'body'"},
    {"segv_parsedata_short_raw_data.onnx", "initializer 'axes' holds 3 bytes of raw_data"},
    {"heap_overflow_parsedata_short_raw_data.onnx", "bytes of raw_data"},
    {"segv_layernorm_axis_int32min.onnx", "(LayerNormalization)"},
    {"segv_convtranspose_rank0_weight.onnx", "(ConvTranspose)"},
    {"hang_scan_num_scan_inputs_int32max.onnx", "num_scan_inputs 2147483647"},
    {"internal_error_json_non_utf8_producer_name.onnx", nullptr},
    // Found by the in-tree fuzzer (scripts/fuzz.sh) at 73a8cd9: SEGV in ONNX's MaxUnpool inference.
    {"segv_maxunpool_ints_attribute_carrying_a_graph.fuzz-original.onnx",
     "attribute 'kernel_shape' has type INTS but also carries a GRAPH value"},
};

fs::path Corpus() { return fs::path(MEMEST_SOURCE_DIR) / "tests" / "data" / "crashers"; }

std::vector<std::string> Estimators() {
  std::vector<std::string> out;
  for (const BackendInfo& b : ListBackends()) {
    if (b.available && b.name != "measurement") out.push_back(b.name);
  }
  return out;
}

// Loads and estimates `path` every way; returns the first error (or OK when all estimate).
// Errors must be bad-model errors; every way must agree on the verdict.
Status LoadAndEstimate(const fs::path& path) {
  auto model = LoadModel(path.string());
  if (!model.ok()) return model.status();
  // A model exported with a fixed batch takes only its own batch (any other is a usage error).
  std::vector<int64_t> batches = {1, 64};
  const auto& inputs = (*model)->summary().data_inputs;
  if (!inputs.empty() && !inputs[0].dims.empty() && inputs[0].dims[0].value > 0) {
    batches = {inputs[0].dims[0].value};
  }
  Status first;
  for (const std::string& name : Estimators()) {
    auto est = MakeEstimator(name);
    EXPECT_TRUE(est.ok()) << name;
    if (!est.ok()) continue;
    for (Mode mode : {Mode::kTrain, Mode::kInfer}) {
      for (int64_t batch : batches) {
        Options o;
        o.mode = mode;
        o.batch = batch;
        auto e = (*est)->Run(**model, o);
        auto mb = FindMaxBatch(**est, **model, o, /*limit=*/1 << 12);
        if (!mb.ok()) {
          EXPECT_NE(mb.status().code(), ErrorCode::kInternal) << mb.status().ToString();
        }
        if (!e.ok()) {
          EXPECT_FALSE(mb.ok()) << path << " " << name;
        }
        if (!e.ok() && first.ok()) first = e.status();
      }
    }
  }
  return first;
}

bool IsBadModel(const Status& s) {
  return s.code() == ErrorCode::kInvalidModel || s.code() == ErrorCode::kOverflow ||
         s.code() == ErrorCode::kUnsupported || s.code() == ErrorCode::kUnboundDim;
}

TEST(Crashers, EachReproducerGivesItsClearErrorOrAnEstimate) {
  for (const Expected& e : kExpected) {
    SCOPED_TRACE(e.file);
    const Status s = LoadAndEstimate(Corpus() / e.file);
    if (e.error == nullptr) {
      EXPECT_TRUE(s.ok()) << s.ToString();
      continue;
    }
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), ErrorCode::kInvalidModel) << s.ToString();
    EXPECT_NE(s.message().find(e.error), std::string::npos) << s.ToString();
  }
}

// Found by the fuzzer at 9e4434a: tensors each under the old 4 EiB bound whose training step
// added up past 2^64; reserved wrapped below allocated and a number was printed.
TEST(Crashers, AStepBeyondSixtyFourBitsIsAnOverflowNotANumber) {
  auto model =
      LoadModel((Corpus() / "invariant_reserved_wraps_past_64_bits.fuzz-original.onnx").string());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  for (const std::string& name : Estimators()) {
    Options o;
    o.batch = 8;
    auto e = (*MakeEstimator(name))->Run(**model, o);
    ASSERT_FALSE(e.ok()) << name << ": printed " << e->peak_device;
    EXPECT_EQ(e.status().code(), ErrorCode::kOverflow) << e.status().ToString();
  }
}

TEST(Crashers, AllFilesInTheCorpus) {
  int files = 0;
  for (const auto& entry : fs::directory_iterator(Corpus())) {
    if (entry.path().extension() != ".onnx") continue;
    ++files;
    SCOPED_TRACE(entry.path().filename().string());
    const Status s = LoadAndEstimate(entry.path());
    EXPECT_TRUE(s.ok() || IsBadModel(s)) << s.ToString();
  }
  EXPECT_GE(files, static_cast<int>(std::size(kExpected)));
}

}  // namespace
}  // namespace memest
