// Conformance run over ONNX's own test models (Debian's libonnx-testdata, 1,072 model.onnx files):
// every model must load or fail with a clear error, and every loaded model must give an estimate
// (train and infer) or a clear error. Nothing may crash or throw. Runs in-process on purpose: a
// crash is a real bug. A signal handler only names the model being processed, then lets the
// signal kill the test as it would have anyway.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/bind.h"
#include "core/graph.h"
#include "memest/estimator.h"
#include "memest/model.h"
#include "memest/options.h"
#include "memest/status.h"

#ifndef MEMEST_ONNX_TESTDATA
#define MEMEST_ONNX_TESTDATA "/usr/share/libonnx-testdata/data"
#endif

namespace memest {
namespace {

namespace fs = std::filesystem;

// The model being processed, for the crash message (async-signal-safe to write).
char g_current[4096] = "";
size_t g_current_len = 0;

void SetCurrent(const std::string& what) {
  g_current_len = std::min(what.size(), sizeof(g_current) - 1);
  std::memcpy(g_current, what.data(), g_current_len);
  g_current[g_current_len] = '\0';
}

extern "C" void NameModelOnCrash(int sig) {
  static const char kPrefix[] = "\nmemest conformance: fatal signal while processing ";
  ssize_t ignored = write(STDERR_FILENO, kPrefix, sizeof(kPrefix) - 1);
  ignored = write(STDERR_FILENO, g_current, g_current_len);
  ignored = write(STDERR_FILENO, "\n", 1);
  (void)ignored;
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

class CrashNamer {
 public:
  CrashNamer() {
    for (int sig : kSignals) previous_.emplace_back(sig, std::signal(sig, NameModelOnCrash));
  }
  ~CrashNamer() {
    for (auto& [sig, handler] : previous_) std::signal(sig, handler);
  }

 private:
  static constexpr int kSignals[] = {SIGSEGV, SIGABRT, SIGFPE, SIGBUS, SIGILL};
  std::vector<std::pair<int, void (*)(int)>> previous_;
};

std::vector<std::string> FindModels(const fs::path& root) {
  std::vector<std::string> models;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file(ec) && it->path().filename() == "model.onnx") {
      models.push_back(it->path().string());
    }
  }
  std::sort(models.begin(), models.end());
  return models;
}

struct Tally {
  int ok = 0;
  std::map<ErrorCode, int> errors;
  std::map<ErrorCode, std::vector<std::string>> examples;  // a few "model: message" per code

