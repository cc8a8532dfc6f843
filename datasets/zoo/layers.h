// datasets/zoo/layers.h -- PyTorch modules as the ONNX subgraphs torch.onnx.export (opset 17,
// TrainingMode.TRAINING, no constant folding) writes for them, on a GraphWriter.
//
// Every function appends nodes to `w` and returns the output tensor name. Shapes are tracked by
// the callers (the family builders know every dim); these helpers only need the dims that go into
// weights. Conventions follow torch 1.13's exporter:
//  * nn.Linear on a 2-D input -> Gemm(transB=1) with weight [out, in]; on a 3-D input ->
//    MatMul with a weight stored [in, out] (as GPT-2's Conv1D; torch would add a Transpose of an
//    [out, in] weight) followed by Add of the bias.
//  * BatchNorm (1d/2d) in training form: BatchNormalization(training_mode=1, momentum=0.9) with
//    3 outputs (Y, running_mean, running_var); scale/bias are parameters, mean/var buffers.
//  * Dropout in training form: Dropout(ratio, training_mode=true) with 2 outputs (Y, mask).
//  * Activations: see ActivationNames(); "identity" adds no node.
#ifndef MEMEST_DATASETS_ZOO_LAYERS_H_
#define MEMEST_DATASETS_ZOO_LAYERS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "datasets/zoo/graph_writer.h"

namespace memest::zoo {

// Names accepted by Activation(): relu, leaky_relu, prelu, elu, selu, tanh, sigmoid, softplus,
// silu, mish, gelu (erf form), gelu_tanh (tanh approximation with Pow, as Python code writes it),
// hardswish, relu6, identity (ActivationNames, which the generated families draw from), and
// gelu_tanh_kernel (F.gelu(approximate="tanh"), the cube as Muls: the Hugging Face builder's).
const std::vector<std::string>& ActivationNames();
bool IsActivation(const std::string& name);

std::string Activation(GraphWriter& w, const std::string& name, const std::string& x);

// nn.Linear(in, out) on [batch, in].
std::string Linear2d(GraphWriter& w, const std::string& x, int64_t in, int64_t out,
                     bool bias = true);
// nn.Linear(in, out) on [..., in] of rank >= 3 (MatMul + Add).
std::string Linear3d(GraphWriter& w, const std::string& x, int64_t in, int64_t out,
                     bool bias = true);
// nn.BatchNorm1d / BatchNorm2d over `channels` (axis 1), training form.
std::string BatchNorm(GraphWriter& w, const std::string& x, int64_t channels);
// nn.Dropout(ratio), training form.
std::string Dropout(GraphWriter& w, const std::string& x, float ratio);
// nn.LayerNorm(features) over the last axis (LayerNormalization-17, output Y only).
std::string LayerNorm(GraphWriter& w, const std::string& x, int64_t features);

struct ConvSpec {
  int64_t in = 0, out = 0, kernel = 3, stride = 1, pad = -1 /* -1: kernel / 2 */, group = 1;
  bool bias = false;
};
// nn.Conv2d.
std::string Conv(GraphWriter& w, const std::string& x, const ConvSpec& spec);
// Output spatial size of a conv/pool.
int64_t ConvOut(int64_t size, int64_t kernel, int64_t stride, int64_t pad);

}  // namespace memest::zoo

#endif  // MEMEST_DATASETS_ZOO_LAYERS_H_
