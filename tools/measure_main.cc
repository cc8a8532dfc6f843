// tools/measure_main.cc -- `memest-measure`, the measurement harness (docs/measurement.md).
//
//   memest-measure MODEL.onnx [-b|--batch N] [-d|--dim name=value]... [--mode train|infer]
//                  [--optimizer ...] [--weight-decay X] [--precision ...] [--loss ...]
//                  [--checkpoint SEGMENTS] [--iterations N] [--device auto|cpu|cuda]
//                  [--family NAME] [--seed N] [--host-limit-mb N]
//                  [--optimizer-impl auto|foreach|single-tensor] [--print-options]
//     runs the model and prints one measured row (docs/measured-row-schema.md) on stdout. The
//     estimation flags (--batch to --checkpoint) are rows of memest's own options table
//     (tools/options_flags.h): the same spellings, defaults, help and errors as memest (--loss ce,
//     --optimizer-impl single are accepted in both). --print-options prints the memest::Options
//     they give as JSON and exits without running; --list-flags prints those flags as JSON (the
//     entries of memest --list-flags) and exits.
//
//   memest-measure --sweep MANIFEST.jsonl --out ROWS.jsonl [--device ...] [--no-isolate]
//                  [--row-timeout S] [--retry-errors] [--limit N] [--time-budget S]
//                  [--shard I/N]
//     runs every configuration of the manifest (one JSON object per line: model, family, batch,
//     dims, mode, optimizer, weight_decay, precision, loss, iterations) and appends one row per
//     configuration to ROWS.jsonl. Resumable: configurations whose row id is already in ROWS.jsonl
//     are skipped (with --retry-errors, rows with status "error" are run again); a partial last
//     line left by a killed sweep is cut off first. One sweep at a time per output file (a lock).
//     Progress (done / total, rate, ETA) goes to stderr. By default every configuration runs in a
//     fresh child process (clean CUDA context and allocator; a crash or a timeout becomes an error
//     row). --shard I/N runs only the configurations whose row id falls in shard I of N (0 <= I <
//     N; the id's first 64 bits modulo N), so N jobs (a Slurm array) split a manifest the same way
//     on every run. --dry-run lists the configurations (of the shard) and their rows' status.
//
//   memest-measure --merge ROWS.jsonl... --out MERGED.jsonl [--sweep MANIFEST.jsonl]
//     merges row files (the shards of a sweep) into one: each row id once (an ok row wins over an
//     oom row, which wins over an error row; else the first), rows copied verbatim. With --sweep,
//     in manifest order, and every configuration without a row is listed.
//
// Exit codes (single run): 0 ok, 1 out of memory, 2 usage error or unbound dim, 3 bad model,
// 4 the run failed (unsupported op, LibTorch error). Sweep: 0 when every row was written, 2 for
// usage errors, 4 when the manifest or the output could not be read or written (or another sweep
// holds the output). Merge: 0 merged (with --sweep: every configuration has a row), 1 merged but
// some configurations have no row, 2 usage, 4 a file could not be read or written.
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "base/sha256.h"
#include "measurement/executor.h"
#include "measurement/plan.h"
#include "measurement/row.h"
#include "memest/json.h"
#include "memest/memest.h"
#include "tools/options_flags.h"

#ifndef MEMEST_VERSION
#define MEMEST_VERSION "unknown"
#endif

