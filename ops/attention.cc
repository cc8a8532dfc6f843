// ops/attention.cc -- see ops/attention.h for the policy and its sources.
#include "ops/attention.h"

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/checked.h"

namespace memest::ops {
namespace {

// Compute capability (major, minor) within [lo, hi], inclusive.
bool SmIn(const AttentionPolicy& p, int lo_major, int lo_minor, int hi_major, int hi_minor) {
  const int sm = p.sm_major * 10 + p.sm_minor;
  return sm >= lo_major * 10 + lo_minor && sm <= hi_major * 10 + hi_minor;
}

std::string Sm(const AttentionPolicy& p) {
  return std::to_string(p.sm_major) + "." + std::to_string(p.sm_minor);
}

// Why neither fused kernel can run a call whose k/v broadcast over the query heads
// (check_batch_size_and_num_heads_dense); "" when they do not.
std::string BroadcastRefusal(const AttentionSite& s) {
  if (!s.broadcast_kv) return "";
  return "k/v broadcast over the query heads without enable_gqa: the fused kernels take as many "
         "k/v heads as query heads";
}

// Why flash cannot run the call (sdp_utils.cpp, can_use_flash_attention); "" when it can.
std::string FlashRefusal(const AttentionPolicy& p, const AttentionSite& s) {
  if (!s.masks.empty())
    return "an explicit attention mask ('" + std::string(s.masks[0].what) + "'): flash takes none";
  if (std::string b = BroadcastRefusal(s); !b.empty()) return b;
  if (!SmIn(p, 8, 0, 12, 1)) return "compute capability " + Sm(p) + ": flash needs 8.0 to 12.1";
  if (s.elem != 2) return "fp32 inputs: flash runs fp16/bf16 only";
  if (!s.known) return "";  // dims unknown: assume they fit
  if (s.head_dim != s.v_head_dim || s.head_dim > 256) {
    return "head dims " + std::to_string(s.head_dim) + "/" + std::to_string(s.v_head_dim) +
           ": flash needs them equal and <= 256";
  }
  const bool sm8x = SmIn(p, 8, 6, 8, 9) || SmIn(p, 12, 0, 12, 1);
  if (s.training && sm8x && !(s.head_dim <= 192 || (s.dropout == 0 && s.head_dim > 224))) {
    return "training with head dim " + std::to_string(s.head_dim) + " on sm " + Sm(p) +
           ": flash's backward takes <= 192 there";
  }
  if (s.causal && s.q_len > 1 && s.q_len != s.kv_len) {
    return "is_causal with " + std::to_string(s.q_len) + " queries and " +
           std::to_string(s.kv_len) + " keys: flash needs them equal";
  }
  return "";
}

// Why the memory-efficient kernel cannot run the call (can_use_mem_efficient_attention); "" when
// it can.
std::string MemEfficientRefusal(const AttentionPolicy& p, const AttentionSite& s) {
  if (!SmIn(p, 5, 0, 12, 1)) {
    return "compute capability " + Sm(p) + ": memory-efficient needs 5.0 to 12.1";
  }
  if (s.elem != 2 && s.elem != 4) return "fp64 inputs: memory-efficient runs fp16/bf16/fp32";
  if (s.bf16 && p.sm_major < 8) return "bf16 on sm " + Sm(p) + ": memory-efficient needs 8.0";
  if (std::string b = BroadcastRefusal(s); !b.empty()) return b;
  if (s.grouped_kv && s.masks.empty()) {
    return "grouped k/v passed with enable_gqa: memory-efficient takes as many k/v heads as query "
           "heads";
  }
  if (!s.known) return "";
  // minimum_gemm_alignment: tensor cores on sm >= 8.0, and on 7.x for half.
  uint64_t align = 1;
  if (p.sm_major >= 8) align = s.elem == 2 ? 8 : 4;
  if (p.sm_major == 7 && s.elem == 2) align = 8;
  if (s.head_dim % align != 0 || s.v_head_dim % align != 0) {
    return "head dims " + std::to_string(s.head_dim) + "/" + std::to_string(s.v_head_dim) +
           ": memory-efficient needs multiples of " + std::to_string(align);
  }
  return "";
}

// Checked products of the site's dims; nullopt when the site is unknown or on overflow.
std::optional<uint64_t> Product(const AttentionSite& s, std::initializer_list<uint64_t> dims) {
  if (!s.known) return std::nullopt;
  uint64_t n = 1;
  for (uint64_t d : dims) {
    auto m = base::CheckedMul(n, d);
    if (!m) return std::nullopt;
    n = *m;
  }
  return n;
}

std::optional<uint64_t> Times(std::optional<uint64_t> a, uint64_t b) {
  if (!a) return std::nullopt;
  return base::CheckedMul(*a, b);
}

uint64_t OrZero(std::optional<uint64_t> v) { return v.value_or(0); }

// `what` is a string literal (SavedTensor::what).
void Value(std::vector<SavedTensor>* out, int id, std::string_view what) {
  out->push_back(SavedTensor{id, 0, what});
}
void Extra(std::vector<SavedTensor>* out, std::optional<uint64_t> bytes, std::string_view what) {
  if (bytes) out->push_back(SavedTensor{-1, *bytes, what});
}
// A graph value when the graph holds the tensor, else an extra of `bytes`.
void ValueOrExtra(std::vector<SavedTensor>* out, int id, std::optional<uint64_t> bytes,
                  std::string_view what) {
  if (id >= 0) {
    Value(out, id, what);
  } else {
    Extra(out, bytes, what);
  }
}

// The sizes every kernel reads, in elements.
struct Sizes {
  std::optional<uint64_t> q, k, v, out, k_rep, v_rep, probs, rows;
};
Sizes SizesOf(const AttentionSite& s) {
  Sizes z;
  z.q = Product(s, {s.batch, s.q_heads, s.q_len, s.head_dim});
  z.k = Product(s, {s.batch, s.kv_heads, s.kv_len, s.head_dim});
  z.v = Product(s, {s.batch, s.kv_heads, s.kv_len, s.v_head_dim});
  z.out = Product(s, {s.batch, s.q_heads, s.q_len, s.v_head_dim});
  z.k_rep = Product(s, {s.batch, s.q_heads, s.kv_len, s.head_dim});
  z.v_rep = Product(s, {s.batch, s.q_heads, s.kv_len, s.v_head_dim});
  z.probs = Product(s, {s.batch, s.q_heads, s.q_len, s.kv_len});
  z.rows = Product(s, {s.batch, s.q_heads, s.q_len});
  return z;
}

// Whether the math composite repeats k and v to the query heads (grouped heads passed with
// enable_gqa: repeat_interleave); broadcast k/v are read as they are.
bool Repeated(const AttentionSite& s) { return s.q_heads != s.kv_heads && !s.broadcast_kv; }

// The math composite's accumulation type: fp32 for fp16/bf16 inputs.
uint64_t AccBytes(const AttentionSite& s) { return s.elem == 2 ? 4 : s.elem; }

// The memory-efficient kernel's copy of mask `m` (converted to q's dtype, its last dim padded to
// a multiple of 8), or nullopt when it takes the graph value as it is (or its size is unknown).
std::optional<uint64_t> MaskCopyBytes(const AttentionSite& s, const AttentionMask& m) {
  if (m.numel == 0 || m.last == 0) return std::nullopt;
  const bool padded = m.last % 8 != 0;
  if (!m.boolean && !padded) return std::nullopt;
  const uint64_t last = (m.last + 7) / 8 * 8;
  return Times(base::CheckedMul(m.numel / m.last, last), s.elem);
}

constexpr uint64_t kAlignLse = 32;  // attention.cu kAlignLSE

}  // namespace

const char* ToString(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::kMath:
      return "math";
    case AttentionKernel::kFlash:
      return "flash";
    case AttentionKernel::kMemEfficient:
      return "memory-efficient";
  }
  return "?";
}

