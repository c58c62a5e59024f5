// libsparrow_nccl.so: NCCL's broadcast, served by sparrow's sparse_bcast, for programs that call NCCL.
//
// LD_PRELOAD it (or link it ahead of libnccl). It defines, with NCCL's exact signatures, only the
// calls it needs to see: ncclBroadcast / ncclBcast (floating-point broadcasts on an intercepted
// communicator go through sparrowSparseBcast), ncclGroupStart / ncclGroupEnd (groups reach sparrow
// too), and the communicator lifecycle (ncclCommInitRank, ncclCommInitRankConfig, ncclCommInitAll,
// ncclCommDestroy, ncclCommAbort), where it creates and frees the matching sparrow communicator.
// Every other nccl* symbol is not defined here, so the dynamic linker resolves it in the real NCCL.
// The real versions of the calls defined here are found with dlsym(RTLD_NEXT), or in libnccl.so.2
// (SPARROW_NCCL_LIB) when the shim was loaded after NCCL.
//
// Bootstrap: after the real communicator exists, its rank 0 creates a sparrow unique id and sends it
// to the other ranks with the real ncclBroadcast on that communicator; then every rank calls
// sparrowCommInitRank with its NCCL rank. No extra configuration.
//
// Configuration: SPARROW_NCCL_SHIM=0 forwards everything; SPARROW_NCCL_DTYPES (default
// "bfloat16,float16,float32"; "all" for every type sparrow has) picks the intercepted types.
#include <dlfcn.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "sparrow/sparrow.h"

#define SHIM_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

template <typename F>
F real(const char* name) {
  static std::once_flag once;
  static void* lib = nullptr;
  void* f = dlsym(RTLD_NEXT, name);
  if (f) return reinterpret_cast<F>(f);
  std::call_once(once, [] {
    const char* path = getenv("SPARROW_NCCL_LIB");
    lib = dlopen(path && *path ? path : "libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
    if (!lib) lib = dlopen("libnccl.so", RTLD_NOW | RTLD_GLOBAL);
  });
  f = lib ? dlsym(lib, name) : nullptr;
  if (!f) {
    fprintf(stderr, "sparrow-nccl: cannot find the real %s (is libnccl loaded? set SPARROW_NCCL_LIB)\n", name);
    abort();  // calling into nothing would be worse; this is a deployment error
  }
  return reinterpret_cast<F>(f);
}

// Looked up once per call site.
#define REAL(name) ([] {                                         \
  static const auto f_ = real<decltype(&name)>(#name);           \
  return f_;                                                     \
}())

bool shim_enabled() {
  static const bool on = [] {
    const char* v = getenv("SPARROW_NCCL_SHIM");
    return !(v && (strcmp(v, "0") == 0 || strcmp(v, "off") == 0 || strcmp(v, "false") == 0));
  }();
  return on;
}

bool dtype_intercepted(ncclDataType_t t) {
  static const std::vector<bool> on = [] {
    std::vector<bool> m(16, false);
    const char* v = getenv("SPARROW_NCCL_DTYPES");
    std::string s = v && *v ? v : "bfloat16,float16,float32";
    if (s == "all") {
      for (int i = 0; i <= 9; ++i) m[i] = true;
      return m;
    }
    const std::pair<const char*, int> names[] = {
        {"int8", ncclInt8},       {"uint8", ncclUint8},       {"int32", ncclInt32},     {"uint32", ncclUint32},
        {"int64", ncclInt64},     {"uint64", ncclUint64},     {"float16", ncclFloat16}, {"half", ncclFloat16},
        {"float32", ncclFloat32}, {"float", ncclFloat32},     {"float64", ncclFloat64}, {"double", ncclFloat64},
        {"bfloat16", ncclBfloat16}, {"bf16", ncclBfloat16}, {"fp16", ncclFloat16},      {"fp32", ncclFloat32}};
    size_t b = 0;
    while (b <= s.size()) {
      size_t e = s.find(',', b);
      if (e == std::string::npos) e = s.size();
      std::string tok = s.substr(b, e - b);
      bool known = false;
      for (auto& [n, i] : names)
        if (tok == n) m[i] = known = true;
      if (!known && !tok.empty()) fprintf(stderr, "sparrow-nccl: SPARROW_NCCL_DTYPES: unknown type '%s' ignored\n", tok.c_str());
      b = e + 1;
    }
    return m;
  }();
  int i = int(t);
  return i >= 0 && i <= 9 && on[i];
}

