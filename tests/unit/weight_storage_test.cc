// Fine-tuning memory (memory/weight_storage.h, memory/optimizer.h): LoRA adapters over a frozen
// base, the base stored in half precision or quantized as bitsandbytes does, and 8-bit Adam.
// Expected values are computed here from the published layouts (PEFT, bitsandbytes), not read
// from memest.
#include "memory/weight_storage.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "memest/memest.h"
#include "memory/optimizer.h"
#include "testing/onnx_builder.h"

namespace memest {
namespace {

using testing::GraphBuilder;
using testing::kFloat;

constexpr int64_t kD = 1024;  // hidden size
constexpr int64_t kR = 8;     // LoRA rank
constexpr int kLayers = 4;
constexpr uint64_t kBaseElements = kD * kD;         // per layer
constexpr uint64_t kAdapterElements = 2 * kD * kR;  // lora_A + lora_B per layer
constexpr uint64_t kAdapterBytes = kLayers * kAdapterElements * 4;

// x -> [x W_l + (x A_l) B_l] for l < kLayers: a LoRA-wrapped Linear stack as PEFT builds it,
// base weights "base.<l>.weight", adapters "lora_A.<l>" [D, r] and "lora_B.<l>" [r, D].
std::shared_ptr<const Model> LoraStack() {
  GraphBuilder b(17);
  b.AddInput("x", kFloat, {"N", 128, kD});
  std::string x = "x";
  for (int l = 0; l < kLayers; ++l) {
    const std::string s = std::to_string(l);
    b.AddInitializer("base." + s + ".weight", {kD, kD});
    b.AddInitializer("lora_A." + s, {kD, kR});
    b.AddInitializer("lora_B." + s, {kR, kD});
    b.AddNode("MatMul", {x, "base." + s + ".weight"}, {"base_out" + s});
    b.AddNode("MatMul", {x, "lora_A." + s}, {"down" + s});
    b.AddNode("MatMul", {"down" + s, "lora_B." + s}, {"up" + s});
    b.AddNode("Add", {"base_out" + s, "up" + s}, {"h" + s});
    x = "h" + s;
  }
  b.graph().mutable_output()->Clear();
  b.AddOutput(x, kFloat, {"N", 128, kD});
  auto m = LoadModelFromBytes(b.Serialize(), "", "lora_stack");
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : nullptr;
}

Options Lora() {
  Options o;
  o.batch = 2;
  o.loss = Loss::kMse;
  o.trainable = "^lora_";
  return o;
}

Result<Estimate> RunWith(const char* backend, const Model& m, const Options& o) {
  auto est = MakeEstimator(backend);
  if (!est.ok()) return est.status();
  return (*est)->Run(m, o);
}

TEST(WeightStorageTest, LoraTrainsOnlyTheAdapters) {
  auto m = LoraStack();
  ASSERT_NE(m, nullptr);
  for (const char* backend : {"analytical", "symbolic"}) {
    auto e = RunWith(backend, *m, Lora());
    ASSERT_TRUE(e.ok()) << backend << ": " << e.status().ToString();
    const uint64_t state =
        e->largest ? e->largest->optimizer_state.bytes : e->breakdown.optimizer_state;
    EXPECT_EQ(state, 2 * kAdapterBytes) << backend;  // Adam: exp_avg, exp_avg_sq on adapters
    EXPECT_EQ(e->breakdown.weights, kLayers * kBaseElements * 4 + kAdapterBytes) << backend;
  }
}

TEST(WeightStorageTest, QuantizedBaseWeightsTakeBitsandbytesSizes) {
  // bitsandbytes: nf4 packs two elements per byte + an fp32 absmax per 64; double quantization
  // stores the absmax in one byte + fp32 per 256 blocks + an fp32 offset; int8 one byte + an
  // fp32 scale per output row.
  const uint64_t blocks = kBaseElements / 64;
  const uint64_t nf4 = kBaseElements / 2 + 4 * blocks;
  const uint64_t nf4_dq = kBaseElements / 2 + blocks + 4 * (blocks / 256) + 4;
  const uint64_t int8 = kBaseElements + 4 * kD;
  EXPECT_EQ(memory::QuantizedWeightBytes(WeightDtype::kNf4, kBaseElements, kD), nf4);
  EXPECT_EQ(memory::QuantizedWeightBytes(WeightDtype::kNf4DoubleQuant, kBaseElements, kD), nf4_dq);
  EXPECT_EQ(memory::QuantizedWeightBytes(WeightDtype::kInt8, kBaseElements, kD), int8);
  auto m = LoraStack();
  ASSERT_NE(m, nullptr);
  for (const auto& [dtype, per_layer] :
       {std::pair{WeightDtype::kNf4, nf4}, std::pair{WeightDtype::kNf4DoubleQuant, nf4_dq},
        std::pair{WeightDtype::kInt8, int8}}) {
    Options o = Lora();
    o.weight_dtype = dtype;
    for (const char* backend : {"analytical", "symbolic"}) {
      auto e = RunWith(backend, *m, o);
      ASSERT_TRUE(e.ok()) << backend << ": " << e.status().ToString();
      // Adapters stay fp32 (PEFT upcasts them); only the base shrinks.
      EXPECT_EQ(e->breakdown.weights, kLayers * per_layer + kAdapterBytes)
          << backend << " " << ToString(dtype);
    }
  }
}

TEST(WeightStorageTest, TransposedLinearWeightsQuantizeAndTheHeadStaysAsItIs) {
  // A training export writes nn.Linear as MatMul(x, Transpose(W)) with W [out, in]; the layer
  // that writes the graph output is the head, which transformers does not quantize.
  GraphBuilder b(17);
  b.AddInput("x", kFloat, {"N", 32});
  b.AddInitializer("fc.weight", {64, 32});
  b.AddInitializer("head.weight", {64, 10});
  b.AddNode("Transpose", {"fc.weight"}, {"fc_t"});
  b.AddNode("MatMul", {"x", "fc_t"}, {"h"});
  b.AddNode("MatMul", {"h", "head.weight"}, {"y"});
  b.AddOutput("y", kFloat, {"N", 10});
  auto m = LoadModelFromBytes(b.Serialize(), "", "transposed");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  Options o;
  o.batch = 4;
  o.mode = Mode::kInfer;  // every parameter counts as frozen
  o.weight_dtype = WeightDtype::kInt8;
  for (const char* backend : {"analytical", "symbolic"}) {
    auto e = RunWith(backend, **m, o);
    ASSERT_TRUE(e.ok()) << backend << ": " << e.status().ToString();
    // fc: one byte per element + an fp32 scale per each of its 64 output rows; head: fp32.
    EXPECT_EQ(e->breakdown.weights, 64u * 32 + 64 * 4 + 64 * 10 * 4) << backend;
  }
}

TEST(WeightStorageTest, AQuantizedMatmulDequantizesItsWeightForTheCall) {
  auto m = LoraStack();
  ASSERT_NE(m, nullptr);
  Options o = Lora();
  o.weight_dtype = WeightDtype::kNf4;
  auto e = RunWith("symbolic", *m, o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ASSERT_TRUE(e->largest.has_value());
  // The fp32 copy of one base weight (4 MiB) exists at some moment next to the matmul's output.
  EXPECT_GE(e->largest->transient.bytes, kBaseElements * 4);
  // The base stored in fp16 under AMP: 2 bytes per element, used as it is (no cast copy).
  Options half = Lora();
  half.weight_dtype = WeightDtype::kFp16;
  half.precision = Precision::kAmpFp16;
  auto a = RunWith("analytical", *m, half);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  // AMP also keeps an fp16 copy of each trainable fp32 weight a matmul uses (the adapters).
  EXPECT_EQ(a->breakdown.weights, kLayers * kBaseElements * 2 + kAdapterBytes + kAdapterBytes / 2);
}

// The state tensors one parameter gets, in creation order (memory/optimizer.h).
TEST(WeightStorageTest, StateTensorSizesPerOptimizer) {
  auto sizes = [](Optimizer o, uint64_t elements, uint64_t bytes) {
    const memory::StateTensorSizes s = memory::StateTensorBytes(o, elements, bytes);
    return std::vector<uint64_t>(s.begin(), s.end());
  };
  using V = std::vector<uint64_t>;
  EXPECT_EQ(sizes(Optimizer::kSgd, 1000, 4000), V{});
  EXPECT_EQ(sizes(Optimizer::kMomentum, 1000, 4000), V{4000});
  EXPECT_EQ(sizes(Optimizer::kAdamW, 1000, 2000), (V{2000, 2000}));
  EXPECT_EQ(sizes(Optimizer::kAdam8bit, 1000, 2000), (V{4000, 4000}));            // small: fp32
  EXPECT_EQ(sizes(Optimizer::kAdamW8bit, 5000, 20000), (V{5000, 5000, 12, 12}));  // 3 blocks
}

TEST(WeightStorageTest, EightBitAdamKeepsBlockwiseStateAndSmallTensorsInFp32) {
  auto m = LoraStack();
  ASSERT_NE(m, nullptr);
  Options o = Lora();
  o.optimizer = Optimizer::kAdamW8bit;
  // Each adapter has 8192 elements (>= 4096): two uint8 states + two fp32 maxima per 2048; the
  // two quantization maps once.
  const uint64_t per_adapter = 2 * 8192 + 2 * 4 * (8192 / 2048);
  const uint64_t expected = 2 * kLayers * per_adapter + 2 * 256 * 4;
  for (const char* backend : {"analytical", "symbolic"}) {
    auto e = RunWith(backend, *m, o);
    ASSERT_TRUE(e.ok()) << backend << ": " << e.status().ToString();
    const uint64_t state =
        e->largest ? e->largest->optimizer_state.bytes : e->breakdown.optimizer_state;
    EXPECT_EQ(state, expected) << backend;
  }
  // Tensors under 4096 elements keep 32-bit state: the small MLP's are all small.
  GraphBuilder mlp = testing::SmallMlp();
  auto small = LoadModelFromBytes(mlp.Serialize(), "", "mlp");
  ASSERT_TRUE(small.ok());
  Options s;
  s.batch = 4;
  s.optimizer = Optimizer::kAdam8bit;
  const uint64_t params = 16 * 32 + 32 + 32 * 4 + 4;
  auto e = RunWith("symbolic", **small, s);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ASSERT_TRUE(e->largest.has_value());
  EXPECT_EQ(e->largest->optimizer_state.bytes, 2 * 4 * params + 2 * 256 * 4);
}

TEST(WeightStorageTest, MixedPrecisionAdamModelStatesAreSixteenToEighteenBytesPerParameter) {
  // ZeRO (Rajbhandari et al. 2020, §3.1) and Korthikanti et al.: fp32 master weights, gradients
  // and two Adam moments are 16 bytes per parameter, + 2 for the fp16 copy the matmuls use.
  auto m = LoraStack();
  ASSERT_NE(m, nullptr);
  Options o;
  o.batch = 2;
  o.loss = Loss::kMse;
  o.precision = Precision::kAmpFp16;
  auto e = RunWith("analytical", *m, o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const uint64_t params = kLayers * (kBaseElements + kAdapterElements);
  const Breakdown& b = e->breakdown;
  const double per_param = static_cast<double>(b.weights + b.gradients + b.optimizer_state) /
                           static_cast<double>(params);
  EXPECT_GE(per_param, 16.0);
  EXPECT_LE(per_param, 18.0);
}

TEST(WeightStorageTest, AWeightDtypeThatChangesNothingIsAnError) {
  auto m = LoraStack();
  ASSERT_NE(m, nullptr);
  Options all = Lora();
  all.trainable.clear();  // everything trains: nothing is stored differently
  all.weight_dtype = WeightDtype::kNf4;
  auto e = RunWith("symbolic", *m, all);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("every parameter trains"), std::string::npos);
  // Half storage needs a half compute (F.linear refuses fp32 x fp16).
  Options half = Lora();
  half.weight_dtype = WeightDtype::kBf16;
  EXPECT_EQ(Validate(half).code(), ErrorCode::kInvalidArgument);
  // A trainable/freeze expression that matches no name is a typo, not a no-op.
  Options typo = Lora();
  typo.trainable = "^loar_";
  auto t = RunWith("analytical", *m, typo);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("matches no parameter name"), std::string::npos);
  // Backends that cannot model quantized storage or 8-bit state refuse it by name.
  Options q = Lora();
  q.weight_dtype = WeightDtype::kNf4;
  auto learned = RunWith("learned", *m, q);
  ASSERT_FALSE(learned.ok());
  EXPECT_EQ(learned.status().code(), ErrorCode::kInvalidArgument);
  // bitsandbytes has one kernel per parameter: --optimizer-impl does not apply.
  Options impl = Lora();
  impl.optimizer = Optimizer::kAdamW8bit;
  impl.optimizer_impl = OptimizerImpl::kFused;
  EXPECT_EQ(Validate(impl).code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace memest
