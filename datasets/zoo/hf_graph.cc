// datasets/zoo/hf_graph.cc -- config field readers and graph helpers shared by the Hugging Face
// builders (hf_internal.h has the policy).
//
// Graph conventions (besides graph_writer.h's): every size that depends on the input is computed
// from Shape() of an input, never written as a constant; Reshape targets use 0 (copy the dim)
// and -1 (infer it) for the batch and sequence dims, so one graph binds at every batch, seq and
// past. Float constants are scalars (rank 0), which memest's loader never counts as parameters.
#include <cmath>
#include <limits>
#include <sstream>
#include <utility>

#include "datasets/zoo/hf_internal.h"
#include "datasets/zoo/layers.h"

namespace memest::zoo::hf {
namespace {

std::string Show(const nlohmann::json& v) {
  std::string s = v.dump();
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// ConfigReader

const nlohmann::json* ConfigReader::Find(std::initializer_list<const char*> keys,
                                         std::string* key) const {
  for (const char* k : keys) {
    auto it = j_.find(k);
    if (it != j_.end() && !it->is_null()) {
      *key = k;
      return &*it;
    }
  }
  *key = *keys.begin();
  return nullptr;
}

bool ConfigReader::Has(const char* key) const {
  auto it = j_.find(key);
  return it != j_.end() && !it->is_null();
}

Status ConfigReader::Error(const std::string& key, const std::string& what) const {
  return InvalidModel(source_ + ": '" + key + "' " + what + " (" + type_ + ")");
}

Status ConfigReader::Plain(const std::string& what) const {
  return InvalidModel(source_ + ": " + what + " (" + type_ + ")");
}

Result<int64_t> ConfigReader::AsInt(const nlohmann::json& v, const std::string& key, int64_t min,
                                    int64_t max) const {
  int64_t n = 0;
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() &&
        v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Error(key, "= " + Show(v) + " exceeds the limit " + std::to_string(max));
    }
    n = v.get<int64_t>();
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e15) {
      return Error(key, "= " + Show(v) + " must be an integer");
    }
    n = static_cast<int64_t>(d);
  } else {
    return Error(key, "= " + Show(v) + " must be an integer");
  }
  if (n < min) {
    return Error(key, "= " + std::to_string(n) + " must be at least " + std::to_string(min));
  }
  if (n > max) {
    return Error(key, "= " + std::to_string(n) + " exceeds the limit " + std::to_string(max));
  }
  return n;
}

Result<int64_t> ConfigReader::Int(std::initializer_list<const char*> keys, int64_t min,
                                  int64_t max) const {
  std::string key;
  const nlohmann::json* v = Find(keys, &key);
  if (v == nullptr) return Plain("missing '" + key + "'");
  return AsInt(*v, key, min, max);
}

Result<int64_t> ConfigReader::IntOr(std::initializer_list<const char*> keys, int64_t fallback,
                                    int64_t min, int64_t max) const {
  std::string key;
  const nlohmann::json* v = Find(keys, &key);
  if (v == nullptr) return fallback;
  return AsInt(*v, key, min, max);
}

Result<double> ConfigReader::NumberOr(std::initializer_list<const char*> keys, double fallback,
                                      double min, double max) const {
  std::string key;
  const nlohmann::json* v = Find(keys, &key);
  if (v == nullptr) return fallback;
  if (!v->is_number()) return Error(key, "= " + Show(*v) + " must be a number");
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < min || d > max) {
    std::ostringstream range;
    range << "must be in [" << min << ", " << max << "]";
    return Error(key, "= " + Show(*v) + " " + range.str());
  }
  return d;
}

Result<bool> ConfigReader::BoolOr(std::initializer_list<const char*> keys, bool fallback) const {
  std::string key;
  const nlohmann::json* v = Find(keys, &key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) return Error(key, "= " + Show(*v) + " must be true or false");
  return v->get<bool>();
}

Result<std::string> ConfigReader::StringOr(std::initializer_list<const char*> keys,
                                           const std::string& fallback) const {
  std::string key;
  const nlohmann::json* v = Find(keys, &key);
  if (v == nullptr) return fallback;
  if (!v->is_string()) return Error(key, "= " + Show(*v) + " must be a string");
  return v->get<std::string>();
}

Result<std::string> MapActivation(const ConfigReader& r, const std::string& field,
                                  const std::string& hf_name) {
  if (hf_name == "silu" || hf_name == "swish") return std::string("silu");
  if (hf_name == "gelu") return std::string("gelu");
  // gelu_new and gelu_fast are Python code (NewGELUActivation: torch.pow, tanh, ...: op by op);
  // gelu_pytorch_tanh is F.gelu(approximate="tanh"), one kernel (activations.py).
  if (hf_name == "gelu_new" || hf_name == "gelu_fast") return std::string("gelu_tanh");
  if (hf_name == "gelu_pytorch_tanh") return std::string("gelu_tanh_kernel");
  if (hf_name == "relu") return std::string("relu");
  return r.Error(field, "= \"" + hf_name +
                            "\" is not an activation this builder writes (silu, swish, gelu, "
                            "gelu_new, gelu_pytorch_tanh, gelu_fast, relu)");
}

