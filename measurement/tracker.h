// measurement/tracker.h -- the CPU tracking allocator of the measurement harness.
//
// Policy:
//  * One process-wide tracker wraps LibTorch's CPU allocator (c10::SetCPUAllocator with priority
//    10, installed on first use and never removed: tensors allocated through it may outlive any
//    recording). Every CPU tensor allocation and free goes through it.
//  * Sizes are kept in a side table keyed by the data pointer. The DataPtr's context is the data
//    pointer itself and the deleter is a plain function, because oneDNN calls raw_allocate /
//    raw_deallocate, which require exactly that (a context object aborts inside mkldnn convs).
//  * Only allocations made while a recording is active are counted. A recording assigns each
//    event a sequence number and tags it with the current iteration, phase and node (set by the
//    executor; process-wide, because autograd may run backward on another thread). Bytes are the
//    requested nbytes (the sum of tensor nbytes), not the 64-byte-aligned size malloc returns.
//  * An optional limit on live bytes turns host memory exhaustion into an out-of-memory error
//    (c10::Error from the allocation) instead of the kernel's OOM killer.
//  * Recordings are not reentrant: the executor serializes runs with its own mutex.
//
// This header is free of LibTorch types; tracker.cc includes only c10 headers.
#ifndef MEMEST_MEASUREMENT_TRACKER_H_
#define MEMEST_MEASUREMENT_TRACKER_H_

#include <cstdint>
#include <vector>

namespace memest::measurement {

// Phases of a measured run. kSetup: parameters, buffers and inputs are created. kForward
// includes the loss (zero_grad runs just before it); kStep is the optimizer step; kTeardown frees
// what is left.
enum class TracePhase : int8_t { kSetup, kForward, kBackward, kStep, kTeardown };
const char* ToString(TracePhase phase);

struct TraceEvent {
  uint64_t seq = 0;       // 0-based position in the recording
  uintptr_t ptr = 0;      // data pointer (frees name the pointer they release)
  uint64_t bytes = 0;     // requested bytes of the block
  bool alloc = true;      // allocation or free
  int32_t iteration = 0;  // 0 during setup, then 1..N
  TracePhase phase = TracePhase::kSetup;
  int32_t node = -1;        // plan node index; -1 outside nodes (see kNode* tags)
  uint64_t live_after = 0;  // live counted bytes after this event
  uint64_t alloc_seq = 0;   // frees: the seq of the matching allocation
};

// Node tags for events outside graph nodes.
inline constexpr int32_t kNodeNone = -1;
inline constexpr int32_t kNodeLoss = -2;
inline constexpr int32_t kNodeOptimizer = -3;
inline constexpr int32_t kNodeInputs = -4;

class CpuTracker {
 public:
  // The process-wide tracker, installed as LibTorch's CPU allocator on first call.
  static CpuTracker& Instance();

  // Starts a recording with an empty trace. `limit_bytes` (0 = none) caps live counted bytes.
  void Start(uint64_t limit_bytes);
  // Ends the recording and returns its events. Blocks still live stay in the side table and are
  // ignored when freed.
  std::vector<TraceEvent> Stop();

  void SetIteration(int32_t iteration);
  void SetPhase(TracePhase phase);
  void SetNode(int32_t node);
  int32_t node() const;

  uint64_t live() const;         // live counted bytes of the current recording
  uint64_t event_count() const;  // events recorded so far (the next event's seq)
  uint64_t peak() const;         // peak of the current recording

  // Called by the allocator (tracker.cc).
  void OnAlloc(void* ptr, uint64_t bytes);  // may throw c10::Error over the limit
  void OnFree(void* ptr);

  struct State;  // defined in tracker.cc

 private:
  CpuTracker() = default;
  State* state_ = nullptr;
};

}  // namespace memest::measurement

#endif  // MEMEST_MEASUREMENT_TRACKER_H_
