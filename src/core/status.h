// Errors as values: Status and Result<T>.
//
// Codes share their numbering with sparrowResult_t (and so with ncclResult_t for 0-8), so the API
// layer maps them one to one. A failing frame adds a breadcrumb with `.context("...")` instead of
// logging; the message a user finally sees reads outermost first.
#pragma once

#include <cstdint>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

namespace sparrow {

enum class Code : int {
  kOk = 0,
  kUnhandledCudaError = 1,
  kSystemError = 2,
  kInternalError = 3,
  kInvalidArgument = 4,
  kInvalidUsage = 5,
  kRemoteError = 6,
  kInProgress = 7,
  kTimeout = 8,
  kPeerLost = 9,
  kVersionMismatch = 10,
  kCorruptData = 11,
  kAuthError = 12,
};

const char* code_name(Code c);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // Prepend a breadcrumb ("while doing X: <inner message>").
  Status& context(const std::string& where) &;
  Status&& context(const std::string& where) &&;
  std::string to_string() const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

inline Status Error(Code c, std::string msg) { return Status(c, std::move(msg)); }
inline Status InvalidArgument(std::string msg) { return Status(Code::kInvalidArgument, std::move(msg)); }
inline Status CorruptData(std::string msg) { return Status(Code::kCorruptData, std::move(msg)); }
inline Status InternalError(std::string msg) { return Status(Code::kInternalError, std::move(msg)); }
inline Status VersionMismatch(std::string msg) { return Status(Code::kVersionMismatch, std::move(msg)); }
Status SystemError(const std::string& what, int err);  // formats strerror(err)

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status s) : v_(std::move(s)) {      // NOLINT
    if (std::get<Status>(v_).ok()) v_ = Status(Code::kInternalError, "Result built from an OK status");
  }
  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  Status take_status() && { return ok() ? Status() : std::move(std::get<Status>(v_)); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::move(std::get<T>(v_)); }
  T* operator->() { return &std::get<T>(v_); }
  const T* operator->() const { return &std::get<T>(v_); }
  T& operator*() & { return std::get<T>(v_); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace sparrow

#define SPARROW_CONCAT_INNER(a, b) a##b
#define SPARROW_CONCAT(a, b) SPARROW_CONCAT_INNER(a, b)

// Return the status if it is an error.
#define SPARROW_RETURN_IF_ERROR(expr)                   \
  do {                                                  \
    ::sparrow::Status _sp_st = (expr);                  \
    if (!_sp_st.ok()) return _sp_st;                    \
  } while (0)

// `SPARROW_ASSIGN_OR_RETURN(auto x, f());`
#define SPARROW_ASSIGN_OR_RETURN(lhs, expr) \
  SPARROW_ASSIGN_OR_RETURN_IMPL(SPARROW_CONCAT(_sp_res_, __LINE__), lhs, expr)
#define SPARROW_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return std::move(tmp).take_status(); \
  lhs = std::move(tmp).value()
