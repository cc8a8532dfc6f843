// datasets/zoo/zoo_main.cc -- the memest-zoo tool.
//
//   memest-zoo --family mlp|cnn|transformer|rnn|all --count N --seed S [--scale full|tiny]
//              [--start I] [--check] --out DIR
//       writes N models per family (indices I..I+N-1) and DIR/index.jsonl (one line per model:
//       file, family, arch, scale, config, params, sha256, bytes, input).
//   memest-zoo gpumemnet [--data DIR] --out FILE.jsonl [--write-models DIR] [--check]
//       GPUMemNet's 6,000 MLP measurements as measured rows (docs/measured-row-schema.md).
//   memest-zoo manifest --preset cpu-ci|gpu-h100 [--root DIR] [--data DIR] --out FILE.jsonl
//       a sweep manifest for the measurement harness (datasets/README.md).
//   memest-zoo hf --config config.json [--phase train|prefill|decode] [--logits all|last]
//              [--check] -o FILE.onnx
//       the weightless graph of a Hugging Face config (docs/hf-config.md); prints the module
//       and its parameter count.
// Exit codes: 0 ok, 1 a model failed --check, 2 usage error, 3 I/O or data error.
#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "datasets/gpumemnet/gpumemnet.h"
#include "datasets/zoo/chain.h"
#include "datasets/zoo/graph_writer.h"
#include "datasets/zoo/hf.h"
#include "datasets/zoo/manifest.h"
#include "datasets/zoo/shapes.h"
#include "datasets/zoo/zoo.h"

namespace {

namespace fs = std::filesystem;
using memest::Status;

int Fail(const Status& st, int code) {
  std::cerr << "memest-zoo: " << st.ToString() << "\n";
  return code;
}

memest::Status MakeDir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return memest::NotFound("cannot create folder '" + dir + "': " + ec.message());
  return Status::Ok();
}

std::string ParentDir(const std::string& file) {
  const fs::path p(file);
  return p.has_parent_path() ? p.parent_path().string() : ".";
}

int Generate(const std::string& family, int64_t count, uint64_t seed, const std::string& scale_name,
             int64_t start, bool check, const std::string& out) {
  using namespace memest::zoo;
  std::vector<Family> families;
  if (family == "all") {
    families = AllFamilies();
  } else {
    auto f = ParseFamily(family);
    if (!f.ok()) return Fail(f.status(), 2);
    families = {*f};
  }
  auto scale = ParseScale(scale_name);
  if (!scale.ok()) return Fail(scale.status(), 2);
  if (Status st = MakeDir(out); !st.ok()) return Fail(st, 3);
  std::ofstream index(out + "/index.jsonl", std::ios::binary | std::ios::trunc);
  if (!index) return Fail(memest::NotFound("cannot write " + out + "/index.jsonl"), 3);
  int failed = 0;
  for (Family f : families) {
    for (int64_t i = start; i < start + count; ++i) {
      GeneratedModel g = Generate(f, i, seed, *scale);
      if (check) {
        if (Status st = Validate(g.model); !st.ok()) {
          std::cerr << "memest-zoo: " << st.ToString() << "\n";
          ++failed;
        }
      }
      if (Status st = WriteFile(out + "/" + g.name + ".onnx", g.bytes); !st.ok()) {
        return Fail(st, 3);
      }
      index << IndexEntry(g).dump() << "\n";
    }
  }
  std::cerr << "memest-zoo: wrote " << families.size() * count << " model(s) to " << out
            << (check
                    ? failed ? " (" + std::to_string(failed) + " failed --check)" : " (all checked)"
                    : "")
            << "\n";
  return failed ? 1 : 0;
}

int Gpumemnet(const std::string& data, const std::string& out, const std::string& models,
              bool check) {
  using namespace memest;
  std::vector<std::string> candidates;
  if (!data.empty()) {
    candidates = {data};
  } else {
    candidates = {"datasets/gpumemnet"};
  }
  auto dir = gpumemnet::FindDataDir(candidates);
  if (!dir.ok()) return Fail(dir.status(), 3);
  auto rows = gpumemnet::ReadAll(*dir);
  if (!rows.ok()) return Fail(rows.status(), 3);
  if (Status st = MakeDir(ParentDir(out)); !st.ok()) return Fail(st, 3);
  if (!models.empty()) {
    if (Status st = MakeDir(models); !st.ok()) return Fail(st, 3);
  }
  std::ofstream jsonl(out, std::ios::binary | std::ios::trunc);
  if (!jsonl) return Fail(NotFound("cannot write '" + out + "'"), 3);
  int failed = 0;
  for (const auto& row : *rows) {
    auto rebuilt = gpumemnet::Rebuild(row);
    if (!rebuilt.ok()) return Fail(rebuilt.status(), 3);
    if (check) {
      if (Status st = zoo::Validate(rebuilt->model); !st.ok()) {
        std::cerr << "memest-zoo: " << st.ToString() << "\n";
        ++failed;
      }
    }
    if (!models.empty()) {
      char name[48];
      std::snprintf(name, sizeof(name), "/gpumemnet_%04d.onnx", row.index);
      if (Status st = zoo::WriteFile(models + name, rebuilt->bytes); !st.ok()) return Fail(st, 3);
    }
    jsonl << gpumemnet::MeasuredRow(row, *rebuilt).dump() << "\n";
  }
  std::cerr << "memest-zoo: wrote " << rows->size() << " GPUMemNet rows to " << out << " (from "
            << *dir << ")\n";
  return failed ? 1 : 0;
}

