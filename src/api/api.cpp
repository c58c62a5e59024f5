// libsparrow's C API (the sparrow* definitions; sparrowCommInitMPI is in bootstrap/mpi.cpp, in
// libsparrow_mpi): validate arguments, call C++, map Status codes. A handle is the communicator
// (comm/) and the collectives' state on it (coll::Engine), checked against the live-handle registry.
#include "sparrow/sparrow.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <thread>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "api/api_internal.h"
#include "api/handle.h"
#include "bootstrap/bootstrap.h"
#include "bootstrap/secret.h"
#include "collectives/bcast.h"
#include "collectives/elastic/elastic.h"
#include "format/checkpoint.h"
#include "comm/comm.h"
#include "kernels/device.h"
#include "transport/transport.h"
#include "core/log.h"
#include "core/params.h"
#include "core/status.h"

#define SPARROW_EXPORT __attribute__((visibility("default")))

static_assert(sparrowAuthError == static_cast<int>(sparrow::Code::kAuthError), "result codes must match");
static_assert(sparrowVersionMismatch == static_cast<int>(sparrow::Code::kVersionMismatch), "result codes must match");
static_assert(sizeof(sparrowUniqueId) == sparrow::bootstrap::kIdBytes, "unique id size");

namespace sparrow {
Comm* comm_impl(sparrowComm_t c) { return c ? c->impl.get() : nullptr; }
}  // namespace sparrow

using namespace sparrow::api;

