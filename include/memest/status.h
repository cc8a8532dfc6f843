// memest/status.h -- errors as values.
//
// Contract: no public memest function throws across the API boundary. Every fallible call returns
// a Status or a Result<T>. A Status carries a code (what kind of failure, stable: the CLI maps it
// to an exit code) and a message with context (file, node name, op type, tensor name).
// Status and Result are plain values: copyable, thread-compatible, no global state.
#ifndef MEMEST_STATUS_H_
#define MEMEST_STATUS_H_

#include <optional>
#include <string>
#include <utility>

namespace memest {

enum class ErrorCode {
  kOk = 0,
  kInvalidArgument,  // bad option value (usage error)
  kNotFound,         // file or named thing (GPU profile, backend) does not exist
  kInvalidModel,     // the file is not a valid ONNX model, or the graph is malformed
  kUnboundDim,       // a symbolic dim has no value (bind it with batch / dims)
  kOverflow,         // dimension or byte arithmetic overflowed 64 bits
  kUnsupported,      // valid model, but something this backend cannot handle
  kUnavailable,      // backend not built or not implemented
  kInternal,         // a bug in memest
};

// Stable lower-case name of a code ("invalid_model", ...), used in JSON output.
const char* ErrorCodeName(ErrorCode code);

// What a failure is about, when the code alone does not say: kNotFound about the model is a
// missing file, about a GPU profile an unknown name. Set by the call that knows (LoadModel tags
// its errors kModel), read by callers that map errors to exit codes, never parsed from messages.
enum class Subject {
  kUnspecified = 0,
  kModel,       // the model file or graph (LoadModel, LoadModelFromBytes)
  kOption,      // an option's value
  kGpuProfile,  // a GPU profile name or file
  kStack,       // a stack name or file
  kBackend,     // a backend name
};

// [[nodiscard]]: a Status dropped on the floor is an error ignored; the compiler says so.
class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}
  Status(ErrorCode code, std::string message, Subject subject)
      : code_(code), message_(std::move(message)), subject_(subject) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  Subject subject() const { return subject_; }
  // "invalid_model: <message>", or "ok".
  std::string ToString() const;

  // Returns a copy whose message is prefixed by `context + ": "` (the subject is kept).
  Status WithContext(const std::string& context) const;
  // Returns a copy that says what the failure is about (an OK status stays OK).
  Status About(Subject subject) const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
  Subject subject_ = Subject::kUnspecified;
};

inline Status InvalidArgument(std::string m) { return {ErrorCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {ErrorCode::kNotFound, std::move(m)}; }
inline Status InvalidModel(std::string m) { return {ErrorCode::kInvalidModel, std::move(m)}; }
inline Status UnboundDim(std::string m) { return {ErrorCode::kUnboundDim, std::move(m)}; }
inline Status Overflow(std::string m) { return {ErrorCode::kOverflow, std::move(m)}; }
inline Status Unsupported(std::string m) { return {ErrorCode::kUnsupported, std::move(m)}; }
inline Status Unavailable(std::string m) { return {ErrorCode::kUnavailable, std::move(m)}; }
inline Status Internal(std::string m) { return {ErrorCode::kInternal, std::move(m)}; }

namespace internal {
// Prints the status and aborts: value() of an error Result is a programming error. Checked in
// every build type (a branch per access), so it never reads an empty optional.
[[noreturn]] void DieOnValueOfError(const Status& status);
}  // namespace internal

// A value or an error. Accessing value() (or *, ->) of an error Result is a programming error
// that aborts naming the status; test ok() first.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  Result(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (status_.ok()) status_ = Internal("Result constructed from an OK status without a value");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  const T& value() const& { return Checked(); }
  T& value() & { return Checked(); }
  T&& value() && { return std::move(Checked()); }
  const T& operator*() const& { return Checked(); }
  T& operator*() & { return Checked(); }
  const T* operator->() const { return &Checked(); }
  T* operator->() { return &Checked(); }

 private:
  const T& Checked() const {
    if (!value_) internal::DieOnValueOfError(status_);
    return *value_;
  }
  T& Checked() {
    if (!value_) internal::DieOnValueOfError(status_);
    return *value_;
  }

  Status status_;
  std::optional<T> value_;
};

}  // namespace memest

// Internal convenience: return early on error. Usable in functions returning Status or Result<U>.
#define MEMEST_RETURN_IF_ERROR(expr)         \
  do {                                       \
    ::memest::Status _memest_st = (expr);    \
    if (!_memest_st.ok()) return _memest_st; \
  } while (0)

#define MEMEST_CONCAT_INNER(a, b) a##b
#define MEMEST_CONCAT(a, b) MEMEST_CONCAT_INNER(a, b)
#define MEMEST_ASSIGN_OR_RETURN(lhs, expr) \
  MEMEST_ASSIGN_OR_RETURN_IMPL(MEMEST_CONCAT(_memest_res_, __LINE__), lhs, expr)
#define MEMEST_ASSIGN_OR_RETURN_IMPL(res, lhs, expr) \
  auto res = (expr);                                 \
  if (!res.ok()) return res.status();                \
  lhs = std::move(res).value()

#endif  // MEMEST_STATUS_H_