int Manifest(const std::string& preset, const std::string& root, const std::string& data,
             const std::string& out) {
  using namespace memest;
  zoo::ManifestRequest req;
  req.preset = preset;
  req.root = root;
  if (preset == "gpu-h100") {
    auto dir =
        gpumemnet::FindDataDir(data.empty() ? std::vector<std::string>{root + "/datasets/gpumemnet"}
                                            : std::vector<std::string>{data});
    if (!dir.ok()) return Fail(dir.status(), 3);
    req.gpumemnet_dir = *dir;
  }
  auto lines = zoo::BuildManifest(req);
  if (!lines.ok())
    return Fail(lines.status(), lines.status().code() == ErrorCode::kInvalidArgument ? 2 : 3);
  if (Status st = MakeDir(ParentDir(out)); !st.ok()) return Fail(st, 3);
  std::ofstream f(out, std::ios::binary | std::ios::trunc);
  if (!f) return Fail(NotFound("cannot write '" + out + "'"), 3);
  for (const auto& l : *lines) f << l.dump() << "\n";
  std::cerr << "memest-zoo: wrote " << lines->size() << " configuration(s) to " << out
            << "; models come from:\n";
  for (const auto& cmd : zoo::ManifestModelCommands(preset)) std::cerr << "  " << cmd << "\n";
  return 0;
}

// Writes a generated model's bytes to `out`: exit 0, or 1 when it cannot.
int WriteBytes(const std::string& bytes, const std::string& out) {
  std::ofstream f(out, std::ios::binary | std::ios::trunc);
  f << bytes;
  f.close();
  if (!f) {
    std::cerr << "memest-zoo: cannot write " << out << ": " << std::strerror(errno) << "\n";
    return 1;
  }
  return 0;
}

int WriteChain(int blocks, const std::string& out) {
  if (WriteBytes(memest::zoo::ChainModel(blocks), out) != 0) return 1;
  std::cout << out << ": " << 4 * int64_t{blocks} << " nodes\n";
  return 0;
}

int WriteShape(const std::string& kind, int width, const std::string& out) {
  if (WriteBytes(memest::zoo::ShapeModel(kind, width), out) != 0) return 1;
  std::cout << out << ": " << kind << " of width " << width << "\n";
  return 0;
}

