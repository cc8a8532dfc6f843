// The payload filter (core/payload_filter.h): its copy parses to the original message less the
// top-level initializers' large raw_data, whatever the file holds around them (unknown fields,
// non-canonical varints, repeated graphs that merge); it gives up where it cannot be sure; and a
// model loaded through it (from a file or from bytes, core/loader.cc) is the model loaded without
// it, with the same payload-length errors, in a fraction of the memory.
#include "core/payload_filter.h"

#include <gmock/gmock.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/graph.h"
#include "datasets/zoo/chain.h"
#include "memest/estimator.h"
#include "memest/model.h"
#include "memest/options.h"
#include "testing/left_out.h"
#include "testing/onnx_builder.h"

namespace memest {
namespace core {
void PrintTo(const LeftOutPayload& l, std::ostream* os) {
  *os << "{raw " << l.raw_bytes << ", " << l.entries << " of field " << l.field << "}";
}
}  // namespace core
namespace {

using memest::testing::ClearLeftOut;
using ::testing::ElementsAre;
using testing::GraphBuilder;
using ::testing::HasSubstr;
using testing::kFloat;
using testing::TempDir;

constexpr uint64_t kMin = core::kLeftOutPayloadBytes;

// --- Wire format by hand, for what a serializer would not write. ---

std::string Varint(uint64_t v) {
  std::string out;
  do {
    out.push_back(static_cast<char>((v & 0x7f) | (v > 0x7f ? 0x80 : 0)));
    v >>= 7;
  } while (v != 0);
  return out;
}
std::string Tag(int field, int wire_type) { return Varint((uint64_t(field) << 3) | wire_type); }
std::string LengthField(int field, const std::string& body) {
  return Tag(field, 2) + Varint(body.size()) + body;
}

std::optional<core::FilteredModel> Filter(const std::string& bytes, uint64_t min = kMin) {
  google::protobuf::io::ArrayInputStream in(bytes.data(), static_cast<int>(bytes.size()));
  return core::LeaveOutPayloads(&in, bytes.size(), min);
}
bool HasPayload(const std::string& bytes, uint64_t min = kMin) {
  google::protobuf::io::ArrayInputStream in(bytes.data(), static_cast<int>(bytes.size()));
  return core::HasPayloadToLeaveOut(&in, bytes.size(), min);
}

core::LeftOutPayload Raw(uint64_t bytes) { return {bytes, 0, 0}; }
core::LeftOutPayload Typed(int field, uint64_t entries) { return {0, entries, field}; }
constexpr int kFloatData = onnx::TensorProto::kFloatDataFieldNumber;
constexpr int kInt32Data = onnx::TensorProto::kInt32DataFieldNumber;
constexpr int kInt64Data = onnx::TensorProto::kInt64DataFieldNumber;
constexpr int kDoubleData = onnx::TensorProto::kDoubleDataFieldNumber;
constexpr int kUInt64Data = onnx::TensorProto::kUint64DataFieldNumber;

// `bytes` parsed, less what `left_out` lists: what the filter's copy must parse to.
std::string ParsedLess(const std::string& bytes,
                       const std::vector<core::LeftOutPayload>& left_out) {
  onnx::ModelProto m;
  EXPECT_TRUE(m.ParseFromString(bytes));
  if (!left_out.empty()) {
    EXPECT_EQ(ClearLeftOut(&m, left_out), "");
  }
  return m.SerializeAsString();
}
std::string Parsed(const std::string& bytes) { return ParsedLess(bytes, {}); }

// X[N, 1024] -> MatMul W1[1024, rows] -> Add B1[rows] -> Relu -> MatMul W2[rows, 16] -> Y, with
// W1, B1 and W2 holding raw_data (zeros) when `weights`, and declared without data otherwise.
GraphBuilder WeightedMlp(int64_t rows, bool weights) {
  GraphBuilder b(13);
  b.AddInput("X", kFloat, {"N", 1024});
  auto add = [&](const std::string& name, const std::vector<int64_t>& dims) {
    onnx::TensorProto& t = b.AddInitializer(name, dims);
    t.clear_float_data();
    if (!weights) return;
    int64_t numel = 1;
    for (int64_t d : dims) numel *= d;
    t.set_raw_data(std::string(static_cast<size_t>(numel * 4), '\0'));
  };
  add("W1", {1024, rows});
  add("B1", {rows});
  add("W2", {rows, 16});
  b.AddNode("MatMul", {"X", "W1"}, {"h0"}, "fc1");
  b.AddNode("Add", {"h0", "B1"}, {"h1"}, "fc1_bias");
  b.AddNode("Relu", {"h1"}, {"h2"}, "relu");
  b.AddNode("MatMul", {"h2", "W2"}, {"Y"}, "fc2");
  b.AddOutput("Y", kFloat, {"N", 16});
  return b;
}

// `b` with each initializer's raw_data moved to float_data, as onnx.helper.make_tensor writes it.
GraphBuilder InFloatData(GraphBuilder b) {
  for (auto& t : *b.graph().mutable_initializer()) {
    t.mutable_float_data()->Resize(static_cast<int>(t.raw_data().size() / 4), 0.0f);
    t.clear_raw_data();
  }
  return b;
}

// A graph whose initializers hold their data in each typed field ONNX packs, `n` entries each,
// with varints of every length from 1 to 10 bytes (negative int32 and int64 entries take 10).
std::string TypedModel(int n) {
  GraphBuilder b(13);
  b.AddInput("X", kFloat, {"N", n});
  onnx::TensorProto& f = b.AddInitializer("F", {n});
  onnx::TensorProto& d = b.AddInitializer("D", {n});
  onnx::TensorProto& i32 = b.AddInitializer("I32", {n});
  onnx::TensorProto& i64 = b.AddInitializer("I64", {n});
  onnx::TensorProto& u64 = b.AddInitializer("U64", {n});
  d.set_data_type(onnx::TensorProto::DOUBLE);
  i32.set_data_type(onnx::TensorProto::INT32);
  i64.set_data_type(onnx::TensorProto::INT64);
  u64.set_data_type(onnx::TensorProto::UINT64);
  for (onnx::TensorProto* t : {&f, &d, &i32, &i64, &u64}) t->clear_float_data();
  for (int k = 0; k < n; ++k) {
    const uint64_t wide = uint64_t{1} << (7 * (k % 10));  // a varint of 1 + k % 10 bytes
    f.add_float_data(float(k));
    d.add_double_data(double(k));
    i32.add_int32_data(k % 3 == 0 ? -k : int32_t(wide & 0x7fffffff));
    i64.add_int64_data(k % 3 == 0 ? -int64_t(k) : int64_t(wide));
    u64.add_uint64_data(wide);
  }
  b.AddNode("Add", {"X", "F"}, {"Y"}, "add");
  b.AddOutput("Y", kFloat, {"N", n});
  return b.Serialize();
}

// ---------------------------------------------------------------------------------------------
// The copy.

TEST(PayloadFilterTest, CopyParsesToTheOriginalLessTheLargeTopLevelPayloads) {
  GraphBuilder b = WeightedMlp(64, true);  // W1 256 KiB, B1 256 B, W2 4 KiB: only W1 left out
  onnx::TensorProto& f = b.AddInitializer("F", {8192});  // 32 KiB of float_data: left out
  for (int i = 0; i < 8192; ++i) f.add_float_data(1.0f);
  b.AddExternalInitializer("E", {1024, 1024}, "e.bin");
  // A Constant's tensor and an If body's initializer hold large raw_data too, and a tensor 256 KiB
  // of string_data: not top-level initializers' raw_data or packed typed data, so copied.
  onnx::TensorProto& strings = b.AddInitializer("S", {4096});
  strings.set_data_type(onnx::TensorProto::STRING);
  strings.clear_float_data();
  for (int i = 0; i < 4096; ++i) strings.add_string_data(std::string(64, 's'));
  onnx::TensorProto big;
  big.set_data_type(kFloat);
  big.add_dims(8192);
  big.set_raw_data(std::string(8192 * 4, '\1'));
  testing::SetTensorAttr(b.AddNode("Constant", {}, {"c"}, "const"), "value", big);
  onnx::GraphProto body;
  *body.add_initializer() = big;
  testing::SetGraphAttr(b.AddNode("If", {"cond"}, {"z"}, "branch"), "then_branch", body);
  const std::string bytes = b.Serialize();

  auto filtered = Filter(bytes);
  ASSERT_TRUE(filtered.has_value());
  const core::LeftOutPayload none;
  EXPECT_THAT(filtered->left_out,
              ElementsAre(Raw(1024 * 64 * 4), none, none, Typed(kFloatData, 8192), none, none));
  EXPECT_EQ(filtered->left_out_bytes, (1024u * 64 + 8192) * 4);
  EXPECT_LT(filtered->bytes.size(), bytes.size() - filtered->left_out_bytes);
  EXPECT_EQ(Parsed(filtered->bytes), ParsedLess(bytes, filtered->left_out));
  EXPECT_TRUE(HasPayload(bytes));

  // At min_bytes 0 every top-level raw_data is left out, W2's and B1's too.
  auto all = Filter(bytes, 0);
  ASSERT_TRUE(all.has_value());
  EXPECT_THAT(all->left_out, ElementsAre(Raw(1024 * 64 * 4), Raw(64 * 4), Raw(64 * 16 * 4),
                                         Typed(kFloatData, 8192), none, none));
  EXPECT_EQ(Parsed(all->bytes), ParsedLess(bytes, all->left_out));
}

TEST(PayloadFilterTest, EachPackedTypedFieldIsLeftOutWithItsEntriesCounted) {
  const std::string bytes = TypedModel(8192);  // 32-64 KiB a field: all above the threshold
  auto filtered = Filter(bytes);
  ASSERT_TRUE(filtered.has_value());
  EXPECT_THAT(filtered->left_out, ElementsAre(Typed(kFloatData, 8192), Typed(kDoubleData, 8192),
                                              Typed(kInt32Data, 8192), Typed(kInt64Data, 8192),
                                              Typed(kUInt64Data, 8192)));
  EXPECT_EQ(Parsed(filtered->bytes), ParsedLess(bytes, filtered->left_out));
  EXPECT_LT(filtered->bytes.size(), 1024u);
  EXPECT_TRUE(HasPayload(bytes));
  // 1,024 entries: under the threshold (4-10 KiB a field), copied.
  auto small = Filter(TypedModel(1024));
  ASSERT_TRUE(small.has_value());
  EXPECT_EQ(small->left_out_bytes, 0u);
  EXPECT_FALSE(HasPayload(TypedModel(1024)));
}

TEST(PayloadFilterTest, GivesUpOnTypedDataTheParseWouldReadOtherwiseOrRefuse) {
  onnx::TensorProto t;
  t.set_data_type(kFloat);
  t.add_dims(8192);
  t.set_name("T");
  const std::string head = t.SerializeAsString();
  const std::string floats = std::string(8192 * 4, '\0');
  const std::string model = WeightedMlp(64, true).Serialize();
  auto with = [&](const std::string& tensor) {
    return model + LengthField(7, LengthField(5, tensor));
  };
  // The baseline: one packed occurrence, left out.
  auto one = Filter(with(head + LengthField(kFloatData, floats)));
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(one->left_out.back(), Typed(kFloatData, 8192));
  // Two large packed occurrences append: left out together.
  auto two = Filter(with(head + LengthField(kFloatData, floats) + LengthField(kFloatData, floats)));
  ASSERT_TRUE(two.has_value());
  EXPECT_EQ(two->left_out.back(), Typed(kFloatData, 2 * 8192));
  // An occurrence copied beside one left out (written unpacked, or small): given up.
  EXPECT_FALSE(Filter(with(head + LengthField(kFloatData, floats) + Tag(kFloatData, 5) +
                           std::string(4, '\0')))
                   .has_value());
  EXPECT_FALSE(Filter(with(head + LengthField(kFloatData, std::string(8, '\0')) +
                           LengthField(kFloatData, floats)))
                   .has_value());
  // Two typed fields to leave out of one tensor.
  EXPECT_FALSE(Filter(with(head + LengthField(kFloatData, floats) +
                           LengthField(kInt64Data, std::string(20000, '\1'))))
                   .has_value());
  // A fixed-width field whose length is not a multiple of its width.
  EXPECT_FALSE(
      Filter(with(head + LengthField(kDoubleData, std::string(8192 * 8 + 4, '\0')))).has_value());
  // Varints: one that goes on past the field's end, and one of 11 bytes. The parse refuses both.
  const std::string ones(20000, '\1');
  for (const std::string& bad : {ones + "\x80", ones + std::string(10, '\x80') + "\x01"}) {
    const std::string bytes = with(head + LengthField(kInt64Data, bad));
    onnx::ModelProto m;
    EXPECT_FALSE(m.ParseFromString(bytes));
    EXPECT_FALSE(Filter(bytes).has_value());
  }
  // Nine continuation bytes then an end: a varint of 10 bytes, which the parse reads.
  const std::string ten =
      with(head + LengthField(kInt64Data, ones + std::string(9, '\xff') + "\x01"));
  auto counted = Filter(ten);
  ASSERT_TRUE(counted.has_value());
  EXPECT_EQ(counted->left_out.back(), Typed(kInt64Data, 20001));
  EXPECT_EQ(Parsed(counted->bytes), ParsedLess(ten, counted->left_out));
}

TEST(PayloadFilterTest, UnknownFieldsWrongWireTypesAndPaddedVarintsParseAsBefore) {
  const std::string model = WeightedMlp(64, true).Serialize();
  std::string odd = model;
  odd += Tag(1, 0) + std::string("\x88\x80\x80\x00", 4);  // ir_version 8, padded: read as 8
  odd += Tag(90, 0) + Varint(uint64_t{1} << 63);          // unknown varint
  odd += Tag(91, 1) + std::string(8, '\x7');              // unknown fixed64
  odd += Tag(92, 5) + std::string(4, '\x7');              // unknown fixed32
  odd += Tag(7, 0) + Varint(5);                           // graph's number, as a varint
  // A second graph (it merges into the first): an unknown field, an initializer whose raw_data
  // comes before its name and dims, and an initializer's number read as fixed32.
  onnx::TensorProto t;
  t.set_data_type(kFloat);
  t.add_dims(8192);
  t.set_name("late");
  const std::string tensor = LengthField(9, std::string(8192 * 4, '\0')) + t.SerializeAsString();
  odd += LengthField(7, Tag(93, 2) + Varint(3) + "abc" + LengthField(5, tensor) + Tag(5, 5) +
                            std::string(4, '\0'));

  auto filtered = Filter(odd);
  ASSERT_TRUE(filtered.has_value());
  const core::LeftOutPayload none;
  EXPECT_THAT(filtered->left_out, ElementsAre(Raw(1024 * 64 * 4), none, none, Raw(8192 * 4)));
  EXPECT_EQ(Parsed(filtered->bytes), ParsedLess(odd, filtered->left_out));
  onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(filtered->bytes));
  EXPECT_EQ(m.ir_version(), 8);
  EXPECT_EQ(m.graph().initializer(3).name(), "late");
}

TEST(PayloadFilterTest, ConcatenatedModelsNumberTheInitializersAcrossBoth) {
  const std::string first = WeightedMlp(64, true).Serialize();
  const std::string second = WeightedMlp(32, true).Serialize();
  const std::string both = first + second;  // protobuf merges: the graphs' initializers append
  auto filtered = Filter(both);
  ASSERT_TRUE(filtered.has_value());
  const core::LeftOutPayload none;
  EXPECT_THAT(filtered->left_out,
              ElementsAre(Raw(1024 * 64 * 4), none, none, Raw(1024 * 32 * 4), none, none));
  EXPECT_EQ(Parsed(filtered->bytes), ParsedLess(both, filtered->left_out));
}

TEST(PayloadFilterTest, GivesUpWhereTheParseWouldReadSomethingElse) {
  const std::string model = WeightedMlp(64, true).Serialize();
  // raw_data twice in one tensor: the parse keeps the last.
  onnx::TensorProto t;
  t.set_data_type(kFloat);
  t.add_dims(8192);
  const std::string twice = t.SerializeAsString() + LengthField(9, std::string(8192 * 4, '\0')) +
                            LengthField(9, std::string(8192 * 4, '\0'));
  EXPECT_FALSE(Filter(model + LengthField(7, LengthField(5, twice))).has_value());
  // A group (deprecated wire types 3 and 4), which the parse would skip as an unknown field.
  EXPECT_FALSE(Filter(model + Tag(94, 3) + Tag(94, 4)).has_value());
  // Truncated inside W1's payload, and inside a length.
  EXPECT_FALSE(Filter(model.substr(0, model.size() / 2)).has_value());
  EXPECT_FALSE(Filter(model + Tag(95, 2) + "\x80").has_value());
  // A field longer than the message around it.
  EXPECT_FALSE(Filter(model + LengthField(7, Tag(5, 2) + Varint(10) + "abc")).has_value());
  // A tag or a length of 6 bytes (field 90, length 3, padded), which protobuf's reader takes and
  // the parse refuses (found by the fuzz target); a padded tag or length of 5 bytes both read.
  const std::string tag5("\xd2\x85\x80\x80\x00", 5), tag6("\xd2\x85\x80\x80\x80\x00", 6);
  const std::string length5("\x83\x80\x80\x80\x00", 5), length6("\x83\x80\x80\x80\x80\x00", 6);
  for (const std::string& bad : {tag6 + Varint(3) + "abc", Tag(90, 2) + length6 + "abc"}) {
    onnx::ModelProto m;
    EXPECT_FALSE(m.ParseFromString(model + bad));
    EXPECT_FALSE(Filter(model + bad).has_value());
  }
  for (const std::string& good : {tag5 + Varint(3) + "abc", Tag(90, 2) + length5 + "abc"}) {
    auto filtered = Filter(model + good);
    ASSERT_TRUE(filtered.has_value());
    EXPECT_EQ(Parsed(filtered->bytes), ParsedLess(model + good, filtered->left_out));
  }
  // Nothing at all is a valid (empty) message: nothing to leave out.
  auto empty = Filter("");
  ASSERT_TRUE(empty.has_value());
  EXPECT_TRUE(empty->bytes.empty());
  EXPECT_TRUE(empty->left_out.empty());
}

// Damaged models (bytes flipped, inserted, cut; a fixed seed): wherever the filter makes a copy
// (every raw_data and packed typed field left out, min_bytes 0), the copy parses exactly when the
// original does, to the same message less the payloads it left out.
TEST(PayloadFilterTest, DamagedModelsParseAsTheirCopiesDo) {
  GraphBuilder attention = testing::SelfAttention();
  for (auto& t : *attention.graph().mutable_initializer()) {
    t.clear_float_data();
    t.set_raw_data(std::string(static_cast<size_t>(t.dims(0) * t.dims(1) * 4), '\2'));
  }
  const std::vector<std::string> models = {WeightedMlp(4, true).Serialize(), attention.Serialize(),
                                           zoo::ChainModel(3), TypedModel(24)};
  std::mt19937 rng(20261206);
  int copies = 0, parsed = 0;
  for (const std::string& model : models) {
    for (int trial = 0; trial < 3000; ++trial) {
      std::string bytes = model;
      const int edits = 1 + static_cast<int>(rng() % 3);
      for (int e = 0; e < edits; ++e) {
        const size_t at = rng() % bytes.size();
        switch (rng() % 4) {
          case 0:
            bytes[at] = static_cast<char>(rng());
            break;
          case 1:
            bytes[at] = static_cast<char>(bytes[at] ^ (1 << (rng() % 8)));
            break;
          case 2:
            bytes.insert(at, 1, static_cast<char>(rng()));
            break;
          default:
            bytes.resize(std::max<size_t>(at, 1));
            break;
        }
      }
      auto filtered = Filter(bytes, 0);
      if (!filtered) continue;
      ++copies;
      onnx::ModelProto original, copy;
      const bool original_ok = original.ParseFromString(bytes);
      ASSERT_EQ(copy.ParseFromString(filtered->bytes), original_ok) << "trial " << trial;
      if (!original_ok) continue;
      ++parsed;
      ASSERT_EQ(ClearLeftOut(&original, filtered->left_out), "") << "trial " << trial;
      ASSERT_EQ(copy.SerializeAsString(), original.SerializeAsString()) << "trial " << trial;
    }
  }
  EXPECT_GT(copies, 1300);  // enough damaged models get a copy to say something
  EXPECT_GT(parsed, 650);
  std::printf("%d copies, %d of them of models that parse\n", copies, parsed);
}

TEST(PayloadFilterTest, FindsAPayloadOnlyWhereThereIsOne) {
  EXPECT_TRUE(HasPayload(WeightedMlp(64, true).Serialize()));
  EXPECT_FALSE(HasPayload(WeightedMlp(64, false).Serialize()));
  EXPECT_FALSE(HasPayload(WeightedMlp(2, true).Serialize())) << "8 KiB: under the threshold";
  EXPECT_FALSE(HasPayload(zoo::ChainModel(100)));
}

// LeaveOutPayloadsIfAny opens a second stream only where the first walk found a payload, and
// hands the model back to the whole parse where it cannot open one or runs out of memory.
TEST(PayloadFilterTest, CopiesOnlyWhereTheFirstWalkFindsAPayload) {
  struct Opener {
    const std::string* bytes;
    int opened = 0;
    int fail_at = -1;  // the call (0-based) that returns null
    bool throw_at_second = false;
    std::unique_ptr<google::protobuf::io::ZeroCopyInputStream> operator()() {
      const int call = opened++;
      if (call == fail_at) return nullptr;
      if (call == 1 && throw_at_second) throw std::bad_alloc();
      return std::make_unique<google::protobuf::io::ArrayInputStream>(
          bytes->data(), static_cast<int>(bytes->size()));
    }
  };
  auto run = [](Opener& o) { return core::LeaveOutPayloadsIfAny(std::ref(o), o.bytes->size()); };
  const std::string weighted = WeightedMlp(64, true).Serialize();
  const std::string weightless = WeightedMlp(64, false).Serialize();

  Opener found{&weighted};
  auto copy = run(found);
  ASSERT_TRUE(copy.has_value());
  EXPECT_EQ(found.opened, 2);
  EXPECT_EQ(copy->bytes, Filter(weighted)->bytes);
  EXPECT_EQ(copy->left_out, Filter(weighted)->left_out);

  Opener none{&weightless};
  EXPECT_FALSE(run(none).has_value());
  EXPECT_EQ(none.opened, 1) << "nothing to leave out: no copy";

  for (int fail_at : {0, 1}) {
    Opener cannot{&weighted, 0, fail_at};
    EXPECT_FALSE(run(cannot).has_value()) << fail_at;
    EXPECT_EQ(cannot.opened, fail_at + 1);
  }
  Opener out_of_memory{&weighted, 0, -1, true};
  EXPECT_FALSE(run(out_of_memory).has_value());
}

// ---------------------------------------------------------------------------------------------
// Loading through it (core/loader.cc filters models over 16 MiB).

std::string Describe(const Status& s) { return s.ToString(); }

uint64_t SymbolicPeak(const Model& model) {
  auto est = MakeEstimator("symbolic");
  EXPECT_TRUE(est.ok());
  Options o;
  o.batch = 32;
  auto r = (*est)->Run(model, o);
  EXPECT_TRUE(r.ok()) << Describe(r.status());
  return r.ok() ? r->peak_device : 0;
}

TEST(PayloadFilterLoadTest, AWeightedModelOver16MiBLoadsAsItsWeightlessSelf) {
  const GraphBuilder weightless = WeightedMlp(8192, false);
  // 32 MiB of W1 and 512 KiB of W2, in raw_data and in float_data.
  for (const GraphBuilder& weighted :
       {WeightedMlp(8192, true), InFloatData(WeightedMlp(8192, true))}) {
    const std::string bytes = weighted.Serialize();
    ASSERT_GT(bytes.size(), size_t{16} << 20);
    ASSERT_TRUE(HasPayload(bytes));
    TempDir dir;
    auto from_file = LoadModel(dir.WriteModel("weighted.onnx", weighted.model()));
    auto from_bytes = LoadModelFromBytes(bytes, dir.path(), "weighted");
    auto reference = LoadModelFromBytes(weightless.Serialize(), dir.path(), "weightless");
    ASSERT_TRUE(from_file.ok()) << Describe(from_file.status());
    ASSERT_TRUE(from_bytes.ok()) << Describe(from_bytes.status());
    ASSERT_TRUE(reference.ok()) << Describe(reference.status());
    // The kept proto is the original parsed and stripped of payloads over 1,024 elements.
    onnx::ModelProto stripped;
    ASSERT_TRUE(stripped.ParseFromString(bytes));
    for (auto& t : *stripped.mutable_graph()->mutable_initializer()) {
      if (t.dims(0) * (t.dims_size() > 1 ? t.dims(1) : 1) <= 1024) continue;
      t.clear_raw_data();
      t.clear_float_data();
    }
    const std::string kept = stripped.SerializeAsString();
    for (const auto* r : {&from_file, &from_bytes}) {
      const Model& m = ***r;
      EXPECT_EQ(m.graph().proto->SerializeAsString(), kept);
      EXPECT_EQ(m.summary().parameter_count, (*reference)->summary().parameter_count);
      EXPECT_EQ(m.summary().parameter_bytes, (*reference)->summary().parameter_bytes);
      EXPECT_EQ(m.summary().op_types, (*reference)->summary().op_types);
      EXPECT_EQ(SymbolicPeak(m), SymbolicPeak(**reference));
    }
  }
}

TEST(PayloadFilterLoadTest, ALeftOutPayloadOfTheWrongLengthIsRejectedAsBefore) {
  GraphBuilder raw = WeightedMlp(8192, true);
  raw.graph().mutable_initializer(0)->mutable_raw_data()->append(4, '\0');  // one element too many
  GraphBuilder typed = InFloatData(WeightedMlp(8192, true));
  typed.graph().mutable_initializer(0)->add_float_data(0.0f);
  const std::pair<const GraphBuilder*, const char*> cases[] = {
      {&raw,
       "initializer 'W1' holds 33554436 bytes of raw_data where its dims and float32 need "
       "33554432"},
      {&typed,
       "initializer 'W1' holds 8388609 float_data entries where its dims and float32 need "
       "8388608"}};
  for (const auto& [b, message] : cases) {
    const std::string bytes = b->Serialize();
    ASSERT_TRUE(HasPayload(bytes));
    TempDir dir;
    for (const auto& r : {LoadModel(dir.WriteModel("bad.onnx", b->model())),
                          LoadModelFromBytes(bytes, dir.path(), "bad")}) {
      ASSERT_FALSE(r.ok());
      EXPECT_THAT(r.status().message(), HasSubstr(message));
    }
  }
}

TEST(PayloadFilterLoadTest, ATruncatedWeightedFileIsRejectedByTheParseAsBefore) {
  const std::string bytes = WeightedMlp(8192, true).Serialize();
  const std::string cut = bytes.substr(0, bytes.size() / 2);  // inside W1's payload
  TempDir dir;
  for (const auto& r :
       {LoadModel(dir.WriteFile("cut.onnx", cut)), LoadModelFromBytes(cut, dir.path(), "cut")}) {
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(r.status().message(), HasSubstr("the protobuf does not parse"));
  }
}

// Peak RSS of loading a 96 MiB weighted file, in a forked child (memory_bound_test.cc explains
// the method): the payloads are skipped unread, so it stays far under the file's size, where a
// whole-file read and parse took more than twice the file.
TEST(PayloadFilterLoadTest, LoadingAWeightedFileDoesNotHoldItsWeightsInMemory) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "sanitizers multiply every allocation";
#endif
  if (!std::ifstream("/proc/self/clear_refs")) GTEST_SKIP() << "no /proc/self/clear_refs";
  TempDir dir;
  std::string path;
  {
    const GraphBuilder b = WeightedMlp(24576, true);  // 96 MiB of W1, 1.5 MiB of W2
    path = dir.WriteModel("weighted.onnx", b.model());
  }
  malloc_trim(0);
  const pid_t pid = fork();
  if (pid == 0) {
    auto status_bytes = [](const std::string& field) -> uint64_t {
      std::ifstream in("/proc/self/status");
      std::string line;
      while (std::getline(in, line)) {
        if (line.rfind(field + ":", 0) == 0) {
          return std::strtoull(line.c_str() + field.size() + 1, nullptr, 10) * 1024;
        }
      }
      return 0;
    };
    std::ofstream("/proc/self/clear_refs") << "5";
    const uint64_t before = status_bytes("VmRSS");
    auto model = LoadModel(path);
    const uint64_t rise = status_bytes("VmHWM") - before;
    _exit(model.ok() && rise < (uint64_t{8} << 20) ? 0 : 1);  // under 8 MiB for a 97.5 MiB file
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "loading a 97.5 MiB weighted file raised the peak RSS by 8 MiB or more, or failed";
}

}  // namespace
}  // namespace memest
