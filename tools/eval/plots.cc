// tools/eval/plots.cc -- see plots.h.
#include "tools/eval/plots.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "tools/eval/heldout.h"
#include "tools/eval/metrics.h"

namespace memest::eval {
namespace {

constexpr double kWidth = 760, kHeight = 600;
constexpr double kLeft = 96, kRight = 24, kTop = 66, kBottom = 64;
constexpr char kFont[] = "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\"";

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string Header(const std::string& title) {
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} "
      "{1}\" {2}>\n<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n<text x=\"{3}\" y=\"30\" "
      "font-size=\"17\" font-weight=\"bold\" text-anchor=\"middle\">{4}</text>\n",
      kWidth, kHeight, kFont, kWidth / 2, Escape(title));
}

std::string Text(double x, double y, const std::string& s, const char* anchor = "middle",
                 int size = 12, const std::string& extra = "") {
  return fmt::format(
      "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"{}\" text-anchor=\"{}\"{}>{}</text>\n", x, y,
      size, anchor, extra, Escape(s));
}

std::string Line(double x1, double y1, double x2, double y2, const std::string& style) {
  return fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" {}/>\n", x1, y1,
                     x2, y2, style);
}

std::string Num(size_t n) {
  std::string s = std::to_string(n);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return s;
}

using LegendEntries = std::vector<std::pair<std::string, std::string>>;  // (colour, text)

// Width and height of a legend box (text width estimated at 6.8 px per character).
std::pair<double, double> LegendSize(const LegendEntries& e) {
  size_t longest = 0;
  for (const auto& [c, t] : e) longest = std::max(longest, t.size());
  return {34 + 6.8 * static_cast<double>(longest), 10 + 20.0 * e.size()};
}

// Legend box with its top-left corner at (x, y).
std::string Legend(double x, double y, const LegendEntries& e) {
  if (e.empty()) return "";
  const auto [w, h] = LegendSize(e);
  std::string out = fmt::format(
      "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"white\" "
      "fill-opacity=\"0.9\" stroke=\"#999\"/>\n",
      x, y, w, h);
  for (size_t i = 0; i < e.size(); ++i) {
    const double cy = y + 15 + 20.0 * i;
    out += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"14\" height=\"12\" fill=\"{}\" "
        "fill-opacity=\"0.8\"/>\n",
        x + 8, cy - 6, e[i].first);
    out += Text(x + 28, cy + 4.5, e[i].second, "start", 12);
  }
  return out;
}

// A "nice" linear step giving at most `max_ticks` intervals over `span`.
double NiceStep(double span, int max_ticks) {
  if (span <= 0) return 1;
  const double raw = span / max_ticks;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (m * mag >= raw) return m * mag;
  }
  return 10 * mag;
}

std::string Percent(double v) {
  if (std::fabs(v) < 1e-9) return "0 %";
  if (std::fabs(v) >= 100) return fmt::format("{:+.0f} %", v);
  if (std::fabs(v - std::round(v)) < 1e-9) return fmt::format("{:+.0f} %", v);
  if (std::fabs(v) < 1) return fmt::format("{:+.2f} %", v);
  return fmt::format("{:+.1f} %", v);
}

}  // namespace

const char* LevelColor(Level level) {
  switch (level) {
    case Level::kDevice:
      return "#1f77b4";
    case Level::kReserved:
      return "#2ca02c";
    case Level::kAllocated:
      return "#ff7f0e";
    case Level::kTensor:
      return "#d62728";
  }
  return "#000";
}

std::string BytesLabel(double bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024 && u < 6) {
    bytes /= 1024;
    ++u;
  }
  if (std::fabs(bytes - std::round(bytes)) < 1e-9)
    return fmt::format("{:.0f} {}", bytes, kUnits[u]);
  return fmt::format("{:.3g} {}", bytes, kUnits[u]);
}

