#include "symbolic/timeline_writer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

namespace memest::symbolic {
namespace {

std::string NodeName(const Simulation& sim, int node) {
  return node >= 0 && static_cast<size_t>(node) < sim.node_names.size()
             ? sim.node_names[static_cast<size_t>(node)]
             : std::string();
}

std::string Human(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} {}", bytes, units[u])
                : fmt::format("{:.4g} {}", bytes, units[u]);
}

std::string Escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
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

std::string Json(const Simulation& sim, std::string_view title) {
  nlohmann::json j;
  j["schema"] = "memest.timeline/1";
  j["title"] = std::string(title);
  j["peak_allocated"] = sim.estimate.peak_allocated;
  j["peak_reserved"] = sim.estimate.peak_reserved;
  j["peak_device"] = sim.estimate.peak_device;
  j["peak_phase"] = ToString(sim.estimate.peak_phase);
  j["peak_node"] = sim.estimate.peak_node;
  j["iterations"] = nlohmann::json::array();
  for (const auto& it : sim.iterations) {
    j["iterations"].push_back(
        {{"iteration", it.iteration}, {"allocated", it.allocated}, {"reserved", it.reserved}});
  }
  auto& events = j["events"] = nlohmann::json::array();
  for (const auto& e : sim.events) {
    events.push_back({{"kind", e.malloc ? "malloc" : "free"},
                      {"bytes", e.bytes},
                      {"category", ToString(e.category)},
                      {"phase", ToString(e.phase)},
                      {"node", NodeName(sim, e.node)},
                      {"iteration", e.iteration},
                      {"allocated", e.allocated},
                      {"reserved", e.reserved}});
  }
  // Node and model names come from the file: invalid UTF-8 is replaced, never an error.
  return j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string Csv(const Simulation& sim) {
  std::string out = "index,kind,bytes,category,phase,node,iteration,allocated,reserved\n";
  for (size_t i = 0; i < sim.events.size(); ++i) {
    const auto& e = sim.events[i];
    std::string node = NodeName(sim, e.node);
    if (node.find_first_of(",\"\n") != std::string::npos) {
      std::string q = "\"";
      for (char c : node) q += c == '"' ? std::string("\"\"") : std::string(1, c);
      node = q + "\"";
    }
    out += fmt::format("{},{},{},{},{},{},{},{},{}\n", i, e.malloc ? "malloc" : "free", e.bytes,
                       ToString(e.category), ToString(e.phase), node, e.iteration, e.allocated,
                       e.reserved);
  }
  return out;
}

const char* PhaseColor(Phase p) {
  switch (p) {
    case Phase::kForward:
      return "#dbeafe";
    case Phase::kBackward:
      return "#fde2e2";
    case Phase::kOptimizerStep:
      return "#dcfce7";
    case Phase::kInference:
      return "#e0e7ff";
    case Phase::kUnknown:
      return "#f3f4f6";
  }
  return "#ffffff";
}

// The SVG chart of a simulation: allocated and reserved bytes over the allocation events, on
// phase bands, with the iterations, the peak and a legend. Each part is one method, drawn in the
// order the chart stacks them.
class SvgChart {
 public:
  SvgChart(const Simulation& sim, std::string_view title)
      : sim_(sim), ev_(sim.events), n_(std::max<size_t>(ev_.size(), 1)) {
    ScaleY();
    s_ = fmt::format(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} "
        "{}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" "
        "fill=\"white\"/>\n<text x=\"{}\" y=\"24\" font-size=\"16\" font-weight=\"bold\">{}"
        "</text>\n",
        kW, kH, kW, kH, kLeft, Escape(title));
  }

  std::string Draw() && {
    PhaseBands();
    IterationLines();
    Axes();
    Lines();
    PeakMarker();
    Legend();
    s_ += "</svg>\n";
    return std::move(s_);
  }

 private:
  static constexpr double kW = 1000, kH = 450, kLeft = 80, kRight = 20, kTop = 60, kBottom = 60;
  static constexpr double kPw = kW - kLeft - kRight, kPh = kH - kTop - kBottom;

  double X(double i) const { return kLeft + kPw * i / static_cast<double>(n_); }
  double Y(double b) const { return kTop + kPh * (1 - b / ymax_); }

  // A tick step of 1, 2, 2.5, 5 or 10 x a power of ten KiB, MiB or GiB, about a fifth of the
  // highest reserved bytes, and the top of the axis a whole number of steps.
  void ScaleY() {
    uint64_t ymax_bytes = 1;
    for (const auto& e : ev_) ymax_bytes = std::max(ymax_bytes, e.reserved);
    const double raw_step = static_cast<double>(ymax_bytes) / 5;
    const double unit = raw_step >= (1ull << 30) ? double(1ull << 30)
                        : raw_step >= (1 << 20)  ? double(1 << 20)
                                                 : 1024.0;
    const double mag = std::pow(10, std::floor(std::log10(std::max(raw_step / unit, 1e-9))));
    double step = mag;
    for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
      if (m * mag * unit >= raw_step) {
        step = m * mag;
        break;
      }
    }
    step_ = step * unit;
    ymax_ = std::ceil(static_cast<double>(ymax_bytes) / step_) * step_;
  }