namespace memest::measure {
namespace {

namespace fs = std::filesystem;
using measurement::DeviceInfo;
using measurement::DeviceKind;
using measurement::RowRequest;
using Json = nlohmann::json;

constexpr int kExitOk = 0;
constexpr int kExitOom = 1;
constexpr int kExitUsage = 2;
constexpr int kExitBadModel = 3;
constexpr int kExitFailed = 4;

constexpr char kTool[] = "memest-measure " MEMEST_VERSION;

void PrintError(const std::string& message) {
  std::cerr << "memest-measure: error: " << message << '\n';
}

// --loss as memest spells it, plus "ce" for cross-entropy (both tools accept it).
Result<Loss> ParseLossFlag(const std::string& text) {
  return ParseLoss(text == "ce" ? "cross-entropy" : text);
}

// --optimizer-impl: memest's spellings (foreach, single-tensor; "single" too) plus auto, which
// follows torch.optim's default for the device (foreach for CUDA parameters, the single-tensor
// loop for CPU ones). The harness mirrors no fused kernels.
// nullopt = auto.
Result<std::optional<OptimizerImpl>> ParseHarnessOptimizerImpl(const std::string& text) {
  if (text == "auto") return std::optional<OptimizerImpl>();
  if (text == "fused") {
    return InvalidArgument(
        "--optimizer-impl fused: the harness does not mirror torch.optim's fused kernels (use "
        "auto, foreach or single-tensor)");
  }
  Result<OptimizerImpl> impl = ParseOptimizerImpl(text);
  if (!impl.ok()) {
    return InvalidArgument("--optimizer-impl must be auto, foreach or single-tensor, not '" + text +
                           "'");
  }
  return std::optional<OptimizerImpl>(*impl);
}

// A configuration to run: what a manifest line or the command line says.
struct Config {
  std::string model;       // path as given
  std::string model_file;  // resolved path to open
  std::string family;
  Options options;
  int iterations = 3;
  int line_no = 0;  // in the manifest (0: the command line)
};

struct RunSettings {
  DeviceKind device = DeviceKind::kAuto;
  uint64_t seed = 0;
  uint64_t host_limit_bytes = 0;
  std::optional<OptimizerImpl> optimizer_impl;  // nullopt: auto (torch.optim's device default)
  std::string trace_file;  // CPU: every allocation event as CSV (single runs only)
};

// The repository root above `file` (a folder with .git, or with CMakeLists.txt and
// include/memest), or empty.
fs::path RepoRootOf(const fs::path& file) {
  std::error_code ec;
  fs::path dir = fs::weakly_canonical(fs::absolute(file, ec), ec).parent_path();
  for (; !dir.empty(); dir = dir.parent_path()) {
    if (fs::exists(dir / ".git", ec) ||
        (fs::exists(dir / "CMakeLists.txt", ec) && fs::exists(dir / "include" / "memest", ec))) {
      return dir;
    }
    if (dir == dir.root_path()) break;
  }
  return {};
}

// The model path as recorded in a row: relative to the repository root when inside it.
std::string RecordedPath(const std::string& file) {
  std::error_code ec;
  const fs::path abs = fs::weakly_canonical(fs::absolute(file, ec), ec);
  const fs::path root = RepoRootOf(abs);
  if (!root.empty()) {
    const fs::path rel = abs.lexically_relative(root);
    if (!rel.empty() && *rel.begin() != "..") return rel.generic_string();
  }
  return file;
}

std::string OptimizerImplName(const RunSettings& s, DeviceKind resolved) {
  if (s.optimizer_impl) return ToString(*s.optimizer_impl);
  return resolved == DeviceKind::kCuda ? "foreach" : "single-tensor";
}

DeviceKind ResolvedDevice(DeviceKind requested) {
  if (requested == DeviceKind::kAuto) {
    return measurement::CudaUsable() ? DeviceKind::kCuda : DeviceKind::kCpu;
  }
  return requested;
}

// SHA-256 of a model file, each file hashed once per process (a sweep names a model many times).
Result<std::string> ModelSha256(const std::string& file) {
  static std::map<std::string, std::string> cache;
  if (auto it = cache.find(file); it != cache.end()) return it->second;
  MEMEST_ASSIGN_OR_RETURN(std::string sha, base::Sha256File(file));
  cache[file] = sha;
  return sha;
}

Result<RowRequest> MakeRequest(const Config& c, const RunSettings& s) {
  RowRequest r;
  r.model_path = RecordedPath(c.model_file);
  MEMEST_ASSIGN_OR_RETURN(r.model_sha256, ModelSha256(c.model_file));
  r.model_name = fs::path(c.model_file).stem().string();
  r.family = c.family;
  r.options = c.options;
  r.dims = c.options.dims;
  r.iterations = c.iterations;
  r.tool = kTool;
  r.seed = s.seed;
  r.optimizer_impl = OptimizerImplName(s, ResolvedDevice(s.device));
  return r;
}

DeviceInfo AttemptedDevice(DeviceKind requested) {
  DeviceInfo d;
  d.kind = requested == DeviceKind::kCuda ? "cuda" : "cpu";
  d.name = "";
  d.torch = measurement::TorchVersion();
  return d;
}

int ExitCodeFor(const Status& s) {
  switch (s.code()) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kUnboundDim:
      return kExitUsage;
    case ErrorCode::kNotFound:
    case ErrorCode::kInvalidModel:
    case ErrorCode::kOverflow:
      return kExitBadModel;
    default:
      return kExitFailed;
  }
}

// The CPU tracker's events as CSV, one line per allocation or free, in the columns of the symbolic
// backend's --timeline CSV where they mean the same thing (kind, bytes, iteration, phase, node)
// plus the live bytes after the event, so the two streams can be put side by side.
Status WriteTrace(const std::string& file, const measurement::Plan& plan,
                  const std::vector<measurement::TraceEvent>& trace) {
  std::ofstream out(file);
  if (!out) return InvalidArgument("cannot write the trace to '" + file + "'");
  out << "seq,kind,bytes,iteration,phase,node,live_after\n";
  for (const measurement::TraceEvent& e : trace) {
    std::string node;
    if (e.node >= 0 && static_cast<size_t>(e.node) < plan.nodes.size()) {
      node = plan.node(e.node).name;
    } else if (e.node == measurement::kNodeLoss) {
      node = "<loss>";
    } else if (e.node == measurement::kNodeOptimizer) {
      node = "<optimizer>";
    } else if (e.node == measurement::kNodeInputs) {
      node = "<inputs>";
    }
    out << e.seq << ',' << (e.alloc ? "malloc" : "free") << ',' << e.bytes << ',' << e.iteration
        << ',' << measurement::ToString(e.phase) << ",\"" << node << "\"," << e.live_after << '\n';
  }
  return out ? Status::Ok() : Internal("writing the trace to '" + file + "' failed");
}

// Runs one configuration in this process and prints its row on stdout (when there is one).
int RunOne(const Config& c, const RunSettings& s) {
  auto request = MakeRequest(c, s);
  if (!request.ok()) {
    PrintError(request.status().ToString());
    return kExitBadModel;
  }
  auto model = LoadModel(c.model_file);
  if (!model.ok()) {
    PrintError(model.status().ToString());
    return ExitCodeFor(model.status());
  }
  auto plan = measurement::BuildPlan(**model, c.options);
  if (!plan.ok()) {
    PrintError(plan.status().ToString());
    return ExitCodeFor(plan.status());
  }
  measurement::ExecuteOptions xo;
  xo.options = c.options;
  xo.iterations = c.iterations;
  xo.device = s.device;
  xo.seed = s.seed;
  xo.host_limit_bytes = s.host_limit_bytes;
  xo.optimizer_impl = s.optimizer_impl;
  xo.keep_trace = !s.trace_file.empty();
  auto m = measurement::Execute(*plan, xo);
  if (m.ok() && xo.keep_trace) {
    if (Status w = WriteTrace(s.trace_file, *plan, m->trace); !w.ok()) {
      PrintError(w.ToString());
      return kExitFailed;
    }
  }
  if (!m.ok()) {
    if (m.status().code() == ErrorCode::kInvalidArgument) {
      PrintError(m.status().ToString());
      return kExitUsage;
    }
    std::cout << measurement::MakeRow(*request, nullptr, m.status().ToString(),
                                      AttemptedDevice(ResolvedDevice(s.device)))
              << std::endl;
    PrintError(m.status().ToString());
    return kExitFailed;
  }
  std::cout << measurement::MakeRow(*request, &*m, "", m->device) << std::endl;
  if (m->status != "ok") {
    PrintError(m->error);
    return kExitOom;
  }
  return kExitOk;
}

// ---------------------------------------------------------------------------------------------
// Sweeps.

// Parses one manifest line. `dir` is the manifest's folder.
Result<Config> ParseManifestLine(const std::string& line, const fs::path& dir) {
  Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("not a JSON object");
  if (!j.contains("model") || !j["model"].is_string()) return InvalidArgument("no \"model\" path");
  Config c;
  c.model = j["model"].get<std::string>();
  // Relative to the manifest's folder, then to each folder above it (the repository root),
  // then to the working directory.
  fs::path resolved;
  std::error_code ec;
  if (fs::path(c.model).is_absolute()) {
    resolved = c.model;
  } else {
    for (fs::path d = fs::absolute(dir, ec); !d.empty(); d = d.parent_path()) {
      if (fs::exists(d / c.model, ec)) {
        resolved = d / c.model;
        break;
      }
      if (d == d.root_path()) break;
    }
    if (resolved.empty()) resolved = c.model;
  }
  c.model_file = resolved.lexically_normal().string();
  auto str = [&](const char* key) -> std::optional<std::string> {
    if (!j.contains(key) || j[key].is_null()) return std::nullopt;
    if (!j[key].is_string()) return std::nullopt;
    return j[key].get<std::string>();
  };
  try {
    if (auto f = str("family")) c.family = *f;
    if (j.contains("batch") && !j["batch"].is_null()) c.options.batch = j["batch"].get<int64_t>();
    if (j.contains("dims") && j["dims"].is_object()) {
      for (auto& [k, v] : j["dims"].items()) c.options.dims[k] = v.get<int64_t>();
    }
    if (auto v = str("mode")) {
      MEMEST_ASSIGN_OR_RETURN(c.options.mode, ParseMode(*v));
    }
    if (auto v = str("optimizer")) {
      MEMEST_ASSIGN_OR_RETURN(c.options.optimizer, ParseOptimizer(*v));
    }
    if (j.contains("weight_decay") && j["weight_decay"].is_number()) {
      c.options.weight_decay = j["weight_decay"].get<double>();
    }
    if (auto v = str("precision")) {
      MEMEST_ASSIGN_OR_RETURN(c.options.precision, ParsePrecision(*v));
    }
    if (auto v = str("loss")) {
      MEMEST_ASSIGN_OR_RETURN(c.options.loss, ParseLossFlag(*v));
    }
    if (j.contains("checkpoint_segments") && !j["checkpoint_segments"].is_null()) {
      c.options.checkpoint_segments = j["checkpoint_segments"].get<int64_t>();
    }
    if (j.contains("checkpoint_blocks") && !j["checkpoint_blocks"].is_null()) {
      c.options.checkpoint_blocks = j["checkpoint_blocks"].get<bool>();
    }
    if (j.contains("iterations") && !j["iterations"].is_null()) {
      c.iterations = j["iterations"].get<int>();
    }
  } catch (const Json::exception& e) {
    return InvalidArgument(std::string("bad field type: ") + e.what());
  }
  if (c.iterations < 1) return InvalidArgument("iterations must be >= 1");
  MEMEST_RETURN_IF_ERROR(Validate(c.options));
  return c;
}

// Command-line arguments that make a child run `c` (single-run mode).
std::vector<std::string> ChildArgs(const Config& c, const RunSettings& s) {
  const Options& o = c.options;
  std::vector<std::string> a = {c.model_file};
  if (o.batch) a.insert(a.end(), {"--batch", std::to_string(*o.batch)});
  for (const auto& [k, v] : o.dims) a.insert(a.end(), {"--dim", k + "=" + std::to_string(v)});
  a.insert(a.end(),
           {"--mode", ToString(o.mode), "--optimizer", ToString(o.optimizer), "--weight-decay",
            fmt::format("{}", o.weight_decay), "--precision", ToString(o.precision), "--loss",
            ToString(o.loss), "--iterations", std::to_string(c.iterations), "--device",
            ToString(s.device), "--seed", std::to_string(s.seed)});
  if (!c.family.empty()) a.insert(a.end(), {"--family", c.family});
  if (o.checkpoint_segments > 1) {
    a.insert(a.end(), {"--checkpoint", std::to_string(o.checkpoint_segments)});
  }
  if (o.checkpoint_blocks) a.insert(a.end(), {"--checkpoint", "blocks"});
  if (s.host_limit_bytes > 0) {
    a.insert(a.end(), {"--host-limit-mb", std::to_string(s.host_limit_bytes >> 20)});
  }
  if (s.optimizer_impl) a.insert(a.end(), {"--optimizer-impl", ToString(*s.optimizer_impl)});
  return a;
}

struct ChildResult {
  std::string out;  // stdout
  std::string err;  // stderr
  int exit_code = -1;
  int signal = 0;
  bool timed_out = false;
};

// Runs this executable with `args`, capturing stdout and stderr, killing it after `timeout_s`.
Result<ChildResult> RunChild(const std::vector<std::string>& args, int timeout_s) {
  int out_pipe[2], err_pipe[2];
  if (pipe(out_pipe) != 0 || pipe(err_pipe) != 0) return Internal("pipe() failed");
  std::vector<std::string> argv_s = {"memest-measure"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return Internal("fork() failed");
  if (pid == 0) {
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    close(out_pipe[0]);
    close(err_pipe[0]);
    close(out_pipe[1]);
    close(err_pipe[1]);
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  ChildResult r;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  char buf[4096];
  while (open_fds > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (timeout_s > 0 && left <= 0) {
      r.timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    const int n =
        poll(fds, 2, timeout_s > 0 ? static_cast<int>(std::min<int64_t>(left, 1000)) : 1000);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t got = read(fds[i].fd, buf, sizeof(buf));
      if (got <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      } else {
        (i == 0 ? r.out : r.err).append(buf, static_cast<size_t>(got));
      }
    }
  }
  for (pollfd& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  return r;
}

std::string Duration(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7) return "?";
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s / 60) % 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

struct SweepSettings {
  std::string manifest;
  std::string out;
  bool isolate = true;
  int row_timeout_s = 1800;
  bool retry_errors = false;
  int64_t limit = 0;      // 0 = all
  int time_budget_s = 0;  // 0 = none: stop starting rows after this many seconds
  int64_t shard_index = 0;
  int64_t shard_count = 0;  // 0 = no sharding
  bool dry_run = false;     // list the configurations and whether each has a row; run nothing
};

// Reads a manifest into `configs`; an exit code (kExitOk when read).
int ReadManifest(const std::string& manifest, std::vector<Config>& configs) {
  std::ifstream in(manifest);
  if (!in) {
    PrintError("cannot open manifest '" + manifest + "'");
    return kExitFailed;
  }
  const fs::path dir = fs::path(manifest).parent_path();
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto c = ParseManifestLine(line, dir);
    if (!c.ok()) {
      PrintError(fmt::format("{}:{}: {}", manifest, line_no, c.status().ToString()));
      return kExitUsage;
    }
    c->line_no = line_no;
    configs.push_back(std::move(c).value());
  }
  return kExitOk;
}

// "I/N" -> (I, N) with 0 <= I < N.
Result<std::pair<int64_t, int64_t>> ParseShard(const std::string& text) {
  const size_t slash = text.find('/');
  int64_t i = -1, n = 0;
  if (slash != std::string::npos) {
    const char* b = text.data();
    const auto [p1, e1] = std::from_chars(b, b + slash, i);
    const auto [p2, e2] = std::from_chars(b + slash + 1, b + text.size(), n);
    if (e1 != std::errc() || p1 != b + slash || e2 != std::errc() || p2 != b + text.size()) {
      i = -1;
    }
  }
  if (i < 0 || n < 1 || i >= n || n > 1000000) {
    return InvalidArgument("--shard '" + text +
                           "': expected I/N with 0 <= I < N (e.g. 0/4 ... 3/4; a Slurm array "
                           "task: $SLURM_ARRAY_TASK_ID/N with --array=0-(N-1))");
  }
  return std::make_pair(i, n);
}

// The shard of a configuration: its row id's first 64 bits modulo N; a configuration without an
// id (its model cannot be hashed) by its manifest line. The same on every run of a manifest.
int64_t ShardOf(const Config& c, const RunSettings& s, int64_t n) {
  auto request = MakeRequest(c, s);
  if (!request.ok()) return c.line_no % n;
  const std::string id = measurement::RowId(*request);
  uint64_t v = 0;
  std::from_chars(id.data(), id.data() + std::min<size_t>(16, id.size()), v, 16);
  return static_cast<int64_t>(v % static_cast<uint64_t>(n));
}

// Holds an exclusive lock on `file` (created when missing) for the life of the process, so that
// two sweeps never append to one file (a requeued array task next to its old self). Closed on
// exec: the children never hold it. Fails when another process holds it.
Status LockOutput(const std::string& file) {
  const int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Internal("cannot write '" + file + "': " + std::strerror(errno));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    close(fd);
    if (e == EWOULDBLOCK) {
      return Internal("another memest-measure is writing '" + file +
                      "' (it holds the file's lock); two sweeps must not append to one file");
    }
    return Internal("cannot lock '" + file + "': " + std::strerror(e));
  }
  return Status::Ok();  // fd stays open: the lock lasts until the process ends
}

// Cuts off a partial last line (a row whose writer was killed mid-write), so that the next row
// starts on a line of its own. Returns the number of bytes dropped.
Result<uint64_t> DropPartialLastLine(const std::string& file) {
  std::error_code ec;
  const uint64_t size = fs::exists(file, ec) ? fs::file_size(file, ec) : 0;
  if (ec || size == 0) return uint64_t{0};
  std::ifstream in(file, std::ios::binary);
  if (!in) return Internal("cannot read '" + file + "'");
  // Find the last newline, reading backwards in blocks.
  uint64_t end = size;
  std::string block;
  bool last_is_newline = false;
  uint64_t keep = 0;
  while (end > 0) {
    const uint64_t begin = end > 65536 ? end - 65536 : 0;
    block.resize(end - begin);
    in.seekg(static_cast<std::streamoff>(begin));
    in.read(block.data(), static_cast<std::streamsize>(block.size()));
    if (!in) return Internal("cannot read '" + file + "'");
    if (end == size && block.back() == '\n') {
      last_is_newline = true;
      break;
    }
    const size_t nl = block.rfind('\n');
    if (nl != std::string::npos) {
      keep = begin + nl + 1;
      break;
    }
    end = begin;
  }
  if (last_is_newline) return uint64_t{0};
  fs::resize_file(file, keep, ec);
  if (ec) return Internal("cannot cut the partial last line of '" + file + "': " + ec.message());
  return size - keep;
}

// Provenance a sweep adds to its rows: the shard, and the Slurm job that ran it.
void AddSweepProvenance(Json& row, const SweepSettings& sw) {
  if (!row.is_object() || !row.contains("provenance") || !row["provenance"].is_object()) return;
  Json& p = row["provenance"];
  if (sw.shard_count > 0) p["shard"] = fmt::format("{}/{}", sw.shard_index, sw.shard_count);
  auto env_value = [](const char* name) -> Json {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return Json(nullptr);
    uint64_t n = 0;
    const char* e = v + std::strlen(v);
    const auto [ptr, ec] = std::from_chars(v, e, n);
    if (ec == std::errc() && ptr == e) return Json(n);
    return Json(std::string(v));
  };
  if (std::getenv("SLURM_JOB_ID") != nullptr) {
    Json slurm{{"job_id", env_value("SLURM_JOB_ID")},
               {"array_job_id", env_value("SLURM_ARRAY_JOB_ID")},
               {"array_task_id", env_value("SLURM_ARRAY_TASK_ID")},
               {"cluster", env_value("SLURM_CLUSTER_NAME")}};
    p["slurm"] = slurm;
  }
}

// id -> status of the rows already in `path` (none when it does not exist).
std::map<std::string, std::string> RowStatuses(const std::string& path) {
  std::map<std::string, std::string> out;
  std::ifstream prev(path);
  std::string line;
  while (std::getline(prev, line)) {
    Json j = Json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("id") && j["id"].is_string()) {
      out[j["id"].get<std::string>()] = j.value("status", "");
    }
  }
  return out;
}

