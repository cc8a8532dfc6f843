// measurement/executor.cc -- runs a Plan with LibTorch the way PyTorch eager training does, and
// records the memory it really took.
//
// Policy (what one measured run is):
//  * Setup. Parameters are created one tensor each (random, PyTorch's default uniform bound
//    1/sqrt(fan_in)), requires_grad; buffers and constants from the file's payload or zeros/ones;
//    data inputs random of the bound shape (float: randn; integer: randint below
//    PlanValue::index_bound). Under --precision bf16 every float32 tensor the graph makes
//    (parameters, buffers, constants, float inputs, Cast-to-float) is bfloat16, like
//    model.to(torch.bfloat16). Data inputs and loss targets are created once and stay alive.
//  * One training iteration (train mode): zero_grad(set_to_none) -> forward -> loss ->
//    backward -> optimizer step, then the outputs and the loss are dropped (the step function's
//    locals going out of scope). Forward runs the nodes in order; a value is dropped right
//    after its last consumer, so only what autograd saved (or a view keeps) stays alive, as in
//    eager code. Graph outputs live until the end of the iteration.
//  * Loss on the first output (memest::Loss): cross-entropy over the last dim with random int64
//    targets when that output is float with rank >= 2 and a last dim > 1 (logits [N, C] or
//    [N, T, V], flattened to [-1, C] like an LM loss), mean-squared error against a random target
//    otherwise.
//  * Optimizers mirror torch.optim (lr 1e-3 for Adam/AdamW, 1e-2 for SGD; momentum 0.9): the
//    single-tensor loop for CPU parameters, the foreach path for CUDA parameters (torch.optim's
//    default), each including the temporaries that path allocates; state is created lazily in
//    the first step. Inference mode: forward only, under no_grad, BatchNorm/Dropout in eval.
//  * AMP (CUDA only): forward and loss under autocast (weight-cast cache cleared when it exits);
//    fp16 adds a GradScaler (scale, unscale in place). The step always runs (a real GradScaler
//    skips steps with inf grads; memory must not depend on that).
//  * CPU counting: the tracking allocator (tracker.h) records every tensor allocation and free,
//    tagged with iteration, phase and node (forward: the node being run; backward: the node
//    whose backward runs, set by a gradient hook on each node output). Phase and iteration
//    peaks come from that trace; so does the attribution of the peak (PeakAttribution).
//  * CUDA counting: the caching allocator's statistics (peaks reset at each phase start:
//    requested = tensor, allocated, reserved), cudaMemGetInfo sampled after every forward node,
//    at every backward hook and at phase ends (device), and the context size (device used minus
//    reserved) right after initialisation and after the last iteration. An out-of-memory error
//    ends the run with status "oom".
// Errors are values at the boundary: ATen exceptions are caught per node and returned as a
// Status naming the node and op.
#include "measurement/executor.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/version.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

#include "measurement/torch_ops.h"
#include "memory/category.h"

#if defined(MEMEST_WITH_CUDA)
#include <ATen/autocast_mode.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif

namespace memest::measurement {
namespace {

constexpr double kAdamLr = 1e-3;
constexpr double kSgdLr = 1e-2;
constexpr double kMomentum = 0.9;
constexpr double kBeta1 = 0.9;
constexpr double kBeta2 = 0.999;
constexpr double kAdamEps = 1e-8;
constexpr double kGradScale = 65536.0;      // torch.amp.GradScaler init_scale
constexpr double kHostLimitFraction = 0.8;  // of MemAvailable, when no limit is given

std::mutex g_run_mutex;  // one measured run at a time (process-global allocators)

// What a tagged tensor is for (memory/category.h, the symbolic backend's categories): the harness
// tags weights, the input batch (activations), gradients and optimizer state; every other
// allocation is attributed by its phase and lifetime (Analyze).
using memory::Category;

// Adds a tagged allocation's bytes to its category's share of the peak. The harness never tags
// transient or collective tensors; were it to, they would count as transient.
void AddToAttribution(Category c, uint64_t bytes, PeakAttribution* a) {
  switch (c) {
    case Category::kWeights:
      a->weights += bytes;
      return;
    case Category::kActivations:
      a->saved_activations += bytes;
      return;
    case Category::kGradients:
      a->gradients += bytes;
      return;
    case Category::kOptimizerState:
      a->optimizer_state += bytes;
      return;
    case Category::kTransient:
    case Category::kCollective:
      a->transient += bytes;
      return;
  }
}

uint64_t MemAvailable() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t value = 0;
  std::string unit;
  while (in >> key >> value >> unit) {
    if (key == "MemAvailable:") return value * 1024;
  }
  return 0;
}

std::string CpuName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) {
        std::string name = line.substr(colon + 1);
        name.erase(0, name.find_first_not_of(' '));
        return name;
      }
    }
  }
  return "cpu";
}

uint64_t Nbytes(const at::Tensor& t) {
  return t.defined() ? static_cast<uint64_t>(t.numel()) * t.element_size() : 0;
}

std::string NodeLabel(const Plan& plan, int32_t node) {
  if (node >= 0 && static_cast<size_t>(node) < plan.nodes.size()) {
    return plan.node(node).name;
  }
  switch (node) {
    case kNodeLoss:
      return "loss";
    case kNodeOptimizer:
      return "optimizer.step";
    case kNodeInputs:
      return "inputs";
    default:
      return "";
  }
}

void MaxInto(std::optional<uint64_t>* into, std::optional<uint64_t> v) {
  if (v && (!*into || **into < *v)) *into = v;
}

void MaxPeaks(Peaks* into, const Peaks& p) {
  MaxInto(&into->tensor, p.tensor);
  MaxInto(&into->allocated, p.allocated);
  MaxInto(&into->reserved, p.reserved);
  MaxInto(&into->device, p.device);
}

#if defined(MEMEST_WITH_CUDA)
// Device-level used bytes, or nullopt when cudaMemGetInfo fails.
std::optional<uint64_t> DeviceUsed() {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return std::nullopt;
  return static_cast<uint64_t>(total_b - free_b);
}

#define MEMEST_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||         \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

struct CudaStats {
  std::optional<uint64_t> requested_peak;  // LibTorch >= 2.1
  uint64_t allocated_peak = 0, reserved_peak = 0, reserved_current = 0;
};

CudaStats ReadCudaStats(c10::DeviceIndex device) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device);
  CudaStats s;
#if MEMEST_TORCH_AT_LEAST(2, 1)
  s.requested_peak = static_cast<uint64_t>(stats.requested_bytes[0].peak);
