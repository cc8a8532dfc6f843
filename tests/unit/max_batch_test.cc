// FindMaxBatch's search (api/max_batch.cc Candidates) over estimators whose peaks are given by a
// formula, so that each rule of the search is met on its own: the line to the capacity, the steps
// down from a batch that failed just below it, and a "fits" that turns back.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "memest/memest.h"
#include "memory/context.h"

namespace memest {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kOutside = kGiB / 2;  // device = reserved + kOutside

// An estimate at batch b from a formula: the allocator's peaks, and whether the step needed the
// release of cached segments or ran out of the allocator's budget (noted as the symbolic backend
// notes them).
struct Step {
  uint64_t allocated = 0;
  uint64_t reserved = 0;
  bool retried = false;
  bool ran_out = false;
  uint64_t growing = 0;  // the breakdown's saved activations: what grows with the batch
  // The peak is the optimizer step's, with these temporaries as the breakdown's transients.
  bool at_step = false;
  uint64_t temporaries = 0;
  uint64_t transient = 0;  // outside the step: the breakdown's transients
  // At the step's peak: the forward and backward's peak (allocated = reserved), reported as the
  // analytical backend reports it (Estimate::phases), with `growing` its saved activations; 0:
  // not reported.
  uint64_t backward = 0;
  bool pipeline = false;  // the estimate is a pipeline's worst stage (two stages in its ranks)
};

class Formula final : public Estimator {
 public:
  explicit Formula(std::function<Step(int64_t)> f) : f_(std::move(f)) {}
  std::string_view name() const override { return "formula"; }
  Result<Estimate> EstimateIn(const memory::EstimationContext& ctx) const override {
    const Step s = f_(*ctx.options().batch);
    Estimate e;
    e.backend = "formula";
    e.peak_allocated = s.allocated;
    e.peak_reserved = s.reserved;
    e.peak_device = s.reserved + kOutside;
    e.peak_phase = s.at_step ? Phase::kOptimizerStep : Phase::kBackward;
    e.breakdown.saved_activations = std::min(s.growing, e.peak_device);
    e.breakdown.transient = std::min(s.at_step ? s.temporaries : s.transient,
                                     e.peak_device - e.breakdown.saved_activations);
    e.breakdown.weights = e.peak_device - e.breakdown.saved_activations - e.breakdown.transient;
    if (s.at_step && s.backward > 0) {
      PhasePeak b;
      b.phase = Phase::kBackward;
      b.peak_allocated = b.peak_reserved = s.backward;
      b.peak_device = s.backward + kOutside;
      b.breakdown.saved_activations = s.growing;
      b.breakdown.weights = b.peak_device - s.growing;
      PhasePeak step;
      step.phase = Phase::kOptimizerStep;
      step.peak_allocated = e.peak_allocated;
      step.peak_reserved = e.peak_reserved;
      step.peak_device = e.peak_device;
      step.breakdown = e.breakdown;
      e.phases = {b, step};
    }
    if (s.pipeline) e.ranks.resize(2);
    if (s.retried) e.diagnostics.push_back({Severity::kInfo, "allocator_retries", "", "", ""});
    if (s.ran_out) e.diagnostics.push_back({Severity::kInfo, "out_of_memory", "", "", ""});
    return e;
  }

