// tests/testing/left_out.h -- the payload filter's record (core/payload_filter.h) checked against
// a parsed model. Header-only: the unit tests and the fuzz target (which links only the library)
// both include it.
#ifndef MEMEST_TESTS_TESTING_LEFT_OUT_H_
#define MEMEST_TESTS_TESTING_LEFT_OUT_H_

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/payload_filter.h"

namespace memest::testing {

// Clears from `m` what `left_out` says the filter left out of its top-level initializers. Returns
// "" where the record is m's own -- one entry per initializer, each left-out raw_data's bytes and
// typed field's entries as m holds them -- else the first thing it gets wrong.
inline std::string ClearLeftOut(onnx::ModelProto* m,
                                const std::vector<core::LeftOutPayload>& left_out) {
  const int initializers = m->graph().initializer_size();
  if (left_out.size() != static_cast<size_t>(initializers)) {
    return std::to_string(left_out.size()) + " initializers recorded, the parse has " +
           std::to_string(initializers);
  }
  for (int i = 0; i < initializers; ++i) {
    onnx::TensorProto* t = m->mutable_graph()->mutable_initializer(i);
    const core::LeftOutPayload& l = left_out[static_cast<size_t>(i)];
    const std::string which = "initializer " + std::to_string(i);
    if (l.raw_bytes != 0) {
      if (t->raw_data().size() != l.raw_bytes) {
        return which + " recorded " + std::to_string(l.raw_bytes) +
               " bytes of raw_data left out, its raw_data has " +
               std::to_string(t->raw_data().size());
      }
      t->clear_raw_data();
    }
    if (l.field != 0) {
      const auto* field = t->GetDescriptor()->FindFieldByNumber(l.field);
      const auto* reflection = t->GetReflection();
      if (field == nullptr || !field->is_repeated() ||
          static_cast<uint64_t>(reflection->FieldSize(*t, field)) != l.entries) {
        return which + " recorded " + std::to_string(l.entries) + " entries left out of field " +
               std::to_string(l.field) + ", which the parse does not hold";
      }
      reflection->ClearField(t, field);
    }
  }
  return "";
}

}  // namespace memest::testing

#endif  // MEMEST_TESTS_TESTING_LEFT_OUT_H_
