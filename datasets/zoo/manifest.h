// datasets/zoo/manifest.h -- sweep manifests for the measurement harness (memest-zoo manifest).
//
// A manifest is JSON Lines, one configuration per line (datasets/README.md, "Sweep manifests"):
//   {"model": path relative to the repo root, "family", "batch", "dims", "mode", "optimizer",
//    "weight_decay", "precision", "iterations"}
// plus informative fields a harness may ignore: "sha256" (of the ONNX file the line expects),
// "estimate_device" (memest analytical peak_device in bytes on the preset's GPU profile, or
// null), "expect" ("fits" | "oom" by that estimate, or null) and "estimate_seconds" (a rough
// run-time model, see manifest.cc, or null).
//
// Presets (deterministic for a given memest build; batches come from the analytical backend, so
// they change when the estimator does -- the committed files are the reference):
//  * cpu-ci: ~30 small configurations (tiny generated models + the bundled small models) meant
//    to run in a few minutes on 2 CPU cores with LibTorch;
//  * gpu-h100: >= 500 configurations on the full-scale generated models, the real
//    architectures (datasets/real/) and bundled models, and 40 GPUMemNet models at their measured
//    configuration. Per model: a moderate batch (log-uniform from 1 to 40 % of the largest batch
//    the estimate says fits), one near the limit (85-98 %) and either one beyond it (105-125 %,
//    expect "oom") or another moderate one; optimizers and precisions are drawn from a seeded
//    stream. Batches are capped so that the modelled run time of a configuration stays under 5 s
//    (so compute- heavy models do not reach the memory limit; their "near" line is simply the time
//    cap).
#ifndef MEMEST_DATASETS_ZOO_MANIFEST_H_
#define MEMEST_DATASETS_ZOO_MANIFEST_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "memest/status.h"

namespace memest::zoo {

struct ManifestRequest {
  std::string preset;         // "cpu-ci" | "gpu-h100"
  std::string root;           // repository root (models are looked up / named relative to it)
  std::string gpumemnet_dir;  // folder with GPUMemNet's CSVs (gpu-h100 only)
  std::string gpu = "h100-80gb";
};

// The manifest lines, in order.
Result<std::vector<nlohmann::json>> BuildManifest(const ManifestRequest& request);

// The memest-zoo commands that regenerate every model a preset references (for the README and
// the tool's --help).
std::vector<std::string> ManifestModelCommands(const std::string& preset);

}  // namespace memest::zoo

#endif  // MEMEST_DATASETS_ZOO_MANIFEST_H_
