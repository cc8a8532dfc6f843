// memest/pack.h: colocation on one GPU and placement on many, against the jobs' own estimates.
#include "memest/pack.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "memest/memest.h"
#include "testing/bundled.h"

namespace memest {
namespace {

using testing::BundledModel;

std::vector<PackJob> Jobs() {
  std::vector<PackJob> jobs;
  for (const auto& [name, batch] :
       std::vector<std::pair<std::string, int64_t>>{{"resnet18_train.onnx", 64},
                                                    {"resnet18_train.onnx", 256},
                                                    {"mlp_small_train.onnx", 32},
                                                    {"gpt2_tiny_train.onnx", 8}}) {
    PackJob j;
    j.name = name + ":" + std::to_string(batch);
    j.model = BundledModel(name);
    j.options.batch = batch;
    jobs.push_back(std::move(j));
  }
  return jobs;
}

TEST(PackTest, ProcessesAddTheirPeaksAndMpsSharesOneContext) {
  const std::vector<PackJob> jobs = Jobs();
  auto est = MakeEstimator("analytical");
  const GpuProfile gpu = *FindGpuProfile("a100-40gb");
  auto c = CheckColocation(**est, jobs, gpu, GpuSharing::kProcesses);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  uint64_t sum = 0, contexts = 0;
  for (const PackJob& j : jobs) {
    Options o = j.options;
    o.gpu = gpu.name;
    auto e = (*est)->Run(*j.model, o);
    ASSERT_TRUE(e.ok());
    sum += e->peak_device;
    contexts += e->breakdown.cuda_context;
  }
  EXPECT_EQ(c->total, sum);
  EXPECT_TRUE(c->fits);
  EXPECT_EQ(c->headroom, static_cast<int64_t>(gpu.usable_memory.bytes - sum));
  auto mps = CheckColocation(**est, jobs, gpu, GpuSharing::kMps);
  ASSERT_TRUE(mps.ok());
  EXPECT_EQ(mps->total, sum - (contexts - contexts / jobs.size()));  // one context, not four
  // On a GPU smaller than the sum they do not fit, by exactly the difference.
  const GpuProfile small = WithCapacity(gpu, sum - 1);
  auto over = CheckColocation(**est, jobs, small, GpuSharing::kProcesses);
  ASSERT_TRUE(over.ok());
  EXPECT_FALSE(over->fits);
  EXPECT_EQ(over->headroom, -1);
}

TEST(PackTest, PlacementRespectsCapacityAndListsWhatDoesNotFit) {
  std::vector<PackJob> jobs = Jobs();
  PackJob huge;
  huge.name = "huge";
  huge.model = BundledModel("resnet18_train.onnx");
  huge.options.batch = 8192;
  jobs.push_back(huge);
  auto est = MakeEstimator("analytical");
  const GpuProfile l4 = *FindGpuProfile("l4-24gb");
  auto p = PlaceJobs(**est, jobs, l4, 2, GpuSharing::kProcesses);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  size_t placed = 0;
  for (size_t g = 0; g < p->gpus.size(); ++g) {
    EXPECT_LE(p->used[g], l4.usable_memory.bytes) << "gpu " << g;
    placed += p->gpus[g].size();
  }
  EXPECT_EQ(placed + p->unplaced.size(), jobs.size());
  ASSERT_EQ(p->unplaced.size(), 1u);
  EXPECT_EQ(p->jobs[p->unplaced[0]].name, "huge");
  EXPECT_GT(p->jobs[p->unplaced[0]].judged, l4.usable_memory.bytes);
  EXPECT_FALSE(PlaceJobs(**est, jobs, l4, 0, GpuSharing::kProcesses).ok());
  // A job whose options are bad names the job.
  jobs[0].options.batch = 0;
  auto bad = PlaceJobs(**est, jobs, l4, 2, GpuSharing::kProcesses);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(jobs[0].name), std::string::npos);
}

}  // namespace
}  // namespace memest
