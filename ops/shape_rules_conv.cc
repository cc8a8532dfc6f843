// ops/shape_rules_conv.cc -- shape rules of convolution and pooling (Conv, ConvTranspose, the
// pools, MaxUnpool, RoiAlign) and of the products (MatMul, Gemm, Einsum). The contract is
// ops/shape_rules.h's, the policy is at the top of ops/shape_rules.cc.
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/dtype.h"
#include "ops/shape_rules.h"
#include "ops/shape_rules_internal.h"

namespace memest::ops::shape {

using internal::Bad;
using internal::BroadcastTwo;
using internal::Dims;
using internal::kI64;

// -------------------------------------------------------------------------------------------
// Convolution and pooling.

namespace {

struct Window {
  std::vector<int64_t> kernel, strides, dilations, pads;  // pads: begins then ends
  std::string auto_pad;
  bool kernel_known = true;
};

// Reads kernel/strides/dilations/pads for `n` spatial dims. `kernel_from_w`: W's dims[2:].
Result<Window> ReadWindow(InferContext& c, size_t n, const Dims* w, bool kernel_from_w) {
  Window win;
  if (auto k = c.attr_ints("kernel_shape")) {
    win.kernel = *k;
  } else if (w != nullptr && w->size() == n + 2) {
    for (size_t i = 0; i < n; ++i) {
      auto d = (*w)[i + 2].AsConstant();
      win.kernel_known = win.kernel_known && d.has_value();
      win.kernel.push_back(d.value_or(1));
    }
  } else if (kernel_from_w) {
    win.kernel_known = false;  // W's shape is unknown: so are the output's spatial dims
    win.kernel.assign(n, 1);
  } else {
    return Bad(c, "no kernel_shape");
  }
  win.strides = c.attr_ints("strides").value_or(std::vector<int64_t>(n, 1));
  win.dilations = c.attr_ints("dilations").value_or(std::vector<int64_t>(n, 1));
  win.pads = c.attr_ints("pads").value_or(std::vector<int64_t>(2 * n, 0));
  win.auto_pad = c.attr_string("auto_pad", "NOTSET");
  if (win.kernel.size() != n || win.strides.size() != n || win.dilations.size() != n ||
      win.pads.size() != 2 * n) {
    return Bad(c, "kernel_shape/strides/dilations/pads do not match the input's rank");
  }
  for (size_t i = 0; i < n; ++i) {
    if (win.kernel[i] < 1 || win.strides[i] < 1 || win.dilations[i] < 1 || win.pads[i] < 0 ||
        win.pads[i + n] < 0 || win.kernel[i] > (int64_t{1} << 31) ||
        win.strides[i] > (int64_t{1} << 31) || win.dilations[i] > (int64_t{1} << 31) ||
        win.pads[i] > (int64_t{1} << 40) || win.pads[i + n] > (int64_t{1} << 40)) {
      return Bad(c, "invalid kernel_shape/strides/dilations/pads");
    }
  }
  return win;
}

// Output spatial dims of a convolution or pooling window over `in`.
Dims WindowOutput(InferContext& c, const Dims& in, const Window& w, bool ceil_mode) {
  Dims out;
  for (size_t i = 0; i < in.size(); ++i) {
    const DimExpr stride(w.strides[i]);
    if (w.auto_pad == "SAME_UPPER" || w.auto_pad == "SAME_LOWER") {
      out.push_back(c.CeilDiv(in[i], stride));
      continue;
    }
    if (!w.kernel_known) {
      out.push_back(c.Unknown());
      continue;
    }
    const int64_t pads = w.auto_pad == "VALID" ? 0 : w.pads[i] + w.pads[i + in.size()];
    const int64_t effective_kernel = (w.kernel[i] - 1) * w.dilations[i] + 1;
    const DimExpr span = c.Sub(c.Add(in[i], pads), effective_kernel);
    const DimExpr steps = ceil_mode ? c.CeilDiv(span, stride) : c.FloorDiv(span, stride);
    out.push_back(c.Add(steps, 1));
  }
  return out;
}

// Conv-like: x at `xi`, W at `wi`, output dtype `dtype`.
Status ConvLike(InferContext& c, size_t xi, size_t wi, int32_t dtype) {
  SymTensor& y = c.out(0);
  y.dtype = dtype;
  const Dims* x = c.shape(xi);
  const Dims* w = c.shape(wi);
  if (x == nullptr) return Status::Ok();
  if (x->size() < 3) return Bad(c, "input rank below 3");
  if (w != nullptr && w->size() != x->size()) return Bad(c, "weight rank differs from input rank");
  const size_t n = x->size() - 2;
  MEMEST_ASSIGN_OR_RETURN(Window win, ReadWindow(c, n, w, /*kernel_from_w=*/true));
  Dims d{(*x)[0]};
  d.push_back(w != nullptr ? (*w)[0] : c.Unknown());
  const Dims spatial(x->begin() + 2, x->end());
  for (DimExpr& e : WindowOutput(c, spatial, win, false)) d.push_back(std::move(e));
  c.out(0).shape = std::move(d);
  return Status::Ok();
}

}  // namespace

Status Conv(InferContext& c) { return ConvLike(c, 0, 1, c.dtype(0)); }
Status ConvInteger(InferContext& c) { return ConvLike(c, 0, 1, base::kInt32); }
Status QLinearConv(InferContext& c) {
  return ConvLike(c, 0, 3, c.dtype(7) != 0 ? c.dtype(7) : c.dtype(0));
}

Status ConvTranspose(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  const Dims* w = c.shape(1);
  if (x == nullptr) return Status::Ok();
  if (x->size() < 3) return Bad(c, "input rank below 3");
  if (w != nullptr && w->size() != x->size()) return Bad(c, "weight rank differs from input rank");
  const size_t n = x->size() - 2;
  MEMEST_ASSIGN_OR_RETURN(Window win, ReadWindow(c, n, w, /*kernel_from_w=*/true));
  const int64_t group = c.attr_int("group", 1);
  if (group < 1 || group > (int64_t{1} << 31)) return Bad(c, "invalid group");
  Dims d{(*x)[0]};
  d.push_back(w != nullptr && w->size() >= 2 ? c.Mul((*w)[1], group) : c.Unknown());
  if (auto os = c.attr_ints("output_shape")) {
    if (os->size() < n) return Bad(c, "output_shape shorter than the spatial rank");
    for (size_t i = os->size() - n; i < os->size(); ++i) {
      if ((*os)[i] < 0) return Bad(c, "negative output_shape");
      d.emplace_back((*os)[i]);
    }
    c.out(0).shape = std::move(d);
    return Status::Ok();
  }
  const auto out_pad = c.attr_ints("output_padding").value_or(std::vector<int64_t>(n, 0));
  if (out_pad.size() != n) return Bad(c, "output_padding does not match the rank");
  for (size_t i = 0; i < n; ++i) {
    const DimExpr& in = (*x)[i + 2];
    if (win.auto_pad == "SAME_UPPER" || win.auto_pad == "SAME_LOWER") {
      d.push_back(c.Mul(in, win.strides[i]));
      continue;
    }
    if (out_pad[i] < 0 || out_pad[i] > (int64_t{1} << 31)) return Bad(c, "invalid output_padding");
    if (!win.kernel_known) {
      d.push_back(c.Unknown());
      continue;
    }
    const int64_t pads = win.auto_pad == "VALID" ? 0 : win.pads[i] + win.pads[i + n];
    const int64_t k = (win.kernel[i] - 1) * win.dilations[i] + 1;
    DimExpr e = c.Mul(c.Sub(in, 1), win.strides[i]);
    e = c.Add(e, out_pad[i] + k - pads);
    d.push_back(e);
  }
  c.out(0).shape = std::move(d);
  return Status::Ok();
}

Status Pool(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  if (x->size() < 3) return Bad(c, "input rank below 3");
  const size_t n = x->size() - 2;
  MEMEST_ASSIGN_OR_RETURN(Window win, ReadWindow(c, n, nullptr, /*kernel_from_w=*/false));
  Dims d{(*x)[0], (*x)[1]};
  const Dims spatial(x->begin() + 2, x->end());
  for (DimExpr& e : WindowOutput(c, spatial, win, c.attr_int("ceil_mode", 0) != 0)) {
    d.push_back(std::move(e));
  }
  if (c.has_output(1)) c.Set(1, kI64, d);
  c.out(0).shape = std::move(d);
  return Status::Ok();
}

// MaxUnpool (opset 9, 11): X [N, C, D1..Dn], I (indices, X's shape) [, output_shape] ->
// output_shape's elements when given (unknown sizes when they are not constant), else
// [N, C, (Di - 1) * stride_i + kernel_i - pad_begin_i - pad_end_i]. memest's own rule: ONNX
// 1.12's inference for it reads I's dim 1 without checking I's rank (a fuzzer crash).
Status MaxUnpool(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  if (x->size() < 3) return Bad(c, "input rank below 3");
  if (const Dims* ind = c.shape(1); ind != nullptr && ind->size() != x->size()) {
    return Bad(c, "indices rank differs from the input's");
  }
  const size_t n = x->size() - 2;
  if (c.has_input(2)) {
    if (const Dims* os = c.shape(2); os != nullptr && os->size() != 1) {
      return Bad(c, "output_shape is not rank 1");
    }
    const Dims* v = c.values(2);
    if (v != nullptr && v->size() != x->size()) {
      return Bad(c, "output_shape does not have one element per input dim");
    }
    Dims d;
    for (size_t i = 0; i < x->size(); ++i) d.push_back(v != nullptr ? (*v)[i] : c.Unknown());
    y.shape = std::move(d);
    return Status::Ok();
  }
  MEMEST_ASSIGN_OR_RETURN(Window win, ReadWindow(c, n, nullptr, /*kernel_from_w=*/false));
  Dims d{(*x)[0], (*x)[1]};
  for (size_t i = 0; i < n; ++i) {
    const DimExpr scaled = c.Mul(c.Sub((*x)[i + 2], 1), win.strides[i]);
    d.push_back(c.Add(scaled, win.kernel[i] - win.pads[i] - win.pads[i + n]));
  }
  y.shape = std::move(d);
  return Status::Ok();
}

Status GlobalPool(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  if (x->size() < 2) return Bad(c, "input rank below 2");
  Dims d{(*x)[0], (*x)[1]};
  d.resize(x->size(), DimExpr(1));
  y.shape = std::move(d);
  return Status::Ok();
}

// RoiAlign (opset 10+): X [N, C, H, W], rois [R, 4], batch_indices [R] ->
// [R, C, output_height, output_width]. MaxRoiPool: X, rois [R, 5] -> [R, C, pooled_shape].
Status RoiAlign(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  const Dims* rois = c.shape(1);
  if (x == nullptr || rois == nullptr) return Status::Ok();
  if (x->size() != 4 || rois->size() != 2) return Bad(c, "expects X of rank 4 and rois of rank 2");
  const bool max_roi = c.node().op_type == "MaxRoiPool";
  DimExpr h(1), w(1);
  if (max_roi) {
    const auto pooled = c.attr_ints("pooled_shape");
    if (!pooled || pooled->size() != 2 || (*pooled)[0] < 1 || (*pooled)[1] < 1) {
      return Bad(c, "pooled_shape must hold two positive sizes");
    }
    h = DimExpr((*pooled)[0]);
    w = DimExpr((*pooled)[1]);
  } else {
    const int64_t oh = c.attr_int("output_height", 1), ow = c.attr_int("output_width", 1);
    if (oh < 1 || ow < 1) return Bad(c, "output_height/output_width must be positive");
    h = DimExpr(oh);
    w = DimExpr(ow);
  }
  y.shape = Dims{(*rois)[0], (*x)[1], h, w};
  return Status::Ok();
}

// -------------------------------------------------------------------------------------------
// Products.

namespace {

Status MatMulShapes(InferContext& c, size_t ai, size_t bi, int32_t dtype) {
  SymTensor& y = c.out(0);
  y.dtype = dtype;
  const Dims* a = c.shape(ai);
  const Dims* b = c.shape(bi);
  if (a == nullptr || b == nullptr) return Status::Ok();
  if (a->empty() || b->empty()) return Bad(c, "scalar operand");
  // A 1-D operand is a matrix of one row (a) or one column (b), dropped from the result again;
  // an operand's batch dims are all but its last two (a 1-D operand has none).
  const size_t ar = a->size(), br = b->size();
  const bool a_vec = ar == 1, b_vec = br == 1;
  const Dims xb(a->begin(), a->begin() + static_cast<std::ptrdiff_t>(a_vec ? 0 : ar - 2));
  const Dims wb(b->begin(), b->begin() + static_cast<std::ptrdiff_t>(b_vec ? 0 : br - 2));
  auto batch = BroadcastTwo(c, xb, wb);
  if (!batch) return Bad(c, "batch dims do not broadcast");
  Dims d = std::move(*batch);
  d.reserve(d.size() + 2);
  if (!a_vec) d.push_back((*a)[ar - 2]);
  if (!b_vec) d.push_back((*b)[br - 1]);
  y.shape = std::move(d);
  return Status::Ok();
}

}  // namespace

Status MatMul(InferContext& c) { return MatMulShapes(c, 0, 1, c.dtype(0)); }
Status MatMulInteger(InferContext& c) { return MatMulShapes(c, 0, 1, base::kInt32); }
Status QLinearMatMul(InferContext& c) {
  return MatMulShapes(c, 0, 3, c.dtype(7) != 0 ? c.dtype(7) : c.dtype(0));
}

Status Gemm(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* a = c.shape(0);
  const Dims* b = c.shape(1);
  if (a == nullptr || b == nullptr) return Status::Ok();
  if (a->size() != 2 || b->size() != 2) return Bad(c, "operands must be 2-D");
  const bool ta = c.attr_int("transA", 0) != 0, tb = c.attr_int("transB", 0) != 0;
  y.shape = Dims{(*a)[ta ? 1 : 0], (*b)[tb ? 0 : 1]};
  return Status::Ok();
}

Status Einsum(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  std::string eq;
  for (char ch : c.attr_string("equation", "")) {
    if (ch != ' ') eq += ch;
  }
  if (eq.empty()) return Bad(c, "no equation");
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(
        lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != c.num_inputs()) return Bad(c, "equation does not match the inputs");
  std::map<char, DimExpr> label_dim;
  std::map<char, int> count;
  std::optional<Dims> ellipsis;
  for (size_t k = 0; k < terms.size(); ++k) {
    const Dims* s = c.shape(k);
    if (s == nullptr) return Status::Ok();
    std::string t = terms[k];
    const size_t dots = t.find("...");
    size_t letters = 0;
    for (char ch : t) letters += std::isalpha(static_cast<unsigned char>(ch)) ? 1 : 0;
    if (letters + (dots == std::string::npos ? 0 : 3) != t.size()) return Bad(c, "bad term");
    if (dots == std::string::npos ? letters != s->size() : letters > s->size()) {
      return Bad(c, "term rank does not match its input");
    }
    const size_t ell_rank = s->size() - letters;
    size_t axis = 0;
    for (size_t i = 0; i < t.size();) {
      if (i == dots) {
        Dims e(s->begin() + static_cast<std::ptrdiff_t>(axis),
               s->begin() + static_cast<std::ptrdiff_t>(axis + ell_rank));
        if (!ellipsis) {
          ellipsis = std::move(e);
        } else {
          auto b = BroadcastTwo(c, *ellipsis, e);
          if (!b) return Bad(c, "ellipsis dims do not broadcast");
          ellipsis = std::move(b);
        }
        axis += ell_rank;
        i += 3;
        continue;
      }
      const char l = t[i];
      ++count[l];
      auto [it, inserted] = label_dim.emplace(l, (*s)[axis]);
      if (!inserted && it->second == DimExpr(1)) it->second = (*s)[axis];
      ++axis;
      ++i;
    }
  }
  Dims d;
  if (arrow == std::string::npos) {  // implicit: ellipsis, then labels seen once, sorted
    if (ellipsis) d = *ellipsis;
    for (const auto& [l, n] : count) {
      if (n == 1) d.push_back(label_dim[l]);
    }
  } else {
    const std::string rhs = eq.substr(arrow + 2);
    for (size_t i = 0; i < rhs.size();) {
      if (rhs.compare(i, 3, "...") == 0) {
        if (ellipsis) d.insert(d.end(), ellipsis->begin(), ellipsis->end());
        i += 3;
        continue;
      }
      auto it = label_dim.find(rhs[i]);
      if (it == label_dim.end()) return Bad(c, "output label not in any input");
      d.push_back(it->second);
      ++i;
    }
  }
  y.shape = std::move(d);
  return Status::Ok();
}

}  // namespace memest::ops::shape