// The configurations of this shard (--shard I/N), or all of them.
std::vector<Config> ThisShard(std::vector<Config> configs, const SweepSettings& sw,
                              const RunSettings& s) {
  if (sw.shard_count <= 0) return configs;
  std::vector<Config> mine;
  for (Config& c : configs) {
    if (ShardOf(c, s, sw.shard_count) == sw.shard_index) mine.push_back(std::move(c));
  }
  std::cerr << fmt::format("memest-measure: shard {}/{}: {} of the manifest's {} configurations\n",
                           sw.shard_index, sw.shard_count, mine.size(), configs.size());
  return mine;
}

// The configurations the sweep would run, first `total` of them: one JSON line each with its
// row id and the status of the row already written, if any (--dry-run).
void PrintDryRun(const std::vector<Config>& configs, size_t total, const SweepSettings& sw,
                 const RunSettings& s) {
  const std::map<std::string, std::string> have = RowStatuses(sw.out);
  for (size_t i = 0; i < total; ++i) {
    const Config& c = configs[i];
    auto request = MakeRequest(c, s);
    const std::string id = request.ok() ? measurement::RowId(*request) : "";
    auto it = have.find(id);
    Json j{{"line", c.line_no},
           {"id", request.ok() ? Json(id) : Json(nullptr)},
           {"model", c.model},
           {"batch", c.options.batch ? Json(*c.options.batch) : Json(nullptr)},
           {"mode", ToString(c.options.mode)},
           {"row", it == have.end() ? Json(nullptr) : Json(it->second)}};
    if (sw.shard_count > 0) j["shard"] = fmt::format("{}/{}", sw.shard_index, sw.shard_count);
    if (!request.ok()) j["error"] = request.status().message();
    std::cout << j.dump() << '\n';
  }
}