AttentionKernel ChooseAttentionKernel(const AttentionPolicy& p, const AttentionSite& s,
                                      std::string* reason) {
  std::string why;
  AttentionKernel k = AttentionKernel::kMath;
  if (s.scores_output) {
    if (reason != nullptr) {
      *reason = "the op returns the attention scores: only the math composite materializes them";
    }
    return k;
  }
  switch (p.requested) {
    case Attention::kEager:
      why = "--attention eager: the math composite";
      break;
    case Attention::kSdpaMath:
      why = "--attention sdpa-math";
      break;
    case Attention::kSdpaFlash:
      k = AttentionKernel::kFlash;
      why = "--attention sdpa-flash";
      break;
    case Attention::kSdpaMemEfficient:
      k = AttentionKernel::kMemEfficient;
      why = "--attention sdpa-mem-efficient";
      break;
    case Attention::kAuto: {
      const std::string flash = FlashRefusal(p, s);
      if (flash.empty()) {
        k = AttentionKernel::kFlash;
        why = std::string(s.bf16 ? "bf16" : "fp16") + " on sm " + Sm(p) + ", no explicit mask";
        break;
      }
      const std::string me = MemEfficientRefusal(p, s);
      if (me.empty()) {
        k = AttentionKernel::kMemEfficient;
        why = "not flash: " + flash;
        break;
      }
      why = "not flash: " + flash + "; not memory-efficient: " + me;
      break;
    }
  }
  if (reason != nullptr) *reason = std::move(why);
  return k;
}

