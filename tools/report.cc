// tools/report.cc -- table / markdown / JSON / CSV rendering of memest results.
//
// Layout of the human table (one backend):
//   model:  <path>  (<nodes> nodes, <parameters> parameters)
//   setup:  <mode> | <batch/dims> | <optimizer> | <precision> | loss |
//   allocator | backend gpu:    <name> (<display name>), usable <capacity> of
//   <total> total <blank> component / bytes / size / share rows, a rule, total
//   (device peak), peak allocated, peak reserved, [uncertainty], gpu usable
//   capacity <blank> result: fits | does not fit, with headroom peak:   phase
//   and node
// With several backends the table has one "size" + "bytes" column pair per
// backend and the fit/headroom/phase/node facts become rows; unavailable or
// failed backends are footnotes. Only ASCII is used so that column widths are
// byte counts.
#include "tools/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "base/json_fields.h"

namespace memest::cli {
namespace {

using Json = nlohmann::ordered_json;

// The breakdown components, in display order. The JSON/CSV key is the Breakdown
// field name.
struct Component {
  const char* label;
  const char* key;
  uint64_t Breakdown::*field;
};
constexpr Component kComponents[] = {
    {"weights", "weights", &Breakdown::weights},
    {"gradients", "gradients", &Breakdown::gradients},
    {"optimizer state", "optimizer_state", &Breakdown::optimizer_state},
    {"saved activations", "saved_activations", &Breakdown::saved_activations},
    {"transient/workspace", "transient", &Breakdown::transient},
    {"allocator rounding", "allocator_overhead", &Breakdown::allocator_overhead},
    {"cached but free", "cached_free", &Breakdown::cached_free},
    {"CUDA context", "cuda_context", &Breakdown::cuda_context},
    {"library memory", "library_memory", &Breakdown::library_memory},
    {"unaccounted", "unaccounted", &Breakdown::unaccounted},
    {"collective buffers", "collective_buffers", &Breakdown::collective_buffers},
    {"NCCL buffers", "nccl_buffers", &Breakdown::nccl_buffers},
};

// The many-GPU components: shown in text and markdown only when the job has more than one GPU.
bool IsParallelComponent(const Component& c) {
  return c.field == &Breakdown::collective_buffers || c.field == &Breakdown::nccl_buffers;
}

// The per-category maxima over the step (Estimate::largest), in display order.
struct LargestComponent {
  const char* label;
  const char* key;
  CategoryPeak CategoryMaxima::*field;
};
constexpr LargestComponent kLargest[] = {
    {"weights", "weights", &CategoryMaxima::weights},
    {"gradients", "gradients", &CategoryMaxima::gradients},
    {"optimizer state", "optimizer_state", &CategoryMaxima::optimizer_state},
    {"saved activations", "saved_activations", &CategoryMaxima::saved_activations},
    {"transient/workspace", "transient", &CategoryMaxima::transient},
    {"cached but free", "cached_free", &CategoryMaxima::cached_free},
};

// A JSON document as text, ending with a newline. Strings from the model or the
// command line (producer, node names, paths) may hold bytes that are not UTF-8;
// they become U+FFFD instead of making dump() throw.
std::string DumpJson(const Json& j) {
  return j.dump(2, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace) + "\n";
}

// ---------------------------------------------------------------------------------------------
// A plain grid of cells rendered either as aligned text or as a markdown table.

enum class Align { kLeft, kRight };

struct Grid {
  std::vector<std::string> header;
  std::vector<Align> align;                    // one per column
  std::vector<std::vector<std::string>> rows;  // an empty row is a horizontal rule
};

std::string RenderText(const Grid& grid) {
  const size_t ncol = grid.header.size();
  std::vector<size_t> width(ncol, 0);
  auto measure = [&](const std::vector<std::string>& row) {
    for (size_t c = 0; c < row.size() && c < ncol; ++c)
      width[c] = std::max(width[c], row[c].size());
  };
  measure(grid.header);
  for (const auto& row : grid.rows) measure(row);
  size_t total_width = 0;
  for (size_t c = 0; c < ncol; ++c) total_width += width[c] + (c ? 2 : 0);

  std::string out;
  auto emit = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t c = 0; c < ncol; ++c) {
      const std::string cell = c < row.size() ? row[c] : std::string();
      if (c) line += "  ";
      const size_t pad = width[c] - cell.size();
      if (grid.align[c] == Align::kRight) {
        line.append(pad, ' ');
        line += cell;
      } else {
        line += cell;
        line.append(pad, ' ');
      }
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line;
    out += '\n';
  };
  emit(grid.header);
  out.append(total_width, '-');
  out += '\n';
  for (const auto& row : grid.rows) {
    if (row.empty()) {
      out.append(total_width, '-');
      out += '\n';
    } else {
      emit(row);
    }
  }
  return out;
}

std::string MdEscape(std::string_view s) {
  std::string out;
  for (char ch : s) {
    if (ch == '|') out += '\\';
    out += ch;
  }
  return out;
}

std::string RenderMarkdown(const Grid& grid) {
  std::string out = "|";
  for (const auto& h : grid.header) out += " " + MdEscape(h) + " |";
  out += "\n|";
  for (Align a : grid.align) out += a == Align::kRight ? " ---: |" : " --- |";
  out += '\n';
  for (const auto& row : grid.rows) {
    if (row.empty()) continue;  // markdown tables have no inner rules
    out += "|";
    for (size_t c = 0; c < grid.header.size(); ++c) {
      out += " " + MdEscape(c < row.size() ? row[c] : std::string()) + " |";
    }
    out += '\n';
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Small formatting helpers.

std::string Quote(std::string_view s) { return fmt::format("\"{}\"", s); }

std::string BatchText(const Report& r) {
  std::vector<std::string> parts;
  if (r.max_batch_mode && r.max_dim == "batch") {
    parts.push_back("batch=max");
  } else if (r.options.batch) {
    parts.push_back(fmt::format("batch={}", *r.options.batch));
  }
  for (const auto& [name, value] : r.options.dims)
    parts.push_back(fmt::format("{}={}", name, value));
  if (r.max_batch_mode && r.max_dim != "batch") parts.push_back(r.max_dim + "=max");
  if (parts.empty()) return "batch as in model";
  return fmt::format("{}", fmt::join(parts, " "));
}

std::string AllocatorText(const Options& o, const GpuProfile& gpu) {
  std::string s = "allocator " + gpu.allocator;
  if (o.allocator.expandable_segments) s += "+expandable_segments";
  if (o.allocator.max_split_size)
    s += fmt::format("+max_split_size={}", *o.allocator.max_split_size);
  if (o.allocator.roundup_power2_divisions) {
    s += fmt::format("+roundup_power2_divisions={}", o.allocator.roundup_power2_divisions);
  }
  if (o.allocator.memory_fraction) {
    s += fmt::format("+memory_fraction={}", *o.allocator.memory_fraction);
  }
  return s;
}

// "64 GPUs = dp 16 x tp 4 x pp 1, zero2, sequence parallel"
std::string ParallelText(const Parallelism& p) {
  std::string out =
      fmt::format("{} GPUs = dp {} x tp {} x pp {}", p.world_size, p.DataParallel(), p.tp, p.pp);
  if (p.sharding != Sharding::kNone) out += fmt::format(", {}", ToString(p.sharding));
  if (p.sequence_parallel) out += ", sequence parallel";
  if (p.offload_optimizer) out += ", optimizer offloaded";
  if (p.offload_params) out += ", parameters offloaded";
  return out;
}

std::string SetupText(const Report& r) {
  const Options& o = r.options;
  std::vector<std::string> parts = {ToString(o.mode), BatchText(r)};
  if (o.mode == Mode::kTrain) {
    std::string opt = ToString(o.optimizer);
    if (o.optimizer_impl != OptimizerImpl::kForeach)
      opt += fmt::format(" {}", ToString(o.optimizer_impl));
    if (o.weight_decay != 0.0) opt += fmt::format(" (weight decay {})", o.weight_decay);
    parts.push_back(opt);
    if (o.micro_batches > 1) parts.push_back(fmt::format("{} micro-batches", o.micro_batches));
    if (o.checkpoint_segments > 1)
      parts.push_back(fmt::format("checkpoint {} segments", o.checkpoint_segments));
    if (o.checkpoint_blocks) parts.push_back("checkpoint every block");
    if (!o.outputs_held) parts.push_back("outputs dropped after the loss");
  }
  if (o.prefill) {
    parts.push_back(o.prefill->cache_emptied ? "after the prefill of its past, cache emptied"
                                             : "after the prefill of its past");
  }
  parts.push_back(ToString(o.precision));
  if (o.mode == Mode::kTrain) parts.push_back(std::string("loss ") + ToString(o.loss));
  if (o.parallel.enabled()) parts.push_back(ParallelText(o.parallel));
  parts.push_back(AllocatorText(o, r.gpu));
  parts.push_back((r.results.size() == 1 ? "backend " : "backends ") + r.backend_request);
  return fmt::format("{}", fmt::join(parts, " | "));
}

std::string GpuText(const GpuProfile& gpu) {
  return fmt::format("{} ({}), usable {} of {} total", gpu.name, gpu.display_name,
                     FormatBytes(gpu.usable_memory.bytes), FormatBytes(gpu.total_memory.bytes));
}

// 1234567 -> "1,234,567" (counts only; byte counts stay plain digits so
// they can be copied).
std::string Grouped(int64_t v) {
  const std::string digits = std::to_string(v < 0 ? 0 : v);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// "h200-141gb", "h200-141gb + h100-80gb" (also measured there), or "(any GPU)".
std::string StackGpus(const StackProfile& s) {
  if (s.gpu.empty()) return "(any GPU)";
  std::string out = s.gpu;
  for (const StackReplicate& r : s.also_measured_on) out += " + " + r.gpu;
  return out;
}

std::string StackText(const StackProfile& s) {
  std::string out = s.name;
  if (!s.gpu.empty()) {
    out += " (calibrated on " + s.gpu;
    for (const StackReplicate& r : s.also_measured_on) out += "; also measured on " + r.gpu;
    out += ")";
  }
  if (s.bands.empty()) return out + ", uncalibrated: no interval";
  for (const auto& [backend, b] : s.bands) {
    out +=
        fmt::format("; {} interval {:+.1f} % .. {:+.1f} % (covered {:.0f} % of {} held-out rows)",
                    backend, 100 * b.low, 100 * b.high, 100 * b.coverage, b.rows);
  }
  return out;
}

std::string HeaderText(const Report& r) {
  const ModelSummary& m = r.model;
  std::string out = fmt::format("model:  {}  ({} nodes, {} parameters, {})\n", r.model_path,
                                Grouped(m.node_count), Grouped(m.parameter_count),
                                FormatBytes(m.parameter_bytes));
  out += fmt::format("setup:  {}\n", SetupText(r));
  out += fmt::format("gpu:    {}\n", GpuText(r.gpu));
  out += fmt::format("stack:  {}\n", StackText(r.stack));
  return out;
}

std::string PhaseText(const Estimate& e) {
  std::string s = e.peak_phase == Phase::kUnknown ? std::string("phase unknown")
                                                  : std::string(ToString(e.peak_phase)) + " phase";
  if (!e.peak_node.empty()) s += ", at node " + Quote(e.peak_node);
  return s;
}

// "backward of iteration 1, at node "x""; "-" for a category that never held memory.
std::string MomentText(const CategoryPeak& p) {
  if (p.bytes == 0) return "-";
  if (p.iteration == 0) return "at start (model on the device)";
  if (p.phase == Phase::kUnknown) return fmt::format("start of iteration {}", p.iteration);
  std::string s = ToString(p.phase);
  if (p.iteration > 0) s += fmt::format(" of iteration {}", p.iteration);
  if (!p.node.empty()) s += ", at node " + Quote(p.node);
  return s;
}

std::string HeadroomText(const Fit& fit) {
  const uint64_t magnitude = fit.headroom < 0 ? uint64_t{0} - static_cast<uint64_t>(fit.headroom)
                                              : static_cast<uint64_t>(fit.headroom);
  return fmt::format("{} ({} bytes, {} of usable)", FormatBytes(magnitude), magnitude,
                     FormatPercent(magnitude, fit.capacity));
}

// How the verdict was judged, when it was not the plain point estimate: " (judged on the upper
// bound 12.3 GiB, margin 2 GiB)", and the memory fraction's limit on the reserved bytes.
std::string JudgedText(const Fit& fit) {
  std::vector<std::string> parts;
  if (fit.on_upper) parts.push_back("judged on the upper bound " + FormatBytes(fit.judged));
  if (fit.margin > 0) parts.push_back("safety margin " + FormatBytes(fit.margin));
  if (fit.reserved_limit > 0) {
    parts.push_back("the memory fraction lets the allocator reserve " +
                    FormatBytes(fit.reserved_limit));
  }
  return parts.empty() ? "" : fmt::format(" ({})", fmt::join(parts, ", "));
}

std::string FitSentence(const Fit& fit, const GpuProfile& gpu) {
  if (fit.fits) {
    return fmt::format("fits on {}, headroom {}{}", gpu.name, HeadroomText(fit), JudgedText(fit));
  }
  return fmt::format("does not fit on {}, over by {}{}", gpu.name, HeadroomText(fit),
                     JudgedText(fit));
}

std::string IntervalText(const Estimate& e) {
  auto side = [](const std::optional<uint64_t>& v) {
    return v ? FormatBytes(*v) : std::string("?");
  };
  return side(e.device_low) + " .. " + side(e.device_high);
}

bool HasInterval(const Estimate& e) {
  return e.device_low.has_value() || e.device_high.has_value();
}

std::string StatusLabel(const Status& s) {
  return s.code() == ErrorCode::kUnavailable ? "unavailable" : "error";
}

// "<backend>: unavailable: <reason>" or "<backend>: error: <code>: <message>".
std::string FailureNote(const BackendResult& r) {
  if (r.status.code() == ErrorCode::kUnavailable) {
    return fmt::format("{}: unavailable: {}", r.backend, r.status.message());
  }
  return fmt::format("{}: error: {}", r.backend, r.status.ToString());
}

std::string VerdictSentence(const Report& r) {
  const Verdict v = OverallVerdict(r.results);
  size_t ok = 0;
  for (const auto& res : r.results) ok += res.status.ok();
  if (r.results.size() == 1) {
    const BackendResult& res = r.results.front();
    if (!res.status.ok()) return "result: " + FailureNote(res);
    if (r.max_batch_mode && res.max_batch.value_or(0) == 0) {
      return fmt::format("result: even {} 1 {}", r.max_dim, FitSentence(res.fit, r.gpu));
    }
    return "result: " + FitSentence(res.fit, r.gpu);
  }
  std::vector<std::string> names;
  switch (v) {
    case Verdict::kDoesNotFit:
      for (const auto& res : r.results) {
        const bool no = r.max_batch_mode ? res.max_batch.value_or(1) == 0 : !res.fit.fits;
        if (res.status.ok() && no) names.push_back(res.backend);
      }
      return fmt::format(
          "result: does not fit on {} (conservative verdict: {} of {} "
          "backend{} with a result say{} so: {})",
          r.gpu.name, names.size(), ok, ok == 1 ? "" : "s", names.size() == 1 ? "s" : "",
          fmt::join(names, ", "));
    case Verdict::kFits:
      for (const auto& res : r.results) {
        if (res.status.ok()) names.push_back(res.backend);
      }
      return fmt::format(
          "result: fits on {} (conservative verdict over {} backend{} with a "
          "result: {})",
          r.gpu.name, ok, ok == 1 ? "" : "s", fmt::join(names, ", "));
    case Verdict::kError:
      for (const auto& res : r.results) {
        if (!res.status.ok() && (ok == 0 || res.status.code() != ErrorCode::kUnavailable)) {
          names.push_back(res.backend);
        }
      }
      return fmt::format("result: unknown, no conclusive estimate (failed: {})",
                         fmt::join(names, ", "));
  }
  return "result: unknown";
}

// ---------------------------------------------------------------------------------------------
// Tables.

// The breakdown grid. Single backend: bytes | size | share. Several: size |
// bytes per backend, plus fit facts as rows.
Grid BuildGrid(const Report& r) {
  Grid g;
  const bool single = r.results.size() == 1;
  g.header.push_back("component");
  g.align.push_back(Align::kLeft);
  if (single) {
    g.header.insert(g.header.end(), {"bytes", "size", "share"});
    g.align.insert(g.align.end(), {Align::kRight, Align::kRight, Align::kRight});
  } else {
    for (const auto& res : r.results) {
      g.header.insert(g.header.end(), {res.backend, "bytes"});
      g.align.insert(g.align.end(), {Align::kRight, Align::kRight});
    }
  }
  bool any_interval = false;
  for (const auto& res : r.results) any_interval |= res.status.ok() && HasInterval(res.estimate);

  // Adds one row; `cell(res)` returns {size text, bytes text, share text} for a
  // successful result.
  auto add = [&](std::string label, auto cell) {
    std::vector<std::string> row = {std::move(label)};
    const bool first_failure_cell = g.rows.empty();
    for (const auto& res : r.results) {
      if (!res.status.ok()) {
        row.push_back(first_failure_cell ? StatusLabel(res.status) : "-");
        row.push_back(single ? "-" : "");
        if (single) row.push_back("");
        continue;
      }
      auto [size, bytes, share] = cell(res);
      if (single) {
        row.insert(row.end(), {bytes, size, share});
      } else {
        row.insert(row.end(), {size, bytes});
      }
    }
    g.rows.push_back(std::move(row));
  };
  using Cells = std::tuple<std::string, std::string, std::string>;
  auto bytes_cells = [](uint64_t v, uint64_t total) {
    return Cells{FormatBytes(v), std::to_string(v), FormatPercent(v, total)};
  };

  if (r.max_batch_mode && !single) {
    add("max " + r.max_dim, [](const BackendResult& res) {
      return Cells{std::to_string(res.max_batch.value_or(0)), "", ""};
    });
  }
  for (const Component& c : kComponents) {
    if (IsParallelComponent(c) && !r.options.parallel.enabled()) continue;
    add(c.label, [&](const BackendResult& res) {
      return bytes_cells(res.estimate.breakdown.*c.field, res.estimate.peak_device);
    });
  }
  g.rows.push_back({});
  add("total (device peak)", [&](const BackendResult& res) {
    return bytes_cells(res.estimate.peak_device, res.estimate.peak_device);
  });
  add("peak allocated", [&](const BackendResult& res) {
    return Cells{FormatBytes(res.estimate.peak_allocated),
                 std::to_string(res.estimate.peak_allocated), ""};
  });
  add("peak reserved", [&](const BackendResult& res) {
    return Cells{FormatBytes(res.estimate.peak_reserved),
                 std::to_string(res.estimate.peak_reserved), ""};
  });
  if (any_interval) {
    add("device interval", [&](const BackendResult& res) {
      return Cells{HasInterval(res.estimate) ? IntervalText(res.estimate) : "-", "", ""};
    });
  }
  if (single) {
    std::vector<std::string> row = {
        "gpu usable capacity", std::to_string(r.gpu.usable_memory.bytes),
        FormatBytes(r.gpu.usable_memory.bytes),
        FormatPercent(r.results.front().status.ok() ? r.results.front().estimate.peak_device : 0,
                      r.gpu.usable_memory.bytes) +
            " used"};
    if (!r.results.front().status.ok()) row.back() = "";
    g.rows.push_back(std::move(row));
    return g;
  }
  g.rows.push_back({});
  add("fits", [&](const BackendResult& res) { return Cells{res.fit.fits ? "yes" : "NO", "", ""}; });
  add("headroom", [&](const BackendResult& res) {
    return Cells{FormatSignedBytes(res.fit.headroom), std::to_string(res.fit.headroom), ""};
  });
  add("peak phase", [&](const BackendResult& res) {
    return Cells{
        res.estimate.peak_phase == Phase::kUnknown ? "unknown" : ToString(res.estimate.peak_phase),
        "", ""};
  });
  add("peak node", [&](const BackendResult& res) {
    return Cells{res.estimate.peak_node.empty() ? "-" : res.estimate.peak_node, "", ""};
  });
  return g;
}

// "1 evaluation", "6 evaluations".
std::string Count(int64_t n, std::string_view noun) {
  return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s");
}

// ", 3 traces and 5 allocator replays" when the search replayed the symbolic step.
std::string ReplayCount(const BackendResult& res) {
  if (res.max_batch_traces == 0) return "";
  return fmt::format(", {} and {}", Count(res.max_batch_traces, "trace"),
                     Count(res.max_batch_replays, "allocator replay"));
}

std::string MaxBatchSentence(const Report& r) {
  if (r.results.size() == 1) {
    const BackendResult& res = r.results.front();
    if (!res.status.ok()) return "";
    if (res.max_batch.value_or(0) == 0) {
      return fmt::format("max {0}: none -- even {0} 1 does not fit on {1} ({2}, {3})\n", r.max_dim,
                         r.gpu.name, res.backend, Count(res.max_batch_evaluations, "evaluation"));
    }
    return fmt::format("max {}: {} fits on {} ({}, {}{}, search limit {})\n", r.max_dim,
                       *res.max_batch, r.gpu.name, res.backend,
                       Count(res.max_batch_evaluations, "evaluation"), ReplayCount(res),
                       r.max_batch_limit);
  }
  const auto mb = ConservativeMaxBatch(r.results);
  if (!mb) return "";
  if (*mb == 0)
    return fmt::format(
        "max {0}: none -- at least one backend says {0} 1 does not fit on "
        "{1}\n",
        r.max_dim, r.gpu.name);
  return fmt::format(
      "max {}: {} fits on {} (conservative: the smallest over the "
      "backends)\n",
      r.max_dim, *mb, r.gpu.name);
}

// True when the table shows exactly the backend that drew the timeline.
bool TimelineMatchesTable(const Report& r) {
  return r.timeline && r.results.size() == 1 && r.results.front().backend == r.timeline->backend;
}

std::string TimelineSentence(const Report& r) {
  const TimelineInfo& t = *r.timeline;
  std::string out = fmt::format("timeline: {} (drawn by the {} backend", t.path, t.backend);
  if (t.batch) out += fmt::format(", batch {}", *t.batch);
  if (!TimelineMatchesTable(r)) {
    std::vector<std::string> table;
    for (const auto& res : r.results) table.push_back(res.backend);
    out += fmt::format("; the table is {}", fmt::join(table, ", "));
  }
  return out + ")";
}

// The largest each category grew to over the simulated step, each at its own moment: the
// breakdown above is one moment (the device peak), often the optimizer step, when the
// activations are already freed and their memory sits cached but free.
std::string LargestText(const BackendResult& res, bool markdown) {
  Grid g;
  g.header = {"largest over the step (" + res.backend + ")", "bytes", "size", "when"};
  g.align = {Align::kLeft, Align::kRight, Align::kRight, Align::kLeft};
  for (const LargestComponent& c : kLargest) {
    const CategoryPeak& p = (*res.estimate.largest).*c.field;
    g.rows.push_back({c.label, std::to_string(p.bytes), FormatBytes(p.bytes), MomentText(p)});
  }
  return markdown ? RenderMarkdown(g) : RenderText(g);
}

// --per-rank: one row per group of ranks holding the same memory (Estimate::ranks).
Grid RankGrid(const Estimate& e) {
  Grid g;
  g.header = {"ranks",     "stage",       "blocks",      "in flight",  "weights",
              "gradients", "optimizer",   "activations", "collective", "NCCL",
              "host",      "device peak", "note"};
  g.align = {Align::kLeft,  Align::kRight, Align::kRight, Align::kRight, Align::kRight,
             Align::kRight, Align::kRight, Align::kRight, Align::kRight, Align::kRight,
             Align::kRight, Align::kRight, Align::kLeft};
  for (const RankPeak& rk : e.ranks) {
    const Breakdown& b = rk.breakdown;
    g.rows.push_back({fmt::format("{}-{}", rk.first_rank, rk.last_rank), std::to_string(rk.stage),
                      std::to_string(rk.layers), std::to_string(rk.in_flight),
                      FormatBytes(b.weights), FormatBytes(b.gradients),
                      FormatBytes(b.optimizer_state), FormatBytes(b.saved_activations),
                      FormatBytes(b.collective_buffers), FormatBytes(b.nccl_buffers),
                      FormatBytes(rk.host_bytes), FormatBytes(rk.peak_device), rk.note});
  }
  return g;
}

std::string RenderReportTable(const Report& r, bool markdown) {
  std::string out;
  if (markdown) {
    out += fmt::format("**memest** `{}` ({} nodes, {} parameters)\n\n", r.model_path,
                       Grouped(r.model.node_count), Grouped(r.model.parameter_count));
    out += fmt::format("- setup: {}\n- gpu: {}\n\n", SetupText(r), GpuText(r.gpu));
  } else {
    out += HeaderText(r);
    out += '\n';
  }
  const std::string mb = r.max_batch_mode ? MaxBatchSentence(r) : "";
  if (!mb.empty()) out += mb + "\n";
  const Grid grid = BuildGrid(r);
  out += markdown ? RenderMarkdown(grid) : RenderText(grid);
  out += '\n';
  const std::string bullet = markdown ? "- " : "";
  for (const auto& res : r.results) {
    if (!res.status.ok()) out += bullet + FailureNote(res) + '\n';
  }
  out += bullet + VerdictSentence(r) + '\n';
  if (r.results.size() == 1 && r.results.front().status.ok()) {
    out += bullet + "peak: " + PhaseText(r.results.front().estimate) + '\n';
  }
  if (r.timeline) out += bullet + TimelineSentence(r) + '\n';
  for (const auto& res : r.results) {
    if (res.status.ok() && res.estimate.largest) out += '\n' + LargestText(res, markdown);
  }
  if (r.per_rank) {
    for (const auto& res : r.results) {
      if (res.status.ok() && !res.estimate.ranks.empty()) {
        const Grid g = RankGrid(res.estimate);
        out += '\n' + (markdown ? RenderMarkdown(g) : RenderText(g));
      }
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// JSON.

Json ModelJson(const Report& r) {
  const ModelSummary& m = r.model;
  Json opsets = Json::object();
  for (const auto& [domain, version] : m.opsets)
    opsets[domain.empty() ? "ai.onnx" : domain] = version;
  Json inputs = Json::array();
  for (const auto& in : m.data_inputs) {
    Json dims = Json::array();
    for (const auto& d : in.dims) {
      if (!d.param.empty()) {
        dims.push_back(d.param);
      } else if (d.value >= 0) {
        dims.push_back(d.value);
      } else {
        dims.push_back(nullptr);
      }
    }
    inputs.push_back(Json{{"name", in.name}, {"dtype", in.dtype}, {"dims", dims}});
  }
  return Json{{"path", r.model_path},
              {"producer", m.producer},
              {"ir_version", m.ir_version},
              {"opsets", opsets},
              {"nodes", m.node_count},
              {"subgraph_nodes", m.subgraph_node_count},
              {"parameters", m.parameter_count},
              {"parameter_bytes", m.parameter_bytes},
              {"inputs", inputs},
              {"symbolic_dims", m.symbolic_dims},
              {"op_types", m.op_types},
              {"diagnostics", base::DiagnosticsJson(m.diagnostics)}};
}

// The options object: the library's encoding (memest/json.h), so that a program can send it back.
Json OptionsJson(const Options& o) { return Json::parse(OptionsToJson(o)); }

// One profile in the table's own format (GpuProfilesToJson, what --gpu-file reads back), with
// the compute capability also as one string and "mig" null for a whole GPU.
Json GpuJson(const GpuProfile& g) {
  Json j = Json::parse(GpuProfilesToJson({g}))["profiles"][0];
  j["compute_capability"] = fmt::format("{}.{}", g.sm_major, g.sm_minor);
  if (!j.contains("mig")) j["mig"] = nullptr;
  return j;
}

Json StackJson(const StackProfile& s) { return Json::parse(StackProfileToJson(s))["stack"]; }

// One backend's result: the library's estimate object with its fit (memest/json.h
// EstimateToJson) and the CLI's own fields -- ok, the per-category maxima, the max-batch search.
Json ResultJson(const BackendResult& res, bool max_batch_mode, const std::string& max_dim) {
  if (!res.status.ok()) {
    return Json{
        {"backend", res.backend},
        {"ok", false},
        {"error", {{"code", ErrorCodeName(res.status.code())}, {"message", res.status.message()}}},
        {"diagnostics", Json::array()}};
  }
  const Estimate& e = res.estimate;
  Json j = Json::parse(EstimateToJson(e, &res.fit));
  j["backend"] = res.backend;
  j["ok"] = true;
  j["largest"] = nullptr;
  if (e.largest) {
    Json largest = Json::object();
    for (const LargestComponent& c : kLargest) {
      const CategoryPeak& p = (*e.largest).*c.field;
      largest[c.key] = {{"bytes", p.bytes},
                        {"phase", ToString(p.phase)},
                        {"iteration", p.iteration},
                        {"node", p.node}};
    }
    j["largest"] = largest;
  }
  if (max_batch_mode) {
    j["max_batch"] = {{"dim", max_dim},
                      {"batch", res.max_batch.value_or(0)},
                      {"evaluations", res.max_batch_evaluations},
                      {"traces", res.max_batch_traces},
                      {"replays", res.max_batch_replays},
                      {"replayed_requests", res.max_batch_replayed_requests}};
  }
  return j;
}

const char* VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kFits:
      return "fits";
    case Verdict::kDoesNotFit:
      return "does_not_fit";
    case Verdict::kError:
      return "error";
  }
  return "error";
}

std::string RenderReportJson(const Report& r) {
  Json j = {{"schema", kEstimateSchema},   {"memest_version", r.memest_version},
            {"model", ModelJson(r)},       {"options", OptionsJson(r.options)},
            {"gpu", GpuJson(r.gpu)},       {"stack", StackJson(r.stack)},
            {"backend", r.backend_request}};
  Json results = Json::array();
  for (const auto& res : r.results) {
    results.push_back(ResultJson(res, r.max_batch_mode, r.max_dim));
  }
  j["results"] = results;
  j["verdict"] = VerdictName(OverallVerdict(r.results));
  if (r.max_batch_mode) {
    Json mb = {{"dim", r.max_dim}, {"batch", nullptr}, {"limit", r.max_batch_limit}};
    if (auto b = ConservativeMaxBatch(r.results)) mb["batch"] = *b;
    j["max_batch"] = mb;
  }
  if (r.timeline) {
    j["timeline"] = {{"path", r.timeline->path},
                     {"backend", r.timeline->backend},
                     {"batch", nullptr},
                     {"same_backend_as_results", TimelineMatchesTable(r)}};
    if (r.timeline->batch) j["timeline"]["batch"] = *r.timeline->batch;
  }
  return DumpJson(j);
}

// ---------------------------------------------------------------------------------------------
// CSV (RFC 4180 quoting).

std::string CsvField(std::string_view s) {
  if (s.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(s);
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"') out += '"';
    out += ch;
  }
  return out + "\"";
}

std::string CsvLine(const std::vector<std::string>& fields) {
  std::string out;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i) out += ',';
    out += CsvField(fields[i]);
  }
  return out + "\n";
}

// CSV columns are only ever appended: a breakdown component added after the first release is
// written after the last older column, not in display order.
bool IsAppendedCsvColumn(const Component& c) {
  return c.field == &Breakdown::cached_free || c.field == &Breakdown::library_memory ||
         IsParallelComponent(c);
}

std::string RenderReportCsv(const Report& r) {
  std::vector<std::string> header = {
      "backend", "ok",       "error_code",     "error_message", "model",      "mode",
      "batch",   "dims",     "optimizer",      "weight_decay",  "precision",  "loss",
      "gpu",     "capacity", "peak_allocated", "peak_reserved", "peak_device"};
  for (const Component& c : kComponents) {
    if (!IsAppendedCsvColumn(c)) header.push_back(c.key);
  }
  header.insert(header.end(),
                {"peak_phase", "peak_node", "device_low", "device_high", "fits", "headroom",
                 "max_batch", "diagnostics", "cached_free", "library_memory", "stack", "fit_on",
                 "judged_peak", "collective_buffers", "nccl_buffers"});
  std::string out = CsvLine(header);
  const Options& o = r.options;
  std::vector<std::string> dims;
  for (const auto& [name, value] : o.dims) dims.push_back(fmt::format("{}={}", name, value));
  for (const auto& res : r.results) {
    const Estimate& e = res.estimate;
    const bool ok = res.status.ok();
    auto num = [ok](auto v) { return ok ? std::to_string(v) : std::string(); };
    std::vector<std::string> row = {res.backend,
                                    ok ? "true" : "false",
                                    ok ? "" : ErrorCodeName(res.status.code()),
                                    ok ? "" : res.status.message(),
                                    r.model_path,
                                    ToString(o.mode),
                                    o.batch ? std::to_string(*o.batch) : "",
                                    fmt::format("{}", fmt::join(dims, ";")),
                                    ToString(o.optimizer),
                                    fmt::format("{}", o.weight_decay),
                                    ToString(o.precision),
                                    ToString(o.loss),
                                    r.gpu.name,
                                    std::to_string(r.gpu.usable_memory.bytes),
                                    num(e.peak_allocated),
                                    num(e.peak_reserved),
                                    num(e.peak_device)};
    for (const Component& c : kComponents) {
      if (!IsAppendedCsvColumn(c)) row.push_back(num(e.breakdown.*c.field));
    }
    row.push_back(ok ? ToString(e.peak_phase) : "");
    row.push_back(ok ? e.peak_node : "");
    row.push_back(ok && e.device_low ? std::to_string(*e.device_low) : "");
    row.push_back(ok && e.device_high ? std::to_string(*e.device_high) : "");
    row.push_back(ok ? (res.fit.fits ? "true" : "false") : "");
    row.push_back(num(res.fit.headroom));
    row.push_back(ok && r.max_batch_mode ? std::to_string(res.max_batch.value_or(0)) : "");
    row.push_back(num(e.diagnostics.size()));
    row.push_back(num(e.breakdown.cached_free));
    row.push_back(num(e.breakdown.library_memory));
    row.push_back(r.stack.name);
    row.push_back(ToString(o.fit.on));
    row.push_back(num(res.fit.judged));
    row.push_back(num(e.breakdown.collective_buffers));
    row.push_back(num(e.breakdown.nccl_buffers));
    out += CsvLine(row);
  }
  return out;
}

std::string YesNo(bool b) { return b ? "yes" : "no"; }

std::string Calibration(const GpuProfile& g) {
  const std::pair<const char*, const ProfileValue*> values[] = {
      {"total", &g.total_memory}, {"usable", &g.usable_memory}, {"workspace", &g.cublas_workspace}};
  std::vector<std::string> done;
  for (const auto& [name, v] : values) {
    if (v->calibrated) done.push_back(name);
  }
  if (done.empty()) return "no";
  if (done.size() == std::size(values)) return "yes";
  return fmt::format("partly ({})", fmt::join(done, ", "));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Public functions.

Verdict OverallVerdict(const std::vector<BackendResult>& results) {
  bool any_ok = false;
  bool any_error = false;
  bool any_no = false;
  for (const auto& res : results) {
    if (res.status.ok()) {
      any_ok = true;
      const bool fits = res.max_batch ? *res.max_batch > 0 : res.fit.fits;
      any_no |= !fits;
    } else if (res.status.code() != ErrorCode::kUnavailable) {
      any_error = true;
    }
  }
  if (any_no) return Verdict::kDoesNotFit;
  if (any_error || !any_ok) return Verdict::kError;
  return Verdict::kFits;
}

std::optional<int64_t> ConservativeMaxBatch(const std::vector<BackendResult>& results) {
  std::optional<int64_t> best;
  for (const auto& res : results) {
    if (!res.status.ok() || !res.max_batch) continue;
    best = best ? std::min(*best, *res.max_batch) : *res.max_batch;
  }
  return best;
}

std::string ReplaceInvalidUtf8(std::string_view s) {
  const std::string quoted =
      Json(std::string(s)).dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
  return Json::parse(quoted).get<std::string>();
}

std::string RenderReport(const Report& report, Format format) {
  switch (format) {
    case Format::kTable:
      return RenderReportTable(report, /*markdown=*/false);
    case Format::kMd:
      return RenderReportTable(report, /*markdown=*/true);
    case Format::kJson:
      return RenderReportJson(report);
    case Format::kCsv:
      return RenderReportCsv(report);
  }
  return "";
}

std::string RenderBackends(const std::vector<BackendInfo>& backends, Format format,
                           std::string_view memest_version) {
  if (format == Format::kJson) {
    Json arr = Json::array();
    for (const auto& b : backends) {
      arr.push_back(Json{{"name", b.name},
                         {"available", b.available},
                         {"description", b.description},
                         {"reason", b.reason}});
    }
    Json j = {{"schema", kBackendsSchema}, {"memest_version", memest_version}, {"backends", arr}};
    return DumpJson(j);
  }
  if (format == Format::kCsv) {
    std::string out = CsvLine({"name", "available", "description", "reason"});
    for (const auto& b : backends)
      out += CsvLine({b.name, b.available ? "true" : "false", b.description, b.reason});
    return out;
  }
  Grid g;
  g.header = {"backend", "available", "description / reason"};
  g.align = {Align::kLeft, Align::kLeft, Align::kLeft};
  for (const auto& b : backends) {
    g.rows.push_back(
        {b.name, YesNo(b.available), b.available ? b.description : "unavailable: " + b.reason});
  }
  return format == Format::kMd ? RenderMarkdown(g) : RenderText(g);
}

std::string RenderGpus(const std::vector<GpuProfile>& gpus, const std::vector<StackProfile>& stacks,
                       Format format, std::string_view memest_version) {
  if (format == Format::kJson) {
    Json arr = Json::array();
    for (const auto& g : gpus) arr.push_back(GpuJson(g));
    Json st = Json::array();
    for (const auto& s : stacks) st.push_back(StackJson(s));
    Json j = {
        {"schema", kGpusSchema}, {"memest_version", memest_version}, {"gpus", arr}, {"stacks", st}};
    return DumpJson(j);
  }
  if (format == Format::kCsv) {
    std::string out = CsvLine({"name", "display_name", "compute_capability", "allocator",
                               "total_memory", "usable_memory", "cublas_workspace", "calibrated"});
    for (const auto& g : gpus) {
      out += CsvLine({g.name, g.display_name, fmt::format("{}.{}", g.sm_major, g.sm_minor),
                      g.allocator, std::to_string(g.total_memory.bytes),
                      std::to_string(g.usable_memory.bytes),
                      std::to_string(g.cublas_workspace.bytes), Calibration(g)});
    }
    return out;
  }
  Grid g;
  g.header = {"gpu", "display name", "total", "usable", "cuBLAS workspace", "calibrated"};
  g.align = {Align::kLeft, Align::kLeft, Align::kRight, Align::kRight, Align::kRight, Align::kLeft};
  for (const auto& p : gpus) {
    g.rows.push_back({p.name, p.display_name, FormatBytes(p.total_memory.bytes),
                      FormatBytes(p.usable_memory.bytes), FormatBytes(p.cublas_workspace.bytes),
                      Calibration(p)});
  }
  Grid s;
  s.header = {"stack",           "calibrated on", "context",       "library",
              "conv ws sp / pw", "rnn ws",        "symbolic band", "rows"};
  s.align = {Align::kLeft,  Align::kLeft,  Align::kRight, Align::kRight,
             Align::kRight, Align::kRight, Align::kRight, Align::kRight};
  for (const auto& st : stacks) {
    const ResidualBand* b = st.band("symbolic");
    s.rows.push_back({st.name, StackGpus(st), FormatBytes(st.cuda_context.bytes),
                      FormatBytes(st.library_memory.bytes),
                      fmt::format("{:.3g} x{} / {:.3g} x", st.conv_workspace.value,
                                  st.conv_weight_gradient_extra.bytes > 0
                                      ? " +" + FormatBytes(st.conv_weight_gradient_extra.bytes)
                                      : "",
                                  st.conv_workspace_pointwise.value),
                      fmt::format("{:.3g} x", st.rnn_workspace.value),
                      b ? fmt::format("{:+.1f} % .. {:+.1f} %", 100 * b->low, 100 * b->high) : "-",
                      b ? std::to_string(b->rows) : "0"});
  }
  const bool md = format == Format::kMd;
  std::string out = md ? RenderMarkdown(g) : RenderText(g);
  out += "\n";
  out += md ? RenderMarkdown(s) : RenderText(s);
  if (format == Format::kTable) {
    out +=
        "\nconv ws sp / pw: the cuDNN workspace of a spatial / a pointwise or depthwise "
        "convolution call, x its input + output + weight bytes (+ what a spatial "
        "weight-gradient call takes more)\n"
        "rnn ws: the cuDNN workspace of a recurrent-layer call, x its output bytes (hidden sizes "
        "below 256 counted as 256)\n"
        "the first stack is the default (--stack NAME, or --stack-file FILE from memest "
        "calibrate); exact bytes and the source of every value: memest --list-gpus -o json\n";
  }
  return out;
}

std::string FormatDiagnostic(const Diagnostic& d, std::string_view backend) {
  std::string out = d.severity == Severity::kWarning ? "warning: " : "info: ";
  if (!backend.empty()) out += fmt::format("[{}] ", backend);
  if (!d.code.empty()) out += d.code + ": ";
  out += d.message;
  std::vector<std::string> where;
  if (!d.node.empty()) where.push_back("node " + Quote(d.node));
  if (!d.op_type.empty()) where.push_back("op " + d.op_type);
  if (!where.empty()) out += fmt::format(" ({})", fmt::join(where, ", "));
  return out;
}

std::string FormatBytes(uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes) / 1024.0;
  size_t unit = 0;
  // Switch units before rounding would print "1024.00".
  while (v >= 1023.995 && unit + 1 < std::size(kUnits)) {
    v /= 1024.0;
    ++unit;
  }
  return fmt::format("{:.2f} {}", v, kUnits[unit]);
}

std::string FormatSignedBytes(int64_t bytes) {
  if (bytes >= 0) return FormatBytes(static_cast<uint64_t>(bytes));
  return "-" + FormatBytes(uint64_t{0} - static_cast<uint64_t>(bytes));
}

std::string FormatPercent(uint64_t part, uint64_t whole) {
  if (whole == 0) return "-";
  return fmt::format("{:.1f}%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

namespace {

std::string JoinWrapped(const std::vector<std::string>& names, size_t width) {
  std::string out, line = " ";
  for (const auto& n : names) {
    if (line.size() + n.size() + 1 > width && line.size() > 1) {
      out += line + "\n";
      line = " ";
    }
    line += " " + n;
  }
  if (line.size() > 1) out += line + "\n";
  return out;
}
}  // namespace

std::string RenderCoverage(const OpCoverage& all, const ModelCoverage* model,
                           std::string_view model_path, Format format,
                           std::string_view memest_version) {
  const size_t covered = all.onnx_ops.size() - all.without_rule.size();
  if (format == Format::kJson) {
    Json j = {{"schema", "memest.coverage/1"},
              {"memest_version", memest_version},
              {"rules", all.rules},
              {"onnx_ops", all.onnx_ops.size()},
              {"onnx_ops_with_rule", covered},
              {"onnx_ops_without_rule", all.without_rule},
              {"onnx_ops_without_shape_rule", all.without_shape_rule}};
    if (model != nullptr) {
      j["model"] = {{"path", model_path},
                    {"op_types", model->op_types},
                    {"without_rule", model->without_rule},
                    {"without_shape_rule", model->without_shape_rule}};
    }
    return DumpJson(j);
  }
  std::string out = fmt::format(
      "rule table: {} rules; {} of {} ONNX operators have one, {} have a shape rule\n", all.rules,
      covered, all.onnx_ops.size(), all.onnx_ops.size() - all.without_shape_rule.size());
  out += fmt::format("ONNX operators without a rule ({}):\n", all.without_rule.size());
  out += JoinWrapped(all.without_rule, 100);
  std::vector<std::string> shape_only;
  std::set_difference(all.without_shape_rule.begin(), all.without_shape_rule.end(),
                      all.without_rule.begin(), all.without_rule.end(),
                      std::back_inserter(shape_only));
  out += fmt::format("with a rule but no shape rule (ONNX shape inference is used) ({}):\n",
                     shape_only.size());
  out += JoinWrapped(shape_only, 100);
  if (model != nullptr) {
    out += fmt::format("\n{}: {} op types; without a rule: {}; without a shape rule: {}\n",
                       model_path, model->op_types.size(),
                       model->without_rule.empty()
                           ? "none"
                           : fmt::format("{}", fmt::join(model->without_rule, ", ")),
                       model->without_shape_rule.empty()
                           ? "none"
                           : fmt::format("{}", fmt::join(model->without_shape_rule, ", ")));
  }
  return out;
}

}  // namespace memest::cli
