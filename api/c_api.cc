// api/c_api.cc -- memest/memest_c.h over the C++ library.
//
// Policy: every handle the library hands out is registered (a set of live pointers with their
// kind, under a mutex) and every call checks its handles against the set first, so a null, freed
// or foreign pointer is MEMEST_C_BAD_HANDLE rather than a dereference. Nothing escapes as an
// exception: each entry point catches everything and reports Internal.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include "memest/estimator.h"
#include "memest/json.h"
#include "memest/memest_c.h"
#include "memest/model.h"
#include "memest/pack.h"
#include "memest/version.h"

struct memest_model {
  std::shared_ptr<const memest::Model> model;
};
struct memest_estimator {
  std::unique_ptr<memest::Estimator> estimator;
};
struct memest_result {
  memest::Estimate estimate;
  memest::Options options;
};

namespace {

enum class Kind { kModel, kEstimator, kResult };

std::mutex& RegistryMutex() {
  static std::mutex* m = new std::mutex();
  return *m;
}
std::unordered_map<const void*, Kind>& Registry() {
  static auto* r = new std::unordered_map<const void*, Kind>();
  return *r;
}

void Register(const void* p, Kind k) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  Registry()[p] = k;
}
bool Live(const void* p, Kind k) {
  if (p == nullptr) return false;
  std::lock_guard<std::mutex> lock(RegistryMutex());
  const auto it = Registry().find(p);
  return it != Registry().end() && it->second == k;
}
bool Unregister(const void* p, Kind k) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  const auto it = Registry().find(p);
  if (it == Registry().end() || it->second != k) return false;
  Registry().erase(it);
  return true;
}

thread_local std::string last_error;

int Ok() {
  last_error.clear();
  return MEMEST_C_OK;
}
int Fail(const memest::Status& s) {
  last_error = s.ToString();
  return static_cast<int>(s.code()) + 1;
}
int BadHandle(const char* what) {
  last_error = std::string("bad_handle: ") + what +
               " is null, already freed or not a handle of this library";
  return MEMEST_C_BAD_HANDLE;
}

// Runs `body` with every exception turned into Internal.
template <typename F>
int Guard(const char* function, F body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return Fail(memest::Internal(std::string(function) + ": out of memory"));
  } catch (const std::exception& e) {
    return Fail(memest::Internal(std::string(function) + ": " + e.what()));
  } catch (...) {
    return Fail(memest::Internal(std::string(function) + ": unknown exception"));
  }
}

int NewModel(memest::Result<std::shared_ptr<const memest::Model>> loaded, memest_model** out) {
  if (!loaded.ok()) return Fail(loaded.status());
  auto* m = new memest_model{std::move(loaded).value()};
  Register(m, Kind::kModel);
  *out = m;
  return Ok();
}

char* CopyString(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out == nullptr) throw std::bad_alloc();
  std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

}  // namespace

