// The C++ API from an installed memest: load, estimate, check the fit, print one line.
#include <cstdio>

#include "memest/memest.h"
#include "memest/version.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  auto model = memest::LoadModel(argv[1]);
  auto estimator = memest::MakeEstimator("analytical");
  if (!model.ok() || !estimator.ok()) return 3;
  memest::Options options;
  options.batch = 32;
  auto e = (*estimator)->Run(**model, options);
  if (!e.ok()) return 4;
  auto gpu = memest::FindGpuProfile(options.gpu);
  if (!gpu.ok()) return 5;
  std::printf("memest %s: peak %llu bytes, fits %d\n", MEMEST_VERSION_STRING,
              static_cast<unsigned long long>(e->peak_device),
              memest::CheckFit(*e, *gpu, options).fits ? 1 : 0);
  return e->peak_device > 0 ? 0 : 6;
}
