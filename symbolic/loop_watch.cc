// symbolic/loop_watch.cc -- seeing the training loop repeat itself (policy in loop_watch.h).
#include "symbolic/loop_watch.h"

namespace memest::symbolic {

LoopWatch::Print LoopWatch::Fingerprint(const std::vector<uint64_t>& words) {
  // Two multiply-xorshift hashes with different constants over the words and their count.
  Print p{0x9e3779b97f4a7c15ull ^ words.size(), 0xc2b2ae3d27d4eb4full + words.size()};
  for (uint64_t w : words) {
    p.a = (p.a ^ w) * 0xff51afd7ed558ccdull;
    p.a ^= p.a >> 33;
    p.b = (p.b + w) * 0x94d049bb133111ebull;
    p.b ^= p.b >> 31;
  }
  return p;
}

std::optional<LoopRepeat> LoopWatch::Starts(int it, std::vector<uint64_t>* words) {
  for (const Recent& r : recent_) {
    if (r.it > 0 && r.words == *words) return LoopRepeat{r.it, it};
  }
  if (candidate_at_ > 0 && it == candidate_at_ + period_) {
    if (candidate_ == *words) return LoopRepeat{candidate_at_, it};
    candidate_at_ = 0;
  }
  // The states older than the last two, by fingerprint (each taken as it leaves recent_): a loop
  // of one or two iterations, the common one, is seen before any is taken.
  std::optional<Print> print;  // this state's, once taken
  if (candidate_at_ == 0 && !prints_.empty()) {
    print = Fingerprint(*words);
    for (auto seen = prints_.rbegin(); seen != prints_.rend(); ++seen) {
      if (seen->first < it - 2 && seen->second == *print) {
        candidate_at_ = it;
        period_ = it - seen->first;
        candidate_ = *words;
        break;
      }
    }
  }
  Recent& slot = recent_[it % 2];
  if (slot.it > 0) {
    prints_.emplace_back(slot.it, slot.print ? *slot.print : Fingerprint(slot.words));
  }
  slot.it = it;
  slot.print = print;
  std::swap(slot.words, *words);
  return std::nullopt;
}

std::optional<std::vector<uint32_t>> CarriedMallocs(const std::vector<LoopRequest>& requests,
                                                    size_t mallocs) {
  std::vector<uint8_t> own(mallocs, 0), previous(mallocs, 0);
  for (const LoopRequest& q : requests) {
    if (q.kind == LoopRequest::kMalloc) continue;
    if (q.r >= mallocs) return std::nullopt;
    ++(q.kind == LoopRequest::kFreeOwn ? own : previous)[q.r];
  }
  std::vector<uint32_t> carried;
  for (uint32_t r = 0; r < mallocs; ++r) {
    if (own[r] + previous[r] != 1) return std::nullopt;  // freed twice, or piling up
    if (previous[r] == 1) carried.push_back(r);
  }
  return carried;
}

void LoopStart(const CachingAllocatorModel& alloc,
               const std::vector<CachingAllocatorModel::Handle>& previous,
               const std::vector<uint32_t>& carried, std::vector<uint64_t>* words) {
  words->clear();
  for (uint32_t r : carried) words->insert(words->end(), {r, alloc.Address(previous[r])});
  alloc.AppendLayout(words);
}

}  // namespace memest::symbolic
