// python/memest_module.cc -- the _memest extension: the C++ library for memest/__init__.py.
//
// Policy: options and results cross the boundary as JSON text in the library's own vocabulary
// (memest/json.h), so the Python layer never restates an option or a field; errors become
// memest.Error whose message starts with the library's error-code name ("invalid_argument: ...").
// Estimates release the GIL: several Python threads can estimate at once.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "memest/memest.h"
#include "memest/version.h"

namespace py = pybind11;

namespace {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <typename T>
T Unwrap(memest::Result<T> r) {
  if (!r.ok()) throw Error(r.status().ToString());
  return std::move(r).value();
}

using ModelPtr = std::shared_ptr<const memest::Model>;
// A loaded model, shared with the library (pybind11 holders cannot hold a pointer to const).
struct PyModel {
  ModelPtr model;
  const memest::ModelSummary& summary() const { return model->summary(); }
};

// The estimate's JSON with the fit on the options' GPU added ("fit": {fits, capacity, headroom,
// judged, on, margin}), as the CLI reports it.
std::string WithFit(const memest::Estimate& e, const memest::Options& o) {
  const memest::GpuProfile gpu = Unwrap(memest::ResolveGpuProfile(o));
  const memest::Fit f = memest::CheckFit(e, gpu, o);
  return memest::EstimateToJson(e, &f);
}

std::string Estimate(const PyModel& model, const std::string& backend,
                     const std::string& options_json) {
  const memest::Options o = Unwrap(memest::OptionsFromJson(options_json));
  std::unique_ptr<memest::Estimator> est = Unwrap(memest::MakeEstimator(backend));
  memest::Result<memest::Estimate> e = [&] {
    py::gil_scoped_release release;
    return est->Run(*model.model, o);
  }();
  return WithFit(Unwrap(std::move(e)), o);
}

py::tuple MaxBatch(const PyModel& model, const std::string& backend,
                   const std::string& options_json) {
  const memest::Options o = Unwrap(memest::OptionsFromJson(options_json));
  std::unique_ptr<memest::Estimator> est = Unwrap(memest::MakeEstimator(backend));
  memest::Result<memest::MaxBatchResult> r = [&] {
    py::gil_scoped_release release;
    return memest::FindMaxBatch(*est, *model.model, o);
  }();
  memest::MaxBatchResult m = Unwrap(std::move(r));
  return py::make_tuple(m.batch, m.evaluations, WithFit(m.at_batch, o));
}

std::string Pack(const std::vector<PyModel>& models, const std::vector<std::string>& options,
                 const std::string& backend, const std::string& gpu_name, int64_t gpus, bool mps) {
  if (models.size() != options.size()) throw Error("invalid_argument: one options per model");
  std::vector<memest::PackJob> jobs;
  for (size_t i = 0; i < models.size(); ++i) {
    jobs.push_back(
        {"job " + std::to_string(i), models[i].model, Unwrap(memest::OptionsFromJson(options[i]))});
  }
  const memest::GpuProfile gpu = Unwrap(memest::FindGpuProfile(gpu_name));
  std::unique_ptr<memest::Estimator> est = Unwrap(memest::MakeEstimator(backend));
  const memest::GpuSharing sharing =
      mps ? memest::GpuSharing::kMps : memest::GpuSharing::kProcesses;
  py::gil_scoped_release release;
  if (gpus == 0) {
    return memest::ColocationToJson(Unwrap(memest::CheckColocation(*est, jobs, gpu, sharing)), gpu,
                                    sharing);
  }
  return memest::PlacementToJson(Unwrap(memest::PlaceJobs(*est, jobs, gpu, gpus, sharing)), gpu,
                                 sharing);
}

}  // namespace

PYBIND11_MODULE(_memest, m) {
  m.doc() = "memest's C++ library (use the memest package, not this module)";
  py::register_exception<Error>(m, "Error");
  m.attr("__version__") = MEMEST_VERSION_STRING;
  py::class_<PyModel>(m, "Model")
      .def_property_readonly("path", [](const PyModel& x) { return x.summary().path; })
      .def_property_readonly("nodes", [](const PyModel& x) { return x.summary().node_count; })
      .def_property_readonly("parameters",
                             [](const PyModel& x) { return x.summary().parameter_count; })
      .def_property_readonly("symbolic_dims",
                             [](const PyModel& x) { return x.summary().symbolic_dims; });
  m.def("load_file",
        [](const std::string& path) { return PyModel{Unwrap(memest::LoadModel(path))}; });
  m.def("load_bytes", [](const py::bytes& data, const std::string& name) {
    return PyModel{Unwrap(memest::LoadModelFromBytes(std::string(data), ".", name))};
  });
  m.def("estimate", &Estimate, py::arg("model"), py::arg("backend"), py::arg("options_json"));
  m.def("max_batch", &MaxBatch, py::arg("model"), py::arg("backend"), py::arg("options_json"));
  m.def("pack", &Pack, py::arg("models"), py::arg("options"), py::arg("backend"), py::arg("gpu"),
        py::arg("gpus"), py::arg("mps"));
}
