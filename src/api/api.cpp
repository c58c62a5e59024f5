// The only file with extern "C" definitions: validate arguments, call C++, map Status codes.
#include "sparrow/sparrow.h"

#include "core/status.h"

#define SPARROW_EXPORT __attribute__((visibility("default")))

static_assert(sparrowAuthError == static_cast<int>(sparrow::Code::kAuthError), "result codes must match");
static_assert(sparrowVersionMismatch == static_cast<int>(sparrow::Code::kVersionMismatch), "result codes must match");

extern "C" {

SPARROW_EXPORT sparrowResult_t sparrowGetVersion(int* version) {
  if (!version) return sparrowInvalidArgument;
  *version = SPARROW_VERSION_CODE;
  return sparrowSuccess;
}

SPARROW_EXPORT const char* sparrowGetErrorString(sparrowResult_t result) {
  int r = static_cast<int>(result);
  if (r < 0 || r > static_cast<int>(sparrow::Code::kAuthError)) return "unknown result code";
  return sparrow::code_name(static_cast<sparrow::Code>(r));
}

}  // extern "C"