#endif
  s.allocated_peak = static_cast<uint64_t>(stats.allocated_bytes[0].peak);
  s.reserved_peak = static_cast<uint64_t>(stats.reserved_bytes[0].peak);
  s.reserved_current = static_cast<uint64_t>(stats.reserved_bytes[0].current);
  return s;
}

std::string VersionString(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

// torch.autocast(device_type="cuda", dtype=...) as a scope.
class AutocastScope {
 public:
  explicit AutocastScope(at::ScalarType dtype) {
#if MEMEST_TORCH_AT_LEAST(2, 4)
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, dtype);
#else
    at::autocast::set_enabled(true);
    at::autocast::set_autocast_gpu_dtype(dtype);
#endif
    at::autocast::set_autocast_cache_enabled(true);
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
#if MEMEST_TORCH_AT_LEAST(2, 4)
    at::autocast::set_autocast_enabled(at::kCUDA, false);
#else
    at::autocast::set_enabled(false);
#endif
  }
};
#endif

// A node of a checkpointed segment failed inside the custom function's forward.
struct SegmentError {
  Status status;
};

// One measured run: the state of a training loop plus its bookkeeping.
class Runner {
 public:
  Runner(const Plan& plan, const ExecuteOptions& xo) : plan_(plan), xo_(xo) {}

  Result<Measurement> Run();

 private:
  struct Boundary {
    int32_t iteration;
    TracePhase phase;
    uint64_t seq;  // first event of the segment
  };
  struct Tag {
    uintptr_t ptr;
    uint64_t seen_at;  // event count when the tensor was known to be alive
    Category category;
  };

  Status Setup();
  Status Forward(int iteration);
  Status RunNode(size_t i);
  Status RunCheckpointed(size_t seg);
  // Drops env_[id] when no node at or after `end` reads it (parameters, buffers, inputs and
  // graph outputs stay for the iteration).
  void DropIfReadBefore(int id, int end);

 public:
  // For CheckpointFunction (activation checkpointing): the segment's forward under no_grad, and
  // its recomputation with grad enabled followed by the backward through it.
  torch::autograd::variable_list SegmentForward(size_t seg, at::TensorList inputs);
  torch::autograd::variable_list SegmentBackward(size_t seg,
                                                 const torch::autograd::variable_list& saved,
                                                 const torch::autograd::variable_list& grads);

 private:
  Status Loss();
  void Backward();
  void Step();
  // The parts of Step(), each as torch.optim does it (live: the parameters with a gradient).
  void UnscaleGradients(const std::vector<size_t>& live);
  void SgdSingleTensor(const std::vector<size_t>& live, double wd, double momentum);
  void SgdForeach(const std::vector<size_t>& live, double wd, double momentum);
  void AdamSingleTensor(const std::vector<size_t>& live, double wd, bool decoupled,
                        double step_size, double bc2_sqrt);
  void AdamForeach(const std::vector<size_t>& live, double wd, bool decoupled, double step_size,
                   double bc2_sqrt);
  void EndIteration();
  void Teardown();
  void BeginPhase(int iteration, TracePhase phase);
  void EndPhase(PhaseStats* stats);
  void TagTensor(const at::Tensor& t, Category c);
  void Analyze(std::vector<TraceEvent> events);
  at::Tensor MakeParameter(const PlanValue& v);
  void InitCuda();
  void NoteDeviceUsed();
  // Run()'s steps, in order.
  Status Configure(bool* use_cuda);
  void ResolveOps();
  void StartMeasurement(bool use_cuda);
  Status Loop();
  Status Iteration(int it);
  void Finish();
#if defined(MEMEST_WITH_CUDA)
  void FindCudaPeakPhase();
#endif

  bool cuda() const { return device_.is_cuda(); }

  const Plan& plan_;
  const ExecuteOptions& xo_;
  at::Device device_ = at::kCPU;
  at::ScalarType float_type_ = at::kFloat;
  bool training_ = true;
  std::optional<at::ScalarType> amp_;
  bool foreach_ = false;

  std::vector<const OpDef*> ops_;
  std::vector<uint32_t> needed_;  // per node: outputs read later or graph outputs
  std::vector<char> persistent_;  // per value: never dropped during an iteration
  std::vector<at::Tensor> env_;
  std::vector<at::Tensor> params_;
  at::Tensor target_;
  at::Tensor loss_;
  at::Tensor grad_scale_;
  at::Tensor growth_tracker_;
  // Optimizer state, per parameter (undefined until created).
  std::vector<at::Tensor> exp_avg_, exp_avg_sq_, momentum_;
  int64_t step_count_ = 0;

  Measurement m_;
  CpuTracker* tracker_ = nullptr;
  std::vector<Boundary> boundaries_;
  std::vector<Tag> tags_;
  int32_t current_iteration_ = 0;
  // CUDA bookkeeping.
  std::atomic<uint64_t> device_used_max_{0};
  std::atomic<int32_t> cuda_node_{kNodeNone};
  uint64_t phase_allocated_best_ = 0;
  std::string phase_peak_node_;
};

void Runner::TagTensor(const at::Tensor& t, Category c) {
  if (!t.defined() || tracker_ == nullptr || Nbytes(t) == 0) return;
  tags_.push_back({reinterpret_cast<uintptr_t>(t.data_ptr()), tracker_->event_count(), c});
}

void Runner::NoteDeviceUsed() {
#if defined(MEMEST_WITH_CUDA)
  if (!cuda()) return;
  if (auto used = DeviceUsed()) {
    uint64_t prev = device_used_max_.load();
    while (prev < *used && !device_used_max_.compare_exchange_weak(prev, *used)) {
    }
  }
#endif
}

void Runner::BeginPhase(int iteration, TracePhase phase) {
  current_iteration_ = iteration;
  if (tracker_ != nullptr) {
    tracker_->SetIteration(iteration);
    tracker_->SetPhase(phase);
    tracker_->SetNode(kNodeNone);
    boundaries_.push_back({iteration, phase, tracker_->event_count()});
  }
#if defined(MEMEST_WITH_CUDA)
  if (cuda()) {
    c10::cuda::device_synchronize();
    c10::cuda::CUDACachingAllocator::resetPeakStats(device_.index());
    device_used_max_ = DeviceUsed().value_or(0);
    phase_allocated_best_ = 0;
    phase_peak_node_.clear();
  }
#endif
}

void Runner::EndPhase(PhaseStats* stats) {
  stats->ran = true;
#if defined(MEMEST_WITH_CUDA)
  if (cuda()) {
    c10::cuda::device_synchronize();
    NoteDeviceUsed();
    const CudaStats s = ReadCudaStats(device_.index());
    stats->peaks.tensor = s.requested_peak;  // nullopt before LibTorch 2.1
    stats->peaks.allocated = s.allocated_peak;
    stats->peaks.reserved = s.reserved_peak;
    stats->peaks.device = device_used_max_.load();
    stats->peak_node = phase_peak_node_;
  }
#else
  (void)stats;
#endif
}

