// The only file with extern "C" definitions: validate arguments, call C++, map Status codes.
#include "sparrow/sparrow.h"

#include <cstring>
#include <memory>
#include <string>

#include "api/api_internal.h"
#include "bootstrap/bootstrap.h"
#include "collectives/comm.h"
#include "core/log.h"
#include "core/status.h"

#define SPARROW_EXPORT __attribute__((visibility("default")))

static_assert(sparrowAuthError == static_cast<int>(sparrow::Code::kAuthError), "result codes must match");
static_assert(sparrowVersionMismatch == static_cast<int>(sparrow::Code::kVersionMismatch), "result codes must match");
static_assert(sizeof(sparrowUniqueId) == sparrow::bootstrap::kIdBytes, "unique id size");

struct sparrowComm {
  std::unique_ptr<sparrow::Comm> impl;
};

namespace sparrow {
Comm* comm_impl(sparrowComm_t c) { return c ? c->impl.get() : nullptr; }
}  // namespace sparrow

namespace {

thread_local std::string t_last_error;

sparrowResult_t fail(const sparrow::Status& s, sparrowComm* comm = nullptr) {
  t_last_error = s.to_string();
  if (comm && comm->impl) comm->impl->set_error(s);
  SPARROW_WARN("%s", t_last_error.c_str());
  return static_cast<sparrowResult_t>(s.code());
}

sparrowResult_t invalid(const char* msg) { return fail(sparrow::InvalidArgument(msg)); }

}  // namespace

extern "C" {

SPARROW_EXPORT sparrowResult_t sparrowGetVersion(int* version) {
  if (!version) return invalid("sparrowGetVersion: version is NULL");
  *version = SPARROW_VERSION_CODE;
  return sparrowSuccess;
}

SPARROW_EXPORT const char* sparrowGetErrorString(sparrowResult_t result) {
  int r = static_cast<int>(result);
  if (r < 0 || r > static_cast<int>(sparrow::Code::kAuthError)) return "unknown result code";
  return sparrow::code_name(static_cast<sparrow::Code>(r));
}

SPARROW_EXPORT sparrowResult_t sparrowGetUniqueId(sparrowUniqueId* uniqueId) {
  if (!uniqueId) return invalid("sparrowGetUniqueId: uniqueId is NULL");
  auto id = sparrow::bootstrap::create_id();
  if (!id.ok()) return fail(id.status());
  sparrow::bootstrap::encode_id(id.value(), reinterpret_cast<uint8_t*>(uniqueId->internal));
  return sparrowSuccess;
}

SPARROW_EXPORT sparrowResult_t sparrowCommInitRank(sparrowComm_t* comm, int nranks, sparrowUniqueId commId, int rank) {
  if (!comm) return invalid("sparrowCommInitRank: comm is NULL");
  *comm = nullptr;
  auto c = sparrow::Comm::init_rank(nranks, reinterpret_cast<const uint8_t*>(commId.internal), rank);
  if (!c.ok()) return fail(c.status());
  *comm = new sparrowComm{std::move(c.value())};
  return sparrowSuccess;
}

SPARROW_EXPORT sparrowResult_t sparrowCommDestroy(sparrowComm_t comm) {
  if (!comm) return invalid("sparrowCommDestroy: comm is NULL");
  delete comm;
  return sparrowSuccess;
}

SPARROW_EXPORT sparrowResult_t sparrowCommAbort(sparrowComm_t comm) {
  if (!comm) return invalid("sparrowCommAbort: comm is NULL");
  comm->impl->abort();
  delete comm;
  return sparrowSuccess;
}

SPARROW_EXPORT sparrowResult_t sparrowCommCount(const sparrowComm_t comm, int* count) {
  if (!comm || !count) return invalid("sparrowCommCount: NULL argument");
  *count = comm->impl->nranks();
  return sparrowSuccess;
}

SPARROW_EXPORT sparrowResult_t sparrowCommUserRank(const sparrowComm_t comm, int* rank) {
  if (!comm || !rank) return invalid("sparrowCommUserRank: NULL argument");
  *rank = comm->impl->rank();
  return sparrowSuccess;
}

SPARROW_EXPORT sparrowResult_t sparrowCommGetAsyncError(sparrowComm_t comm, sparrowResult_t* asyncError) {
  if (!comm || !asyncError) return invalid("sparrowCommGetAsyncError: NULL argument");
  *asyncError = static_cast<sparrowResult_t>(comm->impl->async_error().code());
  return sparrowSuccess;
}

SPARROW_EXPORT const char* sparrowGetLastError(sparrowComm_t comm) {
  if (comm) t_last_error = comm->impl->last_error();
  return t_last_error.c_str();
}

}  // extern "C"
