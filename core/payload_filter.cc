// core/payload_filter.cc -- LeaveOutPayloads: the policy is in payload_filter.h.
//
// One walk serves both calls: it copies (LeaveOutPayloads) or only reads (HasPayloadToLeaveOut),
// descending into ModelProto.graph and into each initializer long enough to hold a payload it
// leaves out; any other field is copied whole. Each nested message is read within a limit pushed
// on the reader, as the parse reads it, and must end exactly there.
#include "core/payload_filter.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <new>

namespace memest::core {
namespace {

using google::protobuf::io::CodedInputStream;
using google::protobuf::io::CodedOutputStream;
using WireFormat = google::protobuf::internal::WireFormatLite;

constexpr int kModelGraph = onnx::ModelProto::kGraphFieldNumber;
constexpr int kGraphInitializer = onnx::GraphProto::kInitializerFieldNumber;
constexpr int kTensorRawData = onnx::TensorProto::kRawDataFieldNumber;

// CodedInputStream, which the filter reads with, takes a tag or a length of up to 10 bytes and
// drops their bits past 32; the parse (protobuf's ParseContext: ReadTag, ReadSize in
// parse_context.h) refuses one of more than 5 bytes, and a size above INT_MAX less its 16 slop
// bytes. The filter gives up on those, or its copy, written with canonical varints, would parse
// where the original does not (found by the fuzz target).
constexpr int kMaxTagOrLengthBytes = 5;
constexpr int kParseSlopBytes = 16;

// A TensorProto field's payload as the filter may leave it out: raw_data's bytes, a packed typed
// field's fixed-width entries, or its varints.
enum class Payload { kNone, kRaw, kFixed32, kFixed64, kVarints };

Payload PayloadOf(int field) {
  switch (field) {
    case kTensorRawData:
      return Payload::kRaw;
    case onnx::TensorProto::kFloatDataFieldNumber:
      return Payload::kFixed32;
    case onnx::TensorProto::kDoubleDataFieldNumber:
      return Payload::kFixed64;
    case onnx::TensorProto::kInt32DataFieldNumber:
    case onnx::TensorProto::kInt64DataFieldNumber:
    case onnx::TensorProto::kUint64DataFieldNumber:
      return Payload::kVarints;
    default:  // string_data and every other field
      return Payload::kNone;
  }
}

void AppendVarint(std::string* out, uint64_t value) {
  uint8_t buf[10];  // a varint of 64 bits takes at most 10 bytes
  const uint8_t* end = CodedOutputStream::WriteVarint64ToArray(value, buf);
  out->append(reinterpret_cast<const char*>(buf), static_cast<size_t>(end - buf));
}

class Walk {
 public:
  // `out` null: read only, and stop at the first payload that would be left out.
  Walk(CodedInputStream* in, uint64_t min_bytes, FilteredModel* out)
      : in_(in), min_bytes_(min_bytes), out_(out) {}

  // The whole message, to its end (the limit the caller pushed).
  bool Model(std::string* bytes) {
    return Fields(bytes, [&](uint32_t tag, std::string* into) {
      return IsLength(tag, kModelGraph) ? Nested(tag, into, &Walk::Graph) : CopyField(tag, into);
    });
  }

  [[nodiscard]] bool found() const { return found_; }

 private:
  static bool IsLength(uint32_t tag, int field) {
    return WireFormat::GetTagFieldNumber(tag) == field &&
           WireFormat::GetTagWireType(tag) == WireFormat::WIRETYPE_LENGTH_DELIMITED;
  }

  // Reads fields to the end of the current limit, handing each tag to `field`.
  template <typename F>
  bool Fields(std::string* into, F field) {
    while (true) {
      const int at = in_->CurrentPosition();
      const uint32_t tag = in_->ReadTag();
      if (tag == 0) return in_->ConsumedEntireMessage() && in_->BytesUntilLimit() == 0;
      if (in_->CurrentPosition() - at > kMaxTagOrLengthBytes) return false;
      if (!field(tag, into)) return false;
    }
  }

  bool Graph(std::string* into) {
    return Fields(into, [&](uint32_t tag, std::string* graph) {
      if (!IsLength(tag, kGraphInitializer)) return CopyField(tag, graph);
      uint32_t length = 0;
      if (!ReadLength(&length)) return false;
      if (length <= min_bytes_) {  // too short to hold a payload left out: copied whole
        Note({}, 0);
        return CopyBody(tag, length, graph);
      }
      return NestedOfLength(tag, length, graph, &Walk::Tensor);
    });
  }

