// core/payload_filter.h -- an ONNX file's bytes without its weights' payloads, before the parse.
//
// memest never reads a weight (core/loader.cc), yet a protobuf parse copies every payload into
// the message: a 375 MB export took 0.7 s and 745 MB of memory to load, twice its file. This
// filter walks the ModelProto's wire format with protobuf's own reader (CodedInputStream) and
// copies it without the raw_data of the top-level graph's large initializers, recording how many
// bytes each held; the loader then parses the copy with protobuf as before, and validates each
// left-out payload's length against its tensor's dims and dtype from that record. Read from a
// file, the payloads are skipped by seeking, so their pages are never read at all.
//
// Policy:
//  * Only the payloads of ModelProto.graph (field 7) -> GraphProto.initializer (field 5) are
//    left out: TensorProto.raw_data (field 9; exporters store weights there) and the packed
//    occurrences of the typed fields float_data (4), int32_data (5), int64_data (7), double_data
//    (10) and uint64_data (11) (onnx.helper.make_tensor's way), each only when it holds more than
//    `min_bytes` bytes -- so a tensor it leaves out has more elements than any the loader keeps
//    data of. A fixed-width field's entries are its length over their width; a varint field's
//    are counted by reading its bytes (the ones that end a varint), which are never copied. Every
//    other field, known or not, is copied as it was read: a varint re-encoded canonically (the
//    parse reads the same value), anything else byte for byte.
//  * The copy parses to the message the original parses to, less those payloads: the filter
//    follows the parse's rules where it could differ -- a field read with the wire type its number
//    does not have is an unknown field, copied; repeated occurrences of ModelProto.graph merge
//    (the initializers are numbered across them, in order). Where it cannot be sure it gives up:
//    a wire-format error, a group, a tensor with raw_data twice (the last one counts) or with
//    payloads of two typed fields to leave out, a fixed-width field whose length is not a
//    multiple of its width, a varint field that does not end a varint where it ends or holds one
//    longer than 10 bytes, a nesting past its limit. Then the caller parses the original bytes, so
//    a malformed file gets the parse's own error, as it did before the filter.
#ifndef MEMEST_CORE_PAYLOAD_FILTER_H_
#define MEMEST_CORE_PAYLOAD_FILTER_H_

#include <google/protobuf/io/zero_copy_stream.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace memest::core {

// Payloads above this many bytes are left out: with elements of at most 16 bytes (complex128),
// such a tensor has more than the 1,024 elements the loader keeps data of.
inline constexpr uint64_t kLeftOutPayloadBytes = uint64_t{16} << 10;

// What the filter left out of one top-level initializer: its raw_data, and the entries of one
// typed field -- float_data, int32_data, int64_data, double_data or uint64_data, each written
// packed (ONNX declares them [packed = true]); the parse appends a field's occurrences, so
// several left out of one field add up. All 0 where nothing was.
struct LeftOutPayload {
  uint64_t raw_bytes = 0;
  uint64_t entries = 0;  // of the typed field `field`
  int field = 0;         // its TensorProto field number (0: none left out)
  bool operator==(const LeftOutPayload&) const = default;
};

struct FilteredModel {
  std::string bytes;  // the ModelProto without the left-out payloads
  // By the top-level graph's initializers, in the order the parse lists them: what was left out
  // of each (a raw_data or a typed field's occurrence is left out when it holds more than
  // min_bytes bytes).
  std::vector<LeftOutPayload> left_out;
  uint64_t left_out_bytes = 0;  // the bytes of the payloads left out, all together
};

// The ModelProto read from `in` (`total_bytes` long, under 2 GiB), copied without the payloads
// of the top-level initializers that hold more than `min_bytes` bytes (policy above). nullopt
// where the filter gives up.
[[nodiscard]] std::optional<FilteredModel> LeaveOutPayloads(
    google::protobuf::io::ZeroCopyInputStream* in, uint64_t total_bytes,
    uint64_t min_bytes = kLeftOutPayloadBytes);

// Whether LeaveOutPayloads would leave any payload out of the ModelProto on `in`: the same walk,
// copying nothing and stopping at the first. False where none is found before the walk ends or
// gives up.
[[nodiscard]] bool HasPayloadToLeaveOut(google::protobuf::io::ZeroCopyInputStream* in,
                                        uint64_t total_bytes,
                                        uint64_t min_bytes = kLeftOutPayloadBytes);

// Opens a stream over the whole ModelProto from its first byte (again at each call); null where
// it cannot.
using ModelStreamOpener =
    std::function<std::unique_ptr<google::protobuf::io::ZeroCopyInputStream>()>;

// The model filtered as LeaveOutPayloads does, where HasPayloadToLeaveOut finds a payload to
// leave out: a first stream is only walked, a second one (opened only then) copied. nullopt --
// the caller parses the model whole -- where none is found, a stream cannot be opened, the filter
// gives up, or memory runs out (the whole parse then reports it, as it would have without the
// filter).
[[nodiscard]] std::optional<FilteredModel> LeaveOutPayloadsIfAny(
    const ModelStreamOpener& open_from_start, uint64_t total_bytes,
    uint64_t min_bytes = kLeftOutPayloadBytes);

}  // namespace memest::core

#endif  // MEMEST_CORE_PAYLOAD_FILTER_H_