at::Tensor Runner::MakeParameter(const PlanValue& v) {
  at::ScalarType type = ToScalarType(v.dtype);
  if (type == at::kFloat) type = float_type_;
  const std::vector<int64_t>& dims = *v.dims;
  int64_t fan_in = 1;
  for (size_t i = 1; i < dims.size(); ++i) fan_in *= dims[i];
  if (dims.size() <= 1) fan_in = std::max<int64_t>(dims.empty() ? 1 : dims[0], 1);
  const double bound = 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(fan_in, 1)));
  at::Tensor p = at::empty(dims, at::TensorOptions().dtype(type).device(device_));
  p.uniform_(-bound, bound);
  p.requires_grad_(true);
  return p;
}

Status Runner::Setup() {
  const size_t n = plan_.values.size();
  env_.assign(n, at::Tensor());
  persistent_.assign(n, 0);
  at::NoGradGuard no_grad;
  for (int id : plan_.parameters) {
    const PlanValue& v = plan_.value(id);
    at::Tensor p = MakeParameter(v);
    env_[static_cast<size_t>(id)] = p;
    persistent_[static_cast<size_t>(id)] = 1;
    params_.push_back(p);
    m_.parameter_bytes += Nbytes(p);
    TagTensor(p, Category::kWeights);
  }
  auto make_fixed = [&](int id, bool is_buffer) {
    const PlanValue& v = plan_.value(id);
    at::Tensor t;
    if (v.data) {
      t = ConstToTensor(*v.data, float_type_);
    } else {
      ConstTensor empty;
      empty.dtype = v.dtype;
      empty.dims = v.dims.value_or(std::vector<int64_t>());
      t = ConstToTensor(empty, float_type_);
      // A running variance of zeros would be odd; the values do not matter for memory.
      if (is_buffer && at::isFloatingType(t.scalar_type())) t.fill_(1.0);
    }
    const bool on_device = is_buffer || (at::isFloatingType(t.scalar_type()) && t.numel() > 64);
    if (on_device) t = t.to(device_);
    env_[static_cast<size_t>(id)] = t;
    persistent_[static_cast<size_t>(id)] = 1;
    m_.buffer_bytes += Nbytes(t);
    TagTensor(t, Category::kWeights);
  };
  for (int id : plan_.buffers) make_fixed(id, true);
  for (int id : plan_.constants) make_fixed(id, false);
  if (tracker_ != nullptr) tracker_->SetNode(kNodeInputs);
  for (int id : plan_.data_inputs) {
    const PlanValue& v = plan_.value(id);
    at::ScalarType type = ToScalarType(v.dtype);
    at::Tensor t;
    if (at::isFloatingType(type)) {
      if (type == at::kFloat) type = float_type_;
      t = at::randn(*v.dims, at::TensorOptions().dtype(type).device(device_));
    } else {
      t = at::randint(0, std::max<int64_t>(v.index_bound, 1), *v.dims,
                      at::TensorOptions().dtype(at::kLong).device(device_));
      if (type != at::kLong) t = t.to(type);
    }
    env_[static_cast<size_t>(id)] = t;
    persistent_[static_cast<size_t>(id)] = 1;
    m_.input_bytes += Nbytes(t);
    TagTensor(t, Category::kActivations);
  }
  exp_avg_.assign(params_.size(), at::Tensor());
  exp_avg_sq_.assign(params_.size(), at::Tensor());
  momentum_.assign(params_.size(), at::Tensor());
  return Status::Ok();
}

Status Runner::Forward(int iteration) {
  size_t i = 0;
  for (size_t seg = 0; seg < plan_.checkpoint.size(); ++seg) {
    for (; i < static_cast<size_t>(plan_.checkpoint[seg].begin); ++i) {
      MEMEST_RETURN_IF_ERROR(RunNode(i));
    }
    MEMEST_RETURN_IF_ERROR(RunCheckpointed(seg));
    i = static_cast<size_t>(plan_.checkpoint[seg].end);
  }
  for (; i < plan_.nodes.size(); ++i) MEMEST_RETURN_IF_ERROR(RunNode(i));
  (void)iteration;
  return Status::Ok();
}

void Runner::DropIfReadBefore(int id, int end) {
  if (id < 0) return;
  const PlanValue& v = plan_.value(id);
  if (v.last_consumer < end && !persistent_[static_cast<size_t>(id)] && !v.graph_output) {
    env_[static_cast<size_t>(id)] = at::Tensor();
  }
}

Status Runner::RunNode(size_t i) {
  const PlanNode& node = plan_.nodes[i];
  const OpDef* op = ops_[i];
  if (tracker_ != nullptr) tracker_->SetNode(static_cast<int32_t>(i));
  std::vector<at::Tensor> inputs(node.inputs.size());
  bool any_device = false;
  for (size_t k = 0; k < node.inputs.size(); ++k) {
    const int id = node.inputs[k];
    if (id < 0) continue;
    inputs[k] = env_[static_cast<size_t>(id)];
    if (!inputs[k].defined()) {
      return Internal("node '" + node.name + "' (" + node.op_type + "): input '" +
                      plan_.value(id).name + "' was not computed");
    }
    const bool host = k < 32 && ((op->host_inputs >> k) & 1u);
    any_device = any_device || (!host && inputs[k].is_cuda());
  }
  if (any_device) {
    for (size_t k = 0; k < inputs.size(); ++k) {
      const bool host = k < 32 && ((op->host_inputs >> k) & 1u);
      if (!host && inputs[k].defined() && !inputs[k].is_cuda() && inputs[k].dim() > 0) {
        inputs[k] = inputs[k].to(device_);
      }
    }
  }
  OpContext ctx{node, inputs, training_, float_type_, device_, needed_[i]};
  std::vector<at::Tensor> outputs = op->fn(ctx);
  for (size_t k = 0; k < node.outputs.size(); ++k) {
    const int id = node.outputs[k];
    if (id < 0) continue;
    at::Tensor out = k < outputs.size() ? outputs[k] : at::Tensor();
    if (!((needed_[i] >> std::min<size_t>(k, 31)) & 1u)) out = at::Tensor();
    if (out.defined() && training_ && out.requires_grad()) {
      bool alias = false;
      for (const at::Tensor& t : inputs) {
        alias = alias || (t.defined() && t.unsafeGetTensorImpl() == out.unsafeGetTensorImpl());
      }
      if (!alias) {
        const int32_t node_id = static_cast<int32_t>(i);
        out.register_hook([this, node_id](const at::Tensor&) {
          if (tracker_ != nullptr) tracker_->SetNode(node_id);
          cuda_node_ = node_id;
          NoteDeviceUsed();
        });
      }
    }
    env_[static_cast<size_t>(id)] = std::move(out);
  }
  outputs.clear();
  inputs.clear();
  // Drop every value whose last reader was this node.
  for (int id : node.inputs) DropIfReadBefore(id, static_cast<int>(i) + 1);
#if defined(MEMEST_WITH_CUDA)
  if (cuda()) {
    NoteDeviceUsed();
    const CudaStats s = ReadCudaStats(device_.index());
    if (s.allocated_peak > phase_allocated_best_) {
      phase_allocated_best_ = s.allocated_peak;
      phase_peak_node_ = node.name;
    }
  }
#endif
  return Status::Ok();
}