 private:
  std::function<Step(int64_t)> f_;
};

class MaxBatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m =
        LoadModel((fs::path(MEMEST_SOURCE_DIR) / "datasets/models/mlp_small_train.onnx").string());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = *m;
    options_.gpu = "h100-80gb";
    auto gpu = ResolveGpuProfile(options_);
    ASSERT_TRUE(gpu.ok());
    capacity_ = gpu->usable_memory.bytes;
  }
  Result<MaxBatchResult> Search(std::function<Step(int64_t)> f) {
    return FindMaxBatch(Formula(std::move(f)), *model_, options_, int64_t{1} << 24);
  }

  // A peak that is the optimizer step's (`step` bytes, `temporaries` of them its transients) until
  // the backward's -- `weights` plus `per_sample` a batch, which grows -- passes it; the batches
  // the search asks for go to *asked.
  // With `phases`, an estimate at the step's peak also says what the backward's was; with
  // `retried` it was made within the allocator's budget, with `pipeline` it is a worst stage's.
  struct StepThenBackward {
    uint64_t per_sample = 0, weights = 0, step = 0, temporaries = 0;
    bool phases = false, retried = false, pipeline = false;
  };
  Result<MaxBatchResult> Search(const StepThenBackward& p, std::vector<int64_t>* asked) {
    return Search([p, asked](int64_t b) {
      asked->push_back(b);
      const uint64_t backward = p.weights + p.per_sample * static_cast<uint64_t>(b);
      if (backward < p.step) {
        Step s{p.step, p.step, false, false, 0, true, p.temporaries};
        if (p.phases) {
          s.backward = backward;
          s.growing = backward - p.weights;
        }
        s.retried = p.retried;
        s.pipeline = p.pipeline;
        return s;
      }
      return Step{backward, backward, false, false, backward - p.weights};
    });
  }
  // Its answer: the largest batch whose backward fits.
  int64_t Answer(const StepThenBackward& p) const {
    return static_cast<int64_t>((capacity_ - kOutside - p.weights) / p.per_sample);
  }

  // A peak of `fixed` bytes and what grows, constant + linear v + square v^2 (the breakdown's
  // saved activations); the values the search asks for go to *asked.
  struct Polynomial {
    uint64_t fixed = 0, constant = 0, linear = 0, square = 0;
    uint64_t Growth(int64_t v) const {
      const auto u = static_cast<uint64_t>(v);
      return constant + linear * u + square * u * u;
    }
  };
  Result<MaxBatchResult> Search(const Polynomial& p, std::vector<int64_t>* asked) {
    return Search([p, asked](int64_t v) {
      asked->push_back(v);
      const uint64_t peak = p.fixed + p.Growth(v);
      return Step{peak, peak, false, false, p.Growth(v)};
    });
  }
  // Its answer: the largest value whose peak fits.
  int64_t Answer(const Polynomial& p) const {
    int64_t answer = 1;
    while (p.fixed + p.Growth(answer + 1) <= capacity_ - kOutside) ++answer;
    return answer;
  }

  std::shared_ptr<const Model> model_;
  Options options_;
  uint64_t capacity_ = 0;
};

TEST_F(MaxBatchTest, AnAffinePeakIsFoundInAFewEstimates) {
  const uint64_t per_sample = 37 * (uint64_t{1} << 20);
  auto r = Search([&](int64_t b) {
    const uint64_t bytes = kGiB + per_sample * static_cast<uint64_t>(b);
    return Step{bytes, bytes};
  });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->batch, static_cast<int64_t>((capacity_ - kOutside - kGiB) / per_sample));
  EXPECT_LE(r->evaluations, 6);
}

// Under a safety margin the verdict turns at the capacity less the margin, and the lines aim
// there: an affine peak is found in as few estimates as without one (they aimed at the whole
// capacity, and took 19 estimates here).
TEST_F(MaxBatchTest, TheLinesAimWhereTheVerdictTurns) {
  options_.fit.margin_fraction = 0.10;
  const uint64_t per_sample = 37 * (uint64_t{1} << 20);
  auto r = Search([&](int64_t b) {
    const uint64_t bytes = kGiB + per_sample * static_cast<uint64_t>(b);
    return Step{bytes, bytes};
  });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const uint64_t room = capacity_ - options_.fit.MarginBytes(capacity_);
  EXPECT_EQ(r->batch, static_cast<int64_t>((room - kOutside - kGiB) / per_sample));
  EXPECT_LE(r->evaluations, 6);
}

