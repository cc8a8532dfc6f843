#include "memest/status.h"

#include <cstdio>
#include <cstdlib>

namespace memest {

const char* ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk:
      return "ok";
    case ErrorCode::kInvalidArgument:
      return "invalid_argument";
    case ErrorCode::kNotFound:
      return "not_found";
    case ErrorCode::kInvalidModel:
      return "invalid_model";
    case ErrorCode::kUnboundDim:
      return "unbound_dim";
    case ErrorCode::kOverflow:
      return "overflow";
    case ErrorCode::kUnsupported:
      return "unsupported";
    case ErrorCode::kUnavailable:
      return "unavailable";
    case ErrorCode::kInternal:
      return "internal";
  }
  return "unknown";
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  return std::string(ErrorCodeName(code_)) + ": " + message_;
}

Status Status::WithContext(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_, subject_);
}

Status Status::About(Subject subject) const {
  if (ok()) return *this;
  return Status(code_, message_, subject);
}

namespace internal {

void DieOnValueOfError(const Status& status) {
  std::fprintf(stderr, "memest: internal error: value() of an error Result (%s)\n",
               status.ToString().c_str());
  std::abort();
}

}  // namespace internal

}  // namespace memest