extern "C" {

int memest_c_abi_version(void) { return MEMEST_C_ABI_VERSION; }
const char* memest_c_version(void) { return MEMEST_VERSION_STRING; }
const char* memest_c_last_error(void) { return last_error.c_str(); }
void memest_c_string_free(char* s) { std::free(s); }

int memest_model_load_file(const char* path, memest_model** out) {
  return Guard("memest_model_load_file", [&] {
    if (out == nullptr) return BadHandle("out");
    *out = nullptr;
    if (path == nullptr) return Fail(memest::InvalidArgument("path is null"));
    return NewModel(memest::LoadModel(path), out);
  });
}

int memest_model_load_bytes(const void* data, size_t size, const char* name, memest_model** out) {
  return Guard("memest_model_load_bytes", [&] {
    if (out == nullptr) return BadHandle("out");
    *out = nullptr;
    if (data == nullptr && size > 0) return Fail(memest::InvalidArgument("data is null"));
    const std::string display = name != nullptr ? name : "<bytes>";
    return NewModel(
        memest::LoadModelFromBytes(
            std::string_view(static_cast<const char*>(data), data ? size : 0), ".", display),
        out);
  });
}

int memest_model_free(memest_model* model) {
  return Guard("memest_model_free", [&] {
    if (model == nullptr) return Ok();
    if (!Unregister(model, Kind::kModel)) return BadHandle("model");
    delete model;
    return Ok();
  });
}

int memest_estimator_new(const char* backend, memest_estimator** out) {
  return Guard("memest_estimator_new", [&] {
    if (out == nullptr) return BadHandle("out");
    *out = nullptr;
    auto e = memest::MakeEstimator(backend != nullptr ? backend : "analytical");
    if (!e.ok()) return Fail(e.status());
    auto* h = new memest_estimator{std::move(e).value()};
    Register(h, Kind::kEstimator);
    *out = h;
    return Ok();
  });
}

int memest_estimator_free(memest_estimator* estimator) {
  return Guard("memest_estimator_free", [&] {
    if (estimator == nullptr) return Ok();
    if (!Unregister(estimator, Kind::kEstimator)) return BadHandle("estimator");
    delete estimator;
    return Ok();
  });
}

int memest_estimate(const memest_estimator* estimator, const memest_model* model,
                    const char* options_json, memest_result** out) {
  return Guard("memest_estimate", [&] {
    if (out == nullptr) return BadHandle("out");
    *out = nullptr;
    if (!Live(estimator, Kind::kEstimator)) return BadHandle("estimator");
    if (!Live(model, Kind::kModel)) return BadHandle("model");
    auto options = memest::OptionsFromJson(options_json != nullptr ? options_json : "");
    if (!options.ok()) return Fail(options.status());
    auto e = estimator->estimator->Run(*model->model, *options);
    if (!e.ok()) return Fail(e.status());
    auto* r = new memest_result{std::move(e).value(), std::move(options).value()};
    Register(r, Kind::kResult);
    *out = r;
    return Ok();
  });
}

int memest_result_free(memest_result* result) {
  return Guard("memest_result_free", [&] {
    if (result == nullptr) return Ok();
    if (!Unregister(result, Kind::kResult)) return BadHandle("result");
    delete result;
    return Ok();
  });
}

int memest_result_peak_device(const memest_result* result, uint64_t* out) {
  return Guard("memest_result_peak_device", [&] {
    if (out == nullptr) return BadHandle("out");
    if (!Live(result, Kind::kResult)) return BadHandle("result");
    *out = result->estimate.peak_device;
    return Ok();
  });
}

int memest_result_json(const memest_result* result, char** out) {
  return Guard("memest_result_json", [&] {
    if (out == nullptr) return BadHandle("out");
    *out = nullptr;
    if (!Live(result, Kind::kResult)) return BadHandle("result");
    *out = CopyString(memest::EstimateToJson(result->estimate));
    return Ok();
  });
}

int memest_result_fits(const memest_result* result, const char* gpu, int* fits, int64_t* headroom) {
  return Guard("memest_result_fits", [&] {
    if (fits == nullptr) return BadHandle("fits");
    if (!Live(result, Kind::kResult)) return BadHandle("result");
    auto profile =
        gpu != nullptr ? memest::FindGpuProfile(gpu) : memest::ResolveGpuProfile(result->options);
    if (!profile.ok()) return Fail(profile.status());
    const memest::Fit f = memest::CheckFit(result->estimate, *profile, result->options);
    *fits = f.fits ? 1 : 0;
    if (headroom != nullptr) *headroom = f.headroom;
    return Ok();
  });
}

int memest_max_batch(const memest_estimator* estimator, const memest_model* model,
                     const char* options_json, int64_t* batch, int* evaluations) {
  return Guard("memest_max_batch", [&] {
    if (batch == nullptr) return BadHandle("batch");
    if (!Live(estimator, Kind::kEstimator)) return BadHandle("estimator");
    if (!Live(model, Kind::kModel)) return BadHandle("model");
    auto options = memest::OptionsFromJson(options_json != nullptr ? options_json : "");
    if (!options.ok()) return Fail(options.status());
    auto r = memest::FindMaxBatch(*estimator->estimator, *model->model, *options);
    if (!r.ok()) return Fail(r.status());
    *batch = r->batch;
    if (evaluations != nullptr) *evaluations = r->evaluations;
    return Ok();
  });
}

int memest_pack(const memest_estimator* estimator, const memest_model* const* models,
                const char* const* options_json, size_t count, const char* gpu, int64_t gpus,
                int mps, char** result_json) {
  return Guard("memest_pack", [&] {
    if (result_json == nullptr) return BadHandle("result_json");
    *result_json = nullptr;
    if (!Live(estimator, Kind::kEstimator)) return BadHandle("estimator");
    if (models == nullptr && count > 0) return BadHandle("models");
    if (gpus < 0) return Fail(memest::InvalidArgument("gpus must be >= 0"));
    std::vector<memest::PackJob> jobs;
    for (size_t i = 0; i < count; ++i) {
      if (!Live(models[i], Kind::kModel)) return BadHandle("models[i]");
      const char* text = options_json != nullptr ? options_json[i] : nullptr;
      auto options = memest::OptionsFromJson(text != nullptr ? text : "");
      if (!options.ok()) {
        return Fail(options.status().WithContext("job " + std::to_string(i)));
      }
      jobs.push_back({"job " + std::to_string(i), models[i]->model, std::move(options).value()});
    }
    auto profile = memest::FindGpuProfile(gpu != nullptr ? gpu : memest::Options{}.gpu);
    if (!profile.ok()) return Fail(profile.status());
    const memest::GpuSharing sharing =
        mps != 0 ? memest::GpuSharing::kMps : memest::GpuSharing::kProcesses;
    if (gpus == 0) {
      auto c = memest::CheckColocation(*estimator->estimator, jobs, *profile, sharing);
      if (!c.ok()) return Fail(c.status());
      *result_json = CopyString(memest::ColocationToJson(*c, *profile, sharing));
    } else {
      auto p = memest::PlaceJobs(*estimator->estimator, jobs, *profile, gpus, sharing);
      if (!p.ok()) return Fail(p.status());
      *result_json = CopyString(memest::PlacementToJson(*p, *profile, sharing));
    }
    return Ok();
  });
}

}  // extern "C"