  bool Tensor(std::string* into) {
    int raw_fields = 0;
    LeftOutPayload left_out;
    uint64_t left_out_bytes = 0;
    uint32_t copied = 0;  // bit n: an occurrence of payload field n was copied
    const bool ok = Fields(into, [&](uint32_t tag, std::string* tensor) {
      const int field = WireFormat::GetTagFieldNumber(tag);
      const Payload payload = PayloadOf(field);
      if (payload == Payload::kNone) return CopyField(tag, tensor);
      if (!IsLength(tag, field)) {  // an entry written unpacked, or a field the parse keeps unknown
        copied |= uint32_t{1} << field;
        return CopyField(tag, tensor);
      }
      if (payload == Payload::kRaw && ++raw_fields > 1) return false;  // the last one counts
      uint32_t length = 0;
      if (!ReadLength(&length)) return false;
      if (length <= min_bytes_) {
        copied |= uint32_t{1} << field;
        return CopyBody(tag, length, tensor);
      }
      if (payload != Payload::kRaw && left_out.field != 0 && left_out.field != field) {
        return false;  // payloads of two typed fields: not followed
      }
      if (out_ == nullptr) {
        found_ = true;
        return false;  // read only: one is enough
      }
      left_out_bytes += length;
      switch (payload) {
        case Payload::kRaw:
          left_out.raw_bytes = length;
          return in_->Skip(static_cast<int>(length));
        case Payload::kFixed32:
        case Payload::kFixed64: {
          const uint32_t width = payload == Payload::kFixed32 ? 4 : 8;
          if (length % width != 0) return false;
          left_out.field = field;
          left_out.entries += length / width;
          return in_->Skip(static_cast<int>(length));
        }
        case Payload::kVarints:
          left_out.field = field;
          return CountVarints(length, &left_out.entries);
        case Payload::kNone:
          break;
      }
      return false;
    });
    // A field is left out whole or not at all: its entries kept and left out would interleave.
    if (!ok || (copied & (uint32_t{1} << left_out.field)) != 0) return false;
    Note(left_out, left_out_bytes);
    return true;
  }

  // Reads `length` bytes of packed varints, adding to `entries` the varints they hold; false
  // where they do not end a varint at their end, or hold one of more than 10 bytes (the parse
  // fails on both).
  bool CountVarints(uint32_t length, uint64_t* entries) {
    int continued = 0;  // bytes in a row that a varint goes on after
    while (length > 0) {
      const void* data = nullptr;
      int size = 0;
      if (!in_->GetDirectBufferPointer(&data, &size) || size <= 0) return false;
      const uint32_t n = std::min(length, static_cast<uint32_t>(size));
      const auto* bytes = static_cast<const uint8_t*>(data);
      for (uint32_t i = 0; i < n; ++i) {
        if ((bytes[i] & 0x80) == 0) {
          ++*entries;
          continued = 0;
        } else if (++continued == 10) {
          return false;
        }
      }
      if (!in_->Skip(static_cast<int>(n))) return false;
      length -= n;
    }
    return continued == 0;
  }

  void Note(const LeftOutPayload& left_out, uint64_t bytes) {
    if (out_ == nullptr) return;
    out_->left_out.push_back(left_out);
    out_->left_out_bytes += bytes;
  }

  // A length-delimited field's length, at most what is left of the message around it.
  // (Read as the parse reads a size: in 5 bytes at most, and below INT_MAX - 16.)
  bool ReadLength(uint32_t* length) {
    const int at = in_->CurrentPosition();
    return in_->ReadVarint32(length) && in_->CurrentPosition() - at <= kMaxTagOrLengthBytes &&
           *length <= static_cast<uint32_t>(INT_MAX - kParseSlopBytes) &&
           static_cast<int64_t>(*length) <= in_->BytesUntilLimit();
  }

