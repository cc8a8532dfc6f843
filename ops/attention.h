// ops/attention.h -- one attention call: which kernel PyTorch runs it with, and what that kernel
// keeps for backward and allocates around the call.
//
// An attention call is either a decomposed chain an exporter wrote (MatMul, scale, mask, Softmax,
// Dropout, MatMul; ops/fusion.h finds it) or a fused op: ONNX's opset-23 Attention and ONNX
// Runtime's com.microsoft Attention, MultiHeadAttention and GroupQueryAttention (their rules in
// ops/rules.cc describe each node as an AttentionSite). Both go through the one kernel choice
// below, so a chain and a fused op of the same shape run the same kernel.
//
// Policy (docs/memory-model.md §3.2 SDPA rows, §3.5; sources there):
//  * Options::attention says how attention runs. eager and sdpa-math: a decomposed chain is
//    costed as written, a fused op as the math composite (`_scaled_dot_product_attention_math`,
//    the same computation). sdpa-flash / sdpa-mem-efficient: that kernel, as forced with
//    torch.nn.attention.sdpa_kernel. auto: the first kernel PyTorch's CUDA dispatcher accepts
//    (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp, select_sdp_backend: flash, then
//    memory-efficient, then math), by these of its checks (a forced kernel whose checks fail is
//    refused, as PyTorch refuses it: ForcedRefusal):
//      both: as many k/v heads (and batch rows) as q, unless grouped k/v come with enable_gqa
//        (check_batch_size_and_num_heads_dense): a call whose k/v broadcast runs math;
//      flash: no explicit attention mask (check_for_attn_mask); q, k, v head dims equal and
//        <= 256; compute capability 8.0 to 12.1; fp16/bf16; with autograd recording on sm 8.6-8.9
//        and 12.x a head dim <= 192, or > 224 without dropout; is_causal only with as many
//        queries as keys (a single query is not causal);
//      memory-efficient: compute capability 5.0 to 12.1; fp16/fp32, bf16 from sm 8.0; q and k
//        head dims equal, and both head dims a multiple of the GEMM alignment (sm >= 8.0: 8 in
//        fp16/bf16, 4 in fp32; sm 7.x: 8 in fp16, 1 in fp32; older: 1); as many k/v heads as
//        query heads (check_batch_size_and_num_heads_dense without GQA support up to PyTorch
//        2.11; pytorch/pytorch#191085 added it later), so a grouped chain that transformers calls
//        with enable_gqa (grouped_kv, no mask) runs flash or, where flash refuses (fp32), math --
//        measured: datasets/h100-lm-torch211/, where fp32 sdpa and eager peaks of the grouped
//        decoders agree within 0.1 %.
//    Not modelled: cuDNN attention (priority on sm 9.0/10.x with cuDNN > 9.15 in recent
//    releases; it keeps what flash keeps, but takes a mask), nested tensors, the data pointer
//    alignment check, the ROCm kernels.
//  * What each kernel keeps when autograd records the call (PyTorch >= 2.5 sources):
//      math: q * sqrt(scale) and k^T * sqrt(scale) (new tensors), v, the softmax probabilities
//        [B, Hq, L, S], and with dropout its bool mask and the dropped probabilities; everything in
//        fp32 when the inputs are fp16/bf16 (the composite upcasts unless
//        allow_fp16_bf16_reduction_math_sdp), k and v repeated to Hq heads for grouped queries
//        (enable_gqa), at their own size when broadcast;
//      flash: q, k, v, out, an fp32 logsumexp [B, Hq, L], and two small uint64 tensors on the
//        device (rng_state[2] and an unused scalar, flash_api.cpp mha_fwd), dropout or not;
//      memory-efficient: q, k, v, out, the attention bias it was given (a boolean mask converted
//        to q's dtype, and a last dim not a multiple of 8 padded: a copy of the mask's size,
//        attention.cpp preprocess_mask), an fp32 logsumexp [B, Hq, ceil(L / 32) * 32]
//        (kAlignLSE), and without dropout two int64 device scalars (seed and offset; with dropout
//        they are CPU tensors, attention.cu _efficient_attention_forward).
//    Graph values are listed by id (a view of a graph value is that value); tensors the op makes
//    inside (a projection, a concatenated cache without a present output) are extras sized from the
//    dims.
//  * What each kernel allocates beyond its outputs and what it keeps (a workspace, freed at the end
//    of the call): math: the [B, Hq, L, S] scores in the accumulation type and, beside them and the
//    probabilities, _safe_softmax's bool scores.eq(-inf) of the same shape, the upcast q and k
//    copies for fp16/bf16 inputs and k repeated for grouped queries; without autograd also the
//    probabilities, the scaled q and the upcast v. flash without autograd: its logsumexp and the
//    two RNG tensors. memory-efficient without autograd: the converted mask and the two scalars.
//  * What each kernel's backward allocates beyond the gradients of the call's inputs and output
//    (held while the input gradients are made): math: the gradients of the probabilities and of
//    the scores, two [B, Hq, L, S] tensors in the accumulation type; flash (flash_api.cpp
//    mha_bwd): softmax_d fp32 [B, Hq, L128] and dq_accum fp32 [B, L128, Hq, D32] (L rounded up to
//    a multiple of 128, D to 32, 256 above 192), and for grouped queries dk and dv expanded to Hq
//    heads in q's dtype; memory-efficient (attention_backward.cu): delta fp32 [B, Hq, L]; its
//    kernel's fp32 gradient accumulators are not counted.
//  * A call whose op returns the scores (scores_output) runs the math composite under every
//    option: no fused kernel materializes them.
//  * Sizes never crash: an unknown or overflowing dim leaves the site unknown; an unknown site
//    keeps only the graph values it names and allocates nothing.
#ifndef MEMEST_OPS_ATTENTION_H_
#define MEMEST_OPS_ATTENTION_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "memest/options.h"
#include "ops/rules.h"

