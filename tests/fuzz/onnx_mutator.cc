// tests/fuzz/onnx_mutator.cc -- a structure-aware libFuzzer mutator for ONNX models.
//
// POLICY. Byte-level mutation of an ONNX file mostly yields bytes that protobuf rejects, so the
// fuzzer would spend its time in the parser. This mutator parses the input as onnx::ModelProto,
// changes exactly one field somewhere in the message tree through protobuf reflection, and
// serializes the result: the output still parses, and the change lands in the graph, a node, an
// attribute, a tensor, a value_info or a shape dim. libprotobuf-mutator does the same but is not
// packaged in Debian 12, so this is a small version of it (protobuf 3.21 reflection only).
//
// One mutation = one field of one message, chosen uniformly among all fields of all messages in
// the tree (so big repeated parts such as nodes and dims get most of the attention):
//   integers  boundary values (0, +-1, INT32_MIN/MAX, INT64_MIN/MAX, 2^31, 2^32, ...), small
//             deltas, small non-negative values (dtypes, axes, ranks);
//   enums     another declared value, or an undeclared number;
//   floats    0, -0, +-1, NaN, +-inf, huge, tiny;
//   strings   another string from the same model (so node inputs/outputs, initializer and
//             value_info names re-wire the graph), an op type or attribute name from the ONNX
//             schema registry, a few interesting words, truncation, an appended character;
//   bytes     truncate, extend, flip a byte, clear;
//   messages  clear, create, replace by a copy of another message of the same type;
//   repeated  delete, duplicate, add or swap an element, or mutate one element as above.
// With probability 1/8, or when the input does not parse, or when the result would exceed
// max_size, it falls back to libFuzzer's byte-level LLVMFuzzerMutate. LLVMFuzzerCustomCrossOver
// replaces a message of model 1 by a same-type message of model 2 (a byte splice when either does
// not parse).
#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using Rng = std::minstd_rand;

// One place a mutation can happen: a field of a message (a whole repeated field is one site).
struct Site {
  Message* msg;
  const FieldDescriptor* field;
};

// Everything collected from one walk over the tree.
struct Tree {
  std::vector<Site> sites;
  std::map<const Descriptor*, std::vector<Message*>> by_type;  // for "copy another message"
  std::vector<std::string> strings;                            // string values (not bytes)
};

void Walk(Message* msg, Tree* tree, std::set<std::string>* seen_strings) {
  const Descriptor* d = msg->GetDescriptor();
  const Reflection* r = msg->GetReflection();
  tree->by_type[d].push_back(msg);
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    tree->sites.push_back({msg, f});
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (f->is_repeated()) {
        for (int j = 0; j < r->FieldSize(*msg, f); ++j) {
          Walk(r->MutableRepeatedMessage(msg, f, j), tree, seen_strings);
        }
      } else if (r->HasField(*msg, f)) {
        Walk(r->MutableMessage(msg, f), tree, seen_strings);
      }
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_STRING &&
               f->type() == FieldDescriptor::TYPE_STRING) {
      auto keep = [&](const std::string& s) {
        if (seen_strings->size() < 4096 && seen_strings->insert(s).second) {
          tree->strings.push_back(s);
        }
      };
      if (f->is_repeated()) {
        for (int j = 0; j < r->FieldSize(*msg, f); ++j) keep(r->GetRepeatedString(*msg, f, j));
      } else if (r->HasField(*msg, f)) {
        keep(r->GetString(*msg, f));
      }
    }
  }
}

template <typename T>
const T& Pick(Rng& rng, const std::vector<T>& v) {
  return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)];
}

size_t Below(Rng& rng, size_t n) {  // uniform in [0, n), n >= 1
  return std::uniform_int_distribution<size_t>(0, n - 1)(rng);
}

// ---- scalar values ----------------------------------------------------------------------------

int64_t MutateInt(Rng& rng, int64_t old) {
  // clang-format off
  static const std::vector<int64_t> kBoundary = {
      0, 1, -1, 2, 3, -2, 7, 8, 255, 256, 65535, 65536,
      std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(),
      int64_t{1} << 31, int64_t{1} << 32, (int64_t{1} << 32) - 1, int64_t{1} << 40,
      int64_t{1} << 62, std::numeric_limits<int64_t>::min(),
      std::numeric_limits<int64_t>::min() + 1, std::numeric_limits<int64_t>::max(),
      std::numeric_limits<int64_t>::max() - 1};
  // clang-format on
  switch (Below(rng, 4)) {
    case 0:
    case 1:
      return Pick(rng, kBoundary);
    case 2: {  // small delta (wrapping, no UB here)
      const int64_t delta = static_cast<int64_t>(Below(rng, 33)) - 16;
      return static_cast<int64_t>(static_cast<uint64_t>(old) + static_cast<uint64_t>(delta));
    }
    default:  // small non-negative: dtypes, axes, ranks, counts
      return static_cast<int64_t>(Below(rng, 25));
  }
}