std::mutex g_mu;
std::unordered_map<ncclComm_t, sparrowComm_t> g_comms;
thread_local int t_group_depth = 0;
// A libnccl whose init calls another public init through the PLT reaches us twice: only the outermost
// call bootstraps.
thread_local int t_init_depth = 0;
struct InitScope {
  InitScope() { ++t_init_depth; }
  ~InitScope() { --t_init_depth; }
  bool outermost() const { return t_init_depth == 1; }
};

sparrowComm_t lookup(ncclComm_t c) {
  std::lock_guard<std::mutex> lk(g_mu);
  auto it = g_comms.find(c);
  return it == g_comms.end() ? nullptr : it->second;
}

sparrowComm_t take(ncclComm_t c) {
  std::lock_guard<std::mutex> lk(g_mu);
  auto it = g_comms.find(c);
  if (it == g_comms.end()) return nullptr;
  sparrowComm_t s = it->second;
  g_comms.erase(it);
  return s;
}

ncclResult_t to_nccl(sparrowResult_t r) {
  if (int(r) <= int(sparrowTimeout)) return ncclResult_t(int(r));  // 0..8 match
  if (r == sparrowVersionMismatch || r == sparrowCorruptData || r == sparrowPeerLost) return ncclRemoteError;
  return ncclSystemError;
}

// The CUDA runtime of the process, if it has one (a GPU program always does); null in CPU-only tests
// with a host-memory NCCL.
struct Cudart {
  cudaError_t (*malloc)(void**, size_t) = nullptr;
  cudaError_t (*free)(void*) = nullptr;
  cudaError_t (*memcpy)(void*, const void*, size_t, cudaMemcpyKind) = nullptr;
  cudaError_t (*sync)(cudaStream_t) = nullptr;
  Cudart() {
    malloc = reinterpret_cast<decltype(malloc)>(dlsym(RTLD_DEFAULT, "cudaMalloc"));
    free = reinterpret_cast<decltype(free)>(dlsym(RTLD_DEFAULT, "cudaFree"));
    memcpy = reinterpret_cast<decltype(memcpy)>(dlsym(RTLD_DEFAULT, "cudaMemcpy"));
    sync = reinterpret_cast<decltype(sync)>(dlsym(RTLD_DEFAULT, "cudaStreamSynchronize"));
  }
  bool ok() const { return malloc && free && memcpy && sync; }
};

// Sends rank 0's sparrow id to every rank over the real communicator, then creates the sparrow one.
void bootstrap(ncclComm_t comm, int nranks, int rank) {
  if (!shim_enabled() || !comm) return;
  if (t_group_depth > 0) {
    fprintf(stderr, "sparrow-nccl: communicator created inside a group: not intercepted (its broadcasts go to NCCL)\n");
    return;
  }
  sparrowUniqueId id;
  memset(&id, 0, sizeof id);
  if (rank == 0 && sparrowGetUniqueId(&id) != sparrowSuccess) {
    fprintf(stderr, "sparrow-nccl: sparrowGetUniqueId failed: %s; the id will be empty\n", sparrowGetLastError(nullptr));
  }
  static Cudart cu;
  ncclResult_t r;
  if (cu.ok()) {
    void* d = nullptr;
    if (cu.malloc(&d, sizeof id) != cudaSuccess) return;
    cu.memcpy(d, &id, sizeof id, cudaMemcpyHostToDevice);
    r = REAL(ncclBroadcast)(d, d, sizeof id, ncclUint8, 0, comm, nullptr);
    cu.sync(nullptr);
    cu.memcpy(&id, d, sizeof id, cudaMemcpyDeviceToHost);
    cu.free(d);
  } else {
    r = REAL(ncclBroadcast)(&id, &id, sizeof id, ncclUint8, 0, comm, nullptr);
  }
  if (r != ncclSuccess) {
    fprintf(stderr, "sparrow-nccl: bootstrap broadcast failed (%d): communicator not intercepted\n", int(r));
    return;
  }
  sparrowComm_t sc = nullptr;
  if (sparrowCommInitRank(&sc, nranks, id, rank) != sparrowSuccess) {
    fprintf(stderr, "sparrow-nccl: sparrowCommInitRank (rank %d of %d) failed: %s; communicator not intercepted\n",
            rank, nranks, sparrowGetLastError(nullptr));
    return;
  }
  std::lock_guard<std::mutex> lk(g_mu);
  g_comms[comm] = sc;
}

}  // namespace

