// tools/calibrate_command.cc -- see tools/calibrate_command.h; the fit is the library's
// (api/calibrate.cc), this file only reads flags, prints and writes.
#include "tools/calibrate_command.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "memest/memest.h"

namespace memest::cli {
namespace {

std::string Pct(double v) { return fmt::format("{:+.1f} %", 100 * v); }
std::string Share(double v) { return fmt::format("{:.1f} %", 100 * v); }

void PrintSummary(const CalibrationResult& r, const StackProfile& base) {
  std::cout << fmt::format("{:<34} {:>6} {:>10} {:>10} {:>8} {:>14} {:>18}\n", "errors", "rows",
                           "median", "P90", "under", "under > 5 %", "upper under > 5 %");
  auto line = [](const std::string& name, const ErrorSummary& s, bool upper) {
    std::cout << fmt::format("{:<34} {:>6} {:>10} {:>10} {:>8} {:>14} {:>18}\n", name, s.rows,
                             Share(s.median_abs), Share(s.p90_abs), Share(s.under),
                             Share(s.under_5pct), upper ? Share(s.upper_under_5pct) : "-");
  };
  line("base stack " + base.name + " (unfitted)", r.base, false);
  line("fitted, in sample", r.fitted, false);
  line(fmt::format("held out (leave one of {} groups out)", r.groups), r.held_out, true);
  line("held out, analytical backend", r.held_out_analytical, true);
}

void PrintJobs(const CalibrationResult& r) {
  std::vector<JobResidual> jobs = r.jobs;
  std::sort(jobs.begin(), jobs.end(),
            [](const JobResidual& a, const JobResidual& b) { return a.id < b.id; });
  std::cout << fmt::format("{:<44} {:<16} {:>11} {:>11} {:>9} {:>11} {:>9} {:>5}\n", "job", "group",
                           "measured", "fitted", "error", "held out", "error", "band");
  for (const JobResidual& j : jobs) {
    std::cout << fmt::format(
        "{:<44} {:<16} {:>7.0f} MiB {:>7.0f} MiB {:>9} {:>7.0f} MiB {:>9} {:>5}\n",
        j.id.substr(0, 44), j.group.substr(0, 16), j.measured / 1048576.0, j.fitted / 1048576.0,
        Pct(j.fitted_error), j.held_out / 1048576.0, Pct(j.held_out_error),
        j.inside_band ? "in" : "OUT");
  }
}

// memest calibrate's command line.
struct CalibrateFlags {
  std::string rows_path, out_path, gpu = Options{}.gpu, base_name, name, display, data_name;
  std::string jobs_out;
  std::vector<std::string> software;
  bool quiet = false;
};

void AddFlags(CLI::App& app, CalibrateFlags& f) {
  app.add_option("rows", f.rows_path,
                 "CSV of measured jobs: model,batch,measured_mib[,family,truth,censored,mode,"
                 "optimizer,optimizer_impl,precision]; model paths relative to the CSV")
      ->required()
      ->type_name("ROWS.csv");
  app.add_option("-o,--output", f.out_path, "the stack file to write")
      ->required()
      ->type_name("STACK.json");
  app.add_option("--gpu", f.gpu, "the GPU profile the jobs ran on (see memest --list-gpus)")
      ->capture_default_str();
  app.add_option("--base-stack", f.base_name,
                 "the stack to start from: its CUDA context, lazy loading and software notes "
                 "(default: the default stack)");
  app.add_option("--name", f.name, "name of the stack written (default: the output file's stem)");
  app.add_option("--display-name", f.display, "one-line description of the stack");
  app.add_option("--data-name", f.data_name, "how the provenance names the rows (default: ROWS)");
  app.add_option("--software", f.software,
                 "KEY=VALUE notes on the measured software (pytorch=2.4, cudnn_benchmark=false); "
                 "repeatable, stored in the stack with the base stack's")
      ->type_name("KEY=VALUE");
  app.add_option("--jobs-out", f.jobs_out,
                 "also write every job's fitted and held-out prediction and error to this CSV")
      ->type_name("FILE.csv");
  app.add_flag("-q,--quiet", f.quiet, "print only the summary, not every job");
}

int Fail(const Status& s, int code) {
  std::cerr << "memest calibrate: error: " << s.message() << '\n';
  return code;
}

// The fit's settings: the base stack with the --software notes, the stack's name (default: the
// output file's stem), lower case, and where the rows came from. InvalidArgument for a
// --software that is not KEY=VALUE.
Result<CalibrationSettings> SettingsFrom(const CalibrateFlags& f, const StackProfile& base) {
  CalibrationSettings s;
  s.gpu = f.gpu;
  s.base = base;
  for (const std::string& kv : f.software) {
    const size_t eq = kv.find('=');
    if (eq == 0 || eq == std::string::npos) {
      return InvalidArgument("--software " + kv + ": expected KEY=VALUE");
    }
    s.base.software[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  std::string name = f.name;
  if (name.empty()) {
    name = f.out_path.substr(f.out_path.find_last_of('/') + 1);
    name = name.substr(0, name.find('.'));
  }
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  s.name = name;
  s.display_name = f.display;
  s.data_source = f.data_name.empty() ? f.rows_path : f.data_name;
  return s;
}

// The fitted values and each backend's band, under the summary.
void PrintStack(const StackProfile& st) {
  std::cout << fmt::format(
      "\nstack {}: library memory {:.0f} MiB, conv workspace {:.3g} x (pointwise/depthwise "
      "{:.3g} x) of a call's input + output + weight, {:.2f} MiB more for a spatial "
      "weight-gradient call\n",
      st.name, st.library_memory.bytes / 1048576.0, st.conv_workspace.value,
      st.conv_workspace_pointwise.value, st.conv_weight_gradient_extra.bytes / 1048576.0);
  for (const auto& [backend, b] : st.bands) {
    std::cout << fmt::format("  {} band {} .. {} (covered {:.1f} % of {} held-out rows)\n", backend,
                             Pct(b.low), Pct(b.high), 100 * b.coverage, b.rows);
  }
}

// --jobs-out: every job's fitted and held-out prediction and error.
Status WriteJobsCsv(const std::string& path, const std::vector<JobResidual>& jobs) {
  std::ofstream csv(path);
  csv << "id,group,measured_bytes,fitted_bytes,held_out_bytes,fitted_error,held_out_error,"
         "inside_band\n";
  for (const JobResidual& j : jobs) {
    csv << fmt::format("{},{},{},{},{},{:.6f},{:.6f},{}\n", j.id, j.group, j.measured, j.fitted,
                       j.held_out, j.fitted_error, j.held_out_error, j.inside_band ? 1 : 0);
  }
  if (!csv) return InvalidArgument("cannot write '" + path + "'");
  return Status::Ok();
}

// The exit code of a failed fit: usage (2), internal (4), else the rows (3).
int CalibrateExitCode(ErrorCode c) {
  if (c == ErrorCode::kInvalidArgument || c == ErrorCode::kNotFound) return 2;
  if (c == ErrorCode::kInternal || c == ErrorCode::kUnavailable) return 4;
  return 3;
}

}  // namespace

int RunCalibrate(int argc, char** argv) {
  CLI::App app{
      "memest calibrate -- fits a software-stack profile (library memory, cuDNN convolution "
      "workspace coefficient, residual band) to device-level measurements of your own jobs. "
      "See docs/stacks.md."};
  app.name("memest calibrate");
  CalibrateFlags f;
  AddFlags(app, f);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  Result<StackProfile> base = ResolveStack(f.base_name);
  if (!base.ok()) return Fail(base.status(), 2);
  int excluded = 0;
  Result<std::vector<MeasuredJob>> jobs = ReadMeasuredJobsCsv(f.rows_path, &excluded);
  if (!jobs.ok()) {
    const ErrorCode c = jobs.status().code();
    return Fail(jobs.status(), c == ErrorCode::kInvalidModel || c == ErrorCode::kOverflow ? 3 : 2);
  }
  Result<CalibrationSettings> s = SettingsFrom(f, *base);
  if (!s.ok()) return Fail(s.status(), 2);
  Result<CalibrationResult> r = Calibrate(*jobs, *s);
  if (!r.ok()) return Fail(r.status(), CalibrateExitCode(r.status().code()));
  if (excluded > 0) {
    std::cerr << "memest calibrate: note: " << excluded
              << " censored row(s) (the GPU was full) not fitted\n";
  }
  if (!f.quiet) {
    PrintJobs(*r);
    std::cout << '\n';
  }
  PrintSummary(*r, *base);
  PrintStack(r->stack);
  if (!f.jobs_out.empty()) {
    if (Status w = WriteJobsCsv(f.jobs_out, r->jobs); !w.ok()) return Fail(w, 2);
  }
  std::ofstream out(f.out_path);
  out << StackProfileToJson(r->stack);
  out.close();
  if (!out) return Fail(InvalidArgument("cannot write '" + f.out_path + "'"), 2);
  std::cout << "wrote " << f.out_path << " (use it with memest --stack-file " << f.out_path
            << ")\n";
  return 0;
}

}  // namespace memest::cli
