// End-to-end tests of the `memest` command-line tool: exit codes, stdout/stderr
// split, the JSON schema, and golden table outputs (tests/golden/).
//
// The binary is MEMEST_CLI_PATH; it runs with stdout and stderr redirected to
// files in a test-owned temporary directory (never the working directory). Set
// MEMEST_UPDATE_GOLDEN=1 to rewrite the golden files from the current output
// instead of comparing.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "memest/memest.h"
#include "testing/onnx_builder.h"

extern char** environ;

namespace memest {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct CliRun {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const fs::path& p, const std::string& content) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << content;
}

std::string Model(const std::string& name) {
  return std::string(MEMEST_SOURCE_DIR) + "/datasets/models/" + name;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::path(::testing::TempDir()) / "memest_cli_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr) << "mkdtemp " << tmpl;
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  // Runs the CLI with `args`, capturing stdout, stderr and the exit code.
  CliRun Run(const std::vector<std::string>& args) {
    return RunWithStdout(args, dir_ / "stdout.txt");
  }

  // Runs the CLI with stdout going to `out` (e.g. /dev/full); CliRun::out holds
  // `out`'s contents when it is a regular file, else "".
  CliRun RunWithStdout(const std::vector<std::string>& args, const fs::path& out) {
    return RunProgram(MEMEST_CLI_PATH, args, out);
  }

  // Runs `program` (e.g. memest-measure) the same way.
  CliRun RunProgram(const std::string& program, const std::vector<std::string>& args) {
    return RunProgram(program, args, dir_ / "stdout.txt");
  }

  CliRun RunProgram(const std::string& program, const std::vector<std::string>& args,
                    const fs::path& out) {
    const fs::path err = dir_ / "stderr.txt";
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<std::string> argv_s = {program};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    CliRun r;
    const int rc = posix_spawn(&pid, program.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      ADD_FAILURE() << "posix_spawn " << program << " failed: " << rc;
      return r;
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) {
      ADD_FAILURE() << "waitpid failed";
      return r;
    }
    if (WIFEXITED(status)) {
      r.exit_code = WEXITSTATUS(status);
    } else {
      ADD_FAILURE() << program << " did not exit normally (signal "
                    << (WIFSIGNALED(status) ? WTERMSIG(status) : 0)
                    << ") for args: " << ::testing::PrintToString(args);
    }
    r.out = fs::is_regular_file(out) ? ReadFile(out) : "";  // not /dev/full
    r.err = ReadFile(err);
    return r;
  }

  // The backends the memest binary has, from `memest --list-backends -o json` (the test binary
  // may link backends memest does not, e.g. measurement).
  std::vector<BackendInfo> CliBackends() {
    CliRun r = Run({"--list-backends", "-o", "json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::vector<BackendInfo> out;
    const json doc = json::parse(r.out);
    for (const auto& b : doc["backends"]) {
      BackendInfo info;
      info.name = b["name"].get<std::string>();
      info.description = b["description"].get<std::string>();
      info.available = b["available"].get<bool>();
      info.reason = b["reason"].get<std::string>();
      out.push_back(info);
    }
    return out;
  }

  // The backends `--backend all` runs: every available one but measurement.
  std::vector<BackendInfo> Estimators() {
    std::vector<BackendInfo> out;
    for (const auto& b : CliBackends()) {
      if (b.available && b.name != "measurement") out.push_back(b);
    }
    return out;
  }

  // Compares `actual` with tests/golden/<name>, or rewrites it when
  // MEMEST_UPDATE_GOLDEN=1.
  void ExpectGolden(const std::string& name, std::string actual) {
    // Paths in the output are made relative to the source tree so the file is
    // portable.
    const std::string root = std::string(MEMEST_SOURCE_DIR) + "/";
    for (size_t pos; (pos = actual.find(root)) != std::string::npos;)
      actual.erase(pos, root.size());
    const fs::path golden = fs::path(MEMEST_SOURCE_DIR) / "tests" / "golden" / name;
    const char* update = std::getenv("MEMEST_UPDATE_GOLDEN");
    if (update != nullptr && std::string(update) == "1") {
      fs::create_directories(golden.parent_path());
      WriteFile(golden, actual);
      std::cerr << "rewrote " << golden << "\n";
      return;
    }
    ASSERT_TRUE(fs::exists(golden))
        << golden << " is missing; run with MEMEST_UPDATE_GOLDEN=1 to create it";
    EXPECT_EQ(ReadFile(golden), actual)
        << "output differs from " << golden
        << " (MEMEST_UPDATE_GOLDEN=1 rewrites it after a deliberate change)";
  }

  // Writes the small MLP test model (batch dim "N") with `producer` to
  // dir_/name.
  std::string WriteMlp(const std::string& name, const std::string& producer) {
    testing::GraphBuilder b = testing::SmallMlp();
    b.model().set_producer_name(producer);
    const fs::path path = dir_ / name;
    WriteFile(path, b.Serialize());
    return path.string();
  }

  fs::path dir_;
};

// True when permission bits do not stop this process (root, CAP_DAC_OVERRIDE).
bool PermissionsIgnored(const fs::path& unreadable) {
  return access(unreadable.c_str(), R_OK) == 0;
}

bool IsByteCount(const json& v) {
  return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
}

// ----------------------------------------------------------------------------------------------
// Exit codes and error messages.

TEST_F(CliTest, MissingFileExits3AndNamesPath) {
  const std::string path = (dir_ / "no_such_model.onnx").string();
  CliRun r = Run({path, "--batch", "4"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find(path), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST_F(CliTest, HtmlFileIsNotOnnxExits3) {
  const fs::path path = dir_ / "model.onnx";
  WriteFile(path,
            "<!DOCTYPE html>\n<html><head><title>404 Not "
            "Found</title></head><body>nope</body></html>\n");
  CliRun r = Run({path.string(), "--batch", "4"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_FALSE(r.err.empty());
  EXPECT_EQ(r.out, "");
}

TEST_F(CliTest, TruncatedModelExits3) {
  const std::string bytes = ReadFile(Model("resnet18_train.onnx"));
  ASSERT_GT(bytes.size(), 100u);
  const fs::path path = dir_ / "truncated.onnx";
  WriteFile(path, bytes.substr(0, bytes.size() / 2));
  CliRun r = Run({path.string(), "--batch", "4"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
}

TEST_F(CliTest, OverflowingDimExits3) {
  CliRun r = Run({Model("gpt2_tiny_train.onnx"), "--dim", "batch=3000000000000000000"});
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("overflow"), std::string::npos) << r.err;
}

TEST_F(CliTest, BadFlagExits2) {
  CliRun r = Run({Model("mlp_small_train.onnx"), "--no-such-flag"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_FALSE(r.err.empty());
  EXPECT_EQ(r.out, "");
}

TEST_F(CliTest, BadValuesExit2) {
  const std::string m = Model("mlp_small_train.onnx");
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{m, "--batch", "abc"},
                                             {m, "--batch", "0"},
                                             {m, "--batch", "8", "--mode", "fly"},
                                             {m, "--batch", "8", "--optimizer", "lion"},
                                             {m, "--batch", "8", "--precision", "fp8"},
                                             {m, "--batch", "8", "--loss", "hinge"},
                                             {m, "--batch", "8", "--weight-decay", "-1"},
                                             {m, "--batch", "8", "--dim", "nonsense"},
                                             {m, "--batch", "8", "-o", "xml"},
                                             {m, "--batch", "8", "-o", "csv", "--json"},
                                             {m, "--batch", "8", "--backend", "no-such-backend"},
                                             {}}) {
    CliRun r = Run(args);
    EXPECT_EQ(r.exit_code, 2) << ::testing::PrintToString(args) << "\n" << r.err;
    EXPECT_FALSE(r.err.empty()) << ::testing::PrintToString(args);
  }
}

TEST_F(CliTest, UnknownGpuExits2) {
  CliRun r = Run({Model("mlp_small_train.onnx"), "--batch", "8", "--gpu", "not-a-gpu-9000"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("not-a-gpu-9000"), std::string::npos) << r.err;
}

TEST_F(CliTest, UnboundBatchExits2AndNamesDim) {
  CliRun r = Run({Model("mlp_small_train.onnx")});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("batch"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--batch"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--dim"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST_F(CliTest, DimBindsBatchByName) {
  CliRun r = Run({Model("mlp_small_train.onnx"), "--dim", "batch=8", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST_F(CliTest, HelpPrintsLibraryDefaults) {
  CliRun r = Run({"--help"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const char* flag :
       {"--batch", "--dim", "--mode", "--optimizer", "--weight-decay", "--precision", "--loss",
        "--gpu", "--expandable-segments", "--backend", "--max-batch", "--output", "--json",
        "--list-backends", "--list-gpus", "--version"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  }
  const std::vector<OptionDoc> docs = DescribeOptions();
  EXPECT_FALSE(docs.empty());
  // Every documented default shows up (the CLI may drop one pair of outer
  // parentheses when it writes "(default: ...)").
  for (const auto& d : docs) {
    std::string value = d.default_value;
    if (value.size() >= 2 && value.front() == '(' && value.back() == ')') {
      value = value.substr(1, value.size() - 2);
    }
    // A number printed with six fixed places ("0.000000") is shown in its shortest form.
    char* end = nullptr;
    const double number = std::strtod(value.c_str(), &end);
    if (!value.empty() && *end == '\0' && value.find('.') != std::string::npos) {
      std::ostringstream shortest;
      shortest << number;
      value = shortest.str();
    }
    EXPECT_NE(r.out.find(value), std::string::npos) << d.name << " = " << value;
  }
  const Options defaults;
  EXPECT_NE(r.out.find(std::string("(default: ") + ToString(defaults.optimizer) + ")"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("(default: " + defaults.gpu + ")"), std::string::npos) << r.out;
}

TEST_F(CliTest, VersionExits0) {
  CliRun r = Run({"--version"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out.rfind("memest ", 0), 0u) << r.out;
}

// ----------------------------------------------------------------------------------------------
// Listing.

TEST_F(CliTest, ShowCoverageListsOpsWithoutRules) {
  const OpCoverage c = RuleCoverage();
  ASSERT_GE(c.onnx_ops.size() - c.without_rule.size(), 150u) << "issue 3: >= 150 ONNX ops";
  CliRun j = Run({"--show-coverage", "--json"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const json doc = json::parse(j.out);
  EXPECT_EQ(doc["schema"], "memest.coverage/1");
  EXPECT_EQ(doc["onnx_ops"], c.onnx_ops.size());
  EXPECT_EQ(doc["onnx_ops_without_rule"].size(), c.without_rule.size());
  for (const char* op : {"Conv", "Gemm", "MatMul", "LSTM", "Softmax", "Einsum", "Trilu"}) {
    EXPECT_EQ(std::count(c.without_rule.begin(), c.without_rule.end(), op), 0) << op;
  }
  std::cout << "[ coverage ] " << c.onnx_ops.size() - c.without_rule.size() << " of "
            << c.onnx_ops.size() << " ONNX operators have a rule ("
            << c.onnx_ops.size() - c.without_shape_rule.size() << " a shape rule); " << c.rules
            << " rules in the table\n";

  // With a model: its op types; every bundled model is fully covered.
  CliRun m = Run({"--show-coverage", Model("resnet18_train.onnx"), "--json"});
  ASSERT_EQ(m.exit_code, 0) << m.err;
  const json md = json::parse(m.out);
  EXPECT_GT(md["model"]["op_types"].size(), 3u);
  EXPECT_TRUE(md["model"]["without_rule"].empty()) << md.dump();
  CliRun t = Run({"--show-coverage", Model("gpt2_tiny_train.onnx")});
  EXPECT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.out.find("without a rule: none"), std::string::npos) << t.out;
  EXPECT_EQ(Run({"--show-coverage", "/nonexistent.onnx"}).exit_code, 3);
}

TEST_F(CliTest, ListGpusShowsH100) {
  CliRun r = Run({"--list-gpus"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("h100-80gb"), std::string::npos) << r.out;
  for (const auto& g : GpuProfiles()) EXPECT_NE(r.out.find(g.name), std::string::npos) << g.name;

  CliRun j = Run({"--list-gpus", "--json"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const json doc = json::parse(j.out);
  EXPECT_EQ(doc["schema"], "memest.gpus/1");
  ASSERT_EQ(doc["gpus"].size(), GpuProfiles().size());
  for (const auto& g : doc["gpus"]) {
    for (const char* key : {"total_memory", "usable_memory", "cublas_workspace"}) {
      EXPECT_TRUE(IsByteCount(g[key]["bytes"])) << g["name"] << " " << key;
      EXPECT_TRUE(g[key]["source"].is_string());
      EXPECT_TRUE(g[key]["calibrated"].is_boolean());
    }
  }
  // The stacks: every value with its source, the default first.
  ASSERT_EQ(doc["stacks"].size(), StackProfiles().size());
  EXPECT_EQ(doc["stacks"][0]["name"], "pytorch2-lazy");
  for (const auto& st : doc["stacks"]) {
    for (const char* key : {"cuda_context", "library_memory"}) {
      EXPECT_TRUE(IsByteCount(st[key]["bytes"])) << st["name"] << " " << key;
      EXPECT_FALSE(st[key]["source"].get<std::string>().empty());
    }
    EXPECT_FALSE(st["conv_workspace"]["source"].get<std::string>().empty());
    for (const auto& [backend, band] : st["bands"].items()) {
      EXPECT_FALSE(band["source"].get<std::string>().empty()) << backend;
    }
  }
}

TEST_F(CliTest, ListBackendsShowsAvailabilityAndReasons) {
  CliRun r = Run({"--list-backends"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  bool saw_analytical = false;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("analytical ", 0) == 0) {
      saw_analytical = true;
      EXPECT_NE(line.find("yes"), std::string::npos) << line;
    }
  }
  EXPECT_TRUE(saw_analytical) << r.out;
  for (const auto& b : ListBackends()) {
    EXPECT_NE(r.out.find(b.name), std::string::npos) << b.name;
    if (!b.available) {
      EXPECT_NE(r.out.find("unavailable: " + b.reason), std::string::npos) << b.name;
    }
  }

  CliRun j = Run({"--list-backends", "-o", "json"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const json doc = json::parse(j.out);
  EXPECT_EQ(doc["schema"], "memest.backends/1");
  bool analytical_available = false;
  for (const auto& b : doc["backends"]) {
    if (b["name"] == "analytical") analytical_available = b["available"].get<bool>();
    if (!b["available"].get<bool>()) {
      EXPECT_FALSE(b["reason"].get<std::string>().empty()) << b["name"];
    }
  }
  EXPECT_TRUE(analytical_available);
}

// ----------------------------------------------------------------------------------------------
// Estimates.

// Checks one successful memest.estimate/1 result object.
void CheckResult(const json& res) {
  ASSERT_TRUE(res["ok"].get<bool>()) << res.dump(2);
  uint64_t sum = 0;
  for (const char* key :
       {"weights", "gradients", "optimizer_state", "saved_activations", "transient",
        "allocator_overhead", "cached_free", "cuda_context", "unaccounted"}) {
    ASSERT_TRUE(res["breakdown"].contains(key)) << key;
    ASSERT_TRUE(IsByteCount(res["breakdown"][key])) << key;
    sum += res["breakdown"][key].get<uint64_t>();
  }
  for (const char* key : {"allocated", "reserved", "device"})
    EXPECT_TRUE(IsByteCount(res["peak"][key])) << key;
  EXPECT_EQ(sum, res["peak"]["device"].get<uint64_t>());
  EXPECT_GT(res["breakdown"]["weights"].get<uint64_t>(), 0u);
  EXPECT_LE(res["peak"]["allocated"].get<uint64_t>(), res["peak"]["reserved"].get<uint64_t>());
  EXPECT_LE(res["peak"]["reserved"].get<uint64_t>(), res["peak"]["device"].get<uint64_t>());
  EXPECT_TRUE(res["fit"]["fits"].is_boolean());
  EXPECT_TRUE(IsByteCount(res["fit"]["capacity"]));
  EXPECT_TRUE(res["fit"]["headroom"].is_number_integer());
  EXPECT_TRUE(res["diagnostics"].is_array());
  EXPECT_TRUE(res["peak_phase"].is_string());
  EXPECT_TRUE(res["interval"].is_null() || res["interval"].is_object());
}

TEST_F(CliTest, JsonParsesAndBreakdownSumsToDevicePeak) {
  CliRun r = Run({Model("mlp_small_train.onnx"), "--batch", "32", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(r.out);
  EXPECT_EQ(doc["schema"], "memest.estimate/1");
  EXPECT_TRUE(doc["memest_version"].is_string());
  EXPECT_GT(doc["model"]["nodes"].get<int64_t>(), 0);
  EXPECT_GT(doc["model"]["parameters"].get<int64_t>(), 0);
  EXPECT_TRUE(IsByteCount(doc["model"]["parameter_bytes"]));
  ASSERT_FALSE(doc["model"]["inputs"].empty());
  EXPECT_EQ(doc["model"]["inputs"][0]["dims"][0], "batch");
  EXPECT_EQ(doc["options"]["batch"], 32);
  EXPECT_EQ(doc["options"]["mode"], "train");
  EXPECT_EQ(doc["gpu"]["name"], Options().gpu);
  EXPECT_FALSE(doc.contains("max_batch"));
  ASSERT_EQ(doc["results"].size(), 1u);
  EXPECT_EQ(doc["results"][0]["backend"], "analytical");
  CheckResult(doc["results"][0]);
  EXPECT_EQ(doc["verdict"], "fits");
}

TEST_F(CliTest, JsonForEveryBundledModelAndMode) {
  for (const char* name : {"mlp_small_train.onnx", "resnet18_train.onnx", "gpt2_tiny_train.onnx"}) {
    for (const char* mode : {"train", "infer"}) {
      CliRun r = Run({Model(name), "--batch", "4", "--mode", mode, "-o", "json"});
      ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 1) << name << " " << mode << "\n" << r.err;
      const json doc = json::parse(r.out);
      CheckResult(doc["results"][0]);
    }
  }
}

// Issue 14 item 6: symbolic's breakdown is one moment (the device peak); the table and the JSON
// add the largest of each category over the step, each with its moment, and name the reserved
// memory no tensor uses "cached but free".
TEST_F(CliTest, SymbolicShowsTheLargestOfEachCategoryOverTheStep) {
  CliRun table = Run({Model("mlp_small_train.onnx"), "--batch", "32", "--backend", "symbolic"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  for (const char* s : {"cached but free", "largest over the step (symbolic)", "of iteration 1"}) {
    EXPECT_NE(table.out.find(s), std::string::npos) << s << "\n" << table.out;
  }
  CliRun r = Run({Model("mlp_small_train.onnx"), "--batch", "32", "--backend",
                  "analytical,symbolic", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(r.out);
  ASSERT_EQ(doc["results"].size(), 2u);
  EXPECT_TRUE(doc["results"][0]["largest"].is_null()) << "analytical does not replay the step";
  const json& sym = doc["results"][1];
  ASSERT_EQ(sym["backend"], "symbolic");
  const json& largest = sym["largest"];
  for (const char* key : {"weights", "gradients", "optimizer_state", "saved_activations",
                          "transient", "cached_free"}) {
    ASSERT_TRUE(largest.contains(key)) << key;
    EXPECT_TRUE(IsByteCount(largest[key]["bytes"])) << key;
    EXPECT_TRUE(largest[key]["phase"].is_string()) << key;
    EXPECT_TRUE(largest[key]["iteration"].is_number_integer()) << key;
    EXPECT_TRUE(largest[key]["node"].is_string()) << key;
    if (std::string(key) != "cached_free") {
      EXPECT_GE(largest[key]["bytes"].get<uint64_t>(), sym["breakdown"][key].get<uint64_t>())
          << key << ": a maximum over the step is at least its value at the peak";
    }
  }
  EXPECT_EQ(largest["optimizer_state"]["phase"], "optimizer_step");
  EXPECT_NE(largest["saved_activations"]["phase"], "optimizer_step");
}

TEST_F(CliTest, TableHasBreakdownTotalAndVerdictOnStdout) {
  CliRun r = Run({Model("mlp_small_train.onnx"), "--batch", "32"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* s : {"weights", "gradients", "optimizer state", "saved activations",
                        "transient/workspace", "allocator rounding", "cached but free",
                        "CUDA context", "unaccounted", "total (device peak)", "peak allocated",
                        "peak reserved", "gpu usable capacity", "result: fits", "peak:"}) {
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  }
  EXPECT_EQ(r.out.find("warning"), std::string::npos) << "diagnostics belong on stderr";
}

TEST_F(CliTest, DiagnosticsGoToStderr) {
  // An eval-mode export (BatchNorm folded into Conv) draws a model warning.
  const std::string m = Model("resnet18_eval.onnx");
  CliRun r = Run({m, "--batch", "4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("memest: warning: "), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("warning"), std::string::npos) << r.out;

  CliRun j = Run({m, "--batch", "4", "--json"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const json doc = json::parse(j.out);  // stdout is pure JSON
  EXPECT_FALSE(doc["model"]["diagnostics"].empty());
  for (const auto& d : doc["model"]["diagnostics"]) {
    EXPECT_TRUE(d["severity"] == "info" || d["severity"] == "warning");
    EXPECT_FALSE(d["code"].get<std::string>().empty());
  }
}

TEST_F(CliTest, CsvAndMarkdown) {
  CliRun c = Run({Model("mlp_small_train.onnx"), "--batch", "32", "-o", "csv"});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  std::istringstream lines(c.out);
  std::string header, row, extra;
  ASSERT_TRUE(std::getline(lines, header));
  ASSERT_TRUE(std::getline(lines, row));
  EXPECT_FALSE(std::getline(lines, extra));
  EXPECT_EQ(header.rfind("backend,ok,", 0), 0u) << header;
  EXPECT_EQ(row.rfind("analytical,true,", 0), 0u) << row;
  EXPECT_NE(header.find("peak_device"), std::string::npos);
  // Columns are only ever appended: the first release's columns keep their places.
  EXPECT_NE(header.find(",allocator_overhead,cuda_context,unaccounted,"), std::string::npos)
      << header;
  const std::string appended =
      ",diagnostics,cached_free,library_memory,stack,fit_on,judged_peak,collective_buffers,"
      "nccl_buffers";
  EXPECT_EQ(header.substr(header.size() - appended.size()), appended) << header;

  CliRun m = Run({Model("mlp_small_train.onnx"), "--batch", "32", "-o", "md"});
  ASSERT_EQ(m.exit_code, 0) << m.err;
  EXPECT_NE(m.out.find("| component |"), std::string::npos) << m.out;
  EXPECT_NE(m.out.find("| ---: |"), std::string::npos) << m.out;
}

TEST_F(CliTest, MaxBatchOnH100) {
  CliRun r = Run({Model("mlp_small_train.onnx"), "--max-batch", "--gpu", "h100-80gb", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(r.out);
  ASSERT_TRUE(doc.contains("max_batch"));
  EXPECT_GE(doc["max_batch"]["batch"].get<int64_t>(), 1);
  EXPECT_EQ(doc["results"][0]["max_batch"]["batch"], doc["max_batch"]["batch"]);
  CheckResult(doc["results"][0]);
  EXPECT_TRUE(doc["results"][0]["fit"]["fits"].get<bool>());

  CliRun t = Run({Model("resnet18_train.onnx"), "--max-batch", "--gpu", "h100-80gb"});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const size_t pos = t.out.find("max batch: ");
  ASSERT_NE(pos, std::string::npos) << t.out;
  EXPECT_GE(std::stoll(t.out.substr(pos + 11)), 1) << t.out;

  // The symbolic search's line counts its one estimate, traces and replays, each noun as many.
  CliRun s = Run(
      {Model("resnet18_train.onnx"), "--max-batch", "--gpu", "h100-80gb", "--backend", "symbolic"});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_NE(s.out.find("(symbolic, 1 evaluation, 3 traces and "), std::string::npos) << s.out;
  EXPECT_EQ(s.out.find("1 evaluations"), std::string::npos) << s.out;
  // Its JSON says what the replays cost: the requests they ran, at least one each; the analytical
  // search replays nothing.
  CliRun sj = Run({Model("resnet18_train.onnx"), "--max-batch", "--gpu", "h100-80gb", "--backend",
                   "symbolic", "--json"});
  ASSERT_EQ(sj.exit_code, 0) << sj.err;
  const json mb = json::parse(sj.out)["results"][0]["max_batch"];
  EXPECT_GE(mb["replayed_requests"].get<int64_t>(), mb["replays"].get<int64_t>()) << mb;
  EXPECT_GT(mb["replays"].get<int64_t>(), 0) << mb;
  EXPECT_EQ(doc["results"][0]["max_batch"]["replayed_requests"], 0);
}

// --memory-fraction: the verdict needs the reserved peak within F x the GPU's total memory, the
// JSON says the limit, and a share outside (0, 1] is a usage error naming the flag.
TEST_F(CliTest, MemoryFractionLimitsWhatTheAllocatorMayReserve) {
  const std::string model = Model("resnet50_train.onnx");
  CliRun whole = Run({model, "--batch", "64", "--gpu", "h100-80gb", "--json"});
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  EXPECT_FALSE(json::parse(whole.out)["results"][0]["fit"].contains("reserved_limit"));
  CliRun small =
      Run({model, "--batch", "64", "--gpu", "h100-80gb", "--memory-fraction", "0.05", "--json"});
  ASSERT_EQ(small.exit_code, 1) << small.err;
  const json fit = json::parse(small.out)["results"][0]["fit"];
  EXPECT_FALSE(fit["fits"].get<bool>());
  EXPECT_EQ(fit["reserved_limit"].get<uint64_t>(), uint64_t{85'017'493'504} / 20);
  CliRun text = Run({model, "--batch", "64", "--gpu", "h100-80gb", "--memory-fraction", "0.05"});
  EXPECT_NE(text.out.find("the memory fraction lets the allocator reserve"), std::string::npos)
      << text.out;
  for (const char* bad : {"0", "1.5", "half"}) {
    CliRun r = Run({model, "--batch", "64", "--memory-fraction", bad});
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_NE(r.err.find("--memory-fraction"), std::string::npos) << r.err;
  }
}

TEST_F(CliTest, MaxDimSearchesANamedDim) {
  const fs::path path = dir_ / "attention.onnx";
  WriteFile(path, testing::SelfAttention().Serialize());
  CliRun r = Run({path.string(), "--batch", "4", "--max-dim", "seq", "--gpu", "l4-24gb", "--loss",
                  "mse", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(r.out);
  EXPECT_EQ(doc["max_batch"]["dim"], "seq");
  EXPECT_GT(doc["max_batch"]["batch"].get<int64_t>(), 1);
  EXPECT_EQ(doc["results"][0]["max_batch"]["dim"], "seq");
  CliRun t = Run({path.string(), "--batch", "4", "--max-dim", "seq", "--gpu", "l4-24gb"});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.out.find("max seq: "), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("seq=max"), std::string::npos) << t.out;
  // Not a dim of the model, or searched twice: usage errors.
  EXPECT_EQ(Run({path.string(), "--batch", "4", "--max-dim", "tokens"}).exit_code, 2);
  EXPECT_EQ(Run({path.string(), "--max-batch", "--max-dim", "seq", "--dim", "seq=8"}).exit_code, 2);
}

TEST_F(CliTest, HugeBatchDoesNotFitExits1) {
  CliRun r = Run({Model("resnet18_train.onnx"), "--batch", "65536", "--gpu", "l4-24gb"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.out.find("does not fit"), std::string::npos) << r.out;

  CliRun j = Run({Model("resnet18_train.onnx"), "--batch", "65536", "--gpu", "l4-24gb", "--json"});
  EXPECT_EQ(j.exit_code, 1) << j.err;
  const json doc = json::parse(j.out);
  EXPECT_FALSE(doc["results"][0]["fit"]["fits"].get<bool>());
  EXPECT_LT(doc["results"][0]["fit"]["headroom"].get<int64_t>(), 0);
  EXPECT_EQ(doc["verdict"], "does_not_fit");
}

TEST_F(CliTest, BackendAllOneResultPerEstimatorConservativeVerdict) {
  const std::vector<BackendInfo> backends = Estimators();
  CliRun r = Run({Model("mlp_small_train.onnx"), "--batch", "32", "--backend", "all", "--json"});
  ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 1) << r.err;
  const json doc = json::parse(r.out);
  ASSERT_EQ(doc["results"].size(), backends.size());
  bool any_does_not_fit = false;
  for (size_t i = 0; i < backends.size(); ++i) {
    const json& res = doc["results"][i];
    EXPECT_EQ(res["backend"], backends[i].name);
    CheckResult(res);
    any_does_not_fit |= !res["fit"]["fits"].get<bool>();
  }
  EXPECT_EQ(doc["results"][0]["backend"], "analytical");
  EXPECT_EQ(r.exit_code, any_does_not_fit ? 1 : 0);

  CliRun t = Run({Model("mlp_small_train.onnx"), "--batch", "32", "--backend", "all"});
  EXPECT_EQ(t.exit_code, r.exit_code) << t.err;
  for (const auto& b : backends) EXPECT_NE(t.out.find(b.name), std::string::npos) << b.name;
  EXPECT_NE(t.out.find("result: "), std::string::npos) << t.out;
}

// Issue "never a silent wrong answer", item 4: `all` means the estimators; the measurement
// backend executes the model and runs only when named.
TEST_F(CliTest, BackendAllNeverRunsMeasurement) {
  CliRun r = Run({Model("mlp_small_train.onnx"), "--batch", "4", "--backend", "all", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(r.out);
  std::vector<std::string> names;
  for (const auto& res : doc["results"]) names.push_back(res["backend"]);
  std::vector<std::string> expected;
  for (const auto& b : Estimators()) expected.push_back(b.name);
  EXPECT_EQ(names, expected);
  EXPECT_EQ(std::count(names.begin(), names.end(), "measurement"), 0);
  EXPECT_EQ(r.err.find("measuring"), std::string::npos) << r.err;
}

TEST_F(CliTest, BackendCommaListAndTypos) {
  const std::string m = Model("mlp_small_train.onnx");
  CliRun r = Run({m, "--batch", "4", "--backend", "symbolic,analytical", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(r.out);
  ASSERT_EQ(doc["results"].size(), 2u);
  EXPECT_EQ(doc["results"][0]["backend"], "analytical");  // ListBackends() order
  EXPECT_EQ(doc["results"][1]["backend"], "symbolic");
  EXPECT_EQ(doc["backend"], "symbolic,analytical");

  CliRun typo = Run({m, "--batch", "4", "--backend", "analytical,symbolc"});
  EXPECT_EQ(typo.exit_code, 2) << typo.err;
  EXPECT_NE(typo.err.find("unknown backend 'symbolc'"), std::string::npos) << typo.err;
  EXPECT_NE(typo.err.find("did you mean 'symbolic'?"), std::string::npos) << typo.err;
  for (const auto& b : Estimators()) EXPECT_NE(typo.err.find(b.name), std::string::npos) << b.name;
  EXPECT_EQ(typo.out, "");

  CliRun far = Run({m, "--batch", "4", "--backend", "zzzzzz"});
  EXPECT_EQ(far.exit_code, 2);
  EXPECT_EQ(far.err.find("did you mean"), std::string::npos) << far.err;
  for (const char* bad : {"analytical,", ",symbolic", "analytical,,symbolic", ""}) {
    CliRun e = Run({m, "--batch", "4", "--backend", bad});
    EXPECT_EQ(e.exit_code, 2) << bad << "\n" << e.err;
    EXPECT_NE(e.err.find("empty backend name"), std::string::npos) << bad << "\n" << e.err;
  }
}

// Named explicitly, the measurement backend runs and says so on stderr before it executes the
// model (and with -q it does not); where this memest has no measurement backend, naming it is a
// usage error that points to memest-measure.
TEST_F(CliTest, MeasurementRunsOnlyWhenNamedAndAnnouncesItself) {
  const std::string m = Model("mlp_small_train.onnx");
  bool available = false;
  for (const auto& b : CliBackends()) available |= b.name == "measurement" && b.available;
  if (!available) {
    for (const char* request : {"measurement", "analytical,measurement"}) {
      CliRun r = Run({m, "--batch", "2", "--backend", request});
      EXPECT_EQ(r.exit_code, 2) << request << "\n" << r.err;
      EXPECT_NE(r.err.find("memest-measure"), std::string::npos) << r.err;
      EXPECT_EQ(r.out, "");
    }
    return;
  }
  CliRun r = Run({m, "--batch", "2", "--backend", "analytical,measurement", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["results"].size(), 2u);
  EXPECT_NE(r.err.find("memest: measuring with LibTorch, batch 2 (this executes the model"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("device peak"), std::string::npos) << r.err;
  CliRun q = Run({m, "--batch", "2", "--backend", "measurement", "-q"});
  ASSERT_EQ(q.exit_code, 0) << q.err;
  EXPECT_EQ(q.err, "");
}

// ----------------------------------------------------------------------------------------------
// The table and --timeline say which backend they come from (item 5).

TEST_F(CliTest, TimelineWithoutBackendAgreesWithTheTable) {
  const fs::path timeline = dir_ / "t.json";
  CliRun r = Run(
      {Model("mlp_small_train.onnx"), "--batch", "4", "--timeline", timeline.string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(r.out);
  ASSERT_EQ(doc["results"].size(), 1u);
  EXPECT_EQ(doc["results"][0]["backend"], "symbolic");
  EXPECT_EQ(doc["timeline"]["backend"], "symbolic");
  EXPECT_EQ(doc["timeline"]["path"], timeline.string());
  EXPECT_EQ(doc["timeline"]["batch"], 4);
  EXPECT_TRUE(doc["timeline"]["same_backend_as_results"].get<bool>());
  EXPECT_EQ(r.err.find("note:"), std::string::npos) << r.err;
  const json tl = json::parse(ReadFile(timeline));
  EXPECT_NE(tl["title"].get<std::string>().find("drawn by the symbolic backend"), std::string::npos)
      << tl["title"];
  // Without --timeline the default is unchanged, and the document has no timeline.
  const json plain =
      json::parse(Run({Model("mlp_small_train.onnx"), "--batch", "4", "--json"}).out);
  EXPECT_EQ(plain["results"][0]["backend"], "analytical");
  EXPECT_FALSE(plain.contains("timeline"));
}

TEST_F(CliTest, TimelineFromAnotherBackendIsSaid) {
  const std::string m = Model("mlp_small_train.onnx");
  const fs::path html = dir_ / "t.html";
  CliRun t = Run({m, "--batch", "4", "--backend", "analytical", "--timeline", html.string()});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.err.find("timeline drawn by the symbolic backend (the only one with a timeline); "
                       "the table is analytical"),
            std::string::npos)
      << t.err;
  EXPECT_NE(t.out.find("timeline: " + html.string() + " (drawn by the symbolic backend"),
            std::string::npos)
      << t.out;
  EXPECT_NE(ReadFile(html).find("drawn by the symbolic backend"), std::string::npos);

  CliRun j = Run({m, "--batch", "4", "--backend", "learned", "--timeline",
                  (dir_ / "t.svg").string(), "--json"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const json doc = json::parse(j.out);
  EXPECT_EQ(doc["results"][0]["backend"], "learned");
  EXPECT_EQ(doc["timeline"]["backend"], "symbolic");
  EXPECT_FALSE(doc["timeline"]["same_backend_as_results"].get<bool>());
  EXPECT_NE(j.err.find("the table is learned"), std::string::npos) << j.err;

  CliRun q = Run({m, "--batch", "4", "--backend", "analytical", "--timeline", html.string(), "-q"});
  EXPECT_EQ(q.exit_code, 0);
  EXPECT_EQ(q.err, "");
}

// ----------------------------------------------------------------------------------------------
// Hostile input (findings of the fuzzing review).

TEST_F(CliTest, JsonReplacesInvalidUtf8) {
  // A producer_name and a file name holding byte 0xFF: U+FFFD in the JSON.
  const std::string path = WriteMlp("model\xff.onnx", "\xff");
  CliRun r = Run({path, "--batch", "4", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(r.out);
  // The builder sets producer_version "0"; the summary appends it.
  EXPECT_EQ(doc["model"]["producer"].get<std::string>(), "\xEF\xBF\xBD 0");
  EXPECT_NE(doc["model"]["path"].get<std::string>().find("model\xEF\xBF\xBD.onnx"),
            std::string::npos);
  EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;

  CliRun c = Run({"--show-coverage", path, "--json"});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NO_THROW(json::parse(c.out));

  // The timeline's title names the model path.
  const fs::path timeline = dir_ / "t.json";
  CliRun t = Run({path, "--batch", "4", "--timeline", timeline.string()});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const json tl = json::parse(ReadFile(timeline));
  EXPECT_NE(tl["title"].get<std::string>().find("model\xEF\xBF\xBD.onnx"), std::string::npos);
}

TEST_F(CliTest, OutOfRangeIntegersAreUsageErrorsNamingTheRange) {
  const std::string m = Model("mlp_small_train.onnx");
  const std::string max = "9223372036854775807";
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {m, "--batch", "9223372036854775808"},
           {m, "--batch", "99999999999999999999999"},
           {m, "--batch", "-1"},
           {m, "--batch", "0"},
           {m, "--batch", "8x"},
           {m, "--dim", "batch=9223372036854775808"},
           {m, "--dim", "batch=-3"},
           {m, "--batch", "8", "--micro-batches", "9223372036854775808"},
           {m, "--batch", "8", "--checkpoint", "9223372036854775808"},
           {m, "--batch", "8", "--checkpoint", "-1"}}) {
    CliRun r = Run(args);
    EXPECT_EQ(r.exit_code, 2) << ::testing::PrintToString(args) << "\n" << r.err;
    EXPECT_NE(r.err.find("to " + max), std::string::npos) << ::testing::PrintToString(args) << "\n"
                                                          << r.err;
    EXPECT_EQ(r.out, "");
  }
  CliRun b = Run({m, "--batch", "9223372036854775808"});
  EXPECT_NE(b.err.find("--batch: 9223372036854775808 is out of range"), std::string::npos) << b.err;
  EXPECT_NE(b.err.find("from 1 to " + max), std::string::npos) << b.err;
  CliRun d = Run({m, "--dim", "batch=9223372036854775808"});
  EXPECT_NE(d.err.find("--dim batch: 9223372036854775808 is out of range"), std::string::npos)
      << d.err;
  EXPECT_NE(d.err.find("from 0 to " + max), std::string::npos) << d.err;
}

TEST_F(CliTest, EmptyIntegerValueSaysEmpty) {
  const std::string m = Model("mlp_small_train.onnx");
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{m, "--batch", ""},
                                             {m, "--dim", "batch="},
                                             {m, "--batch", "8", "--checkpoint", ""},
                                             {m, "--batch", "8", "--micro-batches", ""}}) {
    CliRun r = Run(args);
    EXPECT_EQ(r.exit_code, 2) << ::testing::PrintToString(args) << "\n" << r.err;
    EXPECT_NE(r.err.find("the value is empty"), std::string::npos)
        << ::testing::PrintToString(args) << "\n"
        << r.err;
    EXPECT_EQ(r.err.find("got 0"), std::string::npos) << r.err;
  }
  // "--batch=" is rejected by the flag parser itself ("1 required N missing").
  EXPECT_EQ(Run({m, "--batch="}).exit_code, 2);
}

TEST_F(CliTest, UnreadableModelSaysCannotBeRead) {
  const std::string path = WriteMlp("locked.onnx", "test");
  fs::permissions(path, fs::perms::none);
  if (PermissionsIgnored(path)) {
    GTEST_SKIP() << "running as root (or with CAP_DAC_OVERRIDE): chmod 000 "
                    "does not stop reading; ModelUnderAFileSaysCannotBeRead "
                    "covers the message";
  }
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{path, "--batch", "4"}, {"--show-coverage", path}}) {
    CliRun r = Run(args);
    EXPECT_EQ(r.exit_code, 3) << r.err;
    EXPECT_NE(r.err.find(path + ": cannot be read: " + std::strerror(EACCES)), std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("(unreadable)"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("not_found"), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  }
}

TEST_F(CliTest, ModelUnderAFileSaysCannotBeRead) {
  // The parent is a regular file: open() fails with ENOTDIR, even for root.
  WriteFile(dir_ / "plain", "x");
  const std::string path = (dir_ / "plain" / "model.onnx").string();
  CliRun r = Run({path, "--batch", "4"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find(path + ": cannot be read: " + std::strerror(ENOTDIR)), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("not_found"), std::string::npos) << r.err;
  // A file that does not exist is still not_found.
  CliRun missing = Run({(dir_ / "absent.onnx").string(), "--batch", "4"});
  EXPECT_EQ(missing.exit_code, 3) << missing.err;
  EXPECT_NE(missing.err.find("not_found"), std::string::npos) << missing.err;
}

TEST_F(CliTest, TimelineUnwritableNamesPathAndReason) {
  const std::string m = Model("mlp_small_train.onnx");
  const std::string missing = (dir_ / "no_such_dir" / "t.json").string();
  CliRun r = Run({m, "--batch", "4", "--timeline", missing});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(missing + ": cannot be written: " + std::strerror(ENOENT)),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("not_found"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "") << "the check runs before any estimate";

  const fs::path locked = dir_ / "locked";
  fs::create_directory(locked);
  fs::permissions(locked, fs::perms::owner_read | fs::perms::owner_exec);
  const std::string in_locked = (locked / "t.json").string();
  if (access(locked.c_str(), W_OK) != 0) {
    CliRun l = Run({m, "--batch", "4", "--timeline", in_locked});
    EXPECT_EQ(l.exit_code, 2) << l.err;
    EXPECT_NE(l.err.find(in_locked + ": cannot be written: " + std::strerror(EACCES)),
              std::string::npos)
        << l.err;
  }
  fs::permissions(locked, fs::perms::owner_all);

  // A writable path still gets its timeline, and the check leaves no stray file.
  const fs::path ok = dir_ / "t.csv";
  CliRun w = Run({m, "--batch", "4", "--timeline", ok.string()});
  EXPECT_EQ(w.exit_code, 0) << w.err;
  EXPECT_GT(fs::file_size(ok), 0u);
  CliRun bad = Run({m, "--batch", "0", "--timeline", (dir_ / "never.json").string()});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_FALSE(fs::exists(dir_ / "never.json"));
}

TEST_F(CliTest, StdoutWriteErrorIsNotSuccess) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full on this system";
  const std::string m = Model("mlp_small_train.onnx");
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {m, "--batch", "4"}, {m, "--batch", "4", "--json"}, {"--list-gpus"}, {"--help"}}) {
    CliRun r = RunWithStdout(args, "/dev/full");
    EXPECT_EQ(r.exit_code, 4) << ::testing::PrintToString(args) << "\n" << r.err;
    EXPECT_NE(
        r.err.find(std::string("cannot write the results to stdout: ") + std::strerror(ENOSPC)),
        std::string::npos)
        << r.err;
  }
}

TEST_F(CliTest, TrainingOnlyFlagsConflictWithInferMode) {
  const std::string m = Model("mlp_small_train.onnx");
  for (const std::vector<std::string>& flag :
       std::vector<std::vector<std::string>>{{"--optimizer", "sgd"},
                                             {"--optimizer-impl", "single-tensor"},
                                             {"--checkpoint", "2"},
                                             {"--weight-decay", "0.1"},
                                             {"--loss", "mse"},
                                             {"--micro-batches", "2"}}) {
    std::vector<std::string> args = {m, "--batch", "8", "--mode", "infer"};
    args.insert(args.end(), flag.begin(), flag.end());
    CliRun r = Run(args);
    EXPECT_EQ(r.exit_code, 2) << ::testing::PrintToString(args) << "\n" << r.err;
    EXPECT_NE(r.err.find(flag[0] + " conflicts with --mode infer"), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
    // The same flag in training is fine.
    args[4] = "train";
    EXPECT_EQ(Run(args).exit_code, 0) << ::testing::PrintToString(args);
  }
  CliRun both =
      Run({m, "--batch", "8", "--mode", "infer", "--optimizer", "sgd", "--checkpoint", "2"});
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("--optimizer, --checkpoint conflict with --mode infer"),
            std::string::npos)
      << both.err;
  EXPECT_EQ(Run({m, "--batch", "8", "--mode", "infer"}).exit_code, 0);
}

// ----------------------------------------------------------------------------------------------
// Flags that did something other than they said (item 9).

TEST_F(CliTest, CheckpointAboveNodeCountIsAUsageError) {
  const std::string m = Model("mlp_small_train.onnx");
  auto model = LoadModel(m);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const int64_t nodes = (*model)->summary().node_count;
  const std::string over = std::to_string(nodes + 1);
  CliRun r = Run({m, "--batch", "4", "--checkpoint", over});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(
      r.err.find("--checkpoint " + over + ": the graph has " + std::to_string(nodes) + " nodes"),
      std::string::npos)
      << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(Run({m, "--batch", "4", "--checkpoint", "1000"}).exit_code, 2);
  CliRun at = Run({m, "--batch", "4", "--checkpoint", std::to_string(nodes), "--json"});
  EXPECT_EQ(at.exit_code, 0) << at.err;
  EXPECT_EQ(json::parse(at.out)["options"]["checkpoint_segments"], nodes);
}

// --checkpoint blocks: every repeated block, as transformers' gradient checkpointing; a graph
// without blocks is a usage error naming why, a misspelling a bad integer.
TEST_F(CliTest, CheckpointBlocksNeedsRepeatedBlocks) {
  const std::string hf = std::string(MEMEST_SOURCE_DIR) + "/tests/data/hf/qwen3-0.6b.json";
  CliRun on = Run({"--hf-config", hf, "--batch", "4", "--dim", "seq=1024", "--checkpoint", "blocks",
                   "--backend", "symbolic", "--json"});
  ASSERT_EQ(on.exit_code, 0) << on.err;
  EXPECT_EQ(json::parse(on.out)["options"]["checkpoint_blocks"], true);
  CliRun off = Run(
      {"--hf-config", hf, "--batch", "4", "--dim", "seq=1024", "--backend", "symbolic", "--json"});
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_LT(json::parse(on.out)["results"][0]["peak"]["allocated"].get<uint64_t>(),
            json::parse(off.out)["results"][0]["peak"]["allocated"].get<uint64_t>());
  EXPECT_EQ(Run({"--hf-config", hf, "--batch", "1", "--dim", "seq=64", "--checkpoint", "block"})
                .exit_code,
            2);
}

TEST_F(CliTest, HelpShowsDefaultsReadablyAndEveryFlagIsDocumented) {
  CliRun r = Run({"--help"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("0.000000"), std::string::npos) << r.out;
  const size_t wd = r.out.find("--weight-decay");
  ASSERT_NE(wd, std::string::npos);
  EXPECT_NE(r.out.find("(default: 0)", wd), std::string::npos) << r.out;
  // A text flag over a bool option shows its default as the flag spells it, not "true".
  const size_t outputs = r.out.find("--outputs held|dropped");
  ASSERT_NE(outputs, std::string::npos);
  EXPECT_EQ(r.out.find("(default: ", outputs), r.out.find("(default: held)", outputs)) << r.out;
  // Every flag --help prints is in docs/cli.md.
  const std::string doc = ReadFile(fs::path(MEMEST_SOURCE_DIR) / "docs" / "cli.md");
  std::set<std::string> flags;
  for (size_t pos = 0; (pos = r.out.find("--", pos)) != std::string::npos;) {
    size_t end = pos + 2;
    while (end < r.out.size() &&
           (std::islower(static_cast<unsigned char>(r.out[end])) || r.out[end] == '-')) {
      ++end;
    }
    if (end > pos + 2) flags.insert(r.out.substr(pos, end - pos));
    pos = end;
  }
  for (const char* f : {"--timeline", "--show-coverage", "--quiet", "--verbose", "--checkpoint",
                        "--micro-batches", "--optimizer-impl"}) {
    EXPECT_EQ(flags.count(f), 1u) << f << " missing from --help";
  }
  // A whole flag: not the start of a longer one ("--list" in "--list-gpus").
  auto documented = [&](const std::string& f) {
    for (size_t pos = 0; (pos = doc.find(f, pos)) != std::string::npos; pos += f.size()) {
      const char next = pos + f.size() < doc.size() ? doc[pos + f.size()] : ' ';
      if (!std::islower(static_cast<unsigned char>(next)) && next != '-') return true;
    }
    return false;
  };
  for (const std::string& f : flags) {
    EXPECT_TRUE(documented(f)) << f << " is not documented in docs/cli.md";
  }
}

TEST_F(CliTest, MistypedFlagGetsASuggestion) {
  const std::string m = Model("mlp_small_train.onnx");
  const std::vector<std::pair<std::string, std::string>> typos = {{"--bakend", "--backend"},
                                                                  {"--max-bach", "--max-batch"},
                                                                  {"--timline", "--timeline"},
                                                                  {"--optimiser", "--optimizer"},
                                                                  {"--verbos", "--verbose"}};
  for (const auto& [typo, flag] : typos) {
    CliRun r = Run({m, "--batch", "4", typo});
    EXPECT_EQ(r.exit_code, 2) << typo << "\n" << r.err;
    EXPECT_NE(r.err.find(typo), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("did you mean " + flag + "?"), std::string::npos) << typo << "\n" << r.err;
    EXPECT_EQ(r.out, "");
  }
  CliRun value = Run({m, "--bakend=symbolic", "--batch", "4"});
  EXPECT_EQ(value.exit_code, 2);
  EXPECT_NE(value.err.find("did you mean --backend?"), std::string::npos) << value.err;
  CliRun far = Run({m, "--batch", "4", "--no-such-flag"});
  EXPECT_EQ(far.exit_code, 2);
  EXPECT_EQ(far.err.find("did you mean"), std::string::npos) << far.err;
  CliRun extra = Run({m, "other.onnx", "--batch", "4"});
  EXPECT_EQ(extra.exit_code, 2);
  EXPECT_NE(extra.err.find("other.onnx"), std::string::npos) << extra.err;
}

TEST_F(CliTest, QuietAndVerbose) {
  // resnet18_eval draws a model warning; the symbolic backend adds info diagnostics.
  const std::string m = Model("resnet18_eval.onnx");
  CliRun normal = Run({m, "--batch", "2", "--backend", "symbolic"});
  ASSERT_EQ(normal.exit_code, 0) << normal.err;
  EXPECT_NE(normal.err.find("memest: warning: "), std::string::npos) << normal.err;
  EXPECT_EQ(normal.err.find("memest: info: "), std::string::npos) << normal.err;

  for (const char* q : {"-q", "--quiet"}) {
    CliRun quiet = Run({m, "--batch", "2", "--backend", "symbolic", q});
    EXPECT_EQ(quiet.exit_code, 0) << quiet.err;
    EXPECT_EQ(quiet.err, "");
    EXPECT_EQ(quiet.out, normal.out);
  }
  CliRun ignored = Run({m, "--batch", "2", "--max-batch", "-q", "--json"});
  EXPECT_EQ(ignored.err, "") << "the --batch warning is a warning too";
  // Errors are still printed.
  CliRun error = Run({m, "--batch", "0", "-q"});
  EXPECT_EQ(error.exit_code, 2);
  EXPECT_NE(error.err.find("memest: error: "), std::string::npos) << error.err;

  for (const char* v : {"-v", "--verbose"}) {
    CliRun verbose = Run({m, "--batch", "2", "--backend", "symbolic", v});
    EXPECT_EQ(verbose.exit_code, 0) << verbose.err;
    EXPECT_NE(verbose.err.find("memest: warning: "), std::string::npos) << verbose.err;
    EXPECT_NE(verbose.err.find("memest: info: "), std::string::npos) << verbose.err;
    EXPECT_EQ(verbose.out, normal.out);
  }
  CliRun both = Run({m, "--batch", "2", "-q", "-v"});
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("--quiet conflicts with --verbose"), std::string::npos) << both.err;
}

// memest-measure sits next to memest in the build tree (not built without LibTorch).
std::string MeasureTool() {
  return (fs::path(MEMEST_CLI_PATH).parent_path() / "memest-measure").string();
}

// The --help lines of `flag` ("--batch"): from the line that names it to the next flag's line.
std::string HelpOfFlag(const std::string& help, const std::string& flag) {
  std::istringstream lines(help);
  std::string out;
  bool in = false;
  for (std::string line; std::getline(lines, line);) {
    const size_t first = line.find_first_not_of(' ');
    const bool names_a_flag = first != std::string::npos && line[first] == '-';
    if (names_a_flag) {
      const std::string head = line.substr(first, line.find(' ', first) - first);
      in = (head + ",").find(flag + ",") != std::string::npos ||
           head.find(flag + " ") != std::string::npos || head == flag;
    }
    if (in) out += line + '\n';
  }
  return out;
}

// memest and memest-measure take the estimation options from one table (tools/options_flags.h):
// every flag memest-measure offers has memest's spellings, help text and default, and the same
// command line gives the same memest::Options in both -- compared through the public JSON codec
// (memest --json "options", memest-measure --print-options; neither runs LibTorch) -- or the same
// error.
TEST_F(CliTest, MeasureAndMemestParseTheSharedFlagsIntoTheSameOptions) {
  const std::string m = Model("mlp_small_train.onnx");
  if (!fs::exists(MeasureTool())) GTEST_SKIP() << "memest-measure not built";
  const std::string tool = MeasureTool();
  const std::vector<std::vector<std::string>> command_lines = {
      {"--batch", "4"},
      {"-b", "4", "--mode", "infer"},
      {"--batch", "4", "--loss", "ce"},
      {"--batch", "4", "--loss", "cross-entropy"},
      {"--batch", "4", "--loss", "mse", "--optimizer", "sgd", "--weight-decay", "0.01"},
      {"--batch", "4", "--optimizer", "adamw", "--weight-decay", "1e-4", "--precision", "bf16"},
      {"--batch", "8", "--precision", "amp-bf16", "--optimizer", "momentum"},
      {"--batch", "4", "--checkpoint", "2"},
      {"--dim", "batch=6"},
      {"-d", "batch=6"},
      {"--batch", "4", "--mode=train"},
  };
  for (const auto& flags : command_lines) {
    std::vector<std::string> cli = {m};
    cli.insert(cli.end(), flags.begin(), flags.end());
    std::vector<std::string> est = cli;
    est.push_back("--json");
    std::vector<std::string> measure = cli;
    measure.push_back("--print-options");
    const std::string what = ::testing::PrintToString(flags);
    CliRun a = Run(est);
    CliRun b = RunProgram(tool, measure);
    ASSERT_LE(a.exit_code, 1) << what << "\n" << a.err;
    ASSERT_EQ(b.exit_code, 0) << what << "\n" << b.err;
    const json from_memest = json::parse(a.out)["options"];
    const json from_measure = json::parse(b.out);
    EXPECT_EQ(from_memest, from_measure) << what;
    // And the codec reads it back as the same Options.
    Result<Options> back = OptionsFromJson(b.out);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(json::parse(OptionsToJson(*back)), from_measure) << what;
  }
  // The same bad values are refused with the same message.
  const std::vector<std::vector<std::string>> bad = {
      {"--batch", "0"},        {"--batch", "x"},
      {"--dim", "seq"},        {"--dim", "seq=-1"},
      {"--mode", "fly"},       {"--loss", "hinge"},
      {"--optimizer", "lion"}, {"--precision", "fp8"},
      {"--checkpoint", "-1"},  {"--batch", "2", "--dim", "s=1", "--dim", "s=2"},
  };
  for (const auto& flags : bad) {
    std::vector<std::string> cli = {m};
    cli.insert(cli.end(), flags.begin(), flags.end());
    std::vector<std::string> measure = cli;
    measure.push_back("--print-options");
    const std::string what = ::testing::PrintToString(flags);
    CliRun a = Run(cli);
    CliRun b = RunProgram(tool, measure);
    EXPECT_EQ(a.exit_code, 2) << what << "\n" << a.err;
    EXPECT_EQ(b.exit_code, 2) << what << "\n" << b.err;
    const std::string prefix_a = "memest: error: ";
    const std::string prefix_b = "memest-measure: error: ";
    ASSERT_EQ(a.err.rfind(prefix_a, 0), 0u) << a.err;
    ASSERT_EQ(b.err.rfind(prefix_b, 0), 0u) << b.err;
    EXPECT_EQ(a.err.substr(prefix_a.size()), b.err.substr(prefix_b.size())) << what;
  }
  // Same spellings, help text and default in both --help outputs, for every shared flag.
  const std::string memest_help = Run({"--help"}).out;
  const std::string measure_help = RunProgram(tool, {"--help"}).out;
  for (const char* flag : {"--batch", "--dim", "--mode", "--optimizer", "--weight-decay",
                           "--precision", "--loss", "--checkpoint"}) {
    const std::string in_memest = HelpOfFlag(memest_help, flag);
    EXPECT_FALSE(in_memest.empty()) << flag;
    EXPECT_EQ(in_memest, HelpOfFlag(measure_help, flag)) << flag;
  }
  // The estimation flags the harness would not execute are not offered: an error, never ignored.
  for (const char* flag : {"--gpu", "--attention", "--micro-batches", "--world-size"}) {
    EXPECT_TRUE(HelpOfFlag(measure_help, flag).empty()) << flag;
    CliRun r = RunProgram(tool, {m, "--batch", "2", flag, "2", "--print-options"});
    EXPECT_EQ(r.exit_code, 2) << flag << "\n" << r.out;
  }
}

// `text` with every run of white space made one space.
std::string Words(const std::string& text) {
  std::istringstream in(text);
  std::string word, out;
  while (in >> word) out += (out.empty() ? "" : " ") + word;
  return out;
}

// --list-flags: the options table as JSON, from the rows --help and parsing use. Every listed
// flag is in --help with the same help text, and its default is what an estimate takes when the
// flag is not given (the "options" of --json). memest-measure lists a subset, each entry equal to
// memest's.
TEST_F(CliTest, ListFlagsDescribesTheOptionsTableAsJson) {
  const std::string m = Model("mlp_small_train.onnx");
  CliRun listed = Run({"--list-flags"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  const json flags = json::parse(listed.out);
  ASSERT_TRUE(flags.is_array());
  ASSERT_GT(flags.size(), 20u);
  const std::string help = Run({"--help"}).out;
  std::map<std::string, json> by_flag;
  for (const json& f : flags) {
    const std::string flag = f.at("flag");
    EXPECT_TRUE(by_flag.emplace(flag, f).second) << "listed twice: " << flag;
    const std::vector<std::string> names = f.at("names");
    EXPECT_NE(std::find(names.begin(), names.end(), flag), names.end()) << flag;
    const std::string in_help = HelpOfFlag(help, flag.c_str());
    ASSERT_FALSE(in_help.empty()) << flag << " is listed but not in --help";
    // --help wraps the text over lines; compare the words, spaces collapsed.
    EXPECT_NE(Words(in_help).find(Words(f.at("help"))), std::string::npos)
        << flag << ": " << in_help;
    EXPECT_TRUE(f.at("kind").is_string()) << flag;
    EXPECT_TRUE(f.at("training_only").is_boolean()) << flag;
  }
  // Defaults as an estimate without the flag records them.
  CliRun est = Run({m, "--dim", "batch=2", "--json"});
  ASSERT_LE(est.exit_code, 1) << est.err;
  const json options = json::parse(est.out)["options"];
  EXPECT_TRUE(by_flag.at("--batch").at("default").is_null());  // no batch unless given
  EXPECT_EQ(by_flag.at("--optimizer").at("default"), options.at("optimizer"));
  EXPECT_EQ(by_flag.at("--precision").at("default"), options.at("precision"));
  EXPECT_EQ(by_flag.at("--mode").at("default"), options.at("mode"));
  EXPECT_TRUE(by_flag.at("--weight-decay").at("training_only").get<bool>());
  EXPECT_FALSE(by_flag.at("--batch").at("training_only").get<bool>());
  if (!fs::exists(MeasureTool())) GTEST_SKIP() << "memest-measure not built";
  CliRun measured = RunProgram(MeasureTool(), {"--list-flags"});
  ASSERT_EQ(measured.exit_code, 0) << measured.err;
  const json subset = json::parse(measured.out);
  ASSERT_GT(subset.size(), 5u);
  EXPECT_LT(subset.size(), flags.size());
  for (const json& f : subset) {
    auto it = by_flag.find(f.at("flag"));
    ASSERT_NE(it, by_flag.end()) << f.at("flag");
    EXPECT_EQ(f, it->second);
  }
}

// memest-measure's --optimizer-impl is its own: the harness's default is auto (torch.optim's
// default for the device) and it mirrors no fused kernels. memest's spellings work in both.
TEST_F(CliTest, MeasureAndMemestAcceptTheSameOptimizerImplSpellings) {
  const std::string m = Model("mlp_small_train.onnx");
  for (const char* impl : {"single-tensor", "single"}) {
    CliRun r = Run({m, "--batch", "4", "--optimizer-impl", impl, "--json"});
    ASSERT_EQ(r.exit_code, 0) << impl << "\n" << r.err;
    EXPECT_EQ(json::parse(r.out)["options"]["optimizer_impl"], "single-tensor");
  }
  if (!fs::exists(MeasureTool())) GTEST_SKIP() << "memest-measure not built";
  const std::string tool = MeasureTool();
  auto measure = [&](std::vector<std::string> args) {
    std::vector<std::string> full = {"--batch", "2", "--iterations", "1", "--device", "cpu"};
    args.insert(args.begin(), m);
    args.insert(args.end(), full.begin(), full.end());
    return RunProgram(tool, args);
  };
  for (const char* impl : {"single-tensor", "single", "foreach"}) {
    CliRun r = measure({"--optimizer-impl", impl});
    ASSERT_EQ(r.exit_code, 0) << impl << "\n" << r.err;
    const std::string expected = std::string(impl) == "foreach" ? "foreach" : "single-tensor";
    EXPECT_EQ(json::parse(r.out)["run"]["optimizer_impl"], expected) << r.out;
  }
  CliRun fused = measure({"--optimizer-impl", "fused"});
  EXPECT_EQ(fused.exit_code, 2);
  EXPECT_NE(fused.err.find("fused"), std::string::npos) << fused.err;
}

// ----------------------------------------------------------------------------------------------
// Golden outputs.

TEST_F(CliTest, GoldenMlpTableBatch32) {
  CliRun r = Run({Model("mlp_small_train.onnx"), "--batch", "32"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ExpectGolden("mlp_small_train_b32.txt", r.out);
}

// An inference estimate and a pipeline of many GPUs, whole, as JSON (the walk's peak node, the
// ranks' table).
TEST_F(CliTest, GoldenInferenceJson) {
  CliRun r = Run({Model("resnet18_train.onnx"), "--batch", "16", "--mode", "infer", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ExpectGolden("resnet18_infer_b16.json", r.out);
}

TEST_F(CliTest, GoldenPipelineJson) {
  CliRun r = Run({Model("gpt2_tiny_train.onnx"), "--batch", "8", "--world-size", "8", "--dp", "2",
                  "--tp", "2", "--pp", "2", "--micro-batches", "4", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ExpectGolden("gpt2_tiny_dp2_tp2_pp2_b8.json", r.out);
}

TEST_F(CliTest, AMigSliceIsJudgedAgainstItsOwnMemoryAndSaysWhereThatComesFrom) {
  CliRun r = Run(
      {Model("resnet18_train.onnx"), "--batch", "64", "--gpu", "a100-40gb-mig-1g.5gb", "--json"});
  ASSERT_LE(r.exit_code, 1) << r.err;
  const json doc = json::parse(r.out);
  const json& result = doc["results"][0];
  EXPECT_EQ(result["fit"]["capacity"], uint64_t{4864} << 20);
  bool said = false;
  for (const json& d : result["diagnostics"]) said = said || d["code"] == "mig_slice";
  EXPECT_TRUE(said) << result["diagnostics"].dump();
  CliRun list = Run({"--list-gpus", "--json"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  bool listed = false;
  const json gpus = json::parse(list.out)["gpus"];
  for (const json& g : gpus) {
    if (g["name"] == "a100-40gb-mig-1g.5gb") {
      listed = true;
      EXPECT_EQ(g["mig"]["parent"], "a100-40gb");
      EXPECT_EQ(g["mig"]["profile"], "1g.5gb");
    }
  }
  EXPECT_TRUE(listed);
}

TEST_F(CliTest, GoldenListGpus) {
  CliRun r = Run({"--list-gpus"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ExpectGolden("list_gpus.txt", r.out);
}

}  // namespace
}  // namespace memest

namespace memest {
namespace {

// --gpu-file: a GPU the table lacks, in the table's format; --capacity: a slice of one.
TEST_F(CliTest, GpuFileAndCapacityGiveAGpuTheTableLacks) {
  const std::string profile = R"({"format": "memest-gpu-profiles/1", "about": "a test GPU",
    "profiles": [{"name": "a30-24gb", "display_name": "NVIDIA A30", "sm_major": 8, "sm_minor": 0,
      "sm_source": "cited: test",
      "total_memory": {"bytes": 25000000000, "source": "cited: test", "calibrated": false},
      "usable_memory": {"bytes": 25000000000, "source": "definition: test", "calibrated": false},
      "cublas_workspace": {"bytes": 8519680, "source": "cited: test", "calibrated": false},
      "allocator": "native"}]})";
  const fs::path file = dir_ / "gpus.json";
  WriteFile(file, profile);
  CliRun r =
      Run({Model("resnet18_train.onnx"), "--batch", "64", "--gpu-file", file.string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["gpu"]["name"], "a30-24gb");
  EXPECT_EQ(j["results"][0]["fit"]["capacity"], 25000000000u);
  // A name neither the file nor the table has.
  r = Run({Model("resnet18_train.onnx"), "--batch", "64", "--gpu-file", file.string(), "--gpu",
           "a40-48gb"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("a40-48gb"), std::string::npos) << r.err;
  // A malformed file names the field.
  WriteFile(file, R"({"format": "memest-gpu-profiles/1", "about": "x", "profiles": [{}]})");
  r = Run({Model("resnet18_train.onnx"), "--batch", "64", "--gpu-file", file.string()});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--gpu-file"), std::string::npos) << r.err;
  // --capacity: 1 GiB is too little for ResNet-18 at batch 64 (exit 1); a bad size is usage.
  r = Run({Model("resnet18_train.onnx"), "--batch", "64", "--gpu", "a100-40gb", "--capacity",
           "1GiB", "--json"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["results"][0]["fit"]["capacity"], uint64_t{1} << 30);
  EXPECT_EQ(j["gpu"]["name"], "a100-40gb");
  r = Run({Model("resnet18_train.onnx"), "--batch", "64", "--capacity", "lots"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--capacity lots"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace memest

namespace memest {
namespace {

TEST_F(CliTest, PackChecksColocationAndPlacesJobs) {
  const std::string a = Model("resnet18_train.onnx") + ":batch=64";
  const std::string b = Model("gpt2_tiny_train.onnx") + ":batch=8,precision=amp-bf16";
  CliRun r = Run({"pack", "--gpu", "a100-40gb", a, b, "-o", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["schema"], "memest.pack/1");
  EXPECT_TRUE(j["fits"].get<bool>());
  EXPECT_EQ(j["jobs"].size(), 2u);
  // Too many for one L4, placed on two; one that fits nowhere makes exit 1.
  const std::string big = Model("resnet18_train.onnx") + ":batch=8192";
  r = Run({"pack", "--gpu", "l4-24gb", "--gpus", "2", a, b, big});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.out.find("unplaced"), std::string::npos) << r.out;
  // Usage errors: an unknown option key in a job, an unknown GPU; a missing model is a bad model
  // (exit 3), as for `memest MODEL`.
  r = Run({"pack", "--gpu", "l4-24gb", Model("resnet18_train.onnx") + ":batchsize=8"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("batchsize"), std::string::npos) << r.err;
  r = Run({"pack", "--gpu", "l4-24gb", "/nonexistent.onnx:batch=8"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  r = Run({"pack", "--gpu", "no-such-gpu", a});
  EXPECT_EQ(r.exit_code, 2);
}

}  // namespace
}  // namespace memest

// --hf-config: the graph of a Hugging Face config.json, built in memory and estimated like a file
// (datasets/zoo/hf.h). The model line names the config, the module and the phase.
namespace memest {
namespace {

std::string HfConfig(const std::string& file) {
  return std::string(MEMEST_SOURCE_DIR) + "/tests/data/hf/" + file;
}

// memest serve: the KV cache a vLLM server gets (docs/serving.md); exit 0 when it starts, 1 when a
// request of --max-model-len does not fit, 2 for usage errors.
TEST_F(CliTest, ServeSizesTheKvCacheAndSaysWhetherTheServerStarts) {
  const std::string config = HfConfig("meta-llama-3-8b.json");
  CliRun r = Run({"serve", "--hf-config", config, "--gpu", "h100-80gb", "--max-model-len", "16000",
                  "--block-size", "128", "-o", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(r.out);
  EXPECT_EQ(doc["schema"], "memest.serve/1");
  EXPECT_EQ(doc["kv_cache"]["bytes_per_token"], 32 * 2 * 8 * 128 * 2);
  EXPECT_EQ(doc["kv_cache"]["tokens"].get<int64_t>(),
            doc["kv_cache"]["blocks"].get<int64_t>() * 128);
  EXPECT_TRUE(doc["kv_cache"]["starts"].get<bool>());
  CliRun table =
      Run({"serve", "--hf-config", config, "--gpu", "h100-80gb", "--max-model-len", "16000"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("maximum concurrency for 16000 tokens per request"), std::string::npos);
  CliRun too_long =
      Run({"serve", "--hf-config", config, "--gpu", "l4-24gb", "--max-model-len", "1048576"});
  EXPECT_EQ(too_long.exit_code, 1) << too_long.err;
  EXPECT_NE(too_long.out.find("does NOT start"), std::string::npos) << too_long.out;
  EXPECT_EQ(Run({"serve", "--hf-config", config}).exit_code, 2);  // no --max-model-len
  CliRun bad = Run(
      {"serve", "--hf-config", config, "--max-model-len", "64", "--gpu-memory-utilization", "1.5"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("gpu_memory_utilization"), std::string::npos) << bad.err;
}

TEST_F(CliTest, HfConfigEstimatesTheGraphOfAConfig) {
  const std::string config = HfConfig("tinyllama-1.1b-chat-v1.0.json");
  CliRun r = Run({"--hf-config", config, "--batch", "2", "--dim", "seq=64", "--backend",
                  "analytical,symbolic"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("1,100,048,384 parameters"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(config + " (LlamaForCausalLM, train)"), std::string::npos) << r.out;
  CliRun big =
      Run({"--hf-config", HfConfig("llama-2-70b-shape.json"), "--batch", "1", "--dim", "seq=4096"});
  EXPECT_EQ(big.exit_code, 1) << big.err;  // 69 B parameters with Adam: not on one H100
  EXPECT_NE(big.out.find("68,976,648,192 parameters"), std::string::npos) << big.out;
  // A decode step is inference: --mode infer is implied, and the cache's dims bind.
  CliRun d = Run({"--hf-config", config, "--phase", "decode", "--logits", "last", "--batch", "4",
                  "--dim", "seq=1", "--dim", "past=2047", "--json"});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  const json doc = json::parse(d.out);
  EXPECT_EQ(doc["options"]["mode"], "infer");
  EXPECT_NE(doc["model"]["path"].get<std::string>().find("decode, last logits"), std::string::npos);
  // The sequence must be bound, like any named dim.
  CliRun unbound = Run({"--hf-config", config, "--batch", "2"});
  EXPECT_EQ(unbound.exit_code, 2) << unbound.err;
  EXPECT_NE(unbound.err.find("seq"), std::string::npos) << unbound.err;
}

// --before-decode: a decode step after the prefill of its past (auto: for the backends that
// model it, the symbolic one; the analytical backend estimates the step alone and warns).
TEST_F(CliTest, BeforeDecodeRunsThePrefillWhereTheBackendModelsIt) {
  const std::string config = HfConfig("qwen2.5-0.5b.json");
  const std::vector<std::string> step = {
      "--hf-config", config,  "--phase",   "decode",      "--batch", "16",          "--dim",
      "seq=1",       "--dim", "past=2000", "--precision", "bf16",    "--attention", "auto"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = step;
    args.insert(args.end(), more.begin(), more.end());
    return Run(args);
  };
  auto reserved = [](const CliRun& r, size_t i) {
    return json::parse(r.out)["results"][i]["peak"]["reserved"].get<uint64_t>();
  };
  CliRun both = with({"--backend", "analytical,symbolic", "--json"});
  ASSERT_EQ(both.exit_code, 0) << both.err;
  EXPECT_NE(both.err.find("warning: [analytical] decode_after_prefill"), std::string::npos)
      << both.err;
  EXPECT_EQ(both.err.find("[symbolic] decode_after_prefill"), std::string::npos) << both.err;
  CliRun alone = with({"--backend", "symbolic", "--before-decode", "nothing", "--json"});
  CliRun emptied = with({"--backend", "symbolic", "--before-decode", "prefill-emptied", "--json"});
  CliRun kept = with({"--backend", "symbolic", "--before-decode", "prefill", "--json"});
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  ASSERT_EQ(emptied.exit_code, 0) << emptied.err;
  ASSERT_EQ(kept.exit_code, 0) << kept.err;
  EXPECT_EQ(reserved(kept, 0), reserved(both, 1));  // auto is prefill for the symbolic backend
  EXPECT_GT(reserved(kept, 0), reserved(emptied, 0));
  EXPECT_NE(reserved(emptied, 0), reserved(alone, 0));
  EXPECT_EQ(json::parse(emptied.out)["options"]["prefill"]["cache_emptied"], true);
  // Usage errors: another phase, no --hf-config, an unknown value; the analytical backend told to.
  EXPECT_EQ(Run({"--hf-config", config, "--phase", "prefill", "--before-decode", "prefill",
                 "--batch", "1", "--dim", "seq=8"})
                .exit_code,
            2);
  EXPECT_EQ(Run({Model("mlp_small_train.onnx"), "--before-decode", "nothing"}).exit_code, 2);
  CliRun bad = with({"--before-decode", "warm"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("expected auto, prefill, prefill-emptied or nothing"), std::string::npos);
  CliRun told = with({"--backend", "analytical", "--before-decode", "prefill"});
  EXPECT_EQ(told.exit_code, 2) << told.err;
  EXPECT_NE(told.err.find("prefill"), std::string::npos) << told.err;
}

TEST_F(CliTest, HfConfigErrorsNameTheField) {
  const fs::path bad = dir_ / "config.json";
  json c = json::parse(ReadFile(HfConfig("llama-2-7b-hf.json")));
  c.erase("num_attention_heads");
  WriteFile(bad, c.dump());
  CliRun r = Run({"--hf-config", bad.string(), "--batch", "1", "--dim", "seq=8"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("missing 'num_attention_heads' (llama)"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
  c = json::parse(ReadFile(HfConfig("llama-2-7b-hf.json")));
  c["model_type"] = "mamba";
  WriteFile(bad, c.dump());
  r = Run({"--hf-config", bad.string(), "--batch", "1", "--dim", "seq=8"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("unsupported model_type 'mamba' (supported: llama"), std::string::npos)
      << r.err;
  EXPECT_EQ(Run({"--hf-config", (dir_ / "none.json").string(), "--batch", "1"}).exit_code, 3);
  // Usage errors: a phase the family lacks, an unknown phase, --phase without --hf-config, a
  // model file and a config at once, --mode train on an inference graph.
  const std::string bert = HfConfig("bert-base-uncased.json");
  r = Run({"--hf-config", bert, "--phase", "prefill", "--batch", "1", "--dim", "seq=8"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("train phase only"), std::string::npos) << r.err;
  EXPECT_EQ(Run({"--hf-config", bert, "--phase", "sample"}).exit_code, 2);
  EXPECT_EQ(Run({Model("mlp_small_train.onnx"), "--phase", "decode"}).exit_code, 2);
  EXPECT_EQ(Run({Model("mlp_small_train.onnx"), "--hf-config", bert}).exit_code, 2);
  r = Run({"--hf-config", HfConfig("gpt2.json"), "--phase", "decode", "--mode", "train"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--mode infer"), std::string::npos) << r.err;
}

TEST_F(CliTest, ZooWritesTheGraphOfAConfig) {
  const fs::path out = dir_ / "gpt2.onnx";
  CliRun z =
      RunProgram(MEMEST_ZOO_PATH, {"hf", "--config", HfConfig("gpt2.json"), "-o", out.string()});
  ASSERT_EQ(z.exit_code, 0) << z.err;
  EXPECT_NE(z.out.find("GPT2LMHeadModel (gpt2)"), std::string::npos) << z.out;
  EXPECT_NE(z.out.find("124,439,808 parameters"), std::string::npos) << z.out;
  CliRun r =
      Run({out.string(), "--batch", "2", "--dim", "seq=128", "--backend", "analytical,symbolic"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("124,439,808 parameters"), std::string::npos) << r.out;
  z = RunProgram(MEMEST_ZOO_PATH, {"hf", "--config", HfConfig("mistral-7b-v0.1.json"), "--phase",
                                   "prefill", "--logits", "last", "-o", out.string()});
  EXPECT_EQ(z.exit_code, 0) << z.err;
  EXPECT_NE(z.err.find("sliding_window 4096 is not modelled"), std::string::npos) << z.err;
  const fs::path bad = dir_ / "config.json";
  json c = json::parse(ReadFile(HfConfig("qwen2-7b.json")));
  c["num_key_value_heads"] = 5;
  WriteFile(bad, c.dump());
  z = RunProgram(MEMEST_ZOO_PATH, {"hf", "--config", bad.string(), "-o", out.string()});
  EXPECT_EQ(z.exit_code, 3) << z.err;
  EXPECT_NE(z.err.find("'num_attention_heads' = 28 is not divisible by 'num_key_value_heads' = 5"),
            std::string::npos)
      << z.err;
  z = RunProgram(MEMEST_ZOO_PATH, {"hf", "--config", HfConfig("t5-small.json"), "--phase", "decode",
                                   "-o", out.string()});
  EXPECT_EQ(z.exit_code, 2) << z.err;
}

}  // namespace
}  // namespace memest
