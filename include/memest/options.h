// memest/options.h -- the one options struct every backend takes.
//
// Every field has a documented default, and DescribeOptions() returns those defaults as text so
// the CLI's --help prints them from this struct (never from a second copy).
// Options is a plain value: copy it freely; what it points to (a custom GPU or stack, a prefill
// model) is shared and immutable.
#ifndef MEMEST_OPTIONS_H_
#define MEMEST_OPTIONS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memest/gpu_profile.h"
#include "memest/status.h"

namespace memest {

class Model;  // memest/model.h

enum class Mode { kTrain, kInfer };
// kAdam8bit / kAdamW8bit: bitsandbytes' bnb.optim.Adam8bit / AdamW8bit (block-wise 8-bit state,
// memory/optimizer.h).
enum class Optimizer { kSgd, kMomentum, kAdam, kAdamW, kAdam8bit, kAdamW8bit };
// How torch.optim runs the step (docs/memory-model.md §4.3). kForeach: the default for
// CUDA parameters (a parameter-sized temporary list). kSingleTensor: foreach=False, the per-
// parameter loop (temporaries the size of one parameter; the default for CPU parameters).
// kFused: fused=True, one kernel (no parameter-sized temporaries; Adam/AdamW on CUDA).
enum class OptimizerImpl { kForeach, kSingleTensor, kFused };
// kFp32: everything fp32. kAmpFp16/kAmpBf16: torch.autocast with fp32 master weights.
// kBf16: the whole model cast to bf16 (weights, grads and optimizer state in bf16).
enum class Precision { kFp32, kAmpFp16, kAmpBf16, kBf16 };
// Loss applied to the model's first output in training. kAuto: cross-entropy when that output
// has rank 2 (logits [N, C]), mean-squared error otherwise.
enum class Loss { kAuto, kCrossEntropy, kMse };

// How the model's attention runs (docs/memory-model.md §3.5; ops/attention.h states the policy).
// kEager: as the graph is written (MatMul, Softmax, MatMul: the L x S attention matrix is saved);
// a fused attention op (ONNX Attention, com.microsoft Attention/MultiHeadAttention/
// GroupQueryAttention) as the math composite. kSdpaMath: F.scaled_dot_product_attention with the
// math backend, the same computation. kSdpaFlash / kSdpaMemEfficient: that fused kernel, forced
// (a call it cannot run is refused). kAuto: PyTorch's own choice per call
// (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp); an `attention_kernel` diagnostic says
// which kernel each call got and why.
enum class Attention { kEager, kSdpaMath, kSdpaFlash, kSdpaMemEfficient, kAuto };

// How the parameters that do not train are stored (memory/weight_storage.h): the frozen ones in
// training, all of them in inference. kAuto: as `precision` says. kFp16 / kBf16: the base model
// loaded in half precision (model.half(), torch_dtype=bfloat16). kInt8: bitsandbytes LLM.int8
// (Linear8bitLt); kNf4: bitsandbytes 4-bit NormalFloat (Linear4bit, QLoRA); kNf4DoubleQuant: nf4
// with its block scales quantized again (bnb_4bit_use_double_quant).
enum class WeightDtype { kAuto, kFp16, kBf16, kInt8, kNf4, kNf4DoubleQuant };

// How an exported decoder's key/value cache is stored (memory/kv_cache.h): its past_key_values.*
// inputs and present.* outputs. kAuto: as `precision` says. kFp16 / kBf16: 2 bytes per element;
// kFp8 (vLLM's fp8_e4m3 / fp8_e5m2 kv_cache_dtype) and kInt8: 1 byte.
enum class KvCacheDtype { kAuto, kFp16, kBf16, kFp8, kInt8 };

// Which device-level figure decides "fits" (CheckFit, FindMaxBatch, the CLI's exit code).
// kUpper: the top of the estimate's interval (device_high) when it has one, else the point
// estimate; kPoint: always the point estimate (peak_device).
enum class FitOn { kPoint, kUpper };
struct FitPolicy {
  FitOn on = FitOn::kUpper;
  // Kept free on top of the estimate: a share of the GPU's usable memory (0.05 = 5 %) plus a
  // number of bytes. A job fits when judged peak + margin <= usable memory; under
  // AllocatorSettings::memory_fraction the margin on the limit is kept free within it too.
  double margin_fraction = 0.0;
  uint64_t margin_bytes = 0;