double MutateFloat(Rng& rng) {
  // clang-format off
  static const std::vector<double> kValues = {
      0.0, -0.0, 1.0, -1.0, 0.5, 1e-7, 1e30, -1e30, std::numeric_limits<double>::quiet_NaN(),
      std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
      std::numeric_limits<double>::denorm_min(), std::numeric_limits<float>::max()};
  // clang-format on
  return Pick(rng, kValues);
}

// Op types and their attribute names, from the libonnx schema registry, so that a node can
// become another real op and an attribute another real attribute.
struct OpNames {
  std::string op_type;
  std::vector<std::string> attributes;
};
const std::vector<OpNames>& KnownOps() {
  static const std::vector<OpNames> ops = [] {
    std::vector<OpNames> out;
    for (const auto& schema : ONNX_NAMESPACE::OpSchemaRegistry::get_all_schemas()) {
      OpNames op{schema.Name(), {}};
      for (const auto& [name, attribute] : schema.attributes()) op.attributes.push_back(name);
      out.push_back(std::move(op));
    }
    std::sort(out.begin(), out.end(), [](const OpNames& a, const OpNames& b) {
      return a.op_type < b.op_type;  // deterministic order
    });
    return out;
  }();
  return ops;
}

std::string NewString(Rng& rng, const Tree& tree, const Message& msg, const FieldDescriptor* f,
                      const std::string& old) {
  static const std::vector<std::string> kWords = {
      "",         "batch",  "N",      "seq",           "ai.onnx",     "ai.onnx.ml", "com.microsoft",
      "location", "offset", "length", "../escape.bin", "/etc/passwd", "x",          "\xff\xfe"};
  const std::string& field = f->name();
  const std::string& type = msg.GetDescriptor()->name();
  if (type == "NodeProto" && field == "op_type" && Below(rng, 2) == 0 && !KnownOps().empty()) {
    return Pick(rng, KnownOps()).op_type;
  }
  if (type == "AttributeProto" && field == "name" && Below(rng, 2) == 0 && !KnownOps().empty()) {
    const OpNames& op = Pick(rng, KnownOps());
    if (!op.attributes.empty()) return Pick(rng, op.attributes);
  }
  switch (Below(rng, 8)) {
    case 0:
      return Pick(rng, kWords);
    case 1:
      return old.substr(0, Below(rng, old.size() + 1));
    case 2:
      return old + static_cast<char>('a' + Below(rng, 26));
    default:
      return tree.strings.empty() ? old : Pick(rng, tree.strings);
  }
}

std::string NewBytes(Rng& rng, std::string b) {
  switch (Below(rng, 4)) {
    case 0:
      b.resize(Below(rng, b.size() + 1));  // truncate
      break;
    case 1:
      b.append(1 + Below(rng, 64), static_cast<char>(Below(rng, 256)));  // extend
      break;
    case 2:
      if (!b.empty()) b[Below(rng, b.size())] ^= static_cast<char>(1 + Below(rng, 255));
      break;
    default:
      b.clear();
  }
  return b;
}

