// tests/fuzz/load_estimate_fuzz.cc -- libFuzzer target: load an ONNX model from bytes and run every
// model-based backend on it (docs/robustness.md).
//
// POLICY. memest's contract (include/memest/status.h) is that no public function throws, crashes
// or aborts: every failure comes back as a Status value. This target feeds arbitrary bytes to the
// public API only -- LoadModelFromBytes, MakeEstimator / Estimator::Run for the analytical,
// symbolic and learned backends (never measurement, which executes the graph), FindMaxBatch with a
// small bound -- under several Options. A finding is anything that does not come back as a value:
//   * a crash, abort, sanitizer report (ASan, UBSan, LeakSanitizer), timeout or out-of-memory;
//   * an ErrorCode::kInternal status ("a bug in memest"), unless MEMEST_FUZZ_ALLOW_INTERNAL=1;
//   * an estimate that breaks the documented invariants (breakdown sums to peak_device,
//     allocated <= reserved <= device) or a max batch outside [0, limit];
//   * a payload filter (core/payload_filter.h) whose copy does not parse to the input's message
//     less the payloads it says it left out. The loader filters only models over 16 MiB, larger
//     than the fuzzer's inputs, so the filter is run here on every input with a threshold of 0
//     (every top-level initializer's raw_data and packed typed data left out) and checked against
//     the protobuf parse.
// Errors such as InvalidModel, Overflow, UnboundDim or Unsupported are the expected answer to a
// malformed model and are not findings.
//
// The structure-aware mutator that makes most inputs parse as ONNX lives in onnx_mutator.cc.
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <onnx/onnx_pb.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/payload_filter.h"
#include "memest/memest.h"
#include "testing/left_out.h"