  // The margin on a GPU with `capacity` usable bytes: margin_fraction (clamped to [0, 1]) of it
  // plus margin_bytes, saturating.
  [[nodiscard]] uint64_t MarginBytes(uint64_t capacity) const;
};
struct StackProfile;  // memest/stack.h

// PyTorch CUDA caching allocator settings (PYTORCH_CUDA_ALLOC_CONF), see
// docs/memory-model.md §1.2. Defaults are PyTorch's defaults.
struct AllocatorSettings {
  bool expandable_segments = false;        // expandable_segments:True
  std::optional<uint64_t> max_split_size;  // max_split_size_mb (unset = unlimited)
  uint32_t roundup_power2_divisions = 0;   // roundup_power2_divisions (0 = off)
  // torch.cuda.set_per_process_memory_fraction(f), f in (0, 1]: the allocator may reserve at most
  // f x the GPU's total memory (memory-model.md §1.5); a cudaMalloc past it fails, and the
  // allocator frees its cached segments and retries before it raises OutOfMemoryError. Unset:
  // no such limit.
  std::optional<double> memory_fraction;

  // What memory_fraction lets the allocator reserve on a GPU of `total_memory` bytes: the
  // fraction of it, rounded down as setMemoryFraction does (c10/cuda/CUDACachingAllocator.cpp:
  // allowed_memory_maximum = size_t(fraction x total)); nullopt when unset.
  [[nodiscard]] std::optional<uint64_t> ReservedLimit(uint64_t total_memory) const;
};

// How data-parallel replicas hold the model states (memory/parallel.h, docs/memory-model.md §9).
// kNone: DDP (every replica holds everything; gradients reduced through buckets).
// kZero1/2/3: DeepSpeed ZeRO stages (optimizer state; + gradients; + parameters partitioned over
// the data-parallel ranks), DeepSpeed's mixed-precision layout. kFsdpFull / kFsdpGradOp /
// kFsdpHybrid / kFsdpNoShard: PyTorch FSDP2's fully_shard with reshard_after_forward True /
// False, sharded within a node and replicated across nodes, or not sharded.
enum class Sharding {
  kNone,
  kZero1,
  kZero2,
  kZero3,
  kFsdpFull,
  kFsdpGradOp,
  kFsdpHybrid,
  kFsdpNoShard
};

// DeepSpeed ZeRO, any stage.
constexpr bool IsZero(Sharding s) {
  return s == Sharding::kZero1 || s == Sharding::kZero2 || s == Sharding::kZero3;
}
// Whether parameters are sharded and gathered unit by unit during forward and backward (ZeRO-3,
// FSDP but no-shard).
constexpr bool GathersUnits(Sharding s) {
  return s == Sharding::kZero3 || s == Sharding::kFsdpFull || s == Sharding::kFsdpGradOp ||
         s == Sharding::kFsdpHybrid;
}

// Many GPUs: the ranks of one job and how the model is split over them (memory/parallel.h).
// Ranks are numbered as Megatron-LM does: tensor-parallel fastest, then data-parallel, then the
// pipeline stage (rank = stage * dp * tp + dp_rank * tp + tp_rank). `Options::batch` is the batch
// of one data-parallel replica (per GPU), and `Options::micro_batches` splits it into the
// pipeline's micro-batches. An estimate under parallelism is the worst rank's; Estimate::ranks
// lists every group of ranks that holds the same memory.
struct Parallelism {
  int64_t world_size = 1;  // product of the degrees below
  int64_t dp = 0;          // data-parallel degree; 0: world_size / (tp * pp)
  int64_t tp = 1;          // tensor-parallel degree (Megatron column/row splits)
  int64_t pp = 1;          // pipeline stages (1F1B schedule)
  Sharding sharding = Sharding::kNone;
  // Megatron sequence parallelism: the activations outside the tensor-parallel regions
  // (LayerNorm, dropout, residual) are split over the tp ranks along the sequence too.
  bool sequence_parallel = false;
  // FSDP wrap unit: POSIX extended regular expression; the text it matches in a parameter's name
  // names the unit (e.g. "layers\.[0-9]+"). Empty: the graph's repeated blocks.
  std::string fsdp_unit;
  int64_t gpus_per_node = 8;  // FSDP hybrid shards within a node (of this many GPUs)
  // Offload to host memory (DeepSpeed offload_optimizer / offload_param, FSDP CPUOffload): the
  // optimizer state and fp32 master weights; the parameters (ZeRO-3 and FSDP only).
  bool offload_optimizer = false;
  bool offload_params = false;
  // DDP (sharding kNone, dp > 1): DistributedDataParallel(bucket_cap_mb, gradient_as_bucket_view).
  double bucket_cap_mb = 25.0;
  bool gradient_as_bucket_view = false;
  // NCCL's buffers, outside the caching allocator (memory/parallel.h): per communicator and
  // channel, three connections' buffers of the Simple protocol (NCCL_BUFFSIZE, NCCL's default
  // 4 MiB) and the LL and LL128 protocols. 32 channels: what NCCL opens between H100s over NVLink.
  uint64_t nccl_buffsize = uint64_t{4} << 20;
  int64_t nccl_channels = 32;
  // ZeRO-3: DeepSpeed's sub_group_size (elements of one optimizer step's fp32 gradient buffer).
  uint64_t zero_sub_group_size = 1000000000;