SHIM_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  InitScope scope;
  ncclResult_t r = REAL(ncclCommInitRank)(comm, nranks, commId, rank);
  if (r == ncclSuccess && scope.outermost()) bootstrap(*comm, nranks, rank);
  return r;
}

SHIM_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                                ncclConfig_t* config) {
  InitScope scope;
  ncclResult_t r = REAL(ncclCommInitRankConfig)(comm, nranks, commId, rank, config);
  // Non-blocking communicators are left to NCCL: their init (and our bootstrap broadcast) may return
  // ncclInProgress on some ranks and succeed on others, and a half-created sparrow communicator would
  // make the others wait. Every rank passes the same config, so all skip it alike.
  if (r == ncclSuccess && scope.outermost() && !(config && config->blocking == 0)) bootstrap(*comm, nranks, rank);
  return r;
}

SHIM_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  InitScope scope;
  ncclResult_t r = REAL(ncclCommInitAll)(comms, ndev, devlist);
  if (r != ncclSuccess || !shim_enabled() || ndev <= 0 || !scope.outermost()) return r;
  // All ranks are in this process: one id, ranks initialised from threads (init is collective).
  sparrowUniqueId id;
  if (sparrowGetUniqueId(&id) != sparrowSuccess) return r;
  std::vector<sparrowComm_t> sc(ndev, nullptr);
  std::vector<std::thread> ts;
  for (int i = 0; i < ndev; ++i) ts.emplace_back([&, i] { sparrowCommInitRank(&sc[i], ndev, id, i); });
  for (auto& t : ts) t.join();
  std::lock_guard<std::mutex> lk(g_mu);
  for (int i = 0; i < ndev; ++i)
    if (sc[i]) g_comms[comms[i]] = sc[i];
  return r;
}

SHIM_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (sparrowComm_t s = take(comm)) sparrowCommDestroy(s);
  return REAL(ncclCommDestroy)(comm);
}

SHIM_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (sparrowComm_t s = take(comm)) sparrowCommAbort(s);
  return REAL(ncclCommAbort)(comm);
}

SHIM_EXPORT ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                       int root, ncclComm_t comm, cudaStream_t stream) {
  sparrowComm_t s = shim_enabled() && dtype_intercepted(datatype) ? lookup(comm) : nullptr;
  if (!s) return REAL(ncclBroadcast)(sendbuff, recvbuff, count, datatype, root, comm, stream);
  return to_nccl(sparrowSparseBcast(sendbuff, recvbuff, count, sparrowDataType_t(int(datatype)), root, s,
                                    reinterpret_cast<sparrowStream_t>(stream)));
}

SHIM_EXPORT ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                                   cudaStream_t stream) {
  sparrowComm_t s = shim_enabled() && dtype_intercepted(datatype) ? lookup(comm) : nullptr;
  if (!s) return REAL(ncclBcast)(buff, count, datatype, root, comm, stream);
  return to_nccl(sparrowSparseBcast(buff, buff, count, sparrowDataType_t(int(datatype)), root, s,
                                    reinterpret_cast<sparrowStream_t>(stream)));
}

SHIM_EXPORT ncclResult_t ncclGroupStart(void) {
  ncclResult_t r = REAL(ncclGroupStart)();
  if (r == ncclSuccess) {
    ++t_group_depth;
    sparrowGroupStart();
  }
  return r;
}

SHIM_EXPORT ncclResult_t ncclGroupEnd(void) {
  ncclResult_t r = REAL(ncclGroupEnd)();
  if (t_group_depth > 0) {
    --t_group_depth;
    sparrowResult_t s = sparrowGroupEnd();
    if (r == ncclSuccess && s != sparrowSuccess) r = to_nccl(s);
  }
  return r;
}