// The output file locked for this sweep, a partial last line (a killed writer's) cut off.
Status PrepareOutput(const std::string& path) {
  MEMEST_RETURN_IF_ERROR(LockOutput(path));
  MEMEST_ASSIGN_OR_RETURN(uint64_t dropped, DropPartialLastLine(path));
  if (dropped > 0) {
    std::cerr << fmt::format(
        "memest-measure: note: cut off a partial last line ({} bytes) of {}: a row whose "
        "writer was killed mid-write (a configuration without a whole row runs again)\n",
        dropped, path);
  }
  return Status::Ok();
}

// The last lines a child wrote to stderr (at most `max_lines` non-empty lines, `max_chars`
// characters), joined by " | "; "" when it wrote nothing. A child killed by a signal or a timeout
// writes no row, so these lines are all that says why (an uncaught exception's what(), say).
std::string StderrTail(const std::string& err, size_t max_lines = 3, size_t max_chars = 600) {
  std::vector<std::string> lines;
  size_t end = err.size();
  while (end > 0 && lines.size() < max_lines) {
    const size_t start = err.rfind('\n', end - 1);
    const size_t from = start == std::string::npos ? 0 : start + 1;
    std::string line = err.substr(from, end - from);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (!line.empty()) lines.insert(lines.begin(), std::move(line));
    if (start == std::string::npos) break;
    end = start;
  }
  std::string tail;
  for (const std::string& line : lines) tail += (tail.empty() ? "" : " | ") + line;
  if (tail.size() > max_chars) tail = "..." + tail.substr(tail.size() - max_chars);
  return tail;
}

