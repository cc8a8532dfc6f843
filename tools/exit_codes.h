// tools/exit_codes.h -- the memest CLI's exit codes (docs/cli.md, Exit codes), and the one mapping
// from a library Status to them, shared by `memest` and `memest pack`.
#ifndef MEMEST_TOOLS_EXIT_CODES_H_
#define MEMEST_TOOLS_EXIT_CODES_H_

#include "memest/status.h"

namespace memest::cli {

inline constexpr int kExitFits = 0;
inline constexpr int kExitDoesNotFit = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitBadModel = 3;
inline constexpr int kExitInternal = 4;

// The same code can mean different things: NotFound about the model is a missing file (bad
// model), about a GPU profile an unknown name (usage). The Status says which (Status::subject).
inline int ExitCodeFor(const Status& s) {
  const bool about_model = s.subject() == Subject::kModel;
  switch (s.code()) {
    case ErrorCode::kOk:
      return kExitFits;
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kNotFound:
      return about_model ? kExitBadModel : kExitUsage;
    case ErrorCode::kUnboundDim:
      return kExitUsage;
    case ErrorCode::kInvalidModel:
    case ErrorCode::kOverflow:
      return kExitBadModel;
    case ErrorCode::kUnsupported:  // a model (or option) memest cannot estimate: refused
      return kExitBadModel;
    case ErrorCode::kUnavailable:
    case ErrorCode::kInternal:
      return kExitInternal;
  }
  return kExitInternal;
}

}  // namespace memest::cli

#endif  // MEMEST_TOOLS_EXIT_CODES_H_