// Under a memory fraction the verdict turns where the reserved bytes reach the allocator's limit,
// and the lines aim there (they aimed at the whole usable memory, and took 19 estimates here).
TEST_F(MaxBatchTest, UnderAMemoryFractionTheLinesAimAtTheLimit) {
  options_.allocator.memory_fraction = 0.4;
  auto gpu = ResolveGpuProfile(options_);
  ASSERT_TRUE(gpu.ok());
  const std::optional<uint64_t> limit = options_.allocator.ReservedLimit(gpu->total_memory.bytes);
  ASSERT_TRUE(limit.has_value());
  const uint64_t per_sample = 37 * (uint64_t{1} << 20);
  auto r = Search([&](int64_t b) {
    const uint64_t bytes = kGiB + per_sample * static_cast<uint64_t>(b);
    return Step{bytes, bytes};
  });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->batch, static_cast<int64_t>((*limit - kGiB) / per_sample));
  EXPECT_LE(r->evaluations, 6);
}

// Batch 1's estimate says what grows with the batch (its saved activations, and transients of
// which a part is fixed, so the slope is a little steep): the first candidate is where that line
// meets the capacity -- below the answer, and far above the jump a bare peak would allow (the
// capacity over batch 1's peak, 9 here) -- and the one after it reads that candidate's own
// estimate.
TEST_F(MaxBatchTest, TheFirstCandidateReadsWhatGrowsAtBatchOne) {
  const uint64_t per_sample = 48 * (uint64_t{1} << 20);
  const uint64_t weights = 8 * kGiB, fixed_transient = 8 * (uint64_t{1} << 20);
  std::vector<int64_t> asked;
  auto r = Search([&](int64_t b) {
    asked.push_back(b);
    const uint64_t saved = per_sample * static_cast<uint64_t>(b);
    const uint64_t peak = weights + fixed_transient + saved;
    return Step{peak, peak, false, false, saved, false, 0, fixed_transient};
  });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const int64_t answer =
      static_cast<int64_t>((capacity_ - kOutside - weights - fixed_transient) / per_sample);
  EXPECT_EQ(r->batch, answer);
  ASSERT_GE(asked.size(), 2u);
  EXPECT_LE(asked[1], answer);
  EXPECT_GE(asked[1], answer / 2) << asked[1];
  EXPECT_LE(r->evaluations, 5);
}

// A peak that is the optimizer step's at batch 1 and backward's from the jump on: the line
// through batch 1 and the jump would be far too flat, but the candidate after the jump reads
// what grows with the batch there (the breakdown's saved activations), and lands on the answer or
// its successor.
TEST_F(MaxBatchTest, TheCandidateAfterTheJumpReadsWhatGrowsThere) {
  const StepThenBackward p{200 * (uint64_t{1} << 20), kGiB, 3 * kGiB, 0};
  std::vector<int64_t> asked;
  auto r = Search(p, &asked);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const int64_t answer = Answer(p);
  EXPECT_EQ(r->batch, answer);
  ASSERT_GE(asked.size(), 3u);
  EXPECT_LE(std::abs(asked[2] - answer), 1) << asked[2];
  EXPECT_LE(r->evaluations, 4);
}

// Batch 1 and the jump land where the optimizer step is still the peak: the step's temporaries
// (the breakdown's transients there) say nothing of what grows with the batch, so no candidate is
// drawn from them (read as growth, they would put the first candidate some 4,600 batches out,
// more than twice the answer): the first is the jump, the capacity over batch 1's peak.
TEST_F(MaxBatchTest, AJumpStillAtTheOptimizerStepIsNotReadForGrowth) {
  const StepThenBackward p{40 * (uint64_t{1} << 20), kGiB, 6 * kGiB, 16 * (uint64_t{1} << 20)};
  std::vector<int64_t> asked;
  auto r = Search(p, &asked);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const int64_t answer = Answer(p);
  EXPECT_EQ(r->batch, answer);
  ASSERT_GE(asked.size(), 2u);
  EXPECT_EQ(asked[1], static_cast<int64_t>(capacity_ / (p.step + kOutside)));
  for (int64_t b : asked) EXPECT_LE(b, 2 * answer) << "asked " << b;
}