  // One band per run of events in the same phase of the same iteration.
  void PhaseBands() {
    size_t start = 0;
    for (size_t i = 1; i <= ev_.size(); ++i) {
      if (i == ev_.size() || ev_[i].phase != ev_[start].phase ||
          ev_[i].iteration != ev_[start].iteration) {
        s_ += fmt::format(
            "<rect x=\"{:.1f}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\"/>\n", X(start),
            kTop, std::max(X(i) - X(start), 0.5), kPh, PhaseColor(ev_[start].phase));
        start = i;
      }
    }
  }

  void IterationLines() {
    for (size_t i = 1; i < ev_.size(); ++i) {
      if (ev_[i].iteration != ev_[i - 1].iteration) {
        s_ += fmt::format(
            "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#6b7280\" "
            "stroke-dasharray=\"4 3\"/>\n<text x=\"{3:.1f}\" y=\"{4}\" fill=\"#374151\">"
            "iteration {5}</text>\n",
            X(i), kTop, kTop + kPh, X(i) + 4, kTop + 14, ev_[i].iteration);
      }
    }
  }

  void Axes() {
    for (double t = 0; t <= ymax_ + 1; t += step_) {
      s_ += fmt::format(
          "<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#e5e7eb\"/>\n"
          "<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n",
          kLeft, kLeft + kPw, Y(t), Y(t), kLeft - 6, Y(t) + 4, Human(t));
    }
    s_ += fmt::format(
        "<line x1=\"{0}\" x2=\"{0}\" y1=\"{1}\" y2=\"{2}\" stroke=\"black\"/>\n"
        "<line x1=\"{0}\" x2=\"{3}\" y1=\"{2}\" y2=\"{2}\" stroke=\"black\"/>\n",
        kLeft, kTop, kTop + kPh, kLeft + kPw);
    for (int k = 0; k <= 5; ++k) {
      const double i = static_cast<double>(n_) * k / 5;
      s_ += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{:.0f}</text>\n", X(i),
                        kTop + kPh + 16, i);
    }
    s_ += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">allocation events</text>\n",
                      kLeft + kPw / 2, kTop + kPh + 34);
  }

  // Allocated and reserved, downsampled to at most ~2 points per pixel (bucket maxima keep the
  // peaks).
  void Lines() {
    const size_t buckets = std::min<size_t>(ev_.size(), 2000);
    std::string alloc_pts, res_pts;
    for (size_t b = 0; b < buckets; ++b) {
      const size_t lo = b * ev_.size() / buckets;
      const size_t hi = std::max(lo + 1, (b + 1) * ev_.size() / buckets);
      uint64_t a = 0, r = 0;
      for (size_t i = lo; i < hi; ++i) {
        a = std::max(a, ev_[i].allocated);
        r = std::max(r, ev_[i].reserved);
      }
      alloc_pts += fmt::format("{:.1f},{:.1f} ", X(lo + 0.5), Y(static_cast<double>(a)));
      res_pts += fmt::format("{:.1f},{:.1f} ", X(lo + 0.5), Y(static_cast<double>(r)));
    }
    s_ += fmt::format(
        "<polyline fill=\"none\" stroke=\"#dc2626\" stroke-width=\"1.5\" "
        "stroke-dasharray=\"6 3\" points=\"{}\"/>\n",
        res_pts);
    s_ += fmt::format(
        "<polyline fill=\"none\" stroke=\"#1d4ed8\" stroke-width=\"1.5\" points=\"{}\"/>\n",
        alloc_pts);
  }

  // The first event at the highest allocated bytes, with its phase, iteration and node.
  void PeakMarker() {
    if (ev_.empty()) return;
    size_t peak = 0;
    for (size_t i = 0; i < ev_.size(); ++i) {
      if (ev_[i].allocated > ev_[peak].allocated) peak = i;
    }
    const auto& p = ev_[peak];
    const std::string node = NodeName(sim_, p.node);
    const double px = X(peak + 0.5), py = Y(static_cast<double>(p.allocated));
    s_ += fmt::format(
        "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"#1d4ed8\"/>\n"
        "<text x=\"{}\" y=\"42\" fill=\"#1e3a8a\">&#9679; peak allocated {} in {} "
        "of iteration {}{}{}; peak reserved {}</text>\n",
        px, py, kLeft, Human(static_cast<double>(p.allocated)), ToString(p.phase), p.iteration,
        node.empty() ? "" : ", at ", Escape(node),
        Human(static_cast<double>(sim_.estimate.peak_reserved)));
  }

  void Legend() {
    double lx = kLeft;
    const double ly = kH - 12;
    auto legend = [&](const std::string& swatch, const std::string& label) {
      s_ += swatch +
            fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\">{}</text>\n", lx + 24, ly + 4, label);
      lx += 30 + 7.0 * static_cast<double>(label.size());
    };
    legend(fmt::format("<line x1=\"{0:.0f}\" x2=\"{1:.0f}\" y1=\"{2:.0f}\" y2=\"{2:.0f}\" "
                       "stroke=\"#1d4ed8\" stroke-width=\"2\"/>",
                       lx, lx + 20, ly),
           "allocated");
    legend(fmt::format("<line x1=\"{0:.0f}\" x2=\"{1:.0f}\" y1=\"{2:.0f}\" y2=\"{2:.0f}\" "
                       "stroke=\"#dc2626\" stroke-width=\"2\" stroke-dasharray=\"6 3\"/>",
                       lx, lx + 20, ly),
           "reserved");
    for (Phase p : {Phase::kForward, Phase::kBackward, Phase::kOptimizerStep, Phase::kInference}) {
      legend(fmt::format("<rect x=\"{:.0f}\" y=\"{:.0f}\" width=\"20\" height=\"10\" fill=\"{}\" "
                         "stroke=\"#9ca3af\"/>",
                         lx, ly - 5, PhaseColor(p)),
             ToString(p));
    }
  }

  const Simulation& sim_;
  const std::vector<TimelineEvent>& ev_;
  const size_t n_;   // events, at least 1 (the x axis)
  double step_ = 0;  // y tick, bytes
  double ymax_ = 0;  // top of the y axis, bytes
  std::string s_;
};

