// The bound-graph cache of a loaded model (core/bind_cache.h): estimates at the same dims share
// one bound graph, other dims get their own, the table stays bounded, errors are never kept, and
// an estimate made through the cache is the estimate made without it.
#include "core/bind_cache.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "memest/json.h"
#include "memest/memest.h"
#include "testing/bundled.h"

namespace memest {
namespace {

using testing::BundledModel;

Options AtBatch(int64_t batch) {
  Options o;
  o.batch = batch;
  return o;
}

TEST(BindCacheTest, TheSameDimsShareOneBoundGraph) {
  auto model = BundledModel("resnet18_train");
  ASSERT_NE(model, nullptr);
  core::BindCache cache;
  auto a = cache.Get(model->graph(), AtBatch(8));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  Options other_gpu = AtBatch(8);
  other_gpu.gpu = "a100-40gb";  // not part of the key: binding does not read it
  other_gpu.precision = Precision::kAmpBf16;
  auto b = cache.Get(model->graph(), other_gpu);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a->get(), b->get());
  auto c = cache.Get(model->graph(), AtBatch(16));
  ASSERT_TRUE(c.ok());
  EXPECT_NE(a->get(), c->get());
  EXPECT_EQ((*c)->bindings.begin()->second, 16);
  Options micro = AtBatch(16);
  micro.micro_batches = 2;  // part of the key: the bound batch is 8
  auto d = cache.Get(model->graph(), micro);
  ASSERT_TRUE(d.ok());
  EXPECT_NE(c->get(), d->get());
  EXPECT_EQ((*d)->bindings.begin()->second, 8);
}

TEST(BindCacheTest, KeepsOnlyTheMostRecentlyUsed) {
  auto model = BundledModel("mlp_small_train");
  ASSERT_NE(model, nullptr);
  core::BindCache cache;
  auto first = cache.Get(model->graph(), AtBatch(1));
  ASSERT_TRUE(first.ok());
  const core::BoundGraph* first_ptr = first->get();
  for (int64_t batch = 2; batch <= static_cast<int64_t>(core::BindCache::kSmallEntries); ++batch) {
    ASSERT_TRUE(cache.Get(model->graph(), AtBatch(batch)).ok());
  }
  EXPECT_EQ(cache.Get(model->graph(), AtBatch(1))->get(), first_ptr);  // still kept, now newest
  ASSERT_TRUE(cache.Get(model->graph(), AtBatch(100)).ok());           // evicts batch 2
  ASSERT_TRUE(cache.Get(model->graph(), AtBatch(101)).ok());           // evicts batch 3
  EXPECT_EQ(cache.Get(model->graph(), AtBatch(1))->get(), first_ptr);
  // A bound graph handed out stays valid after its entry is evicted.
  auto held = cache.Get(model->graph(), AtBatch(200));
  for (int64_t batch = 300; batch < 310; ++batch) {
    ASSERT_TRUE(cache.Get(model->graph(), AtBatch(batch)).ok());
  }
  EXPECT_EQ((*held)->bindings.begin()->second, 200);
}

TEST(BindCacheTest, LargeGraphsKeepFewerEntries) {
  auto model = BundledModel("mlp_small_train");
  ASSERT_NE(model, nullptr);
  const size_t values = model->graph().values.size();
  core::BindCache cache(2 * values + 1);  // room for two bound graphs of this model
  auto first = cache.Get(model->graph(), AtBatch(1));
  auto second = cache.Get(model->graph(), AtBatch(2));
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(cache.Get(model->graph(), AtBatch(1))->get(), first->get());  // both kept
  ASSERT_TRUE(cache.Get(model->graph(), AtBatch(3)).ok());  // three do not fit: batch 2 goes
  EXPECT_EQ(cache.Get(model->graph(), AtBatch(1))->get(), first->get());
  EXPECT_NE(cache.Get(model->graph(), AtBatch(2))->get(), second->get());
  core::BindCache tiny(1);  // smaller than one graph: the newest is kept all the same
  auto only = tiny.Get(model->graph(), AtBatch(5));
  ASSERT_TRUE(only.ok());
  EXPECT_EQ(tiny.Get(model->graph(), AtBatch(5))->get(), only->get());
  tiny.Clear();
  EXPECT_NE(tiny.Get(model->graph(), AtBatch(5))->get(), only->get());
}

// Past kEntries only small graphs keep more: while all kept hold at most a kSmallShare-th of the
// values budget.
TEST(BindCacheTest, OnlySmallGraphsKeepMoreThanKEntries) {
  auto model = BundledModel("mlp_small_train");
  ASSERT_NE(model, nullptr);
  const size_t values = model->graph().values.size();
  const auto kept = [&](size_t max_values) {
    core::BindCache cache(max_values);
    std::vector<std::shared_ptr<const core::BoundGraph>> made;  // held: no address is reused
    for (int64_t batch = 1; batch <= 40; ++batch) {
      made.push_back(*cache.Get(model->graph(), AtBatch(batch)));
    }
    size_t n = 0;  // how many of the newest are still the same graphs
    for (int64_t batch = 40; batch >= 1; --batch, ++n) {
      if (cache.Get(model->graph(), AtBatch(batch))->get() != made[batch - 1].get()) break;
    }
    return n;
  };
  EXPECT_EQ(kept(4 * values), core::BindCache::kEntries) << "the share holds none past the fourth";
  EXPECT_EQ(kept(core::BindCache::kSmallShare * 10 * values), 10u) << "the share holds ten";
  EXPECT_EQ(kept(core::BindCache::kMaxValues), core::BindCache::kSmallEntries);
}

TEST(BindCacheTest, AnErrorIsNeverKept) {
  auto model = BundledModel("resnet18_train");
  ASSERT_NE(model, nullptr);
  core::BindCache cache;
  for (int i = 0; i < 2; ++i) {
    auto unbound = cache.Get(model->graph(), Options{});  // no batch for the symbolic dim
    ASSERT_FALSE(unbound.ok());
    EXPECT_EQ(unbound.status().code(), ErrorCode::kUnboundDim);
  }
  EXPECT_TRUE(cache.Get(model->graph(), AtBatch(4)).ok());
}

// Through Estimator::Run (which binds through the model's cache): an estimate repeated after
// others at other dims is the first estimate, field for field.
TEST(BindCacheTest, EstimatesThroughTheCacheAreUnchanged) {
  auto model = BundledModel("resnet18_train");
  ASSERT_NE(model, nullptr);
  for (const char* backend : {"analytical", "symbolic"}) {
    auto est = MakeEstimator(backend);
    ASSERT_TRUE(est.ok());
    auto fresh = BundledModel("resnet18_train");
    auto first = (*est)->Run(*fresh, AtBatch(32));
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    for (int64_t batch : {8, 32, 64, 32}) ASSERT_TRUE((*est)->Run(*model, AtBatch(batch)).ok());
    auto again = (*est)->Run(*model, AtBatch(32));
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(EstimateToJson(*again), EstimateToJson(*first)) << backend;
  }
}

}  // namespace
}  // namespace memest