// torch.utils.checkpoint with use_reentrant=True, as a LibTorch custom function: forward runs
// the segment without grad and keeps its inputs; backward runs the segment again with grad
// enabled from detached inputs and calls backward through it (reentrant), which accumulates the
// parameters' .grad directly and leaves the inputs' gradients in the detached inputs' .grad.
// The segment's parameters are passed as inputs too, so that the outputs require grad even
// when no activation input does (the first segment), as with use_reentrant=False.
struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                Runner* runner, int64_t seg,
                                                at::TensorList inputs) {
    ctx->set_materialize_grads(false);
    ctx->saved_data["seg"] = seg;
    ctx->saved_data["runner"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(runner));
    ctx->save_for_backward(inputs.vec());
    return runner->SegmentForward(static_cast<size_t>(seg), inputs);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* runner =
        reinterpret_cast<Runner*>(static_cast<intptr_t>(ctx->saved_data["runner"].toInt()));
    const auto seg = static_cast<size_t>(ctx->saved_data["seg"].toInt());
    torch::autograd::variable_list in_grads =
        runner->SegmentBackward(seg, ctx->get_saved_variables(), grads);
    in_grads.insert(in_grads.begin(), 2, at::Tensor());  // runner and seg have no gradient
    return in_grads;
  }
};

Status Runner::RunCheckpointed(size_t seg) {
  const PlanSegment& s = plan_.checkpoint[seg];
  std::vector<at::Tensor> inputs;
  for (int id : s.inputs) inputs.push_back(env_[static_cast<size_t>(id)]);
  for (int id : s.parameters) inputs.push_back(env_[static_cast<size_t>(id)]);
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!inputs[k].defined()) {
      return Internal("checkpointed segment at node '" + plan_.node(s.begin).name +
                      "': an input was not computed");
    }
  }
  torch::autograd::variable_list outputs;
  try {
    outputs = CheckpointFunction::apply(this, static_cast<int64_t>(seg), at::TensorList(inputs));
  } catch (const SegmentError& e) {
    return e.status;
  }
  inputs.clear();
  for (size_t k = 0; k < s.outputs.size() && k < outputs.size(); ++k) {
    env_[static_cast<size_t>(s.outputs[k])] = std::move(outputs[k]);
  }
  // Inputs whose last reader was in the segment are dropped (the checkpoint keeps its own).
  for (int id : s.inputs) DropIfReadBefore(id, s.end);
  return Status::Ok();
}

torch::autograd::variable_list Runner::SegmentForward(size_t seg, at::TensorList inputs) {
  const PlanSegment& s = plan_.checkpoint[seg];
  for (size_t k = 0; k < s.inputs.size(); ++k) env_[static_cast<size_t>(s.inputs[k])] = inputs[k];
  for (size_t i = static_cast<size_t>(s.begin); i < static_cast<size_t>(s.end); ++i) {
    if (Status st = RunNode(i); !st.ok()) throw SegmentError{st};
  }
  torch::autograd::variable_list outputs;
  for (int id : s.outputs) {
    outputs.push_back(env_[static_cast<size_t>(id)]);
    env_[static_cast<size_t>(id)] = at::Tensor();  // the caller stores the wrapped output
  }
  return outputs;
}

torch::autograd::variable_list Runner::SegmentBackward(
    size_t seg, const torch::autograd::variable_list& saved,
    const torch::autograd::variable_list& grads) {
  const PlanSegment& s = plan_.checkpoint[seg];
  // Detached inputs (same storage), requiring grad where the originals did.
  std::vector<at::Tensor> detached;
  std::vector<std::pair<int, at::Tensor>> previous;  // env_ entries to put back
  for (size_t k = 0; k < s.inputs.size(); ++k) {
    at::Tensor d = saved[k].detach();
    if (saved[k].requires_grad()) d.requires_grad_(true);
    const auto id = static_cast<size_t>(s.inputs[k]);
    previous.emplace_back(s.inputs[k], env_[id]);
    env_[id] = d;
    detached.push_back(std::move(d));
  }
  torch::autograd::variable_list outputs, out_grads;
  {
    at::AutoGradMode enable(true);
    for (size_t i = static_cast<size_t>(s.begin); i < static_cast<size_t>(s.end); ++i) {
      if (Status st = RunNode(i); !st.ok()) throw std::runtime_error(st.ToString());
    }
    for (size_t k = 0; k < s.outputs.size(); ++k) {
      const auto id = static_cast<size_t>(s.outputs[k]);
      at::Tensor out = env_[id];
      env_[id] = at::Tensor();
      if (k < grads.size() && grads[k].defined() && out.defined() && out.requires_grad()) {
        outputs.push_back(std::move(out));
        out_grads.push_back(grads[k]);
      }
    }
  }
  for (auto& [id, t] : previous) env_[static_cast<size_t>(id)] = std::move(t);
  previous.clear();
  if (!outputs.empty()) torch::autograd::backward(outputs, out_grads);
  outputs.clear();
  out_grads.clear();
  torch::autograd::variable_list in_grads;
  for (at::Tensor& d : detached) in_grads.push_back(d.requires_grad() ? d.grad() : at::Tensor());
  in_grads.resize(saved.size());  // parameters: accumulated in place by the inner backward
  return in_grads;
}

