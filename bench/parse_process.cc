// bench/parse_process.cc -- memest_parse_process FILE: the protobuf parse of an ONNX file as a
// process of its own, the floor any tool that reads the model pays when it starts fresh.
//
// It reads the file and parses its bytes into an onnx::ModelProto as BM_ProtobufParse does
// (bench/estimate_bench.cc), with the allocator the memest CLI runs on (jemalloc and its
// configuration, tools/jemalloc_conf.cc, where the build links them): BM_ParseProcessChain
// (bench/queries_bench.cc) times it next to BM_CliProcessChain, the memest CLI estimating the
// same file, so that a fresh process's page faults are in both (scripts/bench_ratios.py).
// Exits 0 when the bytes parse into a graph with nodes, 1 otherwise.
#include <onnx/onnx_pb.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: memest_parse_process FILE.onnx\n");
    return 1;
  }
  std::ifstream in(argv[1], std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  onnx::ModelProto model;
  if (!in || !model.ParseFromString(bytes) || model.graph().node_size() == 0) {
    std::fprintf(stderr, "memest_parse_process: %s does not parse into a graph\n", argv[1]);
    return 1;
  }
  std::printf("%d nodes\n", model.graph().node_size());
  return 0;
}