std::string ScatterSvg(const std::string& title, const std::vector<ScatterSeries>& series) {
  std::string out = Header(title);
  double lo = 0, hi = 0;
  bool any = false;
  for (const auto& s : series) {
    for (const auto& [m, p] : s.points) {
      if (!(m > 0) || !(p > 0)) continue;
      lo = any ? std::min({lo, m, p}) : std::min(m, p);
      hi = any ? std::max({hi, m, p}) : std::max(m, p);
      any = true;
    }
  }
  const double x0 = kLeft, x1 = kWidth - kRight, y0 = kHeight - kBottom, y1 = kTop;
  if (!any) {
    out += Text(kWidth / 2, kHeight / 2, "no rows");
    return out + "</svg>\n";
  }
  // Axis range: whole powers of two around the data, the same on both axes.
  // A quarter power of two of padding keeps points off the frame.
  int e_lo = static_cast<int>(std::floor(std::log2(lo) - 0.25));
  int e_hi = static_cast<int>(std::ceil(std::log2(hi) + 0.25));
  if (e_hi - e_lo < 2) {
    --e_lo;
    ++e_hi;
  }
  const int span = e_hi - e_lo;
  int step = 1;
  while (span / step > 8) ++step;
  while (step > 1 && 10 % step != 0 && step < 10) ++step;  // 1, 2, 5, 10: ticks at 1/1024 ratios
  // Align ticks to multiples of `step` so 1 MiB / 1 GiB show when they fit.
  auto px = [&](double v) { return x0 + (std::log2(v) - e_lo) / span * (x1 - x0); };
  auto py = [&](double v) { return y0 - (std::log2(v) - e_lo) / span * (y0 - y1); };

  // Grid and ticks.
  std::string grid, labels;
  for (int e = e_lo; e <= e_hi; ++e) {
    const bool major = ((e % step) + step) % step == 0;
    const double v = std::ldexp(1.0, e);
    const std::string color = major ? "#d9d9d9" : "#f0f0f0";
    grid += Line(px(v), y0, px(v), y1, "stroke=\"" + color + "\"");
    grid += Line(x0, py(v), x1, py(v), "stroke=\"" + color + "\"");
    if (!major) continue;
    labels += Line(px(v), y0, px(v), y0 + 5, "stroke=\"#333\"");
    labels += Text(px(v), y0 + 19, BytesLabel(v), "middle", 11);
    labels += Line(x0 - 5, py(v), x0, py(v), "stroke=\"#333\"");
    labels += Text(x0 - 8, py(v) + 4, BytesLabel(v), "end", 11);
    // A narrow range (three powers of two or fewer) also gets a labelled tick at 1.5 x 2^e.
    if (span <= 3 && e < e_hi) {
      const double m = 1.5 * v;
      grid += Line(px(m), y0, px(m), y1, "stroke=\"#eeeeee\"");
      grid += Line(x0, py(m), x1, py(m), "stroke=\"#eeeeee\"");
      labels += Line(px(m), y0, px(m), y0 + 4, "stroke=\"#333\"");
      labels += Text(px(m), y0 + 19, BytesLabel(m), "middle", 11);
      labels += Line(x0 - 4, py(m), x0, py(m), "stroke=\"#333\"");
      labels += Text(x0 - 8, py(m) + 4, BytesLabel(m), "end", 11);
    }
  }
  out += grid;
  // +-20 % band and y = x.
  const double a = std::ldexp(1.0, e_lo), b = std::ldexp(1.0, e_hi);
  out += "<clipPath id=\"plot\"><rect x=\"" + fmt::format("{:.1f}", x0) + "\" y=\"" +
         fmt::format("{:.1f}", y1) + "\" width=\"" + fmt::format("{:.1f}", x1 - x0) +
         "\" height=\"" + fmt::format("{:.1f}", y0 - y1) + "\"/></clipPath>\n";
  out += fmt::format(
      "<polygon clip-path=\"url(#plot)\" points=\"{:.1f},{:.1f} {:.1f},{:.1f} {:.1f},{:.1f} "
      "{:.1f},{:.1f}\" fill=\"#999\" fill-opacity=\"0.15\"/>\n",
      px(a), py(a * 1.2), px(b), py(b * 1.2), px(b), py(b * 0.8), px(a), py(a * 0.8));
  out += Line(px(a), py(a), px(b), py(b), "stroke=\"#333\" stroke-dasharray=\"6 4\"");
  // Points, deduplicated per series at half-pixel resolution.
  LegendEntries legend;
  std::vector<std::pair<double, double>> drawn;
  for (const auto& s : series) {
    std::set<std::pair<long, long>> seen;
    out += "<g fill=\"" + s.color + "\" fill-opacity=\"0.55\" stroke=\"none\">\n";
    size_t n = 0;
    for (const auto& [m, p] : s.points) {
      if (!(m > 0) || !(p > 0)) continue;
      ++n;
      const double cx = px(m), cy = py(p);
      if (!seen.insert({std::lround(cx * 2), std::lround(cy * 2)}).second) continue;
      out += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.6\"/>\n", cx, cy);
      drawn.push_back({cx, cy});
    }
    out += "</g>\n";
    legend.push_back({s.color, s.label + " (N = " + Num(n) + ")"});
  }
  legend.push_back({"#bbbbbb", "±20 % band; dashed: predicted = measured"});
  // Frame, axes labels, legend.
  out += fmt::format(
      "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"none\" "
      "stroke=\"#333\"/>\n",
      x0, y1, x1 - x0, y0 - y1);
  out += labels;
  out += Text((x0 + x1) / 2, kHeight - 18, "measured peak (log scale)", "middle", 13);
  out += Text(22, (y0 + y1) / 2, "predicted peak (log scale)", "middle", 13,
              fmt::format(" transform=\"rotate(-90 22 {:.1f})\"", (y0 + y1) / 2));
  // Legend in the top-left or bottom-right corner, whichever covers fewer points.
  const auto [lw, lh] = LegendSize(legend);
  auto covered = [&](double lx, double ly) {
    return std::count_if(drawn.begin(), drawn.end(), [&](const auto& p) {
      return p.first >= lx - 3 && p.first <= lx + lw + 3 && p.second >= ly - 3 &&
             p.second <= ly + lh + 3;
    });
  };
  const double tl_x = x0 + 10, tl_y = y1 + 10, br_x = x1 - 10 - lw, br_y = y0 - 10 - lh;
  if (covered(tl_x, tl_y) <= covered(br_x, br_y)) {
    out += Legend(tl_x, tl_y, legend);
  } else {
    out += Legend(br_x, br_y, legend);
  }
  out += Text(kWidth / 2, 50, "points below the diagonal are under-estimates (OOM risk)", "middle",
              12, " fill=\"#555\"");
  return out + "</svg>\n";
}