Status Runner::Loss() {
  if (tracker_ != nullptr) tracker_->SetNode(kNodeLoss);
  const at::Tensor& out = env_[static_cast<size_t>(plan_.outputs[0])];
  if (!out.defined() || !at::isFloatingType(out.scalar_type())) {
    return Unsupported("the first graph output '" + plan_.value(plan_.outputs[0]).name +
                       "' is not a float tensor: no loss to train on");
  }
  const memest::Loss loss = xo_.options.loss;
  const bool ce = loss == memest::Loss::kCrossEntropy ||
                  (loss == memest::Loss::kAuto && out.dim() >= 2 && out.size(-1) > 1);
  if (ce) {
    if (out.dim() < 2) return Unsupported("cross-entropy needs logits of rank >= 2");
    at::Tensor logits = out.dim() == 2 ? out : out.reshape({-1, out.size(-1)});
    if (!target_.defined()) {
      at::NoGradGuard no_grad;
      target_ = at::randint(0, out.size(-1), {logits.size(0)},
                            at::TensorOptions().dtype(at::kLong).device(out.device()));
      m_.input_bytes += Nbytes(target_);
      TagTensor(target_, Category::kActivations);
    }
    loss_ = at::cross_entropy_loss(logits, target_);
  } else {
    if (!target_.defined()) {
      at::NoGradGuard no_grad;
      target_ = at::randn(out.sizes(), out.options().requires_grad(false));
      m_.input_bytes += Nbytes(target_);
      TagTensor(target_, Category::kActivations);
    }
    loss_ = at::mse_loss(out, target_);
  }
  if (!loss_.requires_grad()) {
    return Unsupported("no trainable parameter influences the first output '" +
                       plan_.value(plan_.outputs[0]).name + "'");
  }
  return Status::Ok();
}

void Runner::Backward() {
  if (tracker_ != nullptr) tracker_->SetNode(kNodeLoss);
  if (amp_ && *amp_ == at::kHalf) {
    at::Tensor scaled = loss_ * grad_scale_;
    scaled.backward();
  } else {
    loss_.backward();
  }
  for (const at::Tensor& p : params_) TagTensor(p.grad(), Category::kGradients);
}

void Runner::Step() {
  if (tracker_ != nullptr) tracker_->SetNode(kNodeOptimizer);
  at::NoGradGuard no_grad;
  ++step_count_;
  std::vector<size_t> live;  // parameters that got a gradient
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].grad().defined()) live.push_back(i);
  }
  if (amp_ && *amp_ == at::kHalf) UnscaleGradients(live);
  const double wd = xo_.options.weight_decay;
  const Optimizer opt = xo_.options.optimizer;
  if (opt == Optimizer::kSgd || opt == Optimizer::kMomentum) {
    const double momentum = opt == Optimizer::kMomentum ? kMomentum : 0.0;
    if (foreach_) {
      SgdForeach(live, wd, momentum);
    } else {
      SgdSingleTensor(live, wd, momentum);
    }
  } else {
    const bool decoupled = opt == Optimizer::kAdamW;
    // Adam._init_group: the state of every parameter is created before any update.
    for (size_t i : live) {
      if (!exp_avg_[i].defined()) {
        exp_avg_[i] = at::zeros_like(params_[i], at::MemoryFormat::Preserve);
        exp_avg_sq_[i] = at::zeros_like(params_[i], at::MemoryFormat::Preserve);
      }
    }
    const double bc1 = 1.0 - std::pow(kBeta1, static_cast<double>(step_count_));
    const double bc2 = 1.0 - std::pow(kBeta2, static_cast<double>(step_count_));
    const double step_size = kAdamLr / bc1;
    const double bc2_sqrt = std::sqrt(bc2);
    if (foreach_) {
      AdamForeach(live, wd, decoupled, step_size, bc2_sqrt);
    } else {
      AdamSingleTensor(live, wd, decoupled, step_size, bc2_sqrt);
    }
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    TagTensor(exp_avg_[i], Category::kOptimizerState);
    TagTensor(exp_avg_sq_[i], Category::kOptimizerState);
    TagTensor(momentum_[i], Category::kOptimizerState);
  }
}

// GradScaler.unscale_ (in place).
void Runner::UnscaleGradients(const std::vector<size_t>& live) {
  std::vector<at::Tensor> grads;
  for (size_t i : live) grads.push_back(params_[i].grad());
  at::Tensor found_inf = at::zeros({}, grad_scale_.options());
  at::Tensor inv_scale = grad_scale_.to(at::kDouble).reciprocal().to(at::kFloat);
  at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale);
  at::_amp_update_scale_(grad_scale_, growth_tracker_, found_inf, 2.0, 0.5, 2000);
}

// torch/optim/sgd.py _single_tensor_sgd.
void Runner::SgdSingleTensor(const std::vector<size_t>& live, double wd, double momentum) {
  for (size_t i : live) {
    at::Tensor& p = params_[i];
    at::Tensor grad = p.grad();
    if (wd != 0) grad = grad.add(p, wd);
    if (momentum != 0) {
      if (!momentum_[i].defined()) {
        momentum_[i] = at::clone(grad).detach();
      } else {
        momentum_[i].mul_(momentum).add_(grad, 1.0);
      }
      grad = momentum_[i];
    }
    p.add_(grad, -kSgdLr);
  }
}

// torch/optim/sgd.py _multi_tensor_sgd.
void Runner::SgdForeach(const std::vector<size_t>& live, double wd, double momentum) {
  std::vector<at::Tensor> ps, grads;
  for (size_t i : live) {
    ps.push_back(params_[i]);
    grads.push_back(params_[i].grad());
  }
  if (wd != 0) grads = at::_foreach_add(grads, ps, wd);
  if (momentum != 0) {
    bool all = true;
    for (size_t i : live) all = all && momentum_[i].defined();
    std::vector<at::Tensor> bufs;
    if (all) {
      for (size_t i : live) bufs.push_back(momentum_[i]);
      at::_foreach_mul_(bufs, momentum);
      at::_foreach_add_(bufs, grads, 1.0);
    } else {
      for (size_t k = 0; k < live.size(); ++k) {
        at::Tensor& buf = momentum_[live[k]];
        if (!buf.defined()) {
          buf = at::clone(grads[k]).detach();
        } else {
          buf.mul_(momentum).add_(grads[k], 1.0);
        }
        bufs.push_back(buf);
      }
    }
    grads = bufs;
  }
  at::_foreach_add_(ps, grads, -kSgdLr);
}

// torch/optim/adam.py _single_tensor_adam (AdamW when decoupled).
void Runner::AdamSingleTensor(const std::vector<size_t>& live, double wd, bool decoupled,
                              double step_size, double bc2_sqrt) {
  for (size_t i : live) {
    at::Tensor& p = params_[i];
    at::Tensor grad = p.grad();
    if (wd != 0) {
      if (decoupled) {
        p.mul_(1.0 - kAdamLr * wd);
      } else {
        grad = grad.add(p, wd);
      }
    }
    exp_avg_[i].lerp_(grad, 1.0 - kBeta1);
    exp_avg_sq_[i].mul_(kBeta2).addcmul_(grad, grad, 1.0 - kBeta2);
    at::Tensor denom = (exp_avg_sq_[i].sqrt() / bc2_sqrt).add_(kAdamEps);
    p.addcdiv_(exp_avg_[i], denom, -step_size);
  }
}