std::string ForcedRefusal(const AttentionPolicy& p, const AttentionSite& s) {
  if (s.scores_output) return "";
  if (p.requested == Attention::kSdpaFlash) return FlashRefusal(p, s);
  if (p.requested == Attention::kSdpaMemEfficient) return MemEfficientRefusal(p, s);
  return "";
}

std::vector<SavedTensor> AttentionKernelSaved(AttentionKernel kernel, const AttentionSite& s) {
  std::vector<SavedTensor> out;
  if (!s.training) return out;
  const Sizes z = SizesOf(s);
  switch (kernel) {
    case AttentionKernel::kMath: {
      const uint64_t acc = AccBytes(s);
      const bool repeated = Repeated(s);
      Extra(&out, Times(z.q, acc), "q*sqrt(scale)");
      Extra(&out, Times(repeated ? z.k_rep : z.k, acc), "k^T*sqrt(scale)");
      if (s.v >= 0 && s.elem != 2 && !repeated) {
        Value(&out, s.v, "v");
      } else {
        Extra(&out, Times(repeated ? z.v_rep : z.v, acc), s.elem == 2 ? "v(fp32)" : "v");
      }
      Extra(&out, Times(z.probs, acc), "probs");
      if (s.dropout > 0) {
        Extra(&out, z.probs, "dropout mask(bool)");
        Extra(&out, Times(z.probs, acc), "dropped probs");
      }
      break;
    }
    case AttentionKernel::kFlash:
      ValueOrExtra(&out, s.q, Times(z.q, s.elem), "q");
      ValueOrExtra(&out, s.k, Times(z.k, s.elem), "k");
      ValueOrExtra(&out, s.v, Times(z.v, s.elem), "v");
      ValueOrExtra(&out, s.out, Times(z.out, s.elem), "out");
      for (const AttentionMask& m : s.masks) Value(&out, m.value, m.what);  // forced flash only
      if (s.known) {
        Extra(&out, 16, "rng_state(uint64[2])");
        Extra(&out, 8, "philox_offset(uint64)");
      }
      Extra(&out, Times(z.rows, 4), "logsumexp(fp32)");
      break;
    case AttentionKernel::kMemEfficient: {
      ValueOrExtra(&out, s.q, Times(z.q, s.elem), "q");
      ValueOrExtra(&out, s.k, Times(z.k, s.elem), "k");
      ValueOrExtra(&out, s.v, Times(z.v, s.elem), "v");
      ValueOrExtra(&out, s.out, Times(z.out, s.elem), "out");
      for (const AttentionMask& m : s.masks) {
        const std::optional<uint64_t> copy = MaskCopyBytes(s, m);
        if (copy) {
          Extra(&out, copy, m.what);
        } else {
          Value(&out, m.value, m.what);
        }
      }
      if (s.known && s.dropout == 0) {
        Extra(&out, 8, "philox_seed(int64)");
        Extra(&out, 8, "philox_offset(int64)");
      }
      const std::optional<uint64_t> rows =
          Product(s, {s.batch, s.q_heads, (s.q_len + kAlignLse - 1) / kAlignLse * kAlignLse});
      Extra(&out, Times(rows, 4), "logsumexp(fp32)");
      break;
    }
  }
  return out;
}