std::string HistogramSvg(const std::string& title, const std::vector<HistogramSeries>& series) {
  std::string out = Header(title);
  const double x0 = kLeft, x1 = kWidth - kRight, y0 = kHeight - kBottom, y1 = kTop;
  std::vector<double> all;
  for (const auto& s : series) {
    for (double e : s.errors) all.push_back(e * 100);
  }
  if (all.empty()) {
    out += Text(kWidth / 2, kHeight / 2, "no rows");
    return out + "</svg>\n";
  }
  // Range: from the smallest error (>= -100 %) to the 99th percentile, capped at +300 %, always
  // with zero inside; larger errors go to an overflow bin drawn after the last bin.
  const double min_e = *std::min_element(all.begin(), all.end());
  double p99 = *NearestRank(all, 99);
  double lo = std::max(-100.0, std::min(min_e, 0.0)), hi = std::min(300.0, std::max(p99, 0.0));
  if (hi - lo < 10) {
    lo -= 5;
    hi += 5;
  }
  const double width = NiceStep(hi - lo, 60);
  lo = std::floor(lo / width) * width;
  hi = std::ceil(hi / width) * width;
  // Keep zero visibly inside the axis: at least 10 % of the span on each side of it.
  const double margin = std::ceil(0.1 * (hi - lo) / width) * width;
  lo = std::min(lo, -margin);
  hi = std::max(hi, margin);
  const int bins = static_cast<int>(std::lround((hi - lo) / width));
  const bool overflow =
      std::any_of(all.begin(), all.end(), [&](double e) { return e >= hi + 1e-9; });
  // After the last bin: a gap, then the overflow bin (a few bins wide, so it stays visible).
  const int gap = overflow ? std::max(2, bins / 12) : 0;
  const int overflow_width = overflow ? std::max(1, bins / 30) : 0;
  const int slots = bins + gap + overflow_width;
  auto px = [&](double slot) { return x0 + slot / slots * (x1 - x0); };

  // Shares per series and bin.
  std::vector<std::vector<double>> share(series.size(), std::vector<double>(bins + 1, 0.0));
  double ymax = 0;
  for (size_t s = 0; s < series.size(); ++s) {
    if (series[s].errors.empty()) continue;
    for (double e : series[s].errors) {
      const double v = e * 100;
      int bin = v >= hi + 1e-9 ? bins : static_cast<int>(std::floor((v - lo) / width));
      bin = std::clamp(bin, 0, bins - (v >= hi + 1e-9 ? 0 : 1));
      share[s][bin] += 100.0 / series[s].errors.size();
    }
    ymax = std::max(ymax, *std::max_element(share[s].begin(), share[s].end()));
  }
  const double ystep = NiceStep(ymax, 6);
  const double ytop = std::ceil(ymax / ystep) * ystep;
  auto py = [&](double v) { return y0 - v / ytop * (y0 - y1); };

  for (double v = 0; v <= ytop + 1e-9; v += ystep) {
    out += Line(x0, py(v), x1, py(v), "stroke=\"#e5e5e5\"");
    out += Line(x0 - 5, py(v), x0, py(v), "stroke=\"#333\"");
    out += Text(x0 - 8, py(v) + 4, fmt::format("{:g} %", v), "end", 11);
  }
  // Bars.
  for (size_t s = 0; s < series.size(); ++s) {
    out += "<g fill=\"" + series[s].color + "\" fill-opacity=\"0.45\" stroke=\"" + series[s].color +
           "\" stroke-width=\"0.8\">\n";
    for (int b = 0; b <= bins; ++b) {
      if (share[s][b] <= 0) continue;
      const double slot = b < bins ? b : bins + gap;
      const double w = b < bins ? 1 : overflow_width;
      out += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\"/>\n",
                         px(slot), py(share[s][b]), px(slot + w) - px(slot), y0 - py(share[s][b]));
    }
    out += "</g>\n";
  }
  // X ticks (none whose label would run into the overflow bin's).
  const double overflow_x = px(bins + gap + overflow_width / 2.0);
  const double xstep = NiceStep(hi - lo, 10);
  for (double v = std::ceil(lo / xstep) * xstep; v <= hi + 1e-9; v += xstep) {
    const double x = px((v - lo) / width);
    if (overflow && overflow_x - x < 60) continue;
    out += Line(x, y0, x, y0 + 5, "stroke=\"#333\"");
    out += Text(x, y0 + 19, Percent(v), "middle", 11);
  }
  if (overflow) {
    out += Line(overflow_x, y0, overflow_x, y0 + 5, "stroke=\"#333\"");
    out += Text(overflow_x, y0 + 19, fmt::format("> {:+.0f} %", hi), "middle", 11);
  }
  // Zero line; the direction of the errors is in the subtitle.
  const double xz = px((0 - lo) / width);
  out += Line(xz, y0, xz, y1, "stroke=\"#333\" stroke-dasharray=\"5 4\"");
  if (x1 - xz > 90) {
    out += Text(xz + 4, y1 + 14, "0 = exact", "start", 11, " fill=\"#333\"");
  } else {
    out += Text(xz - 4, y1 + 14, "0 = exact", "end", 11, " fill=\"#333\"");
  }
  out += Text(kWidth / 2, 50,
              "left of 0: under-estimates (OOM risk); right of 0: over-estimates (wasted memory)",
              "middle", 12, " fill=\"#555\"");
  out += fmt::format(
      "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"none\" "
      "stroke=\"#333\"/>\n",
      x0, y1, x1 - x0, y0 - y1);
  out += Text(
      (x0 + x1) / 2, kHeight - 18,
      fmt::format("signed relative error (predicted − measured) / measured, {:g} % bins", width),
      "middle", 13);
  out += Text(22, (y0 + y1) / 2, "share of rows", "middle", 13,
              fmt::format(" transform=\"rotate(-90 22 {:.1f})\"", (y0 + y1) / 2));
  LegendEntries legend;
  for (const auto& s : series) {
    if (s.errors.empty()) continue;
    std::vector<double> sig = s.errors;
    legend.push_back({s.color, fmt::format("{} (N = {}, median {})", s.label, Num(s.errors.size()),
                                           Percent(*Median(sig) * 100))});
  }
  // Legend on the side with less mass: right half if most rows are left of zero.
  const double left_share =
      static_cast<double>(
          std::count_if(all.begin(), all.end(), [&](double e) { return e < (lo + hi) / 2; })) /
      all.size();
  const double lx = left_share > 0.5 ? (x0 + x1) / 2 + 20 : x0 + 10;
  out += Legend(lx, y1 + 24, legend);
  return out + "</svg>\n";
}

