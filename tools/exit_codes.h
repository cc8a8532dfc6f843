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

// Which library call produced a Status; the same code can mean different things
// (NotFound from LoadModel is a missing file, from FindGpuProfile an unknown
// name).
enum class Stage { kSetup, kLoad, kEstimate };

inline int ExitCodeFor(const Status& s, Stage stage) {
  switch (s.code()) {
    case ErrorCode::kOk:
      return kExitFits;
    case ErrorCode::kInvalidArgument:
      return stage == Stage::kLoad ? kExitBadModel : kExitUsage;
    case ErrorCode::kNotFound:
      return stage == Stage::kLoad ? kExitBadModel : kExitUsage;
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