  // A nested message: its length, then its fields through `walk` within that length.
  bool Nested(uint32_t tag, std::string* into, bool (Walk::*walk)(std::string*)) {
    uint32_t length = 0;
    return ReadLength(&length) && NestedOfLength(tag, length, into, walk);
  }
  bool NestedOfLength(uint32_t tag, uint32_t length, std::string* into,
                      bool (Walk::*walk)(std::string*)) {
    const CodedInputStream::Limit outer = in_->PushLimit(static_cast<int>(length));
    std::string body;
    const bool ok = (this->*walk)(out_ == nullptr ? nullptr : &body);
    in_->PopLimit(outer);
    if (!ok) return false;
    if (into != nullptr) {
      AppendVarint(into, tag);
      AppendVarint(into, body.size());
      into->append(body);
    }
    return true;
  }

  // A field copied as read (or skipped, reading only), its tag already read.
  bool CopyField(uint32_t tag, std::string* into) {
    switch (WireFormat::GetTagWireType(tag)) {
      case WireFormat::WIRETYPE_VARINT: {
        uint64_t value = 0;
        if (!in_->ReadVarint64(&value)) return false;
        if (into != nullptr) {
          AppendVarint(into, tag);
          AppendVarint(into, value);
        }
        return true;
      }
      case WireFormat::WIRETYPE_FIXED64:
        return CopyRaw(tag, 8, into);
      case WireFormat::WIRETYPE_FIXED32:
        return CopyRaw(tag, 4, into);
      case WireFormat::WIRETYPE_LENGTH_DELIMITED: {
        uint32_t length = 0;
        return ReadLength(&length) && CopyBody(tag, length, into);
      }
      default:  // groups (deprecated) and wire types that do not exist
        return false;
    }
  }

  // The bytes of a length-delimited field whose length was read, with its tag and length.
  bool CopyBody(uint32_t tag, uint32_t length, std::string* into) {
    if (into == nullptr) return in_->Skip(static_cast<int>(length));
    AppendVarint(into, tag);
    AppendVarint(into, length);
    const size_t at = into->size();
    into->resize(at + length);
    return in_->ReadRaw(into->data() + at, static_cast<int>(length));
  }

  bool CopyRaw(uint32_t tag, int bytes, std::string* into) {
    char buf[8];
    if (!in_->ReadRaw(buf, bytes)) return false;
    if (into != nullptr) {
      AppendVarint(into, tag);
      into->append(buf, static_cast<size_t>(bytes));
    }
    return true;
  }

  CodedInputStream* in_;
  uint64_t min_bytes_;
  FilteredModel* out_;
  bool found_ = false;
};

// Runs the walk over the whole stream (`total_bytes` long). `out` null: read only.
bool WalkModel(google::protobuf::io::ZeroCopyInputStream* stream, uint64_t total_bytes,
               uint64_t min_bytes, FilteredModel* out, bool* found) {
  if (total_bytes > static_cast<uint64_t>(INT_MAX)) return false;
  CodedInputStream in(stream);
  in.SetTotalBytesLimit(INT_MAX);
  const CodedInputStream::Limit whole = in.PushLimit(static_cast<int>(total_bytes));
  Walk walk(&in, min_bytes, out);
  const bool ok = walk.Model(out == nullptr ? nullptr : &out->bytes);
  in.PopLimit(whole);
  *found = walk.found();
  return ok;
}

}  // namespace

std::optional<FilteredModel> LeaveOutPayloads(google::protobuf::io::ZeroCopyInputStream* in,
                                              uint64_t total_bytes, uint64_t min_bytes) {
  FilteredModel out;
  bool found = false;
  if (!WalkModel(in, total_bytes, min_bytes, &out, &found)) return std::nullopt;
  return out;
}

bool HasPayloadToLeaveOut(google::protobuf::io::ZeroCopyInputStream* in, uint64_t total_bytes,
                          uint64_t min_bytes) {
  bool found = false;
  WalkModel(in, total_bytes, min_bytes, nullptr, &found);
  return found;
}

std::optional<FilteredModel> LeaveOutPayloadsIfAny(const ModelStreamOpener& open_from_start,
                                                   uint64_t total_bytes, uint64_t min_bytes) {
  try {
    {
      const auto scan = open_from_start();
      if (scan == nullptr || !HasPayloadToLeaveOut(scan.get(), total_bytes, min_bytes)) {
        return std::nullopt;
      }
    }
    const auto copy = open_from_start();
    if (copy == nullptr) return std::nullopt;
    return LeaveOutPayloads(copy.get(), total_bytes, min_bytes);
  } catch (const std::bad_alloc&) {
    return std::nullopt;
  }
}

}  // namespace memest::core