namespace memest::ops {

enum class AttentionKernel { kMath, kFlash, kMemEfficient };
// "math", "flash", "memory-efficient".
const char* ToString(AttentionKernel kernel);

// How the estimate runs attention (memory/device.h KernelChoices fills it from Options and the
// GPU profile).
struct AttentionPolicy {
  Attention requested = Attention::kEager;
  int sm_major = 0;
  int sm_minor = 0;
  bool half = false;     // the precision runs attention in fp16/bf16 (amp-fp16, amp-bf16, bf16)
  bool bf16 = false;     // ... in bf16
  bool training = true;  // Options::mode is train
  // Whether decomposed chains become one kernel (flash, memory-efficient or auto).
  bool FusesChains() const {
    return requested == Attention::kSdpaFlash || requested == Attention::kSdpaMemEfficient ||
           requested == Attention::kAuto;
  }
  bool operator==(const AttentionPolicy&) const = default;
};

// An explicit attention mask or additive bias the call takes.
struct AttentionMask {
  int value = -1;         // its graph value
  bool boolean = false;   // a boolean mask (converted to q's dtype by the fused kernels)
  uint64_t numel = 0;     // elements, 0 when unknown
  uint64_t last = 0;      // its last dim (the key positions), 0 when unknown
  std::string_view what;  // a string literal: "attn_mask", "attn_bias", "mask_index", ...
};

// One attention call, as scaled_dot_product_attention would see it: q [B, Hq, L, D],
// k [B, Hkv, S, D], v [B, Hkv, S, Dv], out [B, Hq, L, Dv].
struct AttentionSite {
  bool known = false;  // the dims below are known
  uint64_t batch = 0, q_heads = 0, kv_heads = 0, q_len = 0, kv_len = 0, head_dim = 0,
           v_head_dim = 0;
  uint64_t elem = 4;  // bytes of one q/k/v element at run time
  bool bf16 = false;
  // The graph values holding q, k, v and the output (or views of them); -1: made inside the op.
  int q = -1, k = -1, v = -1, out = -1;
  std::vector<AttentionMask> masks;
  double dropout = 0;
  bool causal = false;
  // The op returns the [B, Hq, L, S] scores or probabilities as an output (ONNX Attention's
  // qk_matmul_output, MultiHeadAttention's qk, GroupQueryAttention's output_qk): only the math
  // composite materializes them, so the call runs it whatever --attention says.
  bool scores_output = false;
  bool training = false;  // autograd records the call (training, and an input requires grad)
  // A decomposed chain whose k and v were repeated to the query heads (repeat_kv). Without a mask
  // transformers' SDPA path passes them unrepeated with enable_gqa=True instead
  // (integrations/sdpa_attention.py, use_gqa_in_sdpa: PyTorch >= 2.5 and no mask).
  bool grouped_kv = false;
  // k and v have fewer heads (rows) than q and are broadcast over them, passed without enable_gqa
  // (a chain whose MatMuls broadcast, as Falcon's multi-query attention calls SDPA): batch is then
  // k's rows, q_heads the query heads per k/v head and kv_heads 1. No fused kernel takes such a
  // call (check_batch_size_and_num_heads_dense: same batch and heads unless enable_gqa), and the
  // math composite computes it without repeating k and v.
  bool broadcast_kv = false;
  // The graph value of a causal mask the call takes as is_causal instead (a decomposed chain's
  // Trilu mask, ops/fusion.h), or -1.
  int causal_mask = -1;
};

// A call and the kernel chosen for it.
struct AttentionCall {
  size_t node = 0;     // the fused op, or the chain's Softmax
  bool chain = false;  // a decomposed chain (ops/fusion.h)
  // A chain left as written: the math kernel on fp32 inputs (the composite is the same
  // computation). On fp16/bf16 inputs the math composite is costed instead (its fp32 upcast).
  bool as_written = false;
  AttentionKernel kernel = AttentionKernel::kMath;
  std::string reason;  // why this kernel, for the attention_kernel diagnostic
  // Non-empty when --attention forces a kernel that cannot run the call: PyTorch raises "No
  // available kernel" there, and the estimate is refused with this reason (ForcedRefusal).
  std::string refusal;
  AttentionSite site;
};

// The kernel `policy` runs `site` with, and why.
AttentionKernel ChooseAttentionKernel(const AttentionPolicy& policy, const AttentionSite& site,
                                      std::string* reason);

// Why the kernel `policy` forces (sdpa-flash, sdpa-mem-efficient) cannot run `site` (the same
// checks as under auto: an explicit mask for flash, the compute capability, the dtype, the head
// dims, ...); "" when it can, or nothing is forced. A call whose op returns its scores runs the
// math composite and is never refused.
std::string ForcedRefusal(const AttentionPolicy& policy, const AttentionSite& site);

// What `kernel` keeps for backward (policy above); empty unless site.training.
std::vector<SavedTensor> AttentionKernelSaved(AttentionKernel kernel, const AttentionSite& site);

// What `kernel` allocates and frees within the call beyond its outputs and what it keeps.
uint64_t AttentionKernelWorkspace(AttentionKernel kernel, const AttentionSite& site);

// What `kernel`'s backward allocates beyond the gradients of the call's inputs and outputs, held
// while the input gradients are made (0 unless site.training).
uint64_t AttentionKernelBackwardWorkspace(AttentionKernel kernel, const AttentionSite& site);

// The call of fused attention op `ctx.node` (its rule's attention_site): the one the caller chose
// (ctx.attention), else the one a default policy (eager: math) gives, with autograd recording when
// an input requires grad. nullopt when the node's rule is not an attention op.
std::optional<AttentionCall> AttentionCallOf(const RuleContext& ctx);

}  // namespace memest::ops

#endif  // MEMEST_OPS_ATTENTION_H_