  // Whether any of this describes more than one GPU (world_size > 1).
  bool enabled() const { return world_size > 1; }
  // The data-parallel degree dp resolves to.
  int64_t DataParallel() const { return dp > 0 ? dp : (tp * pp > 0 ? world_size / (tp * pp) : 0); }
};

// A decode step's past filled by a prefill in the same process just before it (Options::prefill;
// the symbolic backend, docs/memory-model.md §10.2): the prefill runs on the same caching
// allocator, its key/value outputs stay as the step's past, everything else it allocated is
// freed (its segments stay reserved unless `cache_emptied`), the peaks are reset
// (torch.cuda.reset_peak_memory_stats), then the step runs once. The estimate is that step's.
struct DecodePrefill {
  // The prefill graph: the model's forward over the cached tokens, its dim `seq_dim` bound to the
  // step's `past_dim` (its other dims and the batch as the step's). Its outputs present.<i>.key /
  // .value become the step's past_key_values.<i>.key / .value inputs, and its parameters, found by
  // name, are the step's. Never null in a valid Options.
  std::shared_ptr<const Model> model;
  std::string seq_dim = "seq";
  std::string past_dim = "past";
  // torch.cuda.empty_cache() between the prefill and the step: the segments that hold none of the
  // cache are released, those that hold some stay (what the measured rows of
  // datasets/h100-lm-torch211 did). false: transformers' generate(), which empties nothing.
  bool cache_emptied = false;
  // Written out: this header builds as C++17 too (no defaulted comparisons).
  friend bool operator==(const DecodePrefill& a, const DecodePrefill& b) {
    return a.model == b.model && a.seq_dim == b.seq_dim && a.past_dim == b.past_dim &&
           a.cache_emptied == b.cache_emptied;
  }
};

struct Options {
  // train: one training step (forward, loss, backward, optimizer step), steady state.
  // infer: one forward pass under no_grad.
  Mode mode = Mode::kTrain;
  // Binds the leading symbolic dim of every data input (graph input that is not an initializer).
  // Unset: the model must have no symbolic batch dim, or bind it through `dims`.
  std::optional<int64_t> batch;
  // Binds any named symbolic dim (dim_param), e.g. {"seq", 512}. Wins over `batch` for that name.
  std::map<std::string, int64_t> dims;
  Optimizer optimizer = Optimizer::kAdam;
  OptimizerImpl optimizer_impl = OptimizerImpl::kForeach;
  // Weight decay. With kAdam/kSgd/kMomentum it is L2 (adds a gradient-sized temporary in the
  // foreach step); with kAdamW it is decoupled (in place).
  double weight_decay = 0.0;
  Precision precision = Precision::kFp32;
  Loss loss = Loss::kAuto;
  // GPU profile name (see GpuProfiles() in memest/gpu_profile.h); decides context size, workspaces
  // and capacity.
  std::string gpu = "h100-80gb";
  // A GPU given whole (LoadGpuProfiles(), WithCapacity()); wins over `gpu`. ResolveGpuProfile()
  // is the one lookup every part of memest uses.
  std::shared_ptr<const GpuProfile> custom_gpu;
  // Software-stack profile name (see StackProfiles() in memest/stack.h): CUDA context, library
  // memory, convolution workspaces and the residual band. Empty: the default stack (the first,
  // pytorch2-lazy).
  std::string stack;
  // A stack given whole (a file `memest calibrate` wrote, LoadStackProfile()); wins over `stack`.
  std::shared_ptr<const StackProfile> custom_stack;
  FitPolicy fit;
  AllocatorSettings allocator;
  // Gradient accumulation: `batch` is split into this many equal micro-batches, each run forward
  // and backward before one optimizer step (gradients add into .grad in place). batch must be
  // divisible by it. 1 = no accumulation.
  int64_t micro_batches = 1;
  // Activation checkpointing as torch.utils.checkpoint.checkpoint_sequential(..., segments) with
  // the reentrant implementation: the forward node order is cut into this many segments (see
  // core/checkpoint.h for where the cuts go); every segment but the last runs forward without
  // saving anything except its inputs, and is run again with grad enabled when backward reaches
  // it. 0 or 1 = no checkpointing.
  int64_t checkpoint_segments = 0;
  // Activation checkpointing of every repeated block (core/blocks.h), as transformers'
  // gradient_checkpointing_enable wraps each decoder layer in torch.utils.checkpoint: the nodes of
  // every block (the last one too) save nothing in the forward but the block's inputs, and run
  // again when backward reaches the block; nodes outside the blocks (embedding, final norm, head,
  // loss) save as usual. Not with checkpoint_segments > 1; a graph without repeated blocks, or
  // whose blocks interleave in the node order, is refused.
  bool checkpoint_blocks = false;
  // Training: whether the loop holds the model's outputs until backward has run. true (the
  // conservative reading): `logits = model(x).logits; loss = f(logits, y); loss.backward()`.
  // false: the outputs are dropped once the loss is computed (`loss = f(model(x).logits, y)`;
  // transformers' Trainer, whose compute_loss returns the loss alone), so an output that no node
  // saved for backward is freed after the loss's forward. Modelled by the analytical and symbolic
  // backends.
  bool outputs_held = true;
  // Count the GPU libraries' workspaces (cuBLAS, memory-model.md §2.3) in the estimate. false
  // models a run without them: the CPU measurement harness (tensor level), which memest-eval
  // compares with.
  bool library_workspaces = true;
  // Exported chains of elementary ops that PyTorch runs as one fused kernel (decomposed LayerNorm,
  // GroupNorm, GELU, SiLU and Mish, ops/fusion.h) are costed as that kernel. false: op by op as
  // written, which is what the measurement harness executes (memest-eval compares it so).
  bool fused_kernels = true;
  // A ReLU whose input is a convolution's or a batch norm's output, read by nothing else, runs in
  // place (torchvision's and timm's nn.ReLU(inplace=True) after Conv2d / BatchNorm2d): its output
  // is its input's storage, no new tensor. relu_ keeps its result for backward, as relu does, so
  // the bytes autograd keeps are the same either way; what changes is which blocks the allocator
  // is asked for (memory-model.md §3.6). false: out of place, as the graph is written (what the
  // measurement harness executes). Analytical and symbolic backends, and the learned one through
  // its symbolic features.
  bool inplace_relu = true;
  Attention attention = Attention::kEager;
  // Which parameters train (fine-tuning, frozen layers): POSIX extended regular expressions
  // (grep -E, at most 256 characters) searched in each initializer's name. A parameter trains when
  // `trainable` is empty or matches it, and `freeze` is empty or does not match it. A frozen
  // parameter gets no gradient and no optimizer state, and autograd keeps only what the trainable
  // ones' gradients need (memory/trainable.h). Training only.
  std::string trainable;
  std::string freeze;
  // Storage of the parameters that do not train (see WeightDtype; memory/weight_storage.h). With
  // kFp16/kBf16 the compute must be half precision too (precision amp-fp16 / amp-bf16 or bf16);
  // in training something must be frozen, or no parameter is affected (an error, never a no-op).
  WeightDtype weight_dtype = WeightDtype::kAuto;
  // Storage of the graph's key/value cache (inference; memory/kv_cache.h). A graph without one is
  // an error when this is not kAuto or `paged_kv_cache` is set (never a no-op).
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kAuto;
  // The cache is a pool allocated once (vLLM's paged KV cache blocks, sized by EstimateServing,
  // memest/serving.h): the graph's past inputs and present outputs are views into it and take
  // no memory of their own in the estimate.
  bool paged_kv_cache = false;
  // Inference on a decode graph (a past KV cache the step releases, memory/kv_cache.h): the
  // prefill that filled its past ran just before it, on the same allocator (DecodePrefill).
  // Unset: the step on an allocator that has run nothing before it (a warning says so).
  std::optional<DecodePrefill> prefill;
  // An estimate that rests on tensors whose shape no rule can infer (data-dependent sizes:
  // NonZero, Range over computed bounds, string ops; sequence values) is refused with
  // Unsupported naming the ops. true: estimate anyway, counting those tensors conservatively
  // (sized like the largest tensor their node touches) with an `unknown_shapes` warning.
  bool allow_unknown_shapes = false;
  // Many GPUs (training): see Parallelism. Default: one GPU.
  Parallelism parallel;
};

// Parsers/printers for the enum vocabulary, shared by the CLI and JSON output.
Result<Mode> ParseMode(std::string_view s);
Result<Optimizer> ParseOptimizer(std::string_view s);
Result<OptimizerImpl> ParseOptimizerImpl(std::string_view s);  // foreach | single-tensor | fused
Result<Precision> ParsePrecision(std::string_view s);
Result<Loss> ParseLoss(std::string_view s);
Result<FitOn> ParseFitOn(std::string_view s);  // point | upper
// eager | sdpa-math | sdpa-flash | sdpa-mem-efficient | auto
Result<Attention> ParseAttention(std::string_view s);
Result<WeightDtype> ParseWeightDtype(
    std::string_view s);  // auto | fp16 | bf16 | int8 | nf4 | nf4-dq
Result<KvCacheDtype> ParseKvCacheDtype(std::string_view s);  // auto | fp16 | bf16 | fp8 | int8
const char* ToString(Mode m);
const char* ToString(Optimizer o);
const char* ToString(OptimizerImpl i);
const char* ToString(Precision p);
const char* ToString(Loss l);
const char* ToString(FitOn f);
const char* ToString(Attention a);
const char* ToString(WeightDtype w);
const char* ToString(KvCacheDtype k);
// none | zero1 | zero2 | zero3 | fsdp-full | fsdp-grad-op | fsdp-hybrid | fsdp-no-shard
Result<Sharding> ParseSharding(std::string_view s);
const char* ToString(Sharding s);

// The GPU profile `options` name: custom_gpu when set, else FindGpuProfile(options.gpu).
[[nodiscard]] Result<GpuProfile> ResolveGpuProfile(const Options& options);

// Checks values (batch >= 1, dims >= 0, weight_decay >= 0 and finite, ...).
Status Validate(const Options& options);

// One line per option: name, default value (taken from a default-constructed Options), meaning.
struct OptionDoc {
  std::string name;
  std::string default_value;
  std::string help;
};
std::vector<OptionDoc> DescribeOptions();

}  // namespace memest

#endif  // MEMEST_OPTIONS_H_
