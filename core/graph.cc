// core/graph.cc -- ParsedModel: where a graph's ModelProto lives (policy in core/graph.h).
#include "core/graph.h"

namespace memest::core {

ParsedModel ParsedModel::OnArena() {
  ParsedModel m;
  m.heap_.reset();
  m.arena_ = std::make_unique<google::protobuf::Arena>();
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