namespace {

// Group state is per thread, as in NCCL.
struct PendingOp {
  bool sparse;
  sparrowComm* comm;
  sparrow::coll::BufferArg buf;
  int root;
  sparrowStream_t stream = nullptr;
  bool stage = false;  // sparrowSparseBcastStage
};

// Stream order for device buffers: the operation starts after the work queued on `stream` and is
// complete when the call returns, so work queued later on the stream sees the data.
sparrow::Status wait_for_stream(const PendingOp& op) {
  auto* dev = sparrow::kernels::device_ops();
  if (!dev) return sparrow::Status::Ok();
  if (!op.stream && !sparrow::kernels::is_device(dev, op.buf.send) && !sparrow::kernels::is_device(dev, op.buf.recv))
    return sparrow::Status::Ok();
  return sparrow::kernels::device_error(dev, dev->sync_stream(op.stream), "waiting for the caller's stream");
}
thread_local int t_group_depth = 0;
thread_local std::vector<PendingOp> t_group;

sparrow::Status check_args(sparrowComm* comm, const void* sendbuff, void* recvbuff, size_t count, sparrowDataType_t dt,
                           int root, sparrowStream_t stream, const char* fn) {
  std::string f = fn;
  if (!comm) return sparrow::InvalidArgument(f + ": comm is NULL");
  Pin pin(comm);
  if (!pin) return dead_handle(fn, comm);
  if (int(dt) < 0 || int(dt) > 9) return sparrow::InvalidArgument(f + ": unknown datatype " + std::to_string(int(dt)));
  if (root < 0 || root >= comm->impl->nranks())
    return sparrow::InvalidArgument(f + ": root " + std::to_string(root) + " out of range for " +
                                    std::to_string(comm->impl->nranks()) + " ranks");
  if (stream && !sparrow::kernels::device_ops())
    return sparrow::InvalidArgument(f + ": a stream was given but this process has no device support (" +
                                    sparrow::kernels::device_unavailable_reason() + ")");
  if (count > 0) {
    if (comm->impl->rank() == root && !sendbuff) return sparrow::InvalidArgument(f + ": sendbuff is NULL on the root");
    if (comm->impl->rank() != root && !recvbuff) return sparrow::InvalidArgument(f + ": recvbuff is NULL");
  }
  return sparrow::Status::Ok();
}

sparrowResult_t run(sparrowComm* comm, const sparrow::Status& s) {
  if (!s.ok()) return fail(s, comm);
  return sparrowSuccess;
}

// Executes a group: sparse operations of one (communicator, root) become one operation; everything
// else runs in call order.
sparrowResult_t flush_group(std::vector<PendingOp> ops) {
  sparrowResult_t first = sparrowSuccess;
  std::vector<bool> done(ops.size(), false);
  for (auto& op : ops) {
    sparrow::Status s = wait_for_stream(op);
    if (!s.ok()) return fail(s, op.comm);
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    if (done[i]) continue;
    sparrow::Status s;
    Pin guard(ops[i].comm);
    if (!guard) {  // destroyed or aborted between the group's calls and its end
      if (first == sparrowSuccess) first = fail(dead_handle("sparrowGroupEnd", ops[i].comm));
      done[i] = true;
      continue;
    }
    // The broadcasts of one kind and one (communicator, root) in a group travel together: sparse ones
    // as one checkpoint, dense ones with one round of acknowledgements.
    std::vector<sparrow::coll::BufferArg> bufs;
    for (size_t j = i; j < ops.size(); ++j) {
      if (!done[j] && ops[j].sparse == ops[i].sparse && ops[j].stage == ops[i].stage && ops[j].comm == ops[i].comm &&
          ops[j].root == ops[i].root) {
        bufs.push_back(ops[j].buf);
        done[j] = true;
      }
    }
    const PendingOp& op = ops[i];
    const char* what = op.stage ? "sparrowSparseBcastStage" : op.sparse ? "sparrowSparseBcast" : "sparrowBroadcast";
    s = no_throw(what, [&] {
      if (op.stage) return sparrow::coll::sparse_stage(*op.comm->coll, bufs, op.root);
      if (op.sparse) return sparrow::coll::sparse_bcast(*op.comm->coll, bufs, op.root);
      return sparrow::coll::broadcast(*op.comm->coll, bufs, op.root);
    });
    done[i] = true;
    sparrowResult_t r = run(ops[i].comm, s);
    if (first == sparrowSuccess) first = r;
  }
  return first;
}

sparrowResult_t enqueue_or_run(PendingOp op) {
  if (t_group_depth > 0) {
    t_group.push_back(op);
    return sparrowSuccess;
  }
  return flush_group({op});
}

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

SPARROW_EXPORT sparrowResult_t sparrowSecretFileKey(const char* path, const char* label, unsigned char key[32]) {
  if (!label || !key) return invalid("sparrowSecretFileKey: label or key is NULL");
  const size_t n = strnlen(label, 257);
  if (n == 0 || n > 256) return invalid("sparrowSecretFileKey: label must be 1..256 bytes");
  auto k = sparrow::bootstrap::secret_file_key(path ? path : "", std::string(label, n));
  if (!k.ok()) return fail(k.status());
  memcpy(key, k->data(), 32);
  return sparrowSuccess;
}

namespace {
// sparrowConfig_t as made by SPARROW_CONFIG_INITIALIZER and then set by the caller, checked field by field.
sparrow::Result<sparrow::CommOptions> config_options(const sparrowConfig_t* cfg) {
  sparrow::CommOptions o;
  if (!cfg) return o;
  const std::string fn = "sparrowCommInitRankConfig: ";
  if (cfg->size != sizeof(sparrowConfig_t) || cfg->magic != 0x53505243u || cfg->version != 1)
    return sparrow::InvalidArgument(fn + "config was not initialised with SPARROW_CONFIG_INITIALIZER (size " +
                                    std::to_string(cfg->size) + ", version " + std::to_string(cfg->version) + ")");
  if (cfg->elastic != 0 && cfg->elastic != 1)
    return sparrow::InvalidArgument(fn + "elastic must be 0 or 1, got " + std::to_string(cfg->elastic));
  if (cfg->leaseMs != 0 && (cfg->leaseMs < 100 || cfg->leaseMs > 86400000))
    return sparrow::InvalidArgument(fn + "leaseMs must be 0 (SPARROW_LEASE_MS) or 100..86400000, got " +
                                    std::to_string(cfg->leaseMs));
  if (cfg->leaseMs != 0 && !cfg->elastic)
    return sparrow::InvalidArgument(fn + "leaseMs is set but elastic is 0 (a fixed communicator has no lease)");
  if (cfg->region) {
    const std::string r(cfg->region, strnlen(cfg->region, 65));
    bool printable = !r.empty() && r.size() <= 64;
    for (char ch : r) printable = printable && ch > ' ' && ch < 127;
    if (!printable) return sparrow::InvalidArgument(fn + "region must be 1..64 printable characters without spaces");
    o.region = r;
  }
  o.elastic = cfg->elastic == 1;
  o.lease_ms = cfg->leaseMs;
  return o;
}
}  // namespace

SPARROW_EXPORT sparrowResult_t sparrowCommInitRank(sparrowComm_t* comm, int nranks, sparrowUniqueId commId, int rank) {
  return sparrowCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

SPARROW_EXPORT sparrowResult_t sparrowCommInitRankConfig(sparrowComm_t* comm, int nranks, sparrowUniqueId commId,
                                                         int rank, sparrowConfig_t* config) {
  if (!comm) return invalid("sparrowCommInitRank: comm is NULL");
  *comm = nullptr;
  auto opt = config_options(config);
  if (!opt.ok()) return fail(opt.status());
  sparrow::Result<std::unique_ptr<sparrow::Comm>> c = sparrow::InternalError("not run");
  sparrow::Status ran = no_throw("sparrowCommInitRank", [&] {
    c = sparrow::Comm::init_rank(nranks, reinterpret_cast<const uint8_t*>(commId.internal), rank, opt.value());
    return sparrow::Status::Ok();
  });
  if (!ran.ok()) return fail(ran);
  if (!c.ok()) return fail(c.status());
  *comm = new sparrowComm();
  (*comm)->impl = std::move(c.value());
  (*comm)->coll = std::make_unique<sparrow::coll::Engine>(*(*comm)->impl);
  std::lock_guard<std::mutex> lk(g_live_mu);
  g_live.insert(*comm);
  return sparrowSuccess;
}

SPARROW_EXPORT sparrowResult_t sparrowCommDestroy(sparrowComm_t comm) {
  if (!comm) return invalid("sparrowCommDestroy: comm is NULL");
  if (!retire(comm)) return fail(dead_handle("sparrowCommDestroy", comm));
  // Graceful: broadcasts this rank rooted were handed to the transport; let them arrive.
  sparrow::Status s = sparrow::coll::finish(*comm->coll);
  if (!s.ok()) SPARROW_INFO("sparrowCommDestroy: %s", s.to_string().c_str());
  if (wait_idle(comm, "sparrowCommDestroy")) delete comm;  // another thread's call (a user error) ends first
  return sparrowSuccess;
}

SPARROW_EXPORT sparrowResult_t sparrowCommAbort(sparrowComm_t comm) {
  if (!comm) return invalid("sparrowCommAbort: comm is NULL");
  if (!retire(comm)) return fail(dead_handle("sparrowCommAbort", comm));
  comm->impl->abort();
  if (wait_idle(comm, "sparrowCommAbort")) delete comm;  // they return promptly: every wait fails now
  return sparrowSuccess;
}

SPARROW_EXPORT sparrowResult_t sparrowCommCount(const sparrowComm_t comm, int* count) {
  if (!comm || !count) return invalid("sparrowCommCount: NULL argument");
  Pin pin(comm);
  if (!pin) return fail(dead_handle("sparrowCommCount", comm));
  *count = comm->impl->nranks();
  return sparrowSuccess;
}

SPARROW_EXPORT sparrowResult_t sparrowCommUserRank(const sparrowComm_t comm, int* rank) {
  if (!comm || !rank) return invalid("sparrowCommUserRank: NULL argument");
  Pin pin(comm);
  if (!pin) return fail(dead_handle("sparrowCommUserRank", comm));
  *rank = comm->impl->rank();
  return sparrowSuccess;
}

SPARROW_EXPORT sparrowResult_t sparrowCommJoin(sparrowComm_t* comm, sparrowUniqueId commId, sparrowConfig_t* config,
                                               int* rank) {
  if (!comm || !rank) return invalid("sparrowCommJoin: comm or rank is NULL");
  *comm = nullptr;
  auto opt = config_options(config);
  if (!opt.ok()) return fail(opt.status());
  if (config && !config->elastic) return invalid("sparrowCommJoin: config->elastic must be 1 (only elastic communicators take joiners)");
  if (*rank < 1 && *rank != -1)
    return invalid("sparrowCommJoin: *rank must name the slot to take (1..nranks-1) or be -1 (any free slot)");
  auto c = sparrow::Comm::init_joiner(reinterpret_cast<const uint8_t*>(commId.internal), *rank, opt.value());
  if (!c.ok()) return fail(c.status());
  auto h = std::make_unique<sparrowComm>();
  h->impl = std::move(c.value());
  h->coll = std::make_unique<sparrow::coll::Engine>(*h->impl);
  sparrow::Status s = sparrow::coll::join(*h->coll);
  if (!s.ok()) return fail(s);
  *rank = h->impl->rank();
  *comm = h.release();
  std::lock_guard<std::mutex> lk(g_live_mu);
  g_live.insert(*comm);
  return sparrowSuccess;
}

SPARROW_EXPORT sparrowResult_t sparrowCommGetMembers(sparrowComm_t comm, int* ranks, int maxRanks, int* nlive) {
  if (!comm || !nlive) return invalid("sparrowCommGetMembers: comm or nlive is NULL");
  if (maxRanks < 0 || (maxRanks > 0 && !ranks))
    return invalid("sparrowCommGetMembers: maxRanks must be >= 0, and ranks non-NULL when it is > 0");
  Pin pin(comm);
  if (!pin) return fail(dead_handle("sparrowCommGetMembers", comm));
  const std::vector<int> live = comm->coll->members.live();
  *nlive = int(live.size());
  for (size_t i = 0; i < live.size() && int(i) < maxRanks; ++i) ranks[i] = live[i];
  return sparrowSuccess;
}

SPARROW_EXPORT sparrowResult_t sparrowCommGetAsyncError(sparrowComm_t comm, sparrowResult_t* asyncError) {
  if (!comm || !asyncError) return invalid("sparrowCommGetAsyncError: NULL argument");
  Pin pin(comm);
  if (!pin) return fail(dead_handle("sparrowCommGetAsyncError", comm));
  *asyncError = static_cast<sparrowResult_t>(comm->impl->async_error().code());
  return sparrowSuccess;
}

SPARROW_EXPORT sparrowResult_t sparrowBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                                sparrowDataType_t datatype, int root, sparrowComm_t comm,
                                                sparrowStream_t stream) {
  sparrow::Status s = check_args(comm, sendbuff, recvbuff, count, datatype, root, stream, "sparrowBroadcast");
  if (!s.ok()) return fail(s, comm);
  return enqueue_or_run({false, comm, {sendbuff, recvbuff, count, int(datatype), {}}, root, stream});
}

SPARROW_EXPORT sparrowResult_t sparrowBcast(void* buff, size_t count, sparrowDataType_t datatype, int root,
                                            sparrowComm_t comm, sparrowStream_t stream) {
  return sparrowBroadcast(buff, buff, count, datatype, root, comm, stream);
}

SPARROW_EXPORT sparrowResult_t sparrowSparseBcast(const void* sendbuff, void* recvbuff, size_t count,
                                                  sparrowDataType_t datatype, int root, sparrowComm_t comm,
                                                  sparrowStream_t stream) {
  sparrow::Status s = check_args(comm, sendbuff, recvbuff, count, datatype, root, stream, "sparrowSparseBcast");
  if (!s.ok()) return fail(s, comm);
  return enqueue_or_run({true, comm, {sendbuff, recvbuff, count, int(datatype), {}}, root, stream});
}

SPARROW_EXPORT sparrowResult_t sparrowSparseBcastStage(const void* sendbuff, void* recvbuff, size_t count,
                                                       sparrowDataType_t datatype, int root, sparrowComm_t comm,
                                                       sparrowStream_t stream) {
  sparrow::Status s = check_args(comm, sendbuff, recvbuff, count, datatype, root, stream, "sparrowSparseBcastStage");
  if (!s.ok()) return fail(s, comm);
  return enqueue_or_run({true, comm, {sendbuff, recvbuff, count, int(datatype), {}}, root, stream, true});
}

SPARROW_EXPORT sparrowResult_t sparrowStageQuery(sparrowComm_t comm, int* ready) {
  if (!comm || !ready) return invalid("sparrowStageQuery: NULL argument");
  Pin pin(comm);
  if (!pin) return fail(dead_handle("sparrowStageQuery", comm));
  auto p = sparrow::coll::stage_progress(*comm->coll);
  *ready = !p.pending || p.ready ? 1 : 0;
  return sparrowSuccess;
}

SPARROW_EXPORT sparrowResult_t sparrowStageCommit(sparrowComm_t comm) {
  if (!comm) return invalid("sparrowStageCommit: comm is NULL");
  Pin pin(comm);
  if (!pin) return fail(dead_handle("sparrowStageCommit", comm));
  return run(comm, no_throw("sparrowStageCommit", [&] { return sparrow::coll::stage_commit(*comm->coll); }));
}

SPARROW_EXPORT sparrowResult_t sparrowSparseBcastReset(sparrowComm_t comm, const void* buff) {
  if (!comm || !buff) return invalid("sparrowSparseBcastReset: NULL argument");
  Pin pin(comm);
  if (!pin) return fail(dead_handle("sparrowSparseBcastReset", comm));
  return run(comm, sparrow::coll::sparse_reset(*comm->coll, buff));
}

SPARROW_EXPORT sparrowResult_t sparrowGroupStart(void) {
  ++t_group_depth;
  return sparrowSuccess;
}

SPARROW_EXPORT sparrowResult_t sparrowGroupEnd(void) {
  if (t_group_depth == 0) return fail(sparrow::Error(sparrow::Code::kInvalidUsage, "sparrowGroupEnd without sparrowGroupStart"));
  if (--t_group_depth > 0) return sparrowSuccess;
  std::vector<PendingOp> ops;
  ops.swap(t_group);
  return flush_group(std::move(ops));
}

SPARROW_EXPORT sparrowResult_t sparrowGetSetting(const char* name, char* value, size_t len, size_t* needed) {
  if (!name || (len && !value)) return invalid("sparrowGetSetting: NULL argument");
  auto v = sparrow::params::value_of(name);
  if (!v.ok()) return fail(v.status());
  if (needed) *needed = v->size() + 1;
  if (!value && len == 0) return sparrowSuccess;  // asking for the size only
  if (len < v->size() + 1) return invalid("sparrowGetSetting: buffer too small (see *needed)");
  memcpy(value, v->c_str(), v->size() + 1);
  return sparrowSuccess;
}

SPARROW_EXPORT sparrowResult_t sparrowSetErrorEcho(int echo) {
  if (echo != 0 && echo != 1) return invalid("sparrowSetErrorEcho: echo must be 0 or 1");
  g_echo_errors.store(echo == 1);
  return sparrowSuccess;
}

SPARROW_EXPORT const char* sparrowGetLastError(sparrowComm_t comm) {
  Pin pin(comm);
  if (comm && !pin) t_last_error = dead_handle("sparrowGetLastError", comm).to_string();
  else if (comm) t_last_error = comm->impl->last_error();
  return t_last_error.c_str();
}

}  // extern "C"