// "; its stderr ended: ..." for a failure message, or "" when the child wrote nothing there.
std::string StderrNote(const std::string& err) {
  const std::string tail = StderrTail(err);
  return tail.empty() ? "" : "; its stderr ended: " + tail;
}

// One configuration measured, in this process or (--isolate, the default) in a child with a
// timeout: its row line, or "" with *failure saying why.
std::string MeasureConfig(const Config& c, const RunSettings& s, const SweepSettings& sw,
                          std::string* failure) {
  std::string row;
  if (!sw.isolate) {
    std::stringstream captured;
    auto* old = std::cout.rdbuf(captured.rdbuf());
    const int rc = RunOne(c, s);
    std::cout.rdbuf(old);
    row = captured.str();
    if (row.empty()) *failure = fmt::format("run failed with exit code {}", rc);
  } else {
    auto child = RunChild(ChildArgs(c, s), sw.row_timeout_s);
    if (!child.ok()) {
      *failure = child.status().ToString();
      return "";
    }
    row = child->out;
    if (child->timed_out) {
      *failure = fmt::format("timed out after {} s{}", sw.row_timeout_s, StderrNote(child->err));
      return "";
    }
    if (child->signal != 0) {
      *failure = fmt::format("the run was killed by signal {} ({}){}", child->signal,
                             strsignal(child->signal), StderrNote(child->err));
      return "";
    }
    if (row.empty()) {
      std::string err = child->err;
      while (!err.empty() && (err.back() == '\n' || err.back() == '\r')) err.pop_back();
      *failure = fmt::format("exit code {}: {}", child->exit_code, err);
    }
  }
  while (!row.empty() && (row.back() == '\n' || row.back() == '\r')) row.pop_back();
  if (row.find('\n') != std::string::npos) row = row.substr(row.rfind('\n') + 1);
  return row;
}

// Counts and the progress line of a sweep.
struct SweepProgress {
  size_t total = 0, finished = 0, skipped = 0, ran = 0, n_ok = 0, n_oom = 0, n_err = 0;
  double run_seconds = 0;
  bool tty = false;