namespace {

using memest::ErrorCode;
using memest::Estimate;
using memest::Estimator;
using memest::Model;
using memest::Options;
using memest::Status;

// The backends that estimate from the graph alone. "measurement" is left out on purpose.
constexpr const char* kBackends[] = {"analytical", "symbolic", "learned"};
// FindMaxBatch's bound: small, so one input stays well under the -timeout.
constexpr int64_t kMaxBatchLimit = 64;
// Value for symbolic dims other than the batch dim (sequence lengths and the like).
constexpr int64_t kOtherDimValue = 16;

[[noreturn]] void Finding(const std::string& what) {
  std::fprintf(stderr, "memest-fuzz FINDING: %s\n", what.c_str());
  std::abort();
}

bool AllowInternal() {
  static const bool allow = [] {
    const char* v = std::getenv("MEMEST_FUZZ_ALLOW_INTERNAL");
    return v != nullptr && std::string_view(v) == "1";
  }();
  return allow;
}

// An error status is fine unless it says "bug in memest".
void CheckStatus(const Status& s, const std::string& where) {
  if (s.code() == ErrorCode::kInternal && !AllowInternal()) {
    Finding(where + ": internal error returned: " + s.ToString());
  }
}

void CheckEstimate(const Estimate& e, const std::string& where) {
  if (e.breakdown.Total() != e.peak_device) {
    Finding(where + ": breakdown sums to " + std::to_string(e.breakdown.Total()) +
            " but peak_device is " + std::to_string(e.peak_device));
  }
  if (e.peak_allocated > e.peak_reserved || e.peak_reserved > e.peak_device) {
    Finding(where + ": levels out of order: allocated " + std::to_string(e.peak_allocated) +
            ", reserved " + std::to_string(e.peak_reserved) + ", device " +
            std::to_string(e.peak_device));
  }
  for (const memest::RankPeak& r : e.ranks) {  // the estimate is the worst rank's
    if (r.peak_device > e.peak_device || r.breakdown.Total() != r.peak_device) {
      Finding(where + ": stage " + std::to_string(r.stage) + " peak " +
              std::to_string(r.peak_device) + " inconsistent with the estimate's " +
              std::to_string(e.peak_device));
    }
  }
}

// The Options one input is estimated under: train and infer at batch 1 and 64, plus one variant
// chosen by a hash of the input (so that a reproducer replays the same way) that turns on the less
// common paths: mixed precision, checkpointing, gradient accumulation, other optimizers.
std::vector<Options> OptionsFor(const Model& model, const uint8_t* data, size_t size) {
  Options base;
  // Bind every symbolic dim but the leading dims of data inputs (those are the batch dim; a
  // binding in `dims` would win over `batch`).
  std::set<std::string> batch_params;
  for (const memest::InputInfo& in : model.summary().data_inputs) {
    if (!in.dims.empty() && !in.dims[0].param.empty()) batch_params.insert(in.dims[0].param);
  }
  for (const std::string& d : model.summary().symbolic_dims) {
    if (!batch_params.count(d)) base.dims[d] = kOtherDimValue;
  }
  std::vector<Options> out;
  for (memest::Mode mode : {memest::Mode::kTrain, memest::Mode::kInfer}) {
    for (int64_t batch : {1, 64}) {
      Options o = base;
      o.mode = mode;
      o.batch = batch;
      out.push_back(o);
    }
  }
  uint32_t h = 2166136261u;  // FNV-1a
  for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 16777619u;
  Options v = base;
  v.batch = 8;
  v.precision = static_cast<memest::Precision>(h % 4);
  v.optimizer = static_cast<memest::Optimizer>((h >> 2) % 6);  // 8-bit Adam/AdamW included
  v.optimizer_impl = static_cast<memest::OptimizerImpl>((h >> 4) % 3);
  v.loss = static_cast<memest::Loss>((h >> 6) % 3);
  v.checkpoint_segments = (h >> 8) % 4;       // 0..3
  v.micro_batches = ((h >> 10) % 2) ? 2 : 1;  // 8 is divisible by 2
  v.weight_decay = ((h >> 11) % 2) ? 0.01 : 0.0;
  v.allocator.expandable_segments = (h >> 12) % 2;
  v.library_workspaces = (h >> 13) % 2;
  if ((h >> 14) % 4 == 0) v.gpu = "a100-40gb";
  // Fused kernels (ops/fusion.h), attention kernels and a calibrated stack with bands and a
  // convolution workspace (memory/device.h).
  v.fused_kernels = (h >> 16) % 4 != 0;
  v.inplace_relu = (h >> 29) % 2 != 0;  // bits 29-31 are free
  v.attention = static_cast<memest::Attention>((h >> 18) % 5);
  if ((h >> 21) % 2) v.stack = "a100-40gb-timm";
  // Fine-tuning: a frozen set and a quantized or half base (memory/weight_storage.h). Options a
  // model cannot take (nothing matches, nothing quantizable) are usage errors, which is fine.
  if ((h >> 22) % 3 == 0) v.freeze = "[02468]";
  if ((h >> 24) % 2) v.weight_dtype = static_cast<memest::WeightDtype>(1 + (h >> 25) % 5);
  out.push_back(v);
  // Many GPUs (memory/parallel.h): degrees the graph may not take (heads, widths, blocks) are
  // usage errors, which is fine; crashes and inconsistent estimates are not.
  const uint32_t g = static_cast<uint32_t>(h) * 2654435761u;
  Options p = base;
  p.batch = 8;
  p.micro_batches = 2;
  p.precision = static_cast<memest::Precision>(g % 4);
  p.parallel.tp = 1 + (g >> 2) % 2;
  p.parallel.pp = 1 + (g >> 3) % 2;
  p.parallel.world_size = 2 * p.parallel.tp * p.parallel.pp;
  p.parallel.sharding = static_cast<memest::Sharding>((g >> 4) % 8);
  p.parallel.sequence_parallel = (g >> 7) % 2;
  p.parallel.offload_optimizer =
      (g >> 8) % 4 == 0 && p.parallel.sharding != memest::Sharding::kNone;
  p.parallel.gradient_as_bucket_view = (g >> 10) % 2;
  out.push_back(p);
  return out;
}

std::vector<std::unique_ptr<Estimator>> MakeEstimators() {
  std::vector<std::unique_ptr<Estimator>> out;
  for (const char* name : kBackends) {
    auto e = memest::MakeEstimator(name);
    if (!e.ok()) {
      // Unavailable (e.g. learned weights not shipped) is a build property, not a finding.
      if (e.status().code() == ErrorCode::kUnavailable) continue;
      Finding(std::string("MakeEstimator(") + name + "): " + e.status().ToString());
    }
    out.push_back(std::move(e).value());
  }
  return out;
}

// The payload filter's copy of `bytes` (every top-level initializer's raw_data and packed typed
// data left out) parses exactly where `bytes` does, to the same message less the left-out
// payloads, whose lengths and entries it recorded; and the read-only walk finds a payload wherever
// the copy left one out.
void CheckPayloadFilter(std::string_view bytes) {
  const int size = static_cast<int>(bytes.size());
  google::protobuf::io::ArrayInputStream copy_in(bytes.data(), size);
  const auto copy = memest::core::LeaveOutPayloads(&copy_in, bytes.size(), 0);
  if (!copy) return;  // the filter gave up: the loader parses the original
  onnx::ModelProto original, filtered;
  const bool original_parses = original.ParseFromArray(bytes.data(), size);
  const bool copy_parses = filtered.ParseFromString(copy->bytes);
  if (original_parses != copy_parses) {
    Finding(std::string("payload filter: the original ") +
            (original_parses ? "parses" : "does not parse") + " but its copy " +
            (copy_parses ? "does" : "does not"));
  }
  if (!original_parses) return;
  if (const std::string wrong = memest::testing::ClearLeftOut(&original, copy->left_out);
      !wrong.empty()) {
    Finding("payload filter: " + wrong);
  }
  uint64_t left_out = 0;  // entries and bytes: 0 exactly where nothing was left out
  for (const memest::core::LeftOutPayload& recorded : copy->left_out) {
    left_out += recorded.raw_bytes + recorded.entries;
  }
  if ((left_out == 0) != (copy->left_out_bytes == 0)) {
    Finding("payload filter: left_out_bytes says otherwise than the record");
  }
  if (original.SerializeAsString() != filtered.SerializeAsString()) {
    Finding("payload filter: the copy parses to another message than the original less payloads");
  }
  google::protobuf::io::ArrayInputStream scan_in(bytes.data(), size);
  if (left_out != 0 && !memest::core::HasPayloadToLeaveOut(&scan_in, bytes.size(), 0)) {
    Finding("payload filter: the copy left a payload out that the read-only walk did not find");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<std::unique_ptr<Estimator>> estimators = MakeEstimators();

  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  CheckPayloadFilter(bytes);
  // External-data locations are validated against base_dir but never opened.
  auto loaded = memest::LoadModelFromBytes(bytes, "/nonexistent/memest-fuzz", "fuzz.onnx");
  if (!loaded.ok()) {
    CheckStatus(loaded.status(), "LoadModelFromBytes");
    return 0;
  }
  const Model& model = **loaded;
  (void)model.summary();

  const std::vector<Options> options = OptionsFor(model, data, size);
  for (const auto& est : estimators) {
    const std::string name(est->name());
    for (size_t i = 0; i < options.size(); ++i) {
      const std::string where = name + " Run(options #" + std::to_string(i) + ")";
      auto r = est->Run(model, options[i]);
      if (!r.ok()) {
        CheckStatus(r.status(), where);
        continue;
      }
      CheckEstimate(*r, where);
    }
    for (size_t i : {size_t{0}, size_t{2}}) {  // train and infer
      const std::string where = name + " FindMaxBatch(options #" + std::to_string(i) + ")";
      auto mb = memest::FindMaxBatch(*est, model, options[i], kMaxBatchLimit);
      if (!mb.ok()) {
        CheckStatus(mb.status(), where);
        continue;
      }
      if (mb->batch < 0 || mb->batch > kMaxBatchLimit) {
        Finding(where + ": batch " + std::to_string(mb->batch) + " outside [0, " +
                std::to_string(kMaxBatchLimit) + "]");
      }
      CheckEstimate(mb->at_batch, where + " at_batch");
    }
  }
  return 0;
}
