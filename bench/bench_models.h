// bench/bench_models.h -- the models the benchmarks and the peak-RSS report measure, by name.
//
// Names: a bundled file ("resnet50_train": datasets/models/<name>.onnx, or "real/<name>":
// datasets/real/<name>.onnx), a generated chain ("chain10k", "chain100k", "chain1m": 10,000,
// 100,000 and 1,000,000 nodes, datasets/zoo/chain.h), "gpt70b" (a 70.3 B-parameter GPT-style
// decoder, datasets/zoo), a graph of one shape ("shape:<kind>:<width>", datasets/zoo/shapes.h:
// "shape:fanout:40000"), or a Hugging Face config from tests/data/hf/ ("hf:<config>": its
// training graph, "hf-prefill:<config>": its prefill graph, "hf-decode:<config>": its decode
// step), or "weighted:<name>": that model with the weights it declares held in the file (zeros as
// raw_data; the bundled exports are weightless), or "typed:<name>": the same with a float
// tensor's weights in float_data. Every generator is deterministic.
#ifndef MEMEST_BENCH_BENCH_MODELS_H_
#define MEMEST_BENCH_BENCH_MODELS_H_

#include <string>

#include "datasets/zoo/hf.h"
#include "memest/status.h"

namespace memest::bench {

// The file of a bundled model name ("resnet50_train", "real/<name>").
std::string ModelPath(const std::string& name);

// The serialized ModelProto of `name` (empty when a file is missing or a config fails).
std::string BuildModelBytes(const std::string& name);

// The same, generated once per process and kept.
const std::string& ModelBytes(const std::string& name);

// The graph of a Hugging Face config (tests/data/hf/<file>.json) in `phase`, or an error.
Result<zoo::HfModel> BuildHf(const std::string& file, zoo::HfGraphOptions::Phase phase);

}  // namespace memest::bench

#endif  // MEMEST_BENCH_BENCH_MODELS_H_