// Near the capacity the rounding of blocks and segments moves the device peak by a batch or two
// either way, so a line through two fitting batches can overshoot the answer. Over 120 peaks
// with such rounding (allocated bytes affine in the batch, reserved bytes 0 to 3 batches' growth
// above them, differing batch to batch), a fitting batch whose room left is under two batches'
// growth of its allocated bytes is followed by its successor (no failing batch yet), and the
// answer fits while its successor does not (where "fits" turns back, one of several).
TEST_F(MaxBatchTest, AFittingBatchCloseToTheCapacityIsFollowedByItsSuccessor) {
  const uint64_t budget = capacity_ - kOutside;
  int decisive = 0;  // close batches the line through the last two peaks would have passed over
  for (uint64_t k = 0; k < 120; ++k) {
    const uint64_t per_sample = (20 + k) * (uint64_t{1} << 20);
    auto f = [&](int64_t b) {
      const auto ub = static_cast<uint64_t>(b);
      const uint64_t allocated = kGiB + per_sample * ub;
      // A rounding that differs from batch to batch (a deterministic hash of the batch).
      const uint64_t units = ((ub * 2654435761u + k * 97) >> 7) % 4;
      return Step{allocated, allocated + units * per_sample};
    };
    std::vector<int64_t> asked;
    auto r = Search([&](int64_t b) {
      asked.push_back(b);
      return f(b);
    });
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_LE(f(r->batch).reserved, budget) << k;
    EXPECT_GT(f(r->batch + 1).reserved, budget) << k;
    // Up to the first failure (from there the search is bracketed).
    for (size_t i = 2; i + 1 < asked.size() && f(asked[1]).reserved <= budget; ++i) {
      const Step at = f(asked[i]), before = f(asked[i - 1]);
      if (at.reserved > budget) break;
      const double slope =
          (static_cast<double>(at.allocated) - static_cast<double>(before.allocated)) /
          static_cast<double>(asked[i] - asked[i - 1]);
      const double room = static_cast<double>(budget - at.reserved);
      if (asked[i] > asked[i - 1] && room < 2 * slope) {
        EXPECT_EQ(asked[i + 1], asked[i] + 1)
            << "per sample " << per_sample << ", after " << asked[i];
        // Where the line through the two device peaks meets the budget two or more batches on,
        // the line alone would have skipped the successor.
        const double device_slope =
            (static_cast<double>(at.reserved) - static_cast<double>(before.reserved)) /
            static_cast<double>(asked[i] - asked[i - 1]);
        decisive += device_slope > 0 && room / device_slope >= 2;
      }
    }
  }
  EXPECT_GE(decisive, 1);
  std::printf("close fitting batches the line alone would have passed over: %d\n", decisive);
}

// Steps within the budget: those that fit only by releasing cached segments hold their reserved
// bytes at the budget, and a step fails some batches before its allocated bytes reach it
// (segments it could not release). The search steps down from the first failure instead of
// bisecting from batch 1.
TEST_F(MaxBatchTest, ABatchThatFailedJustBelowTheCapacityIsFollowedByStepsDown) {
  const uint64_t per_sample = 88 * (uint64_t{1} << 20);
  const uint64_t budget = capacity_ - kOutside;
  const int64_t boundary = static_cast<int64_t>(budget / per_sample) - 5;
  std::vector<int64_t> asked;
  auto r = Search([&](int64_t b) {
    asked.push_back(b);
    const uint64_t allocated = per_sample * static_cast<uint64_t>(b);
    if (b > boundary) return Step{allocated, allocated + 8 * kGiB, false, true};
    const uint64_t wanted = allocated + 4 * kGiB;
    return Step{allocated, std::min(wanted, budget), wanted > budget, false};
  });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->batch, boundary);
  EXPECT_LE(r->evaluations, 10);
  // The first batch that failed within the steps' reach is followed by the one below it.
  const auto first_failure = std::find_if(
      asked.begin(), asked.end(), [&](int64_t b) { return b > boundary && b <= boundary + 16; });
  ASSERT_NE(first_failure, asked.end());
  ASSERT_NE(first_failure + 1, asked.end());
  EXPECT_EQ(*(first_failure + 1), *first_failure - 1);
}