// ---------------------------------------------------------------------------------------------
// ParamBudget

Status ParamBudget::Add(const std::string& what, int64_t count, int64_t a, int64_t b) {
  int64_t elements = 0;
  if (__builtin_mul_overflow(a, b, &elements) || elements > kMaxTensorElements) {
    return r_.Plain(what + " would have " + std::to_string(a) + " x " + std::to_string(b) +
                    " elements, above the limit " + std::to_string(kMaxTensorElements) +
                    " per tensor");
  }
  int64_t all = 0;
  if (__builtin_mul_overflow(elements, count, &all) ||
      __builtin_add_overflow(total_, all, &total_) || total_ > kMaxParameters) {
    return r_.Plain("the model would have more than " + std::to_string(kMaxParameters) +
                    " parameters (the limit), reached at " + what);
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// Builder

std::string Builder::Param(const std::string& name, const std::vector<int64_t>& dims) {
  const std::string scope = w_.scope();
  w_.SetScope("");
  std::string p = w_.Weight(name, dims);
  w_.SetScope(scope);
  return p;
}

std::string Builder::Linear(const std::string& x, int64_t in, int64_t out, bool bias,
                            const std::string& name) {
  std::string y = w_.Op("MatMul", {x, Param(name + ".weight", {in, out})});
  if (bias) y = w_.Op("Add", {y, Param(name + ".bias", {out})});
  return y;
}

std::string Builder::LayerNorm(const std::string& x, int64_t features, double eps,
                               const std::string& name) {
  const std::string scale = Param(name + ".weight", {features});
  const std::string b = Param(name + ".bias", {features});
  return w_.Op("LayerNormalization", {x, scale, b},
               {Attr("axis", int64_t{-1}), Attr("epsilon", static_cast<float>(eps))});
}

std::string Builder::RmsNorm(const std::string& x, int64_t features, double eps,
                             const std::string& name, bool plus_one) {
  const std::string sq = w_.Op("Pow", {x, w_.FloatScalar(2.0f)});
  const std::string mean = w_.Op(
      "ReduceMean", {sq}, {Attr("axes", std::vector<int64_t>{-1}), Attr("keepdims", int64_t{1})});
  const std::string var = w_.Op("Add", {mean, w_.FloatScalar(static_cast<float>(eps))});
  const std::string rstd = w_.Op("Reciprocal", {w_.Op("Sqrt", {var})});
  const std::string normed = w_.Op("Mul", {x, rstd});
  std::string weight = Param(name + ".weight", {features});
  if (plus_one) weight = w_.Op("Add", {weight, w_.FloatScalar(1.0f)});
  return w_.Op("Mul", {normed, weight});
}

std::string Builder::Dropout(const std::string& x, float ratio) {
  if (!training_ || ratio <= 0) return x;
  return zoo::Dropout(w_, x, ratio);
}

std::string Builder::Unsqueeze(const std::string& x, const std::vector<int64_t>& axes) {
  return w_.Op("Unsqueeze", {x, w_.Int64s(axes)});
}

std::string Builder::Transpose(const std::string& x, const std::vector<int64_t>& perm) {
  return w_.Op("Transpose", {x}, {Attr("perm", perm)});
}

std::string Builder::Element(const std::string& shape, int64_t index) {
  return w_.Op("Gather", {shape, w_.Int64Scalar(index)}, {Attr("axis", int64_t{0})});
}

std::string Builder::SplitHeads(const std::string& x, int64_t n, int64_t hd) {
  return Transpose(w_.Op("Reshape", {x, w_.Int64s({0, 0, n, hd})}), {0, 2, 1, 3});
}

std::string Builder::MergeHeads(const std::string& x, int64_t n, int64_t hd) {
  return w_.Op("Reshape", {Transpose(x, {0, 2, 1, 3}), w_.Int64s({0, 0, n * hd})});
}

std::string Builder::RepeatKv(const std::string& x, int64_t kv, int64_t rep, int64_t hd) {
  const std::string expanded = w_.Op("Expand", {Unsqueeze(x, {2}), w_.Int64s({1, 1, rep, 1, 1})});
  return w_.Op("Reshape", {expanded, w_.Int64s({0, kv * rep, -1, hd})});
}

std::string Builder::CausalMask(const Dims& d) {
  const std::string shape =
      w_.Op("Concat", {Unsqueeze(d.seq, {0}), Unsqueeze(d.total, {0})}, {Attr("axis", int64_t{0})});
  onnx::TensorProto one;
  one.set_data_type(kBool);
  one.add_dims(1);
  one.add_int32_data(1);
  const std::string ones = w_.Op("ConstantOfShape", {shape}, {Attr("value", one)});
  const std::string k =
      d.past.empty() ? w_.Int64Scalar(1) : w_.Op("Add", {d.past, w_.Int64Scalar(1)});
  return w_.Op("Trilu", {ones, k}, {Attr("upper", int64_t{1})});
}

std::string Builder::Positions(const Dims& d) {
  const std::string start = d.past.empty() ? w_.Int64Scalar(0) : d.past;
  return w_.Op("Range", {start, d.total, w_.Int64Scalar(1)});
}

std::pair<std::string, std::string> Builder::Rotary(const std::string& positions,
                                                    int64_t rotary_dim, double theta) {
  // inv_freq = 1 / theta^(arange(0, dim, 2) / dim), as the rotary module's buffer.
  const std::string idx = w_.Op(
      "Cast", {w_.Op("Range", {w_.Int64Scalar(0), w_.Int64Scalar(rotary_dim), w_.Int64Scalar(2)})},
      {Attr("to", int64_t{kFloat})});
  const std::string expo = w_.Op("Div", {idx, w_.FloatScalar(static_cast<float>(rotary_dim))});
  const std::string inv_freq =
      w_.Op("Reciprocal", {w_.Op("Pow", {w_.FloatScalar(static_cast<float>(theta)), expo})});
  const std::string pos = w_.Op("Cast", {positions}, {Attr("to", int64_t{kFloat})});
  const std::string freqs = w_.Op("Mul", {Unsqueeze(pos, {1}), Unsqueeze(inv_freq, {0})});
  const std::string emb = w_.Op("Concat", {freqs, freqs}, {Attr("axis", int64_t{-1})});
  return {w_.Op("Cos", {emb}), w_.Op("Sin", {emb})};
}

std::string Builder::ApplyRotary(const std::string& x,
                                 const std::pair<std::string, std::string>& cs, int64_t rotary_dim,
                                 int64_t head_dim) {
  const std::string axis = w_.Int64s({-1});
  auto slice = [&](const std::string& t, int64_t from, int64_t to) {
    return w_.Op("Slice", {t, w_.Int64s({from}), w_.Int64s({to}), axis});
  };
  const bool partial = rotary_dim < head_dim;
  const std::string rot = partial ? slice(x, 0, rotary_dim) : x;
  const int64_t half = rotary_dim / 2;
  const std::string rotated =
      w_.Op("Concat", {w_.Op("Neg", {slice(rot, half, rotary_dim)}), slice(rot, 0, half)},
            {Attr("axis", int64_t{-1})});
  const std::string embedded =
      w_.Op("Add", {w_.Op("Mul", {rot, cs.first}), w_.Op("Mul", {rotated, cs.second})});
  if (!partial) return embedded;
  return w_.Op("Concat", {embedded, slice(x, rotary_dim, head_dim)}, {Attr("axis", int64_t{-1})});
}

std::string Builder::Attention(const std::string& q, const std::string& k, const std::string& v,
                               int64_t heads, int64_t kv_heads, int64_t head_dim, float scale,
                               const std::string& bias, const std::string& mask, float dropout,
                               bool broadcast_kv) {
  std::string keys = k, values = v;
  if (kv_heads < heads && !(broadcast_kv && kv_heads == 1)) {
    keys = RepeatKv(k, kv_heads, heads / kv_heads, head_dim);
    values = RepeatKv(v, kv_heads, heads / kv_heads, head_dim);
  }
  std::string scores = w_.Op("MatMul", {q, Transpose(keys, {0, 1, 3, 2})});
  if (scale != 1.0f) scores = w_.Op("Mul", {scores, w_.FloatScalar(scale)});
  if (!bias.empty()) scores = w_.Op("Add", {scores, bias});
  if (!mask.empty()) {
    scores =
        w_.Op("Where", {mask, w_.FloatScalar(-std::numeric_limits<float>::infinity()), scores});
  }
  std::string probs = w_.Op("Softmax", {scores}, {Attr("axis", int64_t{-1})});
  probs = Dropout(probs, dropout);
  return MergeHeads(w_.Op("MatMul", {probs, values}), heads, head_dim);
}

std::string Builder::LastPosition(const std::string& x) {
  return w_.Op("Slice", {x, w_.Int64s({-1}), w_.Int64s({std::numeric_limits<int64_t>::max()}),
                         w_.Int64s({1})});
}

std::string SafeName(const std::string& name) {
  std::string out;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    out += ok ? c : '_';
  }
  if (out.empty() || out == "." || out == "..") out = "hf_model";
  return out;
}

HfModel FinishModel(GraphWriter&& w, const HfGraphOptions& o) {
  HfModel m;
  m.parameters = w.parameter_elements();
  m.model = std::move(w).Finish();
  m.phase = o.phase;
  return m;
}

}  // namespace memest::zoo::hf