// torch/optim/adam.py _multi_tensor_adam (AdamW when decoupled).
void Runner::AdamForeach(const std::vector<size_t>& live, double wd, bool decoupled,
                         double step_size, double bc2_sqrt) {
  std::vector<at::Tensor> ps, grads, avgs, sqs;
  for (size_t i : live) {
    ps.push_back(params_[i]);
    grads.push_back(params_[i].grad());
    avgs.push_back(exp_avg_[i]);
    sqs.push_back(exp_avg_sq_[i]);
  }
  if (wd != 0) {
    if (decoupled) {
      at::_foreach_mul_(ps, 1.0 - kAdamLr * wd);
    } else {
      grads = at::_foreach_add(grads, ps, wd);
    }
  }
#if TORCH_VERSION_MAJOR >= 2
  at::_foreach_lerp_(avgs, grads, 1.0 - kBeta1);
#else
  at::_foreach_mul_(avgs, kBeta1);
  at::_foreach_add_(avgs, grads, 1.0 - kBeta1);
#endif
  at::_foreach_mul_(sqs, kBeta2);
  at::_foreach_addcmul_(sqs, grads, grads, 1.0 - kBeta2);
  grads.clear();  // del device_grads
  std::vector<at::Tensor> denom = at::_foreach_sqrt(sqs);
  at::_foreach_div_(denom, bc2_sqrt);
  at::_foreach_add_(denom, kAdamEps);
  at::_foreach_addcdiv_(ps, avgs, denom, -step_size);
}

void Runner::EndIteration() {
  loss_ = at::Tensor();
  for (int id : plan_.outputs) {
    if (!persistent_[static_cast<size_t>(id)]) env_[static_cast<size_t>(id)] = at::Tensor();
  }
  // Values kept only because they were graph outputs, or never read.
  for (size_t id = 0; id < env_.size(); ++id) {
    if (!persistent_[id]) env_[id] = at::Tensor();
  }
}

void Runner::Teardown() {
  env_.clear();
  params_.clear();
  exp_avg_.clear();
  exp_avg_sq_.clear();
  momentum_.clear();
  target_ = at::Tensor();
  loss_ = at::Tensor();
  grad_scale_ = at::Tensor();
  growth_tracker_ = at::Tensor();
}

void Runner::InitCuda() {
#if defined(MEMEST_WITH_CUDA)
  const c10::DeviceIndex index = 0;
  device_ = at::Device(at::kCUDA, index);
  at::Tensor warm = at::empty({1}, at::TensorOptions().device(device_));
  c10::cuda::device_synchronize();
  warm = at::Tensor();
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) == cudaSuccess) {
    m_.device.name = prop.name;
    m_.device.total_memory = static_cast<uint64_t>(prop.totalGlobalMem);
    m_.device.capability = std::to_string(prop.major) + "." + std::to_string(prop.minor);
  }
  int v = 0;
  if (cudaDriverGetVersion(&v) == cudaSuccess) m_.device.driver = VersionString(v);
  if (cudaRuntimeGetVersion(&v) == cudaSuccess) m_.device.cuda = VersionString(v);
  const auto used = DeviceUsed();
  const CudaStats s = ReadCudaStats(index);
  if (used && *used >= s.reserved_current) m_.context_bytes = *used - s.reserved_current;
#endif
}

// Phase/iteration peaks and the attribution of the tensor peak, from the CPU trace.
void Runner::Analyze(std::vector<TraceEvent> events) {
  const size_t n = events.size();
  // Segment peaks.
  std::map<std::pair<int32_t, int>, std::pair<uint64_t, int64_t>> seg;  // -> (peak, event)
  for (size_t b = 0; b < boundaries_.size(); ++b) {
    const uint64_t begin = boundaries_[b].seq;
    const uint64_t end = b + 1 < boundaries_.size() ? boundaries_[b + 1].seq : n;
    uint64_t live = begin == 0 ? 0 : events[begin - 1].live_after;
    uint64_t peak = live;
    int64_t at = begin == 0 ? -1 : static_cast<int64_t>(begin - 1);
    for (uint64_t s = begin; s < end && s < n; ++s) {
      if (events[s].live_after > peak) {
        peak = events[s].live_after;
        at = static_cast<int64_t>(s);
      }
    }
    auto key = std::make_pair(boundaries_[b].iteration, static_cast<int>(boundaries_[b].phase));
    auto it = seg.find(key);
    if (it == seg.end() || it->second.first < peak) seg[key] = {peak, at};
  }
  for (IterationStats& it : m_.iterations) {
    for (auto [phase, stats] :
         {std::pair{TracePhase::kForward, &it.forward},
          std::pair{TracePhase::kBackward, &it.backward}, std::pair{TracePhase::kStep, &it.step}}) {
      auto s = seg.find({it.iteration, static_cast<int>(phase)});
      if (s == seg.end()) continue;
      stats->peaks.tensor = s->second.first;
      if (s->second.second >= 0) {
        stats->peak_node = NodeLabel(plan_, events[static_cast<size_t>(s->second.second)].node);
      }
      MaxInto(&it.peaks.tensor, stats->peaks.tensor);
    }
    MaxPeaks(&m_.peaks, it.peaks);
  }
  // The global tensor peak: the first event reaching the maximum.
  int64_t peak_at = -1;
  uint64_t peak = 0;
  for (size_t s = 0; s < n; ++s) {
    if (events[s].live_after > peak) {
      peak = events[s].live_after;
      peak_at = static_cast<int64_t>(s);
    }
  }
  if (!m_.peaks.tensor) m_.peaks.tensor = peak;
  if (peak_at < 0) return;
  const TraceEvent& pe = events[static_cast<size_t>(peak_at)];
  m_.peak_iteration = pe.iteration;
  m_.peak_node = NodeLabel(plan_, pe.node);
  switch (pe.phase) {
    case TracePhase::kForward:
      m_.peak_phase = training_ ? Phase::kForward : Phase::kInference;
      break;
    case TracePhase::kBackward:
      m_.peak_phase = Phase::kBackward;
      break;
    case TracePhase::kStep:
      m_.peak_phase = Phase::kOptimizerStep;
      break;
    default:
      m_.peak_phase = Phase::kUnknown;
      break;
  }
  // Free seq of every allocation.
  std::vector<uint64_t> freed_at(n, UINT64_MAX);
  std::map<uintptr_t, std::vector<uint64_t>> allocs_by_ptr;
  for (size_t s = 0; s < n; ++s) {
    if (events[s].alloc) {
      allocs_by_ptr[events[s].ptr].push_back(s);
    } else if (events[s].alloc_seq < n) {
      freed_at[events[s].alloc_seq] = s;
    }
  }
  std::vector<std::optional<Category>> category(n);
  for (const Tag& t : tags_) {
    auto it = allocs_by_ptr.find(t.ptr);
    if (it == allocs_by_ptr.end()) continue;
    // The latest allocation of that pointer before the tensor was seen alive.
    auto pos = std::upper_bound(it->second.begin(), it->second.end(), t.seen_at);
    if (pos == it->second.begin()) continue;
    category[*std::prev(pos)] = t.category;
  }
  // End of the forward of the peak's iteration.
  uint64_t forward_end = n;
  for (size_t b = 0; b < boundaries_.size(); ++b) {
    if (boundaries_[b].iteration == pe.iteration && boundaries_[b].phase == TracePhase::kForward) {
      forward_end = b + 1 < boundaries_.size() ? boundaries_[b + 1].seq : n;
    }
  }
  PeakAttribution& a = m_.at_peak;
  for (size_t s = 0; s <= static_cast<size_t>(peak_at); ++s) {
    const TraceEvent& e = events[s];
    if (!e.alloc || freed_at[s] <= static_cast<uint64_t>(peak_at)) continue;
    if (category[s]) {
      AddToAttribution(*category[s], e.bytes, &a);
      continue;
    }
    if (e.iteration == pe.iteration) {
      if (e.phase == TracePhase::kForward && freed_at[s] >= forward_end) {
        a.saved_activations += e.bytes;
      } else {
        a.transient += e.bytes;
      }
    } else {
      a.unaccounted += e.bytes;
    }
  }
  if (xo_.keep_trace) m_.trace = std::move(events);
}