// What grows with the value grows with its square too (a sequence: its attention scores): a
// line through two estimates lands short of or past the answer, and the line through the
// bracket's ends, on a convex peak, creeps up on it from below. The growth curve through two
// estimates (beta v + gamma v^2) meets the capacity at the answer.
TEST_F(MaxBatchTest, AGrowthWithTheSquareOfTheValueIsFoundInAFewEstimates) {
  const Polynomial p{6 * kGiB, 0, 3 * (uint64_t{1} << 20), 6 * (uint64_t{1} << 10)};
  std::vector<int64_t> asked;
  auto r = Search(p, &asked);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->batch, Answer(p));
  // 4 here; 19 without the curve, 17 with the lines alone (before it).
  EXPECT_LE(r->evaluations, 5) << ::testing::PrintToString(asked);
}

// The 30 values before the allocated bytes reach the budget fail too, their reserved bytes a
// plateau just above it (segments rounded up): a candidate drawn by a line or the curve lands on
// the plateau right under the failing end, again and again, and a bisection from far below
// follows each. After one such failure the search steps down from the failing end, 1, 2, 4, ...
// values, until one fits.
TEST_F(MaxBatchTest, ACandidateThatFailedRightUnderTheFailingEndIsFollowedByStepsDown) {
  const uint64_t per_sample = 30 * (uint64_t{1} << 20), base = 3 * kGiB;
  const uint64_t budget = capacity_ - kOutside;
  const int64_t answer = static_cast<int64_t>((budget - base) / per_sample) - 30;
  auto f = [&](int64_t v) {
    const uint64_t allocated = base + per_sample * static_cast<uint64_t>(v);
    const uint64_t reserved =
        v > answer ? std::max(allocated, budget + (uint64_t{1} << 20)) : allocated;
    return Step{allocated, reserved, false, false, allocated - base};
  };
  std::vector<int64_t> asked;
  auto r = Search([&](int64_t v) {
    asked.push_back(v);
    return f(v);
  });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->batch, answer);
  // Failing candidates 1, 2 and 4 values apart, each right under the last.
  bool stepped_down = false;
  for (size_t i = 3; i < asked.size(); ++i) {
    stepped_down =
        stepped_down || (asked[i - 2] == asked[i - 3] - 1 && asked[i - 1] == asked[i - 2] - 2 &&
                         asked[i] == asked[i - 1] - 4 && asked[i] > answer);
  }
  EXPECT_TRUE(stepped_down) << ::testing::PrintToString(asked);
  // 12 here; 27 without the steps down, 21 with the lines alone (before them).
  EXPECT_LE(r->evaluations, 14) << ::testing::PrintToString(asked);
}

// While the peak is the optimizer step's, nothing an estimate says grows: the search jumps, at
// least 8 times the value (here the capacity is not twice the step's peak, so a jump by the
// capacity over the peak would be a doubling, 13 of them to reach the backward's growth).
TEST_F(MaxBatchTest, WhileThePeakIsTheOptimizerStepsTheJumpIsLong) {
  const StepThenBackward p{10 * (uint64_t{1} << 20), kGiB, 45 * kGiB, kGiB};
  std::vector<int64_t> asked;
  auto r = Search(p, &asked);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->batch, Answer(p));
  ASSERT_GE(asked.size(), 2u);
  EXPECT_EQ(asked[1], 8);
  // 10 here; 17 with doublings, 18 with the lines alone (before the curve).
  EXPECT_LE(r->evaluations, 12) << ::testing::PrintToString(asked);
}

