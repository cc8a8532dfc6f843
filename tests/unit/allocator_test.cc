// Worked examples for the caching-allocator model (docs/memory-model.md §1).
#include "symbolic/allocator.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <random>
#include <vector>

namespace memest::symbolic {
namespace {

constexpr uint64_t MiB = kMiB;

TEST(AllocatorTest, RoundSizeFollowsRoundSize) {
  AllocatorConfig c;
  EXPECT_EQ(CachingAllocatorModel::RoundSize(1, c), 512u);
  EXPECT_EQ(CachingAllocatorModel::RoundSize(512, c), 512u);
  EXPECT_EQ(CachingAllocatorModel::RoundSize(513, c), 1024u);
  EXPECT_EQ(CachingAllocatorModel::RoundSize(11'000'000, c), 11'000'320u);
  c.roundup_power2_divisions = 4;
  // floor_pow2 = 1 MiB, step = 256 KiB -> 1.25 MiB (memory-model.md §1.3
  // roundup_power2_next_division).
  EXPECT_EQ(CachingAllocatorModel::RoundSize(1'200'000, c), 1'310'720u);
  EXPECT_EQ(CachingAllocatorModel::RoundSize(2 * MiB, c), 2 * MiB);  // powers of two stay
  EXPECT_EQ(CachingAllocatorModel::RoundSize(1200, c), 1536u);       // below 512 * divisions
}

// PyTorch raises on a free of a pointer it did not hand out; the model records the first such
// call (a simulation bug) and keeps its state, instead of ignoring it.
TEST(AllocatorTest, DoubleFreeIsRecordedAndChangesNothing) {
  CachingAllocatorModel a;
  const auto h = a.Malloc(1000);
  ASSERT_GE(h, 0);
  a.Free(h);
  EXPECT_TRUE(a.misuse().ok());
  const AllocatorStats before = a.stats();
  a.Free(h);
  EXPECT_EQ(a.misuse().code(), ErrorCode::kInternal);
  EXPECT_NE(a.misuse().message().find("double free"), std::string::npos) << a.misuse().message();
  EXPECT_EQ(a.stats().allocated, before.allocated);
  EXPECT_EQ(a.stats().reserved, before.reserved);
  a.Free(12345);  // never handed out: recorded too (the first message stays)
  EXPECT_NE(a.misuse().message().find("handle " + std::to_string(h)), std::string::npos);
}

TEST(AllocatorTest, SegmentSizes) {
  EXPECT_EQ(AllocationSize(512), 2 * MiB);
  EXPECT_EQ(AllocationSize(1 * MiB), 2 * MiB);
  EXPECT_EQ(AllocationSize(1 * MiB + 512), 20 * MiB);
  EXPECT_EQ(AllocationSize(10 * MiB - 512), 20 * MiB);
  EXPECT_EQ(AllocationSize(10 * MiB), 10 * MiB);
  EXPECT_EQ(AllocationSize(11'000'320), 12 * MiB);
}

TEST(AllocatorTest, ElevenMillionBytesGetATwelveMiBSegmentAndAreSplit) {
  CachingAllocatorModel a;
  auto h = a.Malloc(11'000'000);
  ASSERT_GE(h, 0);
  EXPECT_EQ(a.stats().reserved, 12 * MiB);
  EXPECT_EQ(a.stats().allocated, 11'000'320u);  // split: the 1,582,592 B rest stays free
  EXPECT_EQ(a.stats().requested, 11'000'000u);
  EXPECT_EQ(a.BlockSize(h), 11'000'320u);
  // The rest (> 1 MiB, large pool) serves a later large request without a new segment.
  auto h2 = a.Malloc(1'500'000);
  ASSERT_GE(h2, 0);
  EXPECT_EQ(a.stats().reserved, 12 * MiB);
  EXPECT_EQ(a.stats().segments, 1u);
}

TEST(AllocatorTest, ElevenAndAHalfMiBOnAFreeTwelveMiBBlockIsNotSplitAndCountsTwelve) {
  CachingAllocatorModel a;
  auto h = a.Malloc(12 * MiB);
  EXPECT_EQ(a.stats().reserved, 12 * MiB);
  a.Free(h);
  EXPECT_EQ(a.stats().allocated, 0u);
  auto h2 = a.Malloc(11 * MiB + MiB / 2);
  ASSERT_GE(h2, 0);
  EXPECT_EQ(a.stats().allocated, 12 * MiB);  // remainder 0.5 MiB <= 1 MiB: whole block
  EXPECT_EQ(a.stats().reserved, 12 * MiB);
  EXPECT_EQ(a.stats().num_device_alloc, 1u);
}

TEST(AllocatorTest, SmallRequestsShareATwoMiBSegment) {
  CachingAllocatorModel a;
  auto x = a.Malloc(1000);
  auto y = a.Malloc(4);
  EXPECT_EQ(a.stats().allocated, 1024u + 512u);
  EXPECT_EQ(a.stats().reserved, 2 * MiB);
  EXPECT_EQ(a.stats().segments, 1u);
  a.Free(x);
  a.Free(y);
  EXPECT_EQ(a.stats().allocated, 0u);
  EXPECT_EQ(a.stats().reserved, 2 * MiB);  // never returned on free
  EXPECT_EQ(a.stats().peak_allocated, 1536u);
}

TEST(AllocatorTest, MidSizeRequestsShareATwentyMiBSegment) {
  CachingAllocatorModel a;
  a.Malloc(5 * MiB);
  a.Malloc(5 * MiB);
  a.Malloc(5 * MiB);
  EXPECT_EQ(a.stats().reserved, 20 * MiB);
  a.Malloc(5 * MiB);  // the last 5 MiB: remainder 0, still the same segment
  EXPECT_EQ(a.stats().reserved, 20 * MiB);
  a.Malloc(5 * MiB);
  EXPECT_EQ(a.stats().reserved, 40 * MiB);
}

TEST(AllocatorTest, BestFitTakesTheSmallestBlockThatFits) {
  CachingAllocatorModel a;
  auto big = a.Malloc(30 * MiB);
  auto small = a.Malloc(12 * MiB);
  a.Free(big);
  a.Free(small);
  const uint64_t reserved = a.stats().reserved;
  auto h = a.Malloc(12 * MiB);
  EXPECT_EQ(a.BlockSize(h), 12 * MiB);  // the 12 MiB block, not a split of the 30 MiB one
  EXPECT_EQ(a.stats().reserved, reserved);
}

TEST(AllocatorTest, FreeMergesNeighboursAndEmptyCacheReleasesWholeSegments) {
  CachingAllocatorModel a;
  auto x = a.Malloc(3 * MiB), y = a.Malloc(3 * MiB), z = a.Malloc(3 * MiB);
  EXPECT_EQ(a.stats().reserved, 20 * MiB);
  a.Free(y);
  a.EmptyCache();  // partially used segment: stays
  EXPECT_EQ(a.stats().reserved, 20 * MiB);
  a.Free(x);
  a.Free(z);
  auto w = a.Malloc(19 * MiB);  // only fits if the three blocks and the rest merged back
  EXPECT_EQ(a.stats().reserved, 20 * MiB);
  a.Free(w);
  a.EmptyCache();
  EXPECT_EQ(a.stats().reserved, 0u);
  EXPECT_EQ(a.stats().peak_reserved, 20 * MiB);
}

TEST(AllocatorTest, MemoryPressureReleasesCachedSegmentsThenRunsOutOfMemory) {
  AllocatorConfig c;
  c.capacity = 100 * MiB;
  CachingAllocatorModel a(c);
  a.Free(a.Malloc(60 * MiB));
  auto h = a.Malloc(70 * MiB);  // 60 cached + 70 > 100: release the cached segment, retry
  ASSERT_GE(h, 0);
  EXPECT_FALSE(a.oom());
  EXPECT_EQ(a.stats().reserved, 70 * MiB);
  EXPECT_EQ(a.stats().num_alloc_retries, 1u);
  EXPECT_EQ(a.Malloc(40 * MiB), -1);
  EXPECT_TRUE(a.oom());
  EXPECT_EQ(a.stats().num_ooms, 1u);
}

TEST(AllocatorTest, MaxSplitSizeKeepsSmallRequestsOffOversizeBlocks) {
  AllocatorConfig c;
  c.max_split_size = 40 * MiB;
  CachingAllocatorModel a(c);
  a.Free(a.Malloc(100 * MiB));
  a.Malloc(10 * MiB);  // below max_split: may not take the 100 MiB block
  EXPECT_EQ(a.stats().reserved, 110 * MiB);
  a.Malloc(90 * MiB);  // >= max_split and within 20 MiB of the block: takes it, unsplit
  EXPECT_EQ(a.stats().reserved, 110 * MiB);
  EXPECT_EQ(a.stats().allocated, 110 * MiB);
}

TEST(AllocatorTest, ExpandableSegmentsMapWholePages) {
  AllocatorConfig c;
  c.expandable_segments = true;
  CachingAllocatorModel a(c);
  a.Malloc(5 * MiB);
  EXPECT_EQ(a.stats().reserved, 20 * MiB);  // one 20 MiB large-pool page
  EXPECT_EQ(a.stats().allocated, 5 * MiB);
  a.Malloc(16 * MiB);  // 15 MiB free tail + one more page
  EXPECT_EQ(a.stats().reserved, 40 * MiB);
  EXPECT_EQ(a.stats().allocated, 21 * MiB);
  a.Malloc(100);  // small pool: its own 2 MiB page
  EXPECT_EQ(a.stats().reserved, 42 * MiB);
}

TEST(AllocatorTest, ZeroBytesAllocateNothing) {
  CachingAllocatorModel a;
  EXPECT_EQ(a.Malloc(0), -1);
  EXPECT_FALSE(a.oom());
  EXPECT_EQ(a.stats().reserved, 0u);
}

// A model reset (a search's replays run on one, CachingAllocatorModel::Reset) answers every
// request as a new model under the same config does: the same handles, statistics and layout,
// whatever it held before -- segments, cached and split blocks, an out-of-memory, a misuse.
TEST(AllocatorTest, AModelResetAnswersAsANewOne) {
  std::mt19937_64 random(7);
  // A stream of mallocs (sizes across both pools and the segment sizes) and frees of live ones.
  const auto run = [&random](CachingAllocatorModel* a, int steps, std::vector<uint64_t>* seen) {
    std::vector<CachingAllocatorModel::Handle> live;
    for (int i = 0; i < steps && !a->oom(); ++i) {
      if (live.empty() || random() % 3 != 0) {
        const uint64_t bytes =
            (random() % 4 == 0 ? 1 + random() % (2 * MiB) : 1 + random() % (64 * MiB));
        const auto h = a->Malloc(bytes);
        if (h >= 0) live.push_back(h);
        if (seen != nullptr) seen->push_back(static_cast<uint64_t>(h));
      } else {
        const size_t k = random() % live.size();
        a->Free(live[k]);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      }
      if (seen != nullptr) {
        const AllocatorStats& s = a->stats();
        seen->insert(seen->end(), {s.allocated, s.peak_allocated, s.reserved, s.peak_reserved,
                                   s.requested, s.segments, s.num_alloc_retries, s.num_ooms});
      }
    }
  };
  AllocatorConfig tight;
  tight.capacity = 300 * MiB;
  AllocatorConfig split = tight;
  split.max_split_size = 40 * MiB;
  split.roundup_power2_divisions = 4;
  AllocatorConfig expandable = tight;
  expandable.expandable_segments = true;
  for (const AllocatorConfig& before : {AllocatorConfig{}, tight, expandable}) {
    for (const AllocatorConfig& after : {AllocatorConfig{}, tight, split, expandable}) {
      CachingAllocatorModel reset(before);
      run(&reset, 400, nullptr);
      reset.Free(1'000'000);  // a misuse, forgotten by the reset
      reset.Reset(after);
      CachingAllocatorModel fresh(after);
      const uint64_t seed = random();
      std::vector<uint64_t> got, want;
      random.seed(seed);
      run(&reset, 400, &got);
      random.seed(seed);
      run(&fresh, 400, &want);
      ASSERT_EQ(got, want);
      EXPECT_EQ(reset.oom(), fresh.oom());
      EXPECT_TRUE(reset.misuse().ok());
      std::vector<uint64_t> got_layout, want_layout;
      reset.AppendLayout(&got_layout);
      fresh.AppendLayout(&want_layout);
      EXPECT_EQ(got_layout, want_layout);
    }
  }
}

}  // namespace
}  // namespace memest::symbolic