// `memest-zoo hf`: exit 0 written, 1 failed --check, 2 bad --phase/--logits, 3 a config that
// does not build or an unwritable output.
int WriteHf(const std::string& config_path, const std::string& phase, const std::string& logits,
            bool check, const std::string& out) {
  using namespace memest;
  zoo::HfGraphOptions options;
  auto p = zoo::ParsePhase(phase);
  if (!p.ok()) return Fail(p.status().WithContext("--phase"), 2);
  options.phase = *p;
  if (logits != "all" && logits != "last") {
    return Fail(InvalidArgument("--logits: expected all or last, not '" + logits + "'"), 2);
  }
  options.logits_last_only = logits == "last";
  options.name = fs::path(out).stem().string();
  options.source = config_path;
  auto config = zoo::LoadHfConfig(config_path);
  if (!config.ok()) return Fail(config.status(), 3);
  auto built = zoo::BuildHfModel(*config, options);
  if (!built.ok()) {
    return Fail(built.status(), built.status().code() == ErrorCode::kInvalidArgument ? 2 : 3);
  }
  for (const std::string& note : built->notes) std::cerr << "memest-zoo: note: " << note << "\n";
  if (check) {
    if (Status st = zoo::ValidateStructure(built->model); !st.ok()) return Fail(st, 1);
  }
  if (Status st = zoo::WriteFile(out, zoo::SerializeModel(built->model)); !st.ok()) {
    return Fail(st, 3);
  }
  std::cout << out << ": " << zoo::DescribeHfModel(*built) << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"memest-zoo " MEMEST_VERSION
               ": weightless training-form ONNX model families, GPUMemNet's MLPs as ONNX, and "
               "sweep manifests (see datasets/README.md)"};
  std::string family = "all", scale = "full", out;
  int64_t count = 10, start = 0;
  uint64_t seed = 1;
  bool check = false;
  app.add_option("--family", family, "mlp, cnn, transformer, rnn or all")->capture_default_str();
  app.add_option("--count", count, "models per family")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1000000}));
  app.add_option("--start", start, "index of the first model")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1000000000}));
  app.add_option("--seed", seed, "sampling seed")->capture_default_str();
  app.add_option("--scale", scale, "full or tiny (CPU-test sized)")->capture_default_str();
  app.add_option("--out", out, "output folder (models + index.jsonl)");
  app.add_flag("--check", check,
               "run the ONNX checker, strict shape inference and the full-shape "
               "check on every model");

  auto* gmn = app.add_subcommand("gpumemnet", "GPUMemNet's 6,000 MLP rows as measured rows");
  std::string gmn_data, gmn_out, gmn_models;
  bool gmn_check = false;
  gmn->add_option("--data", gmn_data,
                  "folder with mlp_data_step1.csv and mlp_data_step2.csv (default: "
                  "datasets/gpumemnet)");
  gmn->add_option("--out", gmn_out, "output JSONL file")->required();
  gmn->add_option("--write-models", gmn_models, "also write gpumemnet_<row>.onnx here");
  gmn->add_flag("--check", gmn_check, "validate every rebuilt model (slow: 6,000 models)");

  auto* man = app.add_subcommand("manifest", "a sweep manifest for the measurement harness");
  std::string preset, root = ".", man_data, man_out;
  man->add_option("--preset", preset, "cpu-ci or gpu-h100")->required();
  man->add_option("--root", root, "repository root")->capture_default_str();
  man->add_option("--data", man_data, "GPUMemNet CSV folder (gpu-h100)");
  man->add_option("--out", man_out, "output JSONL file")->required();
  auto* chain = app.add_subcommand(
      "chain", "a synthetic chain of BLOCKS x (MatMul, Add, Relu, LayerNorm): 4 nodes per block");
  int chain_blocks = 0;
  std::string chain_out;
  chain->add_option("--blocks", chain_blocks, "blocks")
      ->required()
      ->check(CLI::Range(1, 10'000'000));
  chain->add_option("--out", chain_out, "output .onnx file")->required();
  auto* shape = app.add_subcommand(
      "shape",
      "a synthetic graph of one shape (datasets/zoo/shapes.h): many consumers, inputs, "
      "outputs, live activations or graph outputs");
  std::string shape_kind, shape_out;
  int shape_width = 0;
  shape->add_option("--kind", shape_kind, "the shape")
      ->required()
      ->check(CLI::IsMember(memest::zoo::ShapeKinds()));
  shape->add_option("--width", shape_width, "the count that grows")
      ->required()
      ->check(CLI::Range(2, 1'000'000));
  shape->add_option("--out", shape_out, "output .onnx file")->required();
  auto* hf = app.add_subcommand(
      "hf", "the weightless graph of a Hugging Face config.json (docs/hf-config.md)");
  std::string hf_config, hf_phase = "train", hf_logits = "all", hf_out;
  bool hf_check = false;
  hf->add_option("--config,--hf-config", hf_config, "the model's config.json")->required();
  hf->add_option("--phase", hf_phase,
                 "train (training forward), prefill or decode (inference with the KV cache)")
      ->capture_default_str();
  hf->add_option("--logits", hf_logits, "all positions, or the last one only (prefill/decode)")
      ->capture_default_str();
  hf->add_flag("--check", hf_check,
               "run the ONNX checker and strict shape inference on the graph first");
  hf->add_option("-o,--out", hf_out, "output .onnx file")->required();
  app.require_subcommand(0, 1);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (gmn->parsed()) return Gpumemnet(gmn_data, gmn_out, gmn_models, gmn_check);
  if (man->parsed()) return Manifest(preset, root, man_data, man_out);
  if (chain->parsed()) return WriteChain(chain_blocks, chain_out);
  if (shape->parsed()) return WriteShape(shape_kind, shape_width, shape_out);
  if (hf->parsed()) return WriteHf(hf_config, hf_phase, hf_logits, hf_check, hf_out);
  if (out.empty()) {
    std::cerr << "memest-zoo: --out is required (see --help)\n";
    return 2;
  }
  return Generate(family, count, seed, scale, start, check, out);
}