// The device (--device, and whether CUDA is usable), the float type or autocast the precision
// asks for, and the optimizer implementation: what the run will do, or why it cannot.
Status Runner::Configure(bool* use_cuda) {
  const Options& o = xo_.options;
  training_ = o.mode == Mode::kTrain;
  if (xo_.iterations < 1) return InvalidArgument("iterations must be >= 1");
  MEMEST_RETURN_IF_ERROR(Validate(o));
  MEMEST_RETURN_IF_ERROR(CheckSupported(plan_));
  *use_cuda = false;
  if (xo_.device == DeviceKind::kCuda) {
    if (!CudaUsable()) {
#if defined(MEMEST_WITH_CUDA)
      return Unavailable("--device cuda: no usable CUDA device (torch sees none)");
#else
      return Unavailable(
          "--device cuda: this harness was built without CUDA (-DMEMEST_WITH_CUDA=ON "
          "with a CUDA-enabled LibTorch)");
#endif
    }
    *use_cuda = true;
  } else if (xo_.device == DeviceKind::kAuto) {
    *use_cuda = CudaUsable();
  }
  switch (o.precision) {
    case Precision::kFp32:
      break;
    case Precision::kBf16:
      float_type_ = at::kBFloat16;
      break;
    case Precision::kAmpFp16:
    case Precision::kAmpBf16:
      if (!*use_cuda) {
        return Unsupported(std::string("precision ") + ToString(o.precision) +
                           " needs CUDA autocast; the CPU harness runs fp32 and bf16 only");
      }
      amp_ = o.precision == Precision::kAmpFp16 ? at::kHalf : at::kBFloat16;
      break;
  }
  if (xo_.optimizer_impl == OptimizerImpl::kFused) {
    return Unsupported(
        "optimizer_impl fused: the harness does not mirror torch.optim's fused kernels (use "
        "foreach or single-tensor)");
  }
  foreach_ = xo_.optimizer_impl ? *xo_.optimizer_impl == OptimizerImpl::kForeach : *use_cuda;
  return Status::Ok();
}

// Each node's op, and which of its outputs are read later (or are graph outputs).
void Runner::ResolveOps() {
  ops_.clear();
  for (const PlanNode& n : plan_.nodes) ops_.push_back(FindOp(n.domain, n.op_type));
  needed_.assign(plan_.nodes.size(), 0);
  for (size_t i = 0; i < plan_.nodes.size(); ++i) {
    const PlanNode& n = plan_.nodes[i];
    for (size_t k = 0; k < n.outputs.size() && k < 32; ++k) {
      const int id = n.outputs[k];
      if (id < 0) continue;
      const PlanValue& v = plan_.value(id);
      if (v.graph_output || v.last_consumer >= 0) needed_[i] |= 1u << k;
    }
  }
}

// A fresh measurement on the device: CUDA initialised, or the CPU tracker started with its limit.
void Runner::StartMeasurement(bool use_cuda) {
  m_ = Measurement();
  m_.device.torch = TorchVersion();
  if (use_cuda) {
    m_.device.kind = "cuda";
    InitCuda();
    return;
  }
  m_.device.kind = "cpu";
  m_.device.name = CpuName();
  tracker_ = &CpuTracker::Instance();
  uint64_t limit = xo_.host_limit_bytes;
  if (limit == 0) {
    limit = static_cast<uint64_t>(static_cast<double>(MemAvailable()) * kHostLimitFraction);
  }
  tracker_->Start(limit);
}

// One iteration: zero_grad, forward (+ loss, backward, step when training), each phase's stats.
Status Runner::Iteration(int it) {
  IterationStats stats;
  stats.iteration = it;
  Status status;
  // zero_grad(set_to_none) before the forward: the frees end the previous segment.
  if (training_) {
    for (at::Tensor& p : params_) p.mutable_grad() = at::Tensor();
  }
  BeginPhase(it, TracePhase::kForward);
  if (training_) {
    {
#if defined(MEMEST_WITH_CUDA)
      std::optional<AutocastScope> autocast;
      if (amp_) autocast.emplace(*amp_);
#endif
      status = Forward(it);
      if (status.ok()) status = Loss();
    }
    EndPhase(&stats.forward);
    if (!status.ok()) return status;
    BeginPhase(it, TracePhase::kBackward);
    Backward();
    EndPhase(&stats.backward);
    BeginPhase(it, TracePhase::kStep);
    Step();
    EndIteration();
    EndPhase(&stats.step);
  } else {
    at::NoGradGuard no_grad;
#if defined(MEMEST_WITH_CUDA)
    std::optional<AutocastScope> autocast;
    if (amp_) autocast.emplace(*amp_);
#endif
    status = Forward(it);
    EndIteration();
    EndPhase(&stats.forward);
  }
  if (cuda()) {
    MaxInto(&stats.peaks.tensor, stats.forward.peaks.tensor);
    for (const PhaseStats* p : {&stats.forward, &stats.backward, &stats.step}) {
      if (p->ran) MaxPeaks(&stats.peaks, p->peaks);
    }
    MaxPeaks(&m_.peaks, stats.peaks);
  }
  m_.iterations.push_back(std::move(stats));
  return status;
}

