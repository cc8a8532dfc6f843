// What a bound graph keeps of the results derived from it (core/derived_cache.h): the value
// facts (ops::ValueFacts::Shared) and the symbolic simulations (symbolic/simulation_key.h).
// Equal keys share one result, other keys and other types get their own, each type's table stays
// bounded, a failed derivation is never kept, a copy keeps nothing -- and an estimate made on a
// model that has answered many other queries is the estimate a freshly loaded model gives, for
// every backend and a mix of options that the shared results read (precision, GPU, attention,
// fused kernels, freezing, tensor parallelism, weight storage, the simulation's options) and do
// not (the GPU's capacity, the fit policy, and for the facts the optimizer, batch and mode).
#include "core/derived_cache.h"

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/bind.h"
#include "core/bind_cache.h"
#include "memest/json.h"
#include "memest/memest.h"
#include "ops/rules.h"
#include "ops/value_facts.h"
#include "testing/bundled.h"

namespace memest {
namespace {

using core::DerivedCache;
using testing::BundledModel;

struct Key {
  int a = 0;
  std::string b;
  bool operator==(const Key&) const = default;
};
struct OtherKey {
  int a = 0;
  std::string b;
  bool operator==(const OtherKey&) const = default;
};

std::shared_ptr<const int> MakeInt(int v, int* calls) {
  ++*calls;
  return std::make_shared<const int>(v);
}

TEST(DerivedCacheTest, EqualKeysShareOneResult) {
  DerivedCache cache;
  int calls = 0;
  auto a = cache.GetOrMake<int>(Key{1, "x"}, 10, [&](const auto&) { return MakeInt(1, &calls); });
  auto b = cache.GetOrMake<int>(Key{1, "x"}, 10, [&](const auto&) { return MakeInt(2, &calls); });
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(*b, 1);
  auto c = cache.GetOrMake<int>(Key{1, "y"}, 10, [&](const auto&) { return MakeInt(3, &calls); });
  EXPECT_EQ(*c, 3);
  // The same fields under another key type, or another result type, are another entry.
  auto d =
      cache.GetOrMake<int>(OtherKey{1, "x"}, 10, [&](const auto&) { return MakeInt(4, &calls); });
  EXPECT_EQ(*d, 4);
  auto e = cache.GetOrMake<long>(Key{1, "x"}, 10,
                                 [](const auto&) { return std::make_shared<const long>(5); });
  EXPECT_EQ(*e, 5);
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(cache.size(), 4u);
}

TEST(DerivedCacheTest, KeepsTheMostRecentlyUsedWithinItsBounds) {
  DerivedCache cache;
  int calls = 0;
  for (int i = 0; i < static_cast<int>(DerivedCache::kEntries); ++i) {
    cache.GetOrMake<int>(Key{i, ""}, 10, [&](const auto&) { return MakeInt(i, &calls); });
  }
  cache.GetOrMake<int>(Key{0, ""}, 10,
                       [&](const auto&) { return MakeInt(-1, &calls); });  // now the newest
  cache.GetOrMake<int>(Key{100, ""}, 10,
                       [&](const auto&) { return MakeInt(100, &calls); });  // evicts 1
  EXPECT_EQ(cache.size(), DerivedCache::kEntries);
  const int before = calls;
  EXPECT_EQ(*cache.GetOrMake<int>(Key{0, ""}, 10, [&](const auto&) { return MakeInt(-1, &calls); }),
            0);
  EXPECT_EQ(calls, before);
  EXPECT_EQ(*cache.GetOrMake<int>(Key{1, ""}, 10, [&](const auto&) { return MakeInt(-1, &calls); }),
            -1);
  EXPECT_EQ(calls, before + 1);
  // A graph of half kMaxValues keeps two results; one larger than kMaxValues keeps its newest.
  DerivedCache large;
  for (int i = 0; i < 3; ++i) {
    large.GetOrMake<int>(Key{i, ""}, DerivedCache::kMaxValues / 2,
                         [&](const auto&) { return MakeInt(i, &calls); });
  }
  EXPECT_EQ(large.size(), 2u);
  DerivedCache huge;
  for (int i = 0; i < 3; ++i) {
    huge.GetOrMake<int>(Key{i, ""}, 2 * DerivedCache::kMaxValues,
                        [&](const auto&) { return MakeInt(i, &calls); });
  }
  EXPECT_EQ(huge.size(), 1u);
}

TEST(DerivedCacheTest, AFailedDerivationIsNotKeptAndACopyKeepsNothing) {
  DerivedCache cache;
  EXPECT_THROW(cache.GetOrMake<int>(Key{}, 1,
                                    [](const auto&) -> std::shared_ptr<const int> {
                                      throw std::runtime_error("failed");
                                    }),
               std::runtime_error);
  EXPECT_EQ(cache.size(), 0u);
  int calls = 0;
  cache.GetOrMake<int>(Key{}, 1, [&](const auto&) { return MakeInt(7, &calls); });
  DerivedCache copy(cache);
  EXPECT_EQ(copy.size(), 0u);
  copy = cache;
  EXPECT_EQ(copy.size(), 0u);
  EXPECT_EQ(cache.size(), 1u);
}

TEST(DerivedCacheTest, ValueFactsAreSharedForEqualInputsOnly) {
  auto model = BundledModel("gpt2_tiny_train");
  ASSERT_NE(model, nullptr);
  Options o;
  o.batch = 2;
  auto bound = core::Bind(model->graph(), o);
  ASSERT_TRUE(bound.ok()) << bound.status().ToString();
  ops::ValueFactsInputs in;
  auto a = ops::ValueFacts::Shared(*bound, in);
  EXPECT_EQ(ops::ValueFacts::Shared(*bound, in).get(), a.get());
  ops::ValueFactsInputs amp = in;
  amp.precision = Precision::kAmpBf16;
  EXPECT_NE(ops::ValueFacts::Shared(*bound, amp).get(), a.get());
  ops::ValueFactsInputs other_sm = in;
  other_sm.fusion.attention.sm_major = 8;
  EXPECT_NE(ops::ValueFacts::Shared(*bound, other_sm).get(), a.get());
  EXPECT_EQ(ops::ValueFacts::Shared(*bound, in).get(), a.get());
}

// The graph itself keeps the requires-grad flags for its bound graphs at other dims (one entry
// for two batches), and another for another set of trainable parameters; each bound graph's facts
// have the flags RequiresGrad gives there.
TEST(DerivedCacheTest, RequiresGradFlagsAreSharedAcrossDims) {
  auto model = BundledModel("gpt2_tiny_train");
  ASSERT_NE(model, nullptr);
  const core::Graph& g = model->graph();
  Options o;
  o.batch = 3;
  auto b3 = core::Bind(g, o);
  o.batch = 5;
  auto b5 = core::Bind(g, o);
  ASSERT_TRUE(b3.ok() && b5.ok());
  ops::ValueFactsInputs in;
  auto f3 = ops::ValueFacts::Shared(*b3, in);
  const size_t kept = g.derived.size();
  EXPECT_GE(kept, 1u);
  auto f5 = ops::ValueFacts::Shared(*b5, in);
  EXPECT_EQ(g.derived.size(), kept);  // batch 5 found batch 3's
  EXPECT_EQ(f3->requires_grad(), ops::RequiresGrad(*b3, nullptr));
  EXPECT_EQ(f5->requires_grad(), ops::RequiresGrad(*b5, nullptr));
  ops::ValueFactsInputs frozen = in;
  frozen.trainable.assign(g.values.size(), false);  // nothing trains
  auto none = ops::ValueFacts::Shared(*b5, frozen);
  EXPECT_LE(g.derived.size(), kept + 1);
  EXPECT_EQ(none->requires_grad(), ops::RequiresGrad(*b5, &frozen.trainable));
  EXPECT_NE(none->requires_grad(), f5->requires_grad());
}

// A bound graph keeps each symbolic simulation for the next query that asks for the same one:
// on GPUs with the same cuBLAS workspace and kernel choices -- of any compute capability when
// the graph has no attention -- and under another fit policy. (The value facts are kept per
// compute capability: one more entry for the L4, sm 8.9, but no simulation.)
TEST(DerivedCacheTest, SymbolicSimulationsAreSharedAcrossGpusThatSimulateAlike) {
  auto model = BundledModel("resnet18_train");
  ASSERT_NE(model, nullptr);
  auto est = MakeEstimator("symbolic");
  ASSERT_TRUE(est.ok());
  Options o;
  o.batch = 4;
  o.gpu = "a100-40gb";
  auto bound = model->bind_cache().Get(model->graph(), o);
  ASSERT_TRUE(bound.ok());
  auto entries_after = [&](const char* gpu) {
    o.gpu = gpu;
    EXPECT_TRUE((*est)->Run(*model, o).ok()) << gpu;
    return (*bound)->derived.size();
  };
  const size_t kept = entries_after("a100-40gb");  // its facts and its simulation
  EXPECT_EQ(entries_after("a100-80gb"), kept) << "the A100-80GB simulated again";
  EXPECT_EQ(entries_after("l4-24gb"), kept + 1) << "the L4 simulated again (or shared facts)";
  o.fit.margin_fraction = 0.2;
  EXPECT_EQ(entries_after("a100-40gb"), kept + 1) << "another fit policy simulated again";
  // Another cuBLAS workspace (and compute capability): its own facts and simulation.
  EXPECT_EQ(entries_after("h100-80gb"), kept + 3);
}

// Each type of result has its own bounds: many results of one type evict none of another's.
TEST(DerivedCacheTest, BoundsHoldForEachTypeApart) {
  DerivedCache cache;
  int calls = 0;
  cache.GetOrMake<int>(Key{0, "facts"}, DerivedCache::kMaxValues / 2,
                       [&](const auto&) { return MakeInt(0, &calls); });
  for (int i = 0; i < 40; ++i) {
    cache.GetOrMake<long>(
        Key{i, ""}, 1, [&](const auto&) { return std::make_shared<const long>(i); }, 32);
  }
  EXPECT_EQ(cache.size(), 33u) << "32 longs and the int";
  const int before = calls;
  cache.GetOrMake<int>(Key{0, "facts"}, DerivedCache::kMaxValues / 2,
                       [&](const auto&) { return MakeInt(1, &calls); });
  EXPECT_EQ(calls, before) << "the int was evicted by results of another type";
  EXPECT_EQ(*cache.GetOrMake<long>(Key{8, ""}, 1,
                                   [](const auto&) { return std::make_shared<const long>(-1); }),
            8)
      << "the 32 newest longs stay";
  EXPECT_EQ(*cache.GetOrMake<long>(Key{7, ""}, 1,
                                   [](const auto&) { return std::make_shared<const long>(-1); }),
            -1)
      << "older ones are gone";
}

std::string Describe(const Result<Estimate>& r) {
  return r.ok() ? EstimateToJson(*r) : "error: " + r.status().ToString();
}

std::vector<Options> MixedQueries() {
  std::vector<Options> out;
  auto add = [&](auto change) {
    Options o;
    o.batch = 4;
    change(&o);
    out.push_back(o);
  };
  add([](Options*) {});
  add([](Options* o) { o->gpu = "a100-40gb"; });
  add([](Options* o) { o->gpu = "a100-80gb"; });
  add([](Options* o) { o->gpu = "v100-32gb"; });
  add([](Options* o) { o->gpu = "l4-24gb"; });
  add([](Options* o) { o->precision = Precision::kAmpBf16; });
  add([](Options* o) {
    o->precision = Precision::kAmpFp16;
    o->gpu = "v100-32gb";
  });
  add([](Options* o) { o->precision = Precision::kBf16; });
  add([](Options* o) { o->optimizer = Optimizer::kMomentum; });
  add([](Options* o) { o->weight_decay = 0.01; });
  add([](Options* o) { o->batch = 8; });
  add([](Options* o) { o->mode = Mode::kInfer; });
  add([](Options* o) { o->fused_kernels = false; });
  add([](Options* o) { o->inplace_relu = false; });
  add([](Options* o) {
    o->attention = Attention::kAuto;
    o->precision = Precision::kAmpBf16;
  });
  add([](Options* o) {
    o->attention = Attention::kSdpaMemEfficient;
    o->gpu = "a100-80gb";
  });
  add([](Options* o) { o->freeze = "weight"; });
  add([](Options* o) {
    o->freeze = "weight";
    o->weight_dtype = WeightDtype::kNf4;
    o->precision = Precision::kAmpBf16;
  });
  add([](Options* o) {
    o->parallel.world_size = 2;
    o->parallel.tp = 2;
  });
  add([](Options* o) {
    o->parallel.world_size = 4;
    o->parallel.sharding = Sharding::kZero3;
  });
  // Options the symbolic simulation reads besides the facts' (its key, symbolic/simulation_key.h)
  // and the fit policy, which it does not.
  add([](Options* o) {
    o->fit.on = FitOn::kPoint;
    o->fit.margin_fraction = 0.05;
  });
  add([](Options* o) { o->allocator.expandable_segments = true; });
  add([](Options* o) { o->checkpoint_segments = 2; });
  add([](Options* o) { o->checkpoint_blocks = true; });
  add([](Options* o) { o->micro_batches = 2; });
  add([](Options* o) { o->optimizer_impl = OptimizerImpl::kFused; });
  // One cuBLAS workspace, two compute capabilities: the attention kernel differs (bf16 runs
  // memory-efficient on sm 8.0, math on sm 7.0), so the simulation does too.
  for (const char* gpu : {"a100-40gb", "v100-32gb"}) {
    add([gpu](Options* o) {
      o->attention = Attention::kAuto;
      o->precision = Precision::kAmpBf16;
      o->gpu = gpu;
    });
  }
  return out;
}

// Every query asked of one model, twice over in two orders, gives what a freshly loaded model
// gives for that query alone: nothing a cached derivation holds leaks into another query.
TEST(DerivedCacheTest, EstimatesOnAModelAskedManyQueriesAreUnchanged) {
  const std::vector<Options> queries = MixedQueries();
  std::vector<size_t> order;
  for (size_t i = 0; i < queries.size(); ++i) order.push_back(i);
  for (size_t i = queries.size(); i-- > 0;) order.push_back(i);
  for (const char* name : {"gpt2_tiny_train", "resnet18_train", "mlp_small_train"}) {
    auto shared = BundledModel(name);
    ASSERT_NE(shared, nullptr);
    for (const char* backend : {"analytical", "symbolic", "learned"}) {
      auto est = MakeEstimator(backend);
      ASSERT_TRUE(est.ok());
      std::vector<std::string> fresh;
      size_t estimated = 0;
      for (const Options& o : queries) {
        auto model = BundledModel(name);
        ASSERT_NE(model, nullptr);
        fresh.push_back(Describe((*est)->Run(*model, o)));
        estimated += fresh.back().rfind("error: ", 0) != 0;
      }
      for (size_t i : order) {
        EXPECT_EQ(Describe((*est)->Run(*shared, queries[i])), fresh[i])
            << name << " " << backend << " query " << i;
      }
      // Most queries estimate (the learned backend refuses freezing and many GPUs).
      EXPECT_GE(estimated, queries.size() * 3 / 4) << name << " " << backend;
    }
  }
}

}  // namespace
}  // namespace memest
