// api/measured_jobs.cc -- the plain CSV of measured jobs that `memest calibrate` reads
// (memest/calibrate.h, ReadMeasuredJobsCsv; the columns are in docs/stacks.md).
//
// Policy: input from users, so every line is checked and an error names the file, the line and
// the column. Fields may be double-quoted (a quote inside doubled); no multi-line fields. Files
// above 16 MiB, lines above 4 KiB and more than 100,000 rows are refused. Each model file is
// loaded once however many rows name it.
#include <sys/stat.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memest/calibrate.h"

namespace memest {
namespace {

constexpr uint64_t kMaxFileBytes = uint64_t{16} << 20;
constexpr size_t kMaxLine = 4096;
constexpr size_t kMaxRows = 100000;

Result<std::vector<std::string>> SplitCsvLine(std::string_view line, const std::string& where) {
  std::vector<std::string> out;
  std::string field;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"' && field.empty()) {
      quoted = true;
    } else if (c == ',') {
      out.push_back(std::move(field));
      field.clear();
    } else {
      field += c;
    }
  }
  if (quoted) return InvalidArgument(where + ": unterminated quote");
  out.push_back(std::move(field));
  return out;
}

Result<double> ParseNumber(const std::string& text, const std::string& where) {
  double v = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || ptr != end || !std::isfinite(v)) {
    return InvalidArgument(where + ": '" + text + "' is not a number");
  }
  return v;
}

// Applies the optional knob columns of one row to `o`.
Status ApplyKnobs(const std::map<std::string, std::string>& row, Options* o,
                  const std::string& where) {
  auto get = [&](const char* key) -> std::optional<std::string> {
    auto it = row.find(key);
    if (it == row.end() || it->second.empty()) return std::nullopt;
    return it->second;
  };
  if (auto v = get("mode")) {
    MEMEST_ASSIGN_OR_RETURN(o->mode, ParseMode(*v));
  }
  if (auto v = get("optimizer")) {
    MEMEST_ASSIGN_OR_RETURN(o->optimizer, ParseOptimizer(*v));
  }
  if (auto v = get("optimizer_impl")) {
    MEMEST_ASSIGN_OR_RETURN(o->optimizer_impl, ParseOptimizerImpl(*v));
  }
  if (auto v = get("precision")) {
    MEMEST_ASSIGN_OR_RETURN(o->precision, ParsePrecision(*v));
  }
  if (auto v = get("attention")) {
    MEMEST_ASSIGN_OR_RETURN(o->attention, ParseAttention(*v));
  }
  Status valid = Validate(*o);
  return valid.ok() ? valid : valid.WithContext(where);
}

std::string Directory(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

Result<std::vector<MeasuredJob>> ReadMeasuredJobsCsv(const std::string& path, int* excluded) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return NotFound("rows file '" + path + "' not found");
  if (!S_ISREG(st.st_mode)) return InvalidArgument("'" + path + "' is not a regular file");
  if (static_cast<uint64_t>(st.st_size) > kMaxFileBytes) {
    return InvalidArgument("'" + path + "' is larger than 16 MiB");
  }
  std::ifstream in(path);
  if (!in) return NotFound("rows file '" + path + "' cannot be read");
  const std::string dir = Directory(path);
  std::vector<std::string> header;
  std::vector<MeasuredJob> jobs;
  std::map<std::string, std::shared_ptr<const Model>> models;
  if (excluded) *excluded = 0;
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    const std::string where = path + ":" + std::to_string(number);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.size() > kMaxLine) return InvalidArgument(where + ": line longer than 4 KiB");
    if (line.empty() || line[0] == '#') continue;
    MEMEST_ASSIGN_OR_RETURN(std::vector<std::string> fields, SplitCsvLine(line, where));
    if (header.empty()) {
      header = fields;
      for (const char* required : {"model", "batch", "measured_mib"}) {
        if (std::find(header.begin(), header.end(), required) == header.end()) {
          return InvalidArgument(where + ": the header lacks column '" + required +
                                 "' (need model, batch, measured_mib; docs/stacks.md)");
        }
      }
      continue;
    }
    if (fields.size() != header.size()) {
      return InvalidArgument(where + ": " + std::to_string(fields.size()) +
                             " fields, the header has " + std::to_string(header.size()));
    }
    if (jobs.size() >= kMaxRows) return InvalidArgument(where + ": more than 100,000 rows");
    std::map<std::string, std::string> row;
    for (size_t i = 0; i < header.size(); ++i) row[header[i]] = fields[i];
    if (auto t = row.find("truth"); t != row.end() && !t->second.empty() && t->second != "device") {
      return InvalidArgument(where + ": truth '" + t->second +
                             "': a stack is fitted to device-level peaks (nvidia-smi per process) "
                             "only");
    }
    if (auto c = row.find("censored"); c != row.end() && c->second == "1") {
      if (excluded) ++*excluded;
      continue;
    }
    MEMEST_ASSIGN_OR_RETURN(double batch, ParseNumber(row["batch"], where + ": batch"));
    MEMEST_ASSIGN_OR_RETURN(double mib, ParseNumber(row["measured_mib"], where + ": measured_mib"));
    if (batch < 1 || batch > 1e9 || batch != std::floor(batch)) {
      return InvalidArgument(where + ": batch must be a positive integer");
    }
    if (mib <= 0 || mib > 1e8) return InvalidArgument(where + ": measured_mib out of range");
    MeasuredJob job;
    job.model_name = row["model"];
    if (job.model_name.empty()) return InvalidArgument(where + ": empty model");
    const std::string model_path =
        job.model_name[0] == '/' ? job.model_name : dir + "/" + job.model_name;
    auto& model = models[model_path];
    if (!model) {
      MEMEST_ASSIGN_OR_RETURN(model, LoadModel(model_path));
    }
    job.model = model;
    job.group = row.count("family") ? row["family"] : "";
    job.options.batch = static_cast<int64_t>(batch);
    MEMEST_RETURN_IF_ERROR(ApplyKnobs(row, &job.options, where));
    job.measured_bytes = static_cast<uint64_t>(std::llround(mib * 1048576.0));
    job.id = job.model_name + ":" + std::to_string(*job.options.batch);
    if (job.options.attention != Options{}.attention) {
      job.id += std::string(":") + ToString(job.options.attention);  // eager and fused rows differ
    }
    jobs.push_back(std::move(job));
  }
  if (header.empty()) return InvalidArgument(path + ": empty (no header)");
  return jobs;
}

}  // namespace memest