  void Count(const std::string& status) {
    if (status == "ok") {
      ++n_ok;
    } else if (status == "oom") {
      ++n_oom;
    } else {
      ++n_err;
    }
  }
  void Ran(double seconds, const std::string& what) {
    ++finished;
    ++ran;
    run_seconds += seconds;
    const double per_row = run_seconds / static_cast<double>(ran);
    const size_t left = total - finished;
    const std::string progress = fmt::format(
        "[{}/{}] {:3.0f}% | {:.1f} rows/min | ETA {} | ok {} oom {} error {} skipped {} | {}",
        finished, total,
        100.0 * static_cast<double>(finished) / static_cast<double>(std::max<size_t>(total, 1)),
        per_row > 0 ? 60.0 / per_row : 0.0, Duration(per_row * static_cast<double>(left)), n_ok,
        n_oom, n_err, skipped, what);
    if (tty) {
      std::cerr << '\r' << progress << "\x1b[K" << std::flush;
    } else {
      std::cerr << progress << '\n';
    }
  }
};

int Sweep(const SweepSettings& sw, const RunSettings& s) {
  std::vector<Config> configs;
  if (int rc = ReadManifest(sw.manifest, configs); rc != kExitOk) return rc;
  configs = ThisShard(std::move(configs), sw, s);
  SweepProgress p;
  p.total = sw.limit > 0 ? std::min<size_t>(configs.size(), static_cast<size_t>(sw.limit))
                         : configs.size();
  if (sw.dry_run) {
    PrintDryRun(configs, p.total, sw, s);
    return kExitOk;
  }
  if (Status ready = PrepareOutput(sw.out); !ready.ok()) {
    PrintError(ready.message());
    return kExitFailed;
  }
  const std::map<std::string, std::string> done = RowStatuses(sw.out);  // resume
  std::ofstream out(sw.out, std::ios::app);
  if (!out) {
    PrintError("cannot write '" + sw.out + "'");
    return kExitFailed;
  }
  p.tty = isatty(STDERR_FILENO) != 0;
  const auto sweep_start = std::chrono::steady_clock::now();
  size_t left_for_later = 0;
  for (size_t i = 0; i < p.total; ++i) {
    const Config& c = configs[i];
    if (sw.time_budget_s > 0 &&
        std::chrono::steady_clock::now() - sweep_start > std::chrono::seconds(sw.time_budget_s)) {
      left_for_later = p.total - i;
      break;
    }
    auto request = MakeRequest(c, s);
    if (request.ok()) {
      auto it = done.find(measurement::RowId(*request));
      if (it != done.end() && !(sw.retry_errors && it->second == "error")) {
        ++p.finished;
        ++p.skipped;
        continue;
      }
    }
    const std::string what = fmt::format("{} b={} {} {} {}", fs::path(c.model).stem().string(),
                                         c.options.batch ? std::to_string(*c.options.batch) : "-",
                                         ToString(c.options.mode), ToString(c.options.optimizer),
                                         ToString(c.options.precision));
    const auto t0 = std::chrono::steady_clock::now();
    std::string failure;
    std::string row;
    if (!request.ok()) {
      failure = request.status().ToString();
    } else {
      row = MeasureConfig(c, s, sw, &failure);
    }
    if (row.empty()) {
      if (!request.ok()) {
        PrintError(what + ": " + failure + " (no row written)");
      } else {
        row = measurement::MakeRow(*request, nullptr, failure,
                                   AttemptedDevice(ResolvedDevice(s.device)));
      }
    }
    if (!row.empty()) {
      if (Json j = Json::parse(row, nullptr, false); j.is_object()) {
        AddSweepProvenance(j, sw);
        row = j.dump();
      }
      if (!measurement::ValidateRow(row).ok()) {
        PrintError(what +
                   ": the row does not validate: " + measurement::ValidateRow(row).ToString());
      }
      out << row << '\n';
      out.flush();
      Json j = Json::parse(row, nullptr, false);
      const std::string status = j.is_object() ? j.value("status", "") : "";
      p.Count(status);
      if (status == "error" && !p.tty) PrintError(what + ": " + j.value("error", failure));
    } else {
      ++p.n_err;
    }
    p.Ran(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), what);
  }
  if (p.tty) std::cerr << '\n';
  std::cerr << fmt::format(
      "memest-measure: {} configurations: {} run ({} ok, {} oom, {} error), "
      "{} already in {}",
      p.total, p.ran, p.n_ok, p.n_oom, p.n_err, p.skipped, sw.out);
  if (left_for_later > 0) {
    std::cerr << fmt::format("; time budget spent, {} left for the next call (same command)",
                             left_for_later);
  }
  std::cerr << '\n';
  return kExitOk;
}

// ---------------------------------------------------------------------------------------------
// Merging row files (the shards of a sweep).

int StatusRank(const std::string& status) {
  if (status == "ok") return 0;
  if (status == "oom") return 1;
  return 2;
}

// The rows of several files, one per id: the best status wins (ok, then oom, then error), the
// first seen among equals; ids in order of first appearance.
struct MergedRows {
  struct Kept {
    std::string line;
    std::string status;
  };
  std::vector<std::string> order;
  std::map<std::string, Kept> rows;
  size_t read = 0, duplicates = 0, replaced = 0, skipped = 0;
};

Status ReadRowFiles(const std::vector<std::string>& inputs, MergedRows* m) {
  for (const std::string& file : inputs) {
    std::ifstream in(file);
    if (!in) return NotFound("cannot read '" + file + "'");
    std::string line;
    for (int line_no = 1; std::getline(in, line); ++line_no) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      Json j = Json::parse(line, nullptr, false);
      const Status valid = measurement::ValidateRow(line);
      if (!j.is_object() || !valid.ok()) {
        ++m->skipped;
        std::cerr << fmt::format(
            "memest-measure: note: {}:{}: not a row, skipped ({}; a partial line of a killed "
            "sweep?)\n",
            file, line_no, valid.ok() ? "not a JSON object" : valid.message());
        continue;
      }
      ++m->read;
      const std::string id = j["id"].get<std::string>();
      const std::string status = j.value("status", "");
      auto it = m->rows.find(id);
      if (it == m->rows.end()) {
        m->order.push_back(id);
        m->rows[id] = MergedRows::Kept{line, status};
        continue;
      }
      ++m->duplicates;
      if (StatusRank(status) < StatusRank(it->second.status)) {
        it->second = MergedRows::Kept{line, status};
        ++m->replaced;
      }
    }
  }
  return Status::Ok();
}