std::map<std::string, std::string> MakePlots(const Evaluation& ev) {
  std::map<std::string, std::string> files;
  for (size_t b = 0; b < ev.backends.size(); ++b) {
    std::vector<ScatterSeries> scatter;
    std::vector<HistogramSeries> hist;
    for (Level level : kLevels) {
      ScatterSeries s{std::string(ToString(level)) + " level", LevelColor(level), {}};
      HistogramSeries h{std::string(ToString(level)) + " level", LevelColor(level), {}};
      for (size_t i = 0; i < ev.rows.size(); ++i) {
        const MeasuredRow& row = ev.rows[i];
        const RowOutcome& out = ev.outcomes[i];
        if (row.status != RowStatus::kOk || !out.setup.ok()) continue;
        if (UsedBy(row, ev.backends[b])) continue;
        const Prediction& p = out.predictions[b];
        if (!p.status.ok()) continue;
        const auto m = row.peaks.Get(level);
        if (!m || *m == 0) continue;
        const Pair pair{PredictedAt(p.estimate, level), *m};
        s.points.push_back(
            {static_cast<double>(pair.measured), static_cast<double>(pair.predicted)});
        h.errors.push_back(SignedRelativeError(pair));
      }
      if (!s.points.empty()) {
        scatter.push_back(std::move(s));
        hist.push_back(std::move(h));
      }
    }
    const std::string& name = ev.backends[b];
    files["scatter_" + name + ".svg"] =
        ScatterSvg(name + ": predicted vs measured peak (held-out rows)", scatter);
    files["errors_" + name + ".svg"] =
        HistogramSvg(name + ": signed relative error (held-out rows)", hist);
  }
  return files;
}

}  // namespace memest::eval