// Sets a scalar field (index < 0: singular; else repeated element `index`, or a new element when
// index == FieldSize) to a mutated value.
void MutateScalar(Rng& rng, const Tree& tree, Message* msg, const FieldDescriptor* f, int index) {
  const Reflection* r = msg->GetReflection();
  const bool add = f->is_repeated() && index == r->FieldSize(*msg, f);
  const bool rep = f->is_repeated();
#define MEMEST_SET(Type, value)                   \
  do {                                            \
    if (add) {                                    \
      r->Add##Type(msg, f, value);                \
    } else if (rep) {                             \
      r->SetRepeated##Type(msg, f, index, value); \
    } else {                                      \
      r->Set##Type(msg, f, value);                \
    }                                             \
  } while (0)
#define MEMEST_GET(Type, fallback) \
  (add ? (fallback) : rep ? r->GetRepeated##Type(*msg, f, index) : r->Get##Type(*msg, f))
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      MEMEST_SET(Int32, static_cast<int32_t>(MutateInt(rng, MEMEST_GET(Int32, 0))));
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      MEMEST_SET(Int64, MutateInt(rng, MEMEST_GET(Int64, 0)));
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      MEMEST_SET(UInt32, static_cast<uint32_t>(MutateInt(rng, MEMEST_GET(UInt32, 0))));
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      MEMEST_SET(UInt64, static_cast<uint64_t>(
                             MutateInt(rng, static_cast<int64_t>(MEMEST_GET(UInt64, 0)))));
      break;
    case FieldDescriptor::CPPTYPE_FLOAT:
      MEMEST_SET(Float, static_cast<float>(MutateFloat(rng)));
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      MEMEST_SET(Double, MutateFloat(rng));
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      MEMEST_SET(Bool, !MEMEST_GET(Bool, false));
      break;
    case FieldDescriptor::CPPTYPE_ENUM: {
      const auto* e = f->enum_type();
      const int value = Below(rng, 4) == 0
                            ? static_cast<int>(MutateInt(rng, 0))
                            : e->value(static_cast<int>(Below(rng, e->value_count())))->number();
      MEMEST_SET(EnumValue, value);
      break;
    }
    case FieldDescriptor::CPPTYPE_STRING: {
      const std::string old = MEMEST_GET(String, std::string());
      MEMEST_SET(String, f->type() == FieldDescriptor::TYPE_BYTES
                             ? NewBytes(rng, old)
                             : NewString(rng, tree, *msg, f, old));
      break;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      break;  // not a scalar
  }
#undef MEMEST_SET
#undef MEMEST_GET
}

// A copy of another message of the same type from the tree, or nullptr when there is none.
const Message* OtherOfType(Rng& rng, const Tree& tree, const Descriptor* d, const Message* self) {
  auto it = tree.by_type.find(d);
  if (it == tree.by_type.end()) return nullptr;
  const Message* m = Pick(rng, it->second);
  return m == self ? nullptr : m;
}

// Moves element `from` of a repeated field to position `to` by adjacent swaps (keeps the order of
// the others: node order matters to the graph).
void MoveElement(Message* msg, const FieldDescriptor* f, int from, int to) {
  const Reflection* r = msg->GetReflection();
  for (; from < to; ++from) r->SwapElements(msg, f, from, from + 1);
  for (; from > to; --from) r->SwapElements(msg, f, from, from - 1);
}

// Appends a copy of element `i` of a repeated field.
void AppendCopy(Message* msg, const FieldDescriptor* f, int i) {
  const Reflection* r = msg->GetReflection();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      r->AddInt32(msg, f, r->GetRepeatedInt32(*msg, f, i));
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      r->AddInt64(msg, f, r->GetRepeatedInt64(*msg, f, i));
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      r->AddUInt32(msg, f, r->GetRepeatedUInt32(*msg, f, i));
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      r->AddUInt64(msg, f, r->GetRepeatedUInt64(*msg, f, i));
      break;
    case FieldDescriptor::CPPTYPE_FLOAT:
      r->AddFloat(msg, f, r->GetRepeatedFloat(*msg, f, i));
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      r->AddDouble(msg, f, r->GetRepeatedDouble(*msg, f, i));
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      r->AddBool(msg, f, r->GetRepeatedBool(*msg, f, i));
      break;
    case FieldDescriptor::CPPTYPE_ENUM:
      r->AddEnumValue(msg, f, r->GetRepeatedEnumValue(*msg, f, i));
      break;
    case FieldDescriptor::CPPTYPE_STRING:
      r->AddString(msg, f, r->GetRepeatedString(*msg, f, i));
      break;
    case FieldDescriptor::CPPTYPE_MESSAGE: {
      std::unique_ptr<Message> copy(r->GetRepeatedMessage(*msg, f, i).New());
      copy->CopyFrom(r->GetRepeatedMessage(*msg, f, i));
      r->AddMessage(msg, f)->CopyFrom(*copy);
      break;
    }
  }
}

void MutateRepeated(Rng& rng, const Tree& tree, Message* msg, const FieldDescriptor* f) {
  const Reflection* r = msg->GetReflection();
  const int n = r->FieldSize(*msg, f);
  const bool is_msg = f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE;
  const size_t op = n == 0 ? 2 : Below(rng, 6);
  const int i = n == 0 ? 0 : static_cast<int>(Below(rng, n));
  switch (op) {
    case 0:  // delete element i
      MoveElement(msg, f, i, n - 1);
      r->RemoveLast(msg, f);
      break;
    case 1:  // duplicate element i, right after it
      AppendCopy(msg, f, i);
      MoveElement(msg, f, n, i + 1);
      break;
    case 2:  // add a new element at a random position
      if (is_msg) {
        // A copy of another message of the type, taken first: it may be an ancestor of `msg`.
        std::unique_ptr<Message> copy;
        const Message* other = OtherOfType(rng, tree, f->message_type(), nullptr);
        if (other != nullptr && Below(rng, 2) == 0) {
          copy.reset(other->New());
          copy->CopyFrom(*other);
        }
        Message* added = r->AddMessage(msg, f);
        if (copy) added->CopyFrom(*copy);
      } else {
        MutateScalar(rng, tree, msg, f, n);
      }
      MoveElement(msg, f, n, static_cast<int>(Below(rng, n + 1)));
      break;
    case 3:  // swap two elements
      r->SwapElements(msg, f, i, static_cast<int>(Below(rng, n)));
      break;
    default:  // mutate element i
      if (is_msg) {
        Message* m = r->MutableRepeatedMessage(msg, f, i);
        if (const Message* other = OtherOfType(rng, tree, f->message_type(), m)) {
          std::unique_ptr<Message> copy(other->New());
          copy->CopyFrom(*other);  // `other` may be an ancestor or descendant of `m`
          m->CopyFrom(*copy);
        } else {
          m->Clear();
        }
      } else {
        MutateScalar(rng, tree, msg, f, i);
      }
  }
}