  void Error(const std::string& model, const Status& status) {
    ++errors[status.code()];
    auto& ex = examples[status.code()];
    if (ex.size() < 3) ex.push_back(model + ": " + status.message());
  }
  int error_total() const {
    int n = 0;
    for (const auto& [code, count] : errors) n += count;
    return n;
  }
};

std::string ShortName(const std::string& path, const std::string& root) {
  std::string s = path.substr(std::min(path.size(), root.size() + 1));
  const std::string suffix = "/model.onnx";
  if (s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0) {
    s.resize(s.size() - suffix.size());
  }
  return s;
}

void Print(const std::string& phase, const Tally& t) {
  std::cout << "  " << phase << ": ok " << t.ok << ", errors " << t.error_total() << "\n";
  for (const auto& [code, count] : t.errors) {
    std::cout << "    " << ErrorCodeName(code) << ": " << count << "\n";
    for (const std::string& ex : t.examples.at(code)) std::cout << "      e.g. " << ex << "\n";
  }
}

void Record(const std::string& phase, const Tally& t) {
  ::testing::Test::RecordProperty(phase + "_ok", t.ok);
  for (const auto& [code, count] : t.errors) {
    ::testing::Test::RecordProperty(phase + "_error_" + ErrorCodeName(code), count);
  }
}

TEST(ConformanceTest, OnnxTestModelsLoadAndEstimateOrFailClearly) {
  const std::string root = MEMEST_ONNX_TESTDATA;
  if (!fs::is_directory(root)) GTEST_SKIP() << root << " is absent (install libonnx-testdata)";
  const std::vector<std::string> models = FindModels(root);
  ASSERT_GE(models.size(), 1000u) << "expected the 1,072 models of libonnx-testdata in " << root;

  auto made = MakeEstimator("analytical");
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  const Estimator& estimator = **made;

  CrashNamer crash_namer;
  Tally load;
  Tally train;
  Tally infer;
  int failures_reported = 0;
  std::vector<std::string> internal_errors;
  std::vector<std::pair<double, std::string>> timings;  // seconds, model
  const auto start = std::chrono::steady_clock::now();

  auto report = [&](const std::string& what) {
    if (++failures_reported <= 20) ADD_FAILURE() << what;
  };
  auto check_error = [&](const std::string& name, const std::string& phase, const Status& s) {
    if (s.message().empty()) report(name + " " + phase + ": error with an empty message");
    if (s.code() == ErrorCode::kInternal)
      internal_errors.push_back(name + " " + phase + ": " + s.message());
  };
  auto check_estimate = [&](const std::string& name, const std::string& phase, const Estimate& e) {
    if (e.peak_device != e.breakdown.Total()) {
      report(name + " " + phase + ": peak_device " + std::to_string(e.peak_device) +
             " != breakdown total " + std::to_string(e.breakdown.Total()));
    }
    if (e.peak_allocated > e.peak_reserved || e.peak_reserved > e.peak_device) {
      report(name + " " + phase + ": allocated " + std::to_string(e.peak_allocated) +
             " / reserved " + std::to_string(e.peak_reserved) + " / device " +
             std::to_string(e.peak_device) + " out of order");
    }
  };

  for (const std::string& path : models) {
    const std::string name = ShortName(path, root);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      SetCurrent(path + " (load)");
      auto loaded = LoadModel(path);
      if (!loaded.ok()) {
        load.Error(name, loaded.status());
        check_error(name, "load", loaded.status());
        continue;
      }
      ++load.ok;
      const Model& model = **loaded;

      Options options;
      const auto& inputs = model.summary().data_inputs;
      if (!inputs.empty() && !inputs[0].dims.empty() && inputs[0].dims[0].value < 0) {
        options.batch = 1;  // a fixed-batch export takes only its own batch
      }
      for (const std::string& dim : model.summary().symbolic_dims) options.dims[dim] = 1;

      options.mode = Mode::kTrain;
      SetCurrent(path + " (train)");
      auto e_train = estimator.Run(model, options);
      if (e_train.ok()) {
        ++train.ok;
        check_estimate(name, "train", *e_train);
      } else {
        train.Error(name, e_train.status());
        check_error(name, "train", e_train.status());
      }

      options.mode = Mode::kInfer;
      SetCurrent(path + " (infer)");
      auto e_infer = estimator.Run(model, options);
      if (e_infer.ok()) {
        ++infer.ok;
        check_estimate(name, "infer", *e_infer);
      } else {
        infer.Error(name, e_infer.status());
        check_error(name, "infer", e_infer.status());
      }
    } catch (const std::exception& ex) {
      report(name + ": threw " + ex.what());
    } catch (...) {
      report(name + ": threw a non-std exception");
    }
    timings.emplace_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), name);
  }
  SetCurrent("(done)");
  const double total_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::cout << "memest conformance over " << root << ": " << models.size() << " models in "
            << total_s << " s\n";
  Print("load", load);
  Print("estimate train", train);
  Print("estimate infer", infer);
  std::sort(timings.rbegin(), timings.rend());
  std::cout << "  slowest:";
  for (size_t i = 0; i < std::min<size_t>(5, timings.size()); ++i) {
    std::cout << " " << timings[i].second << " (" << timings[i].first << " s)";
  }
  std::cout << "\n";
  if (failures_reported > 20) std::cout << "  (" << failures_reported - 20 << " more failures)\n";

  RecordProperty("models", static_cast<int>(models.size()));
  Record("load", load);
  Record("train", train);
  Record("infer", infer);
  RecordProperty("seconds", static_cast<int>(total_s));

  EXPECT_EQ(load.ok + load.error_total(), static_cast<int>(models.size()));
  EXPECT_EQ(train.ok + train.error_total(), load.ok);
  EXPECT_EQ(infer.ok + infer.error_total(), load.ok);
  for (size_t i = 0; i < std::min<size_t>(10, internal_errors.size()); ++i) {
    ADD_FAILURE() << "internal error (a memest bug): " << internal_errors[i];
  }
  EXPECT_TRUE(internal_errors.empty()) << internal_errors.size() << " internal errors";
  EXPECT_EQ(failures_reported, 0);
}

// Reads a TensorProto (input_K.pb / output_K.pb); nullopt when absent or not a TensorProto.
std::optional<onnx::TensorProto> ReadTensor(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  onnx::TensorProto t;
  if (!t.ParseFromIstream(&in)) return std::nullopt;
  return t;
}

std::string DimsToString(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  return s + "]";
}