std::string Svg(const Simulation& sim, std::string_view title) {
  return SvgChart(sim, title).Draw();
}

std::string Html(const Simulation& sim, std::string_view title) {
  const Estimate& e = sim.estimate;
  std::string rows;
  for (const auto& it : sim.iterations) {
    rows += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td></tr>", it.iteration,
                        Human(static_cast<double>(it.allocated)),
                        Human(static_cast<double>(it.reserved)));
  }
  return fmt::format(
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{0}</title>\n<style>body{{"
      "font-family:sans-serif;margin:2em}}td,th{{padding:2px 10px;text-align:right}}</style>"
      "</head><body>\n<h1>{0}</h1>\n<p>Peak allocated <b>{1}</b>, peak reserved <b>{2}</b>, device "
      "peak <b>{3}</b> ({4}{5}{6}).</p>\n{7}\n<table><tr><th>iteration</th><th>peak allocated</th>"
      "<th>reserved at end</th></tr>{8}</table>\n<p>{9} allocation events. Generated by memest "
      "(symbolic backend).</p>\n</body></html>\n",
      Escape(title), Human(static_cast<double>(e.peak_allocated)),
      Human(static_cast<double>(e.peak_reserved)), Human(static_cast<double>(e.peak_device)),
      ToString(e.peak_phase), e.peak_node.empty() ? "" : " at ", Escape(e.peak_node),
      Svg(sim, title), rows, sim.events.size());
}

}  // namespace

std::string RenderTimeline(const Simulation& sim, TimelineFormat format, std::string_view title) {
  switch (format) {
    case TimelineFormat::kJson:
      return Json(sim, title);
    case TimelineFormat::kCsv:
      return Csv(sim);
    case TimelineFormat::kSvg:
      return Svg(sim, title);
    case TimelineFormat::kHtml:
      return Html(sim, title);
  }
  return {};
}

}  // namespace memest::symbolic
