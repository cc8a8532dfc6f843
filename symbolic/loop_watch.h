// symbolic/loop_watch.h -- seeing the training loop repeat itself: the states its iterations start
// from, compared; and an iteration whose requests every later one makes again. Shared by the
// simulation (symbolic/timeline_loop.cc) and the replay of its requests (symbolic/batch_trace.cc),
// which watch the same loop.
//
// Policy:
//  * An iteration does what the state it starts from decides, and nothing else: the tensors alive
//    between iterations, where the allocator holds them, and the allocator's blocks. Once an
//    iteration k starts from the state an earlier one j started from, iterations j .. k-1 repeat
//    for ever, and no later iteration reaches more than they did.
//  * States are compared word for word. The last two are kept whole: the caching allocator
//    settles into a loop of one or two iterations (a buffer freed and made again each iteration
//    alternates between two places). Of the older ones only a fingerprint is kept (two 64-bit
//    hashes, taken as a state leaves the last two, so that a loop seen among the last two takes
//    none); when one matches, the state is kept whole and compared, word for word, with the
//    state as many iterations later (a loop of four: gradient accumulation over two
//    micro-batches). A fingerprint only ever decides what to compare.
//  * An iteration whose requests every later one makes again (LoopRequest) frees only its own
//    mallocs and the iteration before's, and what outlives it is what the next one frees
//    (CarriedMallocs); the state each later iteration starts from is then where those mallocs of
//    the iteration before are, and the allocator's layout (LoopStart).
#ifndef MEMEST_SYMBOLIC_LOOP_WATCH_H_
#define MEMEST_SYMBOLIC_LOOP_WATCH_H_

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "symbolic/allocator.h"

namespace memest::symbolic {

// Iterations from .. at-1 of the training loop repeat for ever: iteration `at` started from the
// state iteration `from` had started from.
struct LoopRepeat {
  int from = 0;
  int at = 0;
  bool operator==(const LoopRepeat&) const = default;
};

// One request of an iteration that every later iteration makes again: a malloc (its number r
// among the iteration's mallocs), or the free of the iteration's own malloc r or of the iteration
// before's.
struct LoopRequest {
  enum Kind : uint8_t { kMalloc, kFreeOwn, kFreePrevious };
  Kind kind = kMalloc;
  uint32_t r = 0;
};

// The mallocs of such an iteration (`mallocs` of them) that outlive it, by number, increasing:
// each freed by the next iteration, every other one by the iteration itself. nullopt when a
// malloc is freed twice or by neither (it would pile up), or a free names no malloc.
[[nodiscard]] std::optional<std::vector<uint32_t>> CarriedMallocs(
    const std::vector<LoopRequest>& requests, size_t mallocs);

// The state an iteration of such a loop starts from, as LoopWatch compares it: each malloc of the
// iteration before that outlived it (`carried`: its number and the address of its block, from
// `previous` by number), then the allocator's layout (CachingAllocatorModel::AppendLayout).
// Replaces *words.
void LoopStart(const CachingAllocatorModel& alloc,
               const std::vector<CachingAllocatorModel::Handle>& previous,
               const std::vector<uint32_t>& carried, std::vector<uint64_t>* words);

class LoopWatch {
 public:
  // Iteration `it` (numbers increase) starts from the state *words. Returns where the loop
  // repeats, once an iteration starts from a state an earlier one was seen to start from. Takes
  // the words over, leaving *words with an older state's to be filled again (no allocation).
  [[nodiscard]] std::optional<LoopRepeat> Starts(int it, std::vector<uint64_t>* words);

 private:
  struct Print {
    uint64_t a = 0, b = 0;
    bool operator==(const Print&) const = default;
  };
  static Print Fingerprint(const std::vector<uint64_t>& words);

  // The last two states, by it % 2 (it 0: none), with a fingerprint where one was taken.
  struct Recent {
    int it = 0;
    std::vector<uint64_t> words;
    std::optional<Print> print;
  };
  Recent recent_[2];
  std::vector<std::pair<int, Print>> prints_;  // every state older than the last two
  // A state whose fingerprint an older one had, kept whole to be compared `period` later.
  int candidate_at_ = 0, period_ = 0;
  std::vector<uint64_t> candidate_;
};

}  // namespace memest::symbolic

#endif  // MEMEST_SYMBOLIC_LOOP_WATCH_H_