// The same peaks, but each estimate at the step's peak says what the backward's was (as the
// analytical backend does, Estimate::phases): the line through batch 1's backward meets the
// capacity at the answer, and no jump is made.
TEST_F(MaxBatchTest, AtTheStepsPeakTheBackwardsPhaseDrawsTheCandidates) {
  StepThenBackward p{10 * (uint64_t{1} << 20), kGiB, 45 * kGiB, kGiB};
  p.phases = true;
  std::vector<int64_t> asked;
  auto r = Search(p, &asked);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const int64_t answer = Answer(p);
  EXPECT_EQ(r->batch, answer);
  ASSERT_GE(asked.size(), 2u);
  EXPECT_EQ(asked[1], answer);
  // 3 here (1, the answer, its successor); 10 without the backward's phase (above).
  EXPECT_LE(r->evaluations, 3) << ::testing::PrintToString(asked);
}

// The phases are not read from an estimate made within the allocator's budget (its signal is its
// allocated side, not its device peak) nor from a pipeline's worst stage (another stage's backward
// may decide): there the step's peak says nothing of what grows, and the search jumps as without
// them.
TEST_F(MaxBatchTest, PhasesWithinTheBudgetOrOfAPipelineStageAreNotRead) {
  for (const bool pipeline : {false, true}) {
    StepThenBackward p{10 * (uint64_t{1} << 20), kGiB, 45 * kGiB, kGiB};
    p.phases = true;
    p.retried = !pipeline;
    p.pipeline = pipeline;
    std::vector<int64_t> asked;
    auto r = Search(p, &asked);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->batch, Answer(p)) << pipeline;
    ASSERT_GE(asked.size(), 2u);
    EXPECT_EQ(asked[1], 8) << pipeline;
  }
}

// What grows has a constant part (a transient of fixed size, such as an embedding's gradient),
// beside a part that grows with the square of the value. Once a value fits and a larger one
// fails, the growth curve is drawn through the fitting one and the failing one and read between
// them; through the fitting one and a smaller one, the constant part bends it, and read beyond
// them it lands far from the answer.
TEST_F(MaxBatchTest, InTheBracketTheCurveIsReadBetweenItsPoints) {
  const Polynomial p{3 * kGiB, 2 * kGiB, 256 * (uint64_t{1} << 10), 2 * (uint64_t{1} << 10)};
  std::vector<int64_t> asked;
  auto r = Search(p, &asked);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->batch, Answer(p));
  // 9 here; 23 with the curve through the nearest smaller value (before), whose candidates land
  // past the answer and start steps down that find nothing.
  EXPECT_LE(r->evaluations, 10) << ::testing::PrintToString(asked);
}

// A "fits" that turns back: the answer fits and its successor does not.
TEST_F(MaxBatchTest, WhereFitsTurnsBackTheAnswerFitsAndItsSuccessorDoesNot) {
  const std::set<int64_t> holes = {700, 701, 702, 705, 720, 721, 730};
  const uint64_t per_sample = 100 * (uint64_t{1} << 20);
  const uint64_t budget = capacity_ - kOutside;
  auto f = [&](int64_t b) {
    const uint64_t bytes = kGiB + per_sample * static_cast<uint64_t>(b);
    if (bytes > budget) return Step{bytes, bytes, false, true};
    if (holes.count(b) > 0) return Step{bytes, budget + 1, false, false};
    return Step{bytes, bytes};
  };
  auto r = Search(f);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto fits = [&](int64_t b) { return f(b).reserved <= budget; };
  EXPECT_TRUE(fits(r->batch)) << r->batch;
  EXPECT_FALSE(fits(r->batch + 1)) << r->batch;
}

}  // namespace
}  // namespace memest