// Puts the merged rows in the manifest's order (rows of no configuration after the others) and
// lists the configurations without a row in *missing. 0, or ReadManifest's exit code.
int OrderByManifest(const std::string& manifest, const RunSettings& s, MergedRows* m,
                    std::vector<std::string>* missing, size_t* manifest_configs) {
  std::vector<Config> configs;
  if (int rc = ReadManifest(manifest, configs); rc != kExitOk) return rc;
  std::vector<std::string> sorted;
  std::map<std::string, bool> placed;
  for (const Config& c : configs) {
    ++*manifest_configs;
    const std::string what = fmt::format(
        "{}:{}: {} b={} {} {} {}", manifest, c.line_no, fs::path(c.model).stem().string(),
        c.options.batch ? std::to_string(*c.options.batch) : "-", ToString(c.options.mode),
        ToString(c.options.optimizer), ToString(c.options.precision));
    auto request = MakeRequest(c, s);
    if (!request.ok()) {
      missing->push_back(what + " (" + request.status().message() + ")");
      continue;
    }
    const std::string id = measurement::RowId(*request);
    if (m->rows.count(id) == 0) {
      missing->push_back(what + " (id " + id.substr(0, 12) + ")");
    } else if (!placed[id]) {
      placed[id] = true;
      sorted.push_back(id);
    }
  }
  size_t extra = 0;
  for (const std::string& id : m->order) {
    if (!placed[id]) {
      sorted.push_back(id);
      ++extra;
    }
  }
  if (extra > 0) {
    std::cerr << fmt::format(
        "memest-measure: note: {} rows are not configurations of {}; kept after the others\n",
        extra, manifest);
  }
  m->order = std::move(sorted);
  return kExitOk;
}

// Writes the rows next to `out_file` and renames: the output is never half written, and may be
// an input. Counts the statuses written into ok / oom / err.
Status WriteMerged(const MergedRows& m, const std::string& out_file, size_t* ok, size_t* oom,
                   size_t* err) {
  const std::string tmp = out_file + fmt::format(".tmp.{}", getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (const std::string& id : m.order) {
      const MergedRows::Kept& k = m.rows.at(id);
      out << k.line << '\n';
      (k.status == "ok" ? *ok : k.status == "oom" ? *oom : *err)++;
    }
    out.flush();
    if (!out) {
      std::error_code ec;
      fs::remove(tmp, ec);
      return Internal("cannot write '" + tmp + "'");
    }
  }
  std::error_code ec;
  fs::rename(tmp, out_file, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::remove(tmp, ec);
    return Internal("cannot rename '" + tmp + "' to '" + out_file + "': " + why);
  }
  return Status::Ok();
}

int Merge(const std::vector<std::string>& inputs, const std::string& out_file,
          const std::string& manifest, const RunSettings& s) {
  MergedRows m;
  if (Status st = ReadRowFiles(inputs, &m); !st.ok()) {
    PrintError(st.message());
    return kExitFailed;
  }
  std::vector<std::string> missing;
  size_t manifest_configs = 0;
  if (!manifest.empty()) {
    if (int rc = OrderByManifest(manifest, s, &m, &missing, &manifest_configs); rc != kExitOk) {
      return rc;
    }
  }
  size_t n_ok = 0, n_oom = 0, n_err = 0;
  if (Status st = WriteMerged(m, out_file, &n_ok, &n_oom, &n_err); !st.ok()) {
    PrintError(st.message());
    return kExitFailed;
  }
  std::cerr << fmt::format(
      "memest-measure: merged {} files ({} rows read) into {}: {} rows ({} ok, {} oom, {} "
      "error); {} duplicate ids dropped ({} replaced by a better status); {} lines skipped\n",
      inputs.size(), m.read, out_file, m.order.size(), n_ok, n_oom, n_err, m.duplicates, m.replaced,
      m.skipped);
  if (manifest.empty()) return kExitOk;
  if (missing.empty()) {
    std::cerr << fmt::format("memest-measure: every one of the {} configurations of {} has a row\n",
                             manifest_configs, manifest);
    return kExitOk;
  }
  std::cerr << fmt::format(
      "memest-measure: {} of the {} configurations of {} have no row (run their shards "
      "again: the sweep resumes):\n",
      missing.size(), manifest_configs, manifest);
  for (size_t i = 0; i < missing.size() && i < 20; ++i) std::cerr << "  " << missing[i] << '\n';
  if (missing.size() > 20) std::cerr << fmt::format("  ... and {} more\n", missing.size() - 20);
  return 1;
}

// Everything memest-measure's command line gives, before it is checked.
struct MeasureFlags {
  std::string model;
  std::string device = "auto";
  std::string family;
  std::string optimizer_impl = "auto";
  std::string trace;
  int iterations = 3;
  uint64_t seed = 0;
  uint64_t host_limit_mb = 0;
  SweepSettings sweep;
  bool no_isolate = false;
  std::string shard;
  std::vector<std::string> merge_inputs;
  bool print_options = false;
  bool list_flags = false;
  // The estimation options the harness executes, from the table memest's flags come from.
  cli::OptionFlags options{cli::MeasureOptionFlagNames()};
};

