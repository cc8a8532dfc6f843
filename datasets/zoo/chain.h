// datasets/zoo/chain.h -- a synthetic graph of any size, for benchmarks and resource bounds.
//
// ChainModel(blocks): X[batch, 64] through `blocks` x (MatMul, Add, Relu, LayerNormalization),
// 4 nodes per block, opset 17, weights declared without data (as in the bundled weightless
// exports). Deterministic; memory and time grow linearly with `blocks`.
#ifndef MEMEST_DATASETS_ZOO_CHAIN_H_
#define MEMEST_DATASETS_ZOO_CHAIN_H_

#include <string>

namespace memest::zoo {

// The serialized ModelProto of the chain.
std::string ChainModel(int blocks);

}  // namespace memest::zoo

#endif  // MEMEST_DATASETS_ZOO_CHAIN_H_