// Setup, then every iteration until one fails.
Status Runner::Loop() {
  BeginPhase(0, TracePhase::kSetup);
  Status status = Setup();
  if (status.ok() && amp_ && *amp_ == at::kHalf) {
    grad_scale_ = at::full({}, kGradScale, at::TensorOptions().dtype(at::kFloat).device(device_));
    growth_tracker_ = at::zeros({}, at::TensorOptions().dtype(at::kInt).device(device_));
  }
  for (int it = 1; status.ok() && it <= xo_.iterations; ++it) status = Iteration(it);
  return status;
}

// Gradient and optimizer-state sizes at the end, the teardown segment, and (CUDA) the memory
// outside the allocator; then everything is freed and the CPU trace analysed.
void Runner::Finish() {
  for (const at::Tensor& p : params_) m_.gradient_bytes += Nbytes(p.grad());
  for (size_t i = 0; i < params_.size(); ++i) {
    m_.optimizer_state_bytes += Nbytes(exp_avg_[i]) + Nbytes(exp_avg_sq_[i]) + Nbytes(momentum_[i]);
  }
  if (tracker_ != nullptr) {
    tracker_->SetPhase(TracePhase::kTeardown);
    boundaries_.push_back({xo_.iterations + 1, TracePhase::kTeardown, tracker_->event_count()});
  }
#if defined(MEMEST_WITH_CUDA)
  if (cuda()) {
    c10::cuda::device_synchronize();
    const auto used = DeviceUsed();
    const CudaStats s = ReadCudaStats(device_.index());
    if (used && *used >= s.reserved_current) m_.context_after_bytes = *used - s.reserved_current;
  }
#endif
  Teardown();
  if (tracker_ != nullptr) {
    std::vector<TraceEvent> events = tracker_->Stop();
    Analyze(std::move(events));
  }
#if defined(MEMEST_WITH_CUDA)
  if (cuda()) {
    c10::cuda::device_synchronize();
    c10::cuda::CUDACachingAllocator::emptyCache();
    FindCudaPeakPhase();
  }
#endif
}

#if defined(MEMEST_WITH_CUDA)
// The peak's iteration, phase and node at the allocated level.
void Runner::FindCudaPeakPhase() {
  uint64_t best = 0;
  for (const IterationStats& it : m_.iterations) {
    for (auto [phase, p] :
         {std::pair{Phase::kForward, &it.forward}, std::pair{Phase::kBackward, &it.backward},
          std::pair{Phase::kOptimizerStep, &it.step}}) {
      if (p->ran && p->peaks.allocated.value_or(0) > best) {
        best = *p->peaks.allocated;
        m_.peak_iteration = it.iteration;
        m_.peak_phase = (phase == Phase::kForward && !training_) ? Phase::kInference : phase;
        m_.peak_node = p->peak_node.empty() ? ToString(phase) : p->peak_node;
      }
    }
  }
}
#endif

Result<Measurement> Runner::Run() {
  const auto t0 = std::chrono::steady_clock::now();
  bool use_cuda = false;
  MEMEST_RETURN_IF_ERROR(Configure(&use_cuda));
  ResolveOps();
  std::lock_guard<std::mutex> run_lock(g_run_mutex);
  at::manual_seed(xo_.seed);
  StartMeasurement(use_cuda);

  std::string failure;  // out-of-memory message
  std::string failed_node;
  auto node_name = [&]() -> std::string {
    int32_t node = tracker_ != nullptr ? tracker_->node() : cuda_node_.load();
    std::string label = NodeLabel(plan_, node);
    if (node >= 0) {
      label = "node '" + label + "' (" + plan_.node(node).op_type + ")";
    }
    return label.empty() ? std::string("setup") : label;
  };
  bool oom = false;
  Status status;
  try {
    status = Loop();
  } catch (const OpError& e) {
    status = Unsupported(node_name() + ": " + e.what());
#if defined(MEMEST_WITH_CUDA)
  } catch (const c10::OutOfMemoryError& e) {
    oom = true;
    failure = e.what_without_backtrace();
    failed_node = node_name();
#endif
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    if (what.find("out of memory") != std::string::npos ||
        what.find("not enough memory") != std::string::npos) {
      oom = true;
      failure = what;
      failed_node = node_name();
    } else {
      status = Internal(node_name() + ": LibTorch failed: " + what);
    }
  } catch (const std::exception& e) {
    status = Internal(node_name() + ": " + e.what());
  }
  Finish();
  if (!status.ok()) return status;
  if (oom) {
    m_.status = "oom";
    m_.error = failed_node + ": " + failure;
  }
  m_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return std::move(m_);
}

}  // namespace

Result<DeviceKind> ParseDeviceKind(std::string_view s) {
  if (s == "auto") return DeviceKind::kAuto;
  if (s == "cpu") return DeviceKind::kCpu;
  if (s == "cuda") return DeviceKind::kCuda;
  return InvalidArgument("unknown device '" + std::string(s) + "' (expected auto, cpu or cuda)");
}

const char* ToString(DeviceKind d) {
  switch (d) {
    case DeviceKind::kAuto:
      return "auto";
    case DeviceKind::kCpu:
      return "cpu";
    case DeviceKind::kCuda:
      return "cuda";
  }
  return "auto";
}

Status CheckSupported(const Plan& plan) {
  for (const PlanNode& n : plan.nodes) {
    const std::string op = n.domain.empty() ? n.op_type : n.domain + "::" + n.op_type;
    if (n.has_subgraph) {
      return Unsupported("op " + op + " (node '" + n.name +
                         "') has a subgraph: control flow is not supported by the measurement "
                         "harness");
    }
    if (FindOp(n.domain, n.op_type) == nullptr) {
      return Unsupported("op " + op + " (node '" + n.name +
                         "') is not supported by the measurement harness");
    }
  }
  for (int id : plan.data_inputs) {
    const int32_t t = plan.value(id).dtype;
    try {
      (void)ToScalarType(t);
    } catch (const OpError& e) {
      return Unsupported("input '" + plan.value(id).name + "': " + e.what());
    }
  }
  return Status::Ok();
}

Result<Measurement> Execute(const Plan& plan, const ExecuteOptions& options) {
  Runner runner(plan, options);
  return runner.Run();
}

std::vector<std::string> MeasuredOpTypes() { return SupportedOpTypes(); }

bool CudaUsable() {
#if defined(MEMEST_WITH_CUDA)
  return at::hasCUDA() && c10::cuda::device_count() > 0;
#else
  return false;
#endif
}

std::string TorchVersion() { return TORCH_VERSION; }

}  // namespace memest::measurement
