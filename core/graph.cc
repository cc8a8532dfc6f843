// core/graph.cc -- ParsedModel: where a graph's ModelProto lives (policy in core/graph.h).
#include "core/graph.h"

namespace memest::core {
namespace {

// The largest block the parse's arena takes from the allocator; the blocks start at protobuf's
// 256 bytes and double up to it, so a small model's arena stays small. Protobuf's default, 8 KiB,
// made a 1,000,000-node graph's parse about 90,000 allocations of 8 KiB, which the C library's
// allocator serves from the free blocks an earlier heap-heavy task of the process left behind:
// in the benchmark, where the reference protobuf parse onto the heap (730 MiB of small blocks,
// freed) ran before each load, the 1M chain's load took 2.1-2.2 s against 1.3 s alone, and with
// 1 MiB blocks 1.1-1.8 s against 1.1-1.2 s; the 100k chain's load, timed in the same rounds as
// its parse (BM_ChainPaired), fell from 2.06-2.22 to 1.73-1.79 x the parse; the 10,000-node
// chain's parse onto the arena runs 9 % fewer instructions (docs/speed-log.md, 2026-12-07).
constexpr size_t kArenaMaxBlock = size_t{1} << 20;

}  // namespace

ParsedModel ParsedModel::OnArena() {
  ParsedModel m;
  m.heap_.reset();
  google::protobuf::ArenaOptions options;
  options.max_block_size = kArenaMaxBlock;
  m.arena_ = std::make_unique<google::protobuf::Arena>(options);
  m.proto_ = google::protobuf::Arena::CreateMessage<onnx::ModelProto>(m.arena_.get());
  return m;
}

void ParsedModel::MoveToHeap() {
  if (arena_ == nullptr) return;
  auto heap = std::make_unique<onnx::ModelProto>(*proto_);
  proto_ = heap.get();
  heap_ = std::move(heap);
  arena_.reset();
}

}  // namespace memest::core
