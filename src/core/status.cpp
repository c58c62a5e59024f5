#include "core/status.h"

#include <cstring>

namespace sparrow {

const char* code_name(Code c) {
  switch (c) {
    case Code::kOk: return "success";
    case Code::kUnhandledCudaError: return "unhandled CUDA error";
    case Code::kSystemError: return "system error";
    case Code::kInternalError: return "internal error";
    case Code::kInvalidArgument: return "invalid argument";
    case Code::kInvalidUsage: return "invalid usage";
    case Code::kRemoteError: return "remote error";
    case Code::kInProgress: return "in progress";
    case Code::kTimeout: return "timeout";
    case Code::kPeerLost: return "peer lost";
    case Code::kVersionMismatch: return "version mismatch";
    case Code::kCorruptData: return "corrupt data";
    case Code::kAuthError: return "authentication error";
  }
  return "unknown error";
}

Status& Status::context(const std::string& where) & {
  if (!ok()) message_ = where + ": " + message_;
  return *this;
}

Status&& Status::context(const std::string& where) && {
  if (!ok()) message_ = where + ": " + message_;
  return std::move(*this);
}

std::string Status::to_string() const {
  if (ok()) return "success";
  return std::string(code_name(code_)) + ": " + message_;
}

Status SystemError(const std::string& what, int err) {
  char buf[128];
  const char* s = strerror_r(err, buf, sizeof buf);  // GNU variant returns the string
  return Status(Code::kSystemError, what + ": " + s);
}

}  // namespace sparrow