// Registers the options table's flags and memest-measure's own with `app`.
void AddFlags(CLI::App& app, MeasureFlags& f, cli::HelpDefaults& help) {
  SweepSettings& sw = f.sweep;
  app.add_option("model", f.model, "ONNX model to run");
  f.options.AddTo(app, help);
  app.add_option("--iterations", f.iterations, "training iterations (or inference passes)")
      ->capture_default_str();
  app.add_option("--device", f.device, "auto | cpu | cuda")->capture_default_str();
  app.add_option("--family", f.family, "model family recorded in the row");
  app.add_option("--seed", f.seed, "random seed")->capture_default_str();
  app.add_option("--host-limit-mb", f.host_limit_mb,
                 "CPU: live tensor MiB that count as out of memory (default: 80% of available)");
  app.add_option("--optimizer-impl", f.optimizer_impl,
                 "auto | foreach | single-tensor (auto: torch.optim's default for the device, "
                 "foreach on CUDA and single-tensor on the CPU; memest's default is foreach)")
      ->capture_default_str();
  app.add_option("--trace", f.trace,
                 "CPU, single runs: write every allocation and free as CSV to this file");
  app.add_option("--sweep", sw.manifest, "run every configuration of a JSONL manifest");
  app.add_option("--out", sw.out, "sweep: JSONL file the rows are appended to");
  app.add_flag("--no-isolate", f.no_isolate, "sweep: run configurations in this process");
  app.add_option("--row-timeout", sw.row_timeout_s, "sweep: seconds before a run is killed")
      ->capture_default_str();
  app.add_flag("--retry-errors", sw.retry_errors, "sweep: run rows with status error again");
  app.add_option("--limit", sw.limit, "sweep: only the first N configurations");
  app.add_option("--time-budget", sw.time_budget_s,
                 "sweep: start no new configuration after this many seconds (resume later)");
  app.add_option("--shard", f.shard,
                 "sweep: only shard I of N, I/N with 0 <= I < N (by row id: the same split on "
                 "every run; one Slurm array task each)");
  app.add_flag("--dry-run", sw.dry_run,
               "sweep: print the configurations (of this shard) as JSON lines, with the status "
               "of their row in --out (null: none yet); run nothing");
  app.add_flag("--print-options", f.print_options,
               "print the memest::Options the flags above give, as JSON (memest/json.h, the "
               "\"options\" of memest --json), and exit without running");
  app.add_flag("--list-flags", f.list_flags,
               "print the estimation flags above as JSON (the form of memest --list-flags), and "
               "exit");
  app.add_option("--merge", f.merge_inputs,
                 "merge row files (a sweep's shards) into --out, each row id once; with --sweep "
                 "MANIFEST, in manifest order, listing configurations without a row");
}

// The harness settings every mode shares (device, seed, host limit, optimizer implementation,
// trace file); InvalidArgument for a bad --device or --optimizer-impl.
Result<RunSettings> RunSettingsFrom(const MeasureFlags& f) {
  RunSettings s;
  s.trace_file = f.trace;
  MEMEST_ASSIGN_OR_RETURN(s.device, measurement::ParseDeviceKind(f.device));
  s.seed = f.seed;
  s.host_limit_bytes = f.host_limit_mb << 20;
  MEMEST_ASSIGN_OR_RETURN(s.optimizer_impl, ParseHarnessOptimizerImpl(f.optimizer_impl));
  return s;
}

// --merge FILES --out FILE [--sweep MANIFEST].
int RunMerge(const MeasureFlags& f, const RunSettings& s) {
  if (f.sweep.out.empty()) {
    PrintError("--merge needs --out FILE.jsonl");
    return kExitUsage;
  }
  if (!f.shard.empty() || !f.model.empty()) {
    PrintError(
        "--merge takes row files, --out and optionally --sweep MANIFEST (no --shard, no model)");
    return kExitUsage;
  }
  return Merge(f.merge_inputs, f.sweep.out, f.sweep.manifest, s);
}

// --sweep MANIFEST --out FILE [--shard I/N].
int RunSweep(const MeasureFlags& f, const RunSettings& s) {
  SweepSettings sw = f.sweep;
  if (!f.shard.empty()) {
    auto parsed = ParseShard(f.shard);
    if (!parsed.ok()) {
      PrintError(parsed.status().message());
      return kExitUsage;
    }
    sw.shard_index = parsed->first;
    sw.shard_count = parsed->second;
  }
  if (sw.out.empty()) {
    PrintError("--sweep needs --out FILE.jsonl");
    return kExitUsage;
  }
  sw.isolate = !f.no_isolate;
  return Sweep(sw, s);
}

// One model: its configuration from the flags, then --print-options or a measured run.
int RunModel(const MeasureFlags& f, const RunSettings& s) {
  Config c;
  c.model = c.model_file = f.model;
  c.family = f.family;
  c.iterations = f.iterations;
  // Not refused with --mode infer: a sweep's child gets a manifest line's whole configuration,
  // and the row id covers the training fields of an inference row too.
  if (Status st = f.options.ApplyTo(&c.options, /*refuse_training_in_inference=*/false); !st.ok()) {
    PrintError(st.message());
    return kExitUsage;
  }
  if (f.iterations < 1) {
    PrintError("--iterations must be >= 1");
    return kExitUsage;
  }
  if (Status v = Validate(c.options); !v.ok()) {
    PrintError(v.message());
    return kExitUsage;
  }
  if (f.print_options) {
    std::cout << OptionsToJson(c.options) << std::endl;
    return kExitOk;
  }
  return RunOne(c, s);
}

int Main(int argc, char** argv) {
  CLI::App app{
      "memest-measure: runs ONNX training graphs with LibTorch and records the memory "
      "they take, as measured rows (docs/measured-row-schema.md)"};
  MeasureFlags f;
  cli::HelpDefaults help(DescribeOptions());
  AddFlags(app, f, help);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }
  if (f.list_flags) {
    std::cout << f.options.DescribeJson(help) << std::endl;
    return kExitOk;
  }
  Result<RunSettings> s = RunSettingsFrom(f);
  if (!s.ok()) {
    PrintError(s.status().message());
    return kExitUsage;
  }
  if (!f.merge_inputs.empty()) return RunMerge(f, *s);
  if (!f.shard.empty() && f.sweep.manifest.empty()) {
    PrintError("--shard needs --sweep MANIFEST.jsonl");
    return kExitUsage;
  }
  if (!f.sweep.manifest.empty()) return RunSweep(f, *s);
  if (f.model.empty()) {
    PrintError("give a model (or --sweep MANIFEST.jsonl --out ROWS.jsonl); see --help");
    return kExitUsage;
  }
  return RunModel(f, *s);
}

}  // namespace
}  // namespace memest::measure

int main(int argc, char** argv) { return memest::measure::Main(argc, argv); }