// Binds every model to the shapes of its test_data_set_0 inputs and compares the bound shape and
// dtype of each graph output with the reference output_K.pb. A mismatch means memest would size
// that tensor wrongly.
TEST(ConformanceTest, BoundOutputShapesMatchReferenceOutputs) {
  const std::string root = MEMEST_ONNX_TESTDATA;
  if (!fs::is_directory(root)) GTEST_SKIP() << root << " is absent (install libonnx-testdata)";
  const std::vector<std::string> models = FindModels(root);
  ASSERT_GE(models.size(), 1000u);

  CrashNamer crash_namer;
  int compared_models = 0, skipped_models = 0, bind_errors = 0;
  int outputs_match = 0;
  std::vector<std::string> mismatches;
  std::vector<std::string> unknown;  // outputs whose shape stayed unknown after binding
  for (const std::string& path : models) {
    const std::string name = ShortName(path, root);
    const fs::path data = fs::path(path).parent_path() / "test_data_set_0";
    SetCurrent(path + " (bind to reference inputs)");
    auto loaded = LoadModel(path);
    if (!loaded.ok() || !fs::is_directory(data)) {
      ++skipped_models;
      continue;
    }
    const core::Graph& graph = (*loaded)->graph();
    Options options;
    options.mode = Mode::kInfer;
    options.allow_unknown_shapes = true;  // compares what is known; unknown outputs are counted
    bool usable = true;
    for (size_t k = 0; k < graph.data_inputs.size() && usable; ++k) {
      const core::Value& v = graph.value(graph.data_inputs[k]);
      auto t = ReadTensor(data / ("input_" + std::to_string(k) + ".pb"));
      if (!t || v.dtype == 0 || !v.has_shape || t->dims_size() != static_cast<int>(v.dims.size())) {
        usable = false;
        break;
      }
      for (size_t i = 0; i < v.dims.size(); ++i) {
        if (v.dims[i].symbolic()) {
          options.dims[v.dims[i].param] = t->dims(static_cast<int>(i));
        } else if (!v.dims[i].known() && i == 0) {
          options.batch = t->dims(0);
        } else if (!v.dims[i].known()) {
          usable = false;  // an unnamed inner dim cannot be bound through Options
        }
      }
    }
    if (!usable) {
      ++skipped_models;
      continue;
    }
    auto bound = core::Bind(graph, options);
    if (!bound.ok()) {
      ++bind_errors;
      EXPECT_FALSE(bound.status().message().empty()) << name;
      continue;
    }
    ++compared_models;
    const auto& outputs = graph.proto->graph().output();
    for (int k = 0; k < outputs.size(); ++k) {
      if (!outputs[k].type().has_tensor_type()) continue;
      auto ref = ReadTensor(data / ("output_" + std::to_string(k) + ".pb"));
      if (!ref) continue;
      const int id = graph.FindValue(outputs[k].name());
      if (id < 0 || !bound->shapes[static_cast<size_t>(id)]) {
        unknown.push_back(name + " output '" + outputs[k].name() + "'");
        continue;
      }
      const core::Dims got_dims = *bound->shapes[static_cast<size_t>(id)];
      const std::vector<int64_t> got(got_dims.begin(), got_dims.end());
      const std::vector<int64_t> want(ref->dims().begin(), ref->dims().end());
      const int32_t got_dtype = bound->dtypes[static_cast<size_t>(id)];
      // The reference files store bfloat16 tensors as uint16 (numpy has no bfloat16).
      const bool same_dtype = got_dtype == 0 || got_dtype == ref->data_type() ||
                              (got_dtype == onnx::TensorProto::BFLOAT16 &&
                               ref->data_type() == onnx::TensorProto::UINT16);
      if (got != want || !same_dtype) {
        mismatches.push_back(name + " output '" + outputs[k].name() + "': bound " +
                             DimsToString(got) + " dtype " + std::to_string(got_dtype) +
                             ", reference " + DimsToString(want) + " dtype " +
                             std::to_string(ref->data_type()));
      } else {
        ++outputs_match;
      }
    }
  }
  SetCurrent("(done)");
  std::cout << "memest bound-shape conformance: " << compared_models << " models compared, "
            << skipped_models << " skipped, " << bind_errors
            << " bind errors; outputs: " << outputs_match << " match, " << mismatches.size()
            << " mismatch, " << unknown.size() << " unknown\n";
  for (const std::string& m : mismatches) std::cout << "  mismatch: " << m << "\n";
  for (const std::string& u : unknown) std::cout << "  unknown: " << u << "\n";
  RecordProperty("shape_models_compared", compared_models);
  RecordProperty("shape_outputs_match", outputs_match);
  RecordProperty("shape_outputs_mismatch", static_cast<int>(mismatches.size()));
  RecordProperty("shape_outputs_unknown", static_cast<int>(unknown.size()));
  EXPECT_GE(compared_models, 900);
  EXPECT_TRUE(mismatches.empty()) << mismatches.size() << " outputs bound to a wrong shape";
}

}  // namespace
}  // namespace memest