void MutateSingularMessage(Rng& rng, const Tree& tree, Message* msg, const FieldDescriptor* f) {
  const Reflection* r = msg->GetReflection();
  if (!r->HasField(*msg, f)) {
    r->MutableMessage(msg, f);  // create it empty
    return;
  }
  const Message* current = &r->GetMessage(*msg, f);
  const Message* other = OtherOfType(rng, tree, f->message_type(), current);
  if (other != nullptr && Below(rng, 2) == 0) {
    std::unique_ptr<Message> copy(other->New());
    copy->CopyFrom(*other);
    r->MutableMessage(msg, f)->CopyFrom(*copy);
  } else {
    r->ClearField(msg, f);
  }
}

// Mutates one field of `model`. Returns false when there was nothing to mutate.
bool MutateModel(Rng& rng, onnx::ModelProto* model) {
  Tree tree;
  std::set<std::string> seen;
  Walk(model, &tree, &seen);
  if (tree.sites.empty()) return false;
  const Site site = Pick(rng, tree.sites);
  if (site.field->is_repeated()) {
    MutateRepeated(rng, tree, site.msg, site.field);
  } else if (site.field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
    MutateSingularMessage(rng, tree, site.msg, site.field);
  } else if (site.msg->GetReflection()->HasField(*site.msg, site.field) && Below(rng, 8) == 0) {
    site.msg->GetReflection()->ClearField(site.msg, site.field);
  } else {
    MutateScalar(rng, tree, site.msg, site.field, -1);
  }
  return true;
}

bool Parse(const uint8_t* data, size_t size, onnx::ModelProto* model) {
  return size > 0 && model->ParseFromArray(data, static_cast<int>(size));
}

}  // namespace

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size,
                                          unsigned int seed) {
  Rng rng(seed);
  onnx::ModelProto model;
  if (Below(rng, 8) == 0 || !Parse(data, size, &model) || !MutateModel(rng, &model)) {
    return LLVMFuzzerMutate(data, size, max_size);
  }
  std::string out;
  if (!model.SerializeToString(&out) || out.size() > max_size) {
    return LLVMFuzzerMutate(data, size, max_size);
  }
  std::memcpy(data, out.data(), out.size());
  return out.size();
}

extern "C" size_t LLVMFuzzerCustomCrossOver(const uint8_t* data1, size_t size1,
                                            const uint8_t* data2, size_t size2, uint8_t* out,
                                            size_t max_out_size, unsigned int seed) {
  Rng rng(seed);
  onnx::ModelProto a, b;
  if (Parse(data1, size1, &a) && Parse(data2, size2, &b)) {
    Tree ta, tb;
    std::set<std::string> seen_a, seen_b;
    Walk(&a, &ta, &seen_a);
    Walk(&b, &tb, &seen_b);
    // A message of `a` (not the root) whose type also occurs in `b`, replaced by one from `b`.
    std::vector<Message*> candidates;
    for (auto& [type, msgs] : ta.by_type) {
      if (type == a.GetDescriptor() || !tb.by_type.count(type)) continue;
      candidates.insert(candidates.end(), msgs.begin(), msgs.end());
    }
    if (!candidates.empty()) {
      Message* target = Pick(rng, candidates);
      target->CopyFrom(*Pick(rng, tb.by_type[target->GetDescriptor()]));
      std::string s;
      if (a.SerializeToString(&s) && s.size() <= max_out_size) {
        std::memcpy(out, s.data(), s.size());
        return s.size();
      }
    }
  }
  // Byte splice: a prefix of input 1 and a suffix of input 2.
  const size_t head = std::min(size1 == 0 ? 0 : Below(rng, size1 + 1), max_out_size);
  const size_t tail = std::min(size2 == 0 ? 0 : Below(rng, size2 + 1), max_out_size - head);
  std::memcpy(out, data1, head);
  std::memcpy(out + head, data2 + (size2 - tail), tail);
  return head + tail;
}
