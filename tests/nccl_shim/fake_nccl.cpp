// A test double of libnccl for machines without a GPU (built only for tests): the NCCL calls the shim
// tests use, with NCCL's exact signatures, over host memory, for ranks that are threads of one process.
// It counts the broadcasts it performs per datatype (fakeNcclBroadcastCount), so a test can tell
// which broadcasts the shim served and which it forwarded.
#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <vector>

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// One collective "round": every rank posts its pointers, the last one to arrive lets everyone copy;
// a second phase keeps the root's buffer valid until every rank has copied.
struct Shared {
  int n = 0;
  std::mutex mu;
  std::condition_variable cv;
  int joined = 0;
  int arrived = 0, done = 0;
  uint64_t gen = 0;
  std::vector<const void*> send;
  std::vector<float*> accum;
};

struct Comm {
  std::shared_ptr<Shared> sh;
  int rank = 0;
  bool aborted = false;
};

std::mutex g_mu;
std::map<std::string, std::shared_ptr<Shared>> g_pending;
std::atomic<long> g_bcast[16];
thread_local int g_group_depth = 0;

size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}

// Runs `copy` on every rank once all have posted `mine`; waits for all to finish.
template <typename F>
void round(Comm* c, const void* mine, F copy) {
  Shared& s = *c->sh;
  std::unique_lock<std::mutex> lk(s.mu);
  s.cv.wait(lk, [&] { return s.done == 0; });  // the previous round fully drained
  uint64_t g = s.gen;
  s.send[c->rank] = mine;
  if (++s.arrived == s.n) {
    s.gen++;
    s.cv.notify_all();
  } else {
    s.cv.wait(lk, [&] { return s.gen != g; });
  }
  lk.unlock();
  copy(s.send);
  lk.lock();
  if (++s.done == s.n) {
    s.arrived = 0;
    s.done = 0;
    s.gen++;
    s.cv.notify_all();
  } else {
    uint64_t g2 = s.gen;
    s.cv.wait(lk, [&] { return s.gen != g2; });
  }
}

}  // namespace

FAKE_EXPORT long fakeNcclBroadcastCount(int dtype) { return dtype >= 0 && dtype < 16 ? g_bcast[dtype].load() : -1; }

FAKE_EXPORT ncclResult_t ncclGetVersion(int* v) {
  *v = NCCL_VERSION_CODE;
  return ncclSuccess;
}

FAKE_EXPORT const char* ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : "fake nccl error"; }

FAKE_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::random_device rd;
  memset(id, 0, sizeof *id);
  snprintf(id->internal, sizeof id->internal, "fake-nccl-%08x%08x", rd(), rd());
  return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  if (nranks <= 0 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  std::shared_ptr<Shared> sh;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    auto& p = g_pending[std::string(id.internal)];
    if (!p) {
      p = std::make_shared<Shared>();
      p->n = nranks;
      p->send.resize(nranks);
    }
    sh = p;
  }
  {
    std::unique_lock<std::mutex> lk(sh->mu);
    if (++sh->joined == sh->n) sh->cv.notify_all();
    sh->cv.wait(lk, [&] { return sh->joined == sh->n; });
  }
  auto* c = new Comm{sh, rank};
  *comm = reinterpret_cast<ncclComm_t>(c);
  return ncclSuccess;
}

// Calls the public ncclCommInitRank through the PLT, as a library may: an interposing shim sees two
// nested inits and must bootstrap once (nccl_shim.preload_config checks it).
FAKE_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t*) {
  return ncclCommInitRank(comm, nranks, id, rank);
}

FAKE_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t*, int, const int*) { return ncclInvalidUsage; }  // needs GPUs

FAKE_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete reinterpret_cast<Comm*>(comm);
  return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }

FAKE_EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  *count = reinterpret_cast<Comm*>(comm)->sh->n;
  return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  *rank = reinterpret_cast<Comm*>(comm)->rank;
  return ncclSuccess;
}

namespace {
// Internal, so that ncclBcast does not go back through an interposed ncclBroadcast.
ncclResult_t do_broadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t dt, int root, ncclComm_t comm) {
  auto* c = reinterpret_cast<Comm*>(comm);
  if (!c || root < 0 || root >= c->sh->n) return ncclInvalidArgument;
  g_bcast[int(dt) & 15]++;
  const size_t bytes = count * type_size(dt);
  round(c, c->rank == root ? sendbuff : nullptr, [&](const std::vector<const void*>& send) {
    if (recvbuff != send[root] && bytes) memcpy(recvbuff, send[root], bytes);
  });
  return ncclSuccess;
}

}  // namespace

FAKE_EXPORT ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t dt, int root,
                                       ncclComm_t comm, cudaStream_t) {
  return do_broadcast(sendbuff, recvbuff, count, dt, root, comm);
}

FAKE_EXPORT ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t dt, int root, ncclComm_t comm, cudaStream_t) {
  return do_broadcast(buff, buff, count, dt, root, comm);
}

// Sum of float32 only (what the tests use).
FAKE_EXPORT ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t dt,
                                       ncclRedOp_t op, ncclComm_t comm, cudaStream_t) {
  auto* c = reinterpret_cast<Comm*>(comm);
  if (dt != ncclFloat32 || op != ncclSum) return ncclInvalidArgument;
  std::vector<float> tmp(count, 0.f);
  round(c, sendbuff, [&](const std::vector<const void*>& send) {
    for (auto* p : send)
      for (size_t i = 0; i < count; ++i) tmp[i] += static_cast<const float*>(p)[i];
  });
  // Second round: nobody overwrites a send buffer (in place) before everyone has read it.
  round(c, nullptr, [](const std::vector<const void*>&) {});
  memcpy(recvbuff, tmp.data(), count * sizeof(float));
  return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclGroupStart(void) {
  ++g_group_depth;
  return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclGroupEnd(void) {
  if (g_group_depth == 0) return ncclInvalidUsage;
  --g_group_depth;
  return ncclSuccess;
}
