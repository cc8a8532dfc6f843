// memory/weight_storage.h -- how the parameters that do not train are stored
// (Options::weight_dtype), and what using a quantized one costs; stated once for every backend.
//
// Policy (docs/memory-model.md §5.4; PEFT and bitsandbytes as of 0.45):
//  * Which parameters: those that do not train -- the frozen ones in training (TrainableSet), every
//    float initializer in inference.
//  * fp16 / bf16: each such float initializer in 2 bytes per element (the base model loaded with
//    torch_dtype=float16/bfloat16, or model.half()).
//  * int8 and nf4 replace nn.Linear layers only (transformers' replace_with_bnb_linear), so they
//    apply to a 2-D float initializer whose every use is as the weight (input 1) of a MatMul or
//    Gemm, directly or through one Transpose (how training exports write W^T); other parameters
//    keep the size the precision gives them. A MatMul/Gemm whose output is a graph output is
//    taken for the model's head (lm_head), which transformers leaves unquantized
//    (llm_int8_skip_modules), so its weight is kept too.
//      int8 (bnb.nn.Linear8bitLt, LLM.int8): 1 byte per element + one fp32 scale per output row.
//      nf4 (bnb.nn.Linear4bit, blocksize 64; bitsandbytes/functional.py quantize_4bit): half a
//        byte per element + one fp32 absmax per block of 64.
//      nf4-dq (compress_statistics): the absmax quantized again to 1 byte per block, + one fp32
//        absmax per 256 of those blocks + an fp32 offset.
//    A quantized weight is stored here as one allocation of these bytes (bitsandbytes makes two or
//    three: the rounding of the small ones is below the residual band).
//  * Using a quantized weight (bitsandbytes/autograd/_functions.py): nf4's MatMul4Bit dequantizes
//    the whole weight to the compute dtype for the forward matmul, and again in backward when the
//    input needs a gradient; int8's MatMul8bitLt quantizes the input to int8 (1 byte per element)
//    and accumulates an int32 result (4 bytes per output element) in forward, and dequantizes the
//    weight to the compute dtype in backward. Each lives for that node only (a transient).
//    The compute dtype is fp32 under --precision fp32, else 2 bytes.
//  * A weight dtype that changes no parameter (nothing frozen in training, or no Linear weight for
//    int8/nf4) is InvalidArgument: an option is never silently a no-op.
#ifndef MEMEST_MEMORY_WEIGHT_STORAGE_H_
#define MEMEST_MEMORY_WEIGHT_STORAGE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/bind.h"
#include "memest/options.h"
#include "memest/status.h"
#include "memory/trainable.h"

namespace memest::memory {

class WeightStorage {
 public:
  // Weights as the precision says (weight_dtype auto).
  WeightStorage() = default;
  [[nodiscard]] static Result<WeightStorage> Make(const core::BoundGraph& graph,
                                                  const TrainableSet& trainable,
                                                  const Options& options);

  // Per value id: the bytes a stored parameter takes under the weight dtype; 0 for a value it
  // does not change (empty when weight_dtype is auto).
  const std::vector<uint64_t>& stored_bytes() const { return stored_; }
  // Bytes node k allocates and frees around its matmul on a quantized weight, in forward, and in
  // backward when its activation input needs a gradient; 0 for every other node.
  uint64_t forward_transient(size_t node) const { return At(forward_, node); }
  uint64_t backward_transient(size_t node) const { return At(backward_, node); }

  // For the diagnostic: how many parameter tensors changed, their elements, bytes before/after.
  int tensors() const { return tensors_; }
  uint64_t elements() const { return elements_; }
  uint64_t bytes_before() const { return before_; }
  uint64_t bytes_after() const { return after_; }

 private:
  static uint64_t At(const std::vector<uint64_t>& v, size_t i) { return i < v.size() ? v[i] : 0; }

  std::vector<uint64_t> stored_;
  std::vector<uint64_t> forward_;
  std::vector<uint64_t> backward_;
  int tensors_ = 0;
  uint64_t elements_ = 0;
  uint64_t before_ = 0;
  uint64_t after_ = 0;
};

// Bytes of `elements` elements of one Linear weight of `rows` output rows stored as `dtype`
// (kInt8 / kNf4 / kNf4DoubleQuant; the others: 2 bytes per element).
uint64_t QuantizedWeightBytes(WeightDtype dtype, uint64_t elements, uint64_t rows);

}  // namespace memest::memory

#endif  // MEMEST_MEMORY_WEIGHT_STORAGE_H_
