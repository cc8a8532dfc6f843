// measurement/tracker.cc -- the CPU tracking allocator (policy at the top of tracker.h).
//
// Allocation policy, restated where it is implemented:
//  * allocate(n): check the live-bytes limit (throws c10::Error past it, like the default
//    allocator on malloc failure), take the block from the allocator that was installed before
//    us, then record {ptr -> n} in the side table and, while recording, an event.
//  * The DataPtr carries context == data pointer and the plain function TrackedDelete, so
//    raw_allocate / raw_deallocate (oneDNN) work unchanged.
//  * free(ptr): look the pointer up, record the event when the block was counted, hand the block
//    back to the underlying allocator's raw deleter.
// Only c10 headers are included here (no ATen), to keep this translation unit cheap.
#include "measurement/tracker.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

namespace memest::measurement {

struct CpuTracker::State {
  struct Block {
    uint64_t bytes = 0;
    uint64_t recording = 0;  // recording id that counted it (0: not counted)
    uint64_t seq = 0;        // seq of its allocation event
  };
  std::mutex mu;
  std::unordered_map<void*, Block> blocks;
  bool recording = false;
  uint64_t recording_id = 0;
  uint64_t limit = 0;
  uint64_t live = 0;
  uint64_t peak = 0;
  std::vector<TraceEvent> events;
  std::atomic<int32_t> iteration{0};
  std::atomic<int8_t> phase{static_cast<int8_t>(TracePhase::kSetup)};
  std::atomic<int32_t> node{kNodeNone};
  c10::Allocator* base = nullptr;
  c10::DeleterFnPtr base_deleter = nullptr;

  // Appends one trace event at the current iteration/phase/node (mu held).
  void Record(void* ptr, uint64_t bytes, bool alloc, uint64_t alloc_seq) {
    TraceEvent e;
    e.seq = events.size();
    e.ptr = reinterpret_cast<uintptr_t>(ptr);
    e.bytes = bytes;
    e.alloc = alloc;
    e.iteration = iteration;
    e.phase = static_cast<TracePhase>(phase.load());
    e.node = node;
    e.live_after = live;
    e.alloc_seq = alloc_seq;
    events.push_back(e);
  }
};

namespace {

void TrackedDelete(void* ptr);

// Forwards to the allocator that was installed before it and reports to the tracker.
class TrackingAllocator final : public c10::Allocator {
 public:
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  c10::DataPtr allocate(size_t n) override { return Allocate(n); }
#else
  c10::DataPtr allocate(size_t n) const override { return Allocate(n); }
#endif
  c10::DeleterFnPtr raw_deleter() const override { return &TrackedDelete; }
  // Pure virtual in LibTorch >= 2.2; a plain member before.
  void copy_data(void* dest, const void* src, std::size_t count) const {
    if (count > 0) std::memcpy(dest, src, count);
  }

 private:
  c10::DataPtr Allocate(size_t n) const;
};

CpuTracker::State* g_state = nullptr;  // set once, under std::call_once in Instance()

c10::DataPtr TrackingAllocator::Allocate(size_t n) const {
  CpuTracker& tracker = CpuTracker::Instance();
  CpuTracker::State& s = *g_state;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    TORCH_CHECK(!s.recording || s.limit == 0 || s.live + n <= s.limit,
                "memest measurement: host memory limit reached (", s.live, " bytes live + ", n,
                " requested > limit ", s.limit,
                " bytes): not enough memory (out of memory on the CPU)");
  }
  void* ptr = s.base->raw_allocate(n);
  if (ptr != nullptr) tracker.OnAlloc(ptr, n);
  return {ptr, ptr, &TrackedDelete, c10::Device(c10::DeviceType::CPU)};
}

void TrackedDelete(void* ptr) {
  if (ptr == nullptr) return;
  CpuTracker::Instance().OnFree(ptr);
  g_state->base_deleter(ptr);
}

}  // namespace

const char* ToString(TracePhase phase) {
  switch (phase) {
    case TracePhase::kSetup:
      return "setup";
    case TracePhase::kForward:
      return "forward";
    case TracePhase::kBackward:
      return "backward";
    case TracePhase::kStep:
      return "step";
    case TracePhase::kTeardown:
      return "teardown";
  }
  return "unknown";
}

CpuTracker& CpuTracker::Instance() {
  static CpuTracker* tracker = [] {
    auto* t = new CpuTracker();  // never destroyed: blocks may be freed at exit
    t->state_ = new State();
    g_state = t->state_;
    c10::Allocator* base = c10::GetCPUAllocator();
    t->state_->base = base;
    t->state_->base_deleter = base->raw_deleter();
    TORCH_CHECK(t->state_->base_deleter != nullptr,
                "memest measurement: the CPU allocator has no raw deleter");
    static TrackingAllocator allocator;
    c10::SetCPUAllocator(&allocator, /*priority=*/10);
    return t;
  }();
  return *tracker;
}

void CpuTracker::Start(uint64_t limit_bytes) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->recording = true;
  ++state_->recording_id;
  state_->limit = limit_bytes;
  state_->live = 0;
  state_->peak = 0;
  state_->events.clear();
  state_->iteration = 0;
  state_->phase = static_cast<int8_t>(TracePhase::kSetup);
  state_->node = kNodeNone;
}

std::vector<TraceEvent> CpuTracker::Stop() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->recording = false;
  state_->limit = 0;
  return std::move(state_->events);
}

void CpuTracker::SetIteration(int32_t iteration) { state_->iteration = iteration; }
void CpuTracker::SetPhase(TracePhase phase) { state_->phase = static_cast<int8_t>(phase); }
void CpuTracker::SetNode(int32_t node) { state_->node = node; }
int32_t CpuTracker::node() const { return state_->node; }

uint64_t CpuTracker::live() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->live;
}

uint64_t CpuTracker::event_count() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->events.size();
}

uint64_t CpuTracker::peak() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->peak;
}

void CpuTracker::OnAlloc(void* ptr, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(state_->mu);
  State& s = *state_;
  State::Block block{bytes, 0, 0};
  if (s.recording) {
    block.recording = s.recording_id;
    block.seq = s.events.size();
    s.live += bytes;
    if (s.live > s.peak) s.peak = s.live;
    s.Record(ptr, bytes, /*alloc=*/true, block.seq);
  }
  s.blocks[ptr] = block;
}

void CpuTracker::OnFree(void* ptr) {
  std::lock_guard<std::mutex> lock(state_->mu);
  State& s = *state_;
  auto it = s.blocks.find(ptr);
  if (it == s.blocks.end()) return;  // allocated before the tracker was installed
  const State::Block block = it->second;
  s.blocks.erase(it);
  if (!s.recording || block.recording != s.recording_id) return;
  s.live -= block.bytes;
  s.Record(ptr, block.bytes, /*alloc=*/false, block.seq);
}

}  // namespace memest::measurement