uint64_t AttentionKernelWorkspace(AttentionKernel kernel, const AttentionSite& s) {
  if (!s.known) return 0;
  const Sizes z = SizesOf(s);
  uint64_t total = 0;
  auto add = [&](std::optional<uint64_t> bytes) { total = base::SatAdd(total, OrZero(bytes)); };
  switch (kernel) {
    case AttentionKernel::kMath: {
      const uint64_t acc = AccBytes(s);
      const bool half = s.elem == 2;
      const bool grouped = Repeated(s);
      add(Times(z.probs, acc));  // the scores, before the softmax
      add(z.probs);              // _safe_softmax's scores.eq(-inf), bool, beside both
      if (half) {                // q.to(float), k.to(float): alive to the end of the call
        add(Times(z.q, 4));
        add(Times(z.k, 4));
      }
      if (grouped) add(Times(z.k_rep, acc));  // k repeated to Hq heads
      if (!s.training) {                      // what autograd would have kept is a temporary too
        add(Times(z.probs, acc));
        add(Times(z.q, acc));
        if (half) add(Times(z.v, 4));
        if (grouped) add(Times(z.v_rep, acc));
      }
      break;
    }
    case AttentionKernel::kFlash:
      if (!s.training) {
        add(Times(z.rows, 4));
        add(24);
      }
      break;
    case AttentionKernel::kMemEfficient:
      if (!s.training) {
        if (s.dropout == 0) add(16);
        for (const AttentionMask& m : s.masks) add(MaskCopyBytes(s, m));
      }
      break;
  }
  return total;
}

uint64_t AttentionKernelBackwardWorkspace(AttentionKernel kernel, const AttentionSite& s) {
  if (!s.known || !s.training) return 0;
  const Sizes z = SizesOf(s);
  auto round = [](uint64_t n, uint64_t m) { return (n + m - 1) / m * m; };
  uint64_t total = 0;
  auto add = [&](std::optional<uint64_t> bytes) { total = base::SatAdd(total, OrZero(bytes)); };
  switch (kernel) {
    case AttentionKernel::kMath:
      add(Times(z.probs, 2 * AccBytes(s)));  // grad of the probabilities, grad of the scores
      break;
    case AttentionKernel::kFlash: {
      const uint64_t l128 = round(s.q_len, 128);
      const uint64_t d32 = s.head_dim <= 192 ? round(s.head_dim, 32) : 256;
      add(Times(Product(s, {s.batch, s.q_heads, l128}), 4));       // softmax_d
      add(Times(Product(s, {s.batch, l128, s.q_heads, d32}), 4));  // dq_accum
      if (s.q_heads != s.kv_heads) {                               // dk, dv expanded
        add(Times(z.k_rep, s.elem));
        add(Times(z.v_rep, s.elem));
      }
      break;
    }
    case AttentionKernel::kMemEfficient:
      add(Times(z.rows, 4));  // delta
      break;
  }
  return total;
}

std::optional<AttentionCall> AttentionCallOf(const RuleContext& ctx) {
  const OpRule* rule = RuleOf(ctx.node);
  if (rule == nullptr || rule->attention_site == nullptr) return std::nullopt;
  if (ctx.attention != nullptr) return *ctx.attention;
  AttentionCall call;
  rule->attention_site(ctx, &call.site);
  call.site.training = std::any_of(ctx.node.inputs.begin(), ctx.node.inputs.end(), [&](int id) {
    return id >= 0 && static_cast<size_t>(id) < ctx.requires_grad.size() &&
           ctx.requires_grad[static_cast<size_t>(id)];
  });
  call.kernel = ChooseAttentionKernel(AttentionPolicy{}, call.site, &call.reason);
  return call;
}

}  // namespace memest::ops
