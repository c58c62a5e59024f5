// sparrow._sparrow: a thin pybind11 layer over the public C API (include/sparrow/sparrow.h).
//
// Buffers cross as integer addresses: the pure-Python layer (sparrow/__init__.py) takes them from
// torch tensors (data_ptr) and numpy arrays (__array_interface__), checks dtype and contiguity and
// keeps the objects alive, so no tensor memory is ever copied. Every call that may block (init,
// collectives, destroy) releases the GIL, so ranks may run as Python threads and other
// Python threads keep running while a sync is in flight. Errors come back as result codes; the
// Python layer raises the matching sparrow.Error subclass with sparrowGetLastError's message.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "sparrow/sparrow.h"

namespace py = pybind11;

namespace {

using Gil = py::gil_scoped_release;

void* ptr(uintptr_t p) { return reinterpret_cast<void*>(p); }

// One communicator handle. Not thread-safe, like the C communicator: one thread at a time.
class Comm {
 public:
  // `region` empty: SPARROW_REGION or inferred. Range checks are the C library's (sparrowInvalidArgument).
  Comm(int nranks, py::bytes uid, int rank, bool elastic, int lease_ms, const std::string& region) {
    sparrowUniqueId u = to_id(uid);
    {
      Gil g;
      sparrowConfig_t cfg = SPARROW_CONFIG_INITIALIZER;
      cfg.elastic = elastic ? 1 : 0;
      cfg.leaseMs = lease_ms;
      cfg.region = region.empty() ? nullptr : region.c_str();
      init_rc_ = sparrowCommInitRankConfig(&c_, nranks, u, rank, &cfg);
    }
    if (init_rc_ != sparrowSuccess) {
      init_error_ = sparrowGetLastError(nullptr);
      c_ = nullptr;
    }
  }
  // sparrowCommJoin: a new process takes a free slot of a running elastic communicator (`rank`, or
  // -1 for any); the slot it took is rank().
  static std::unique_ptr<Comm> join(py::bytes uid, int rank, int lease_ms, const std::string& region) {
    sparrowUniqueId u = to_id(uid);
    std::unique_ptr<Comm> c(new Comm());
    {
      Gil g;
      sparrowConfig_t cfg = SPARROW_CONFIG_INITIALIZER;
      cfg.elastic = 1;
      cfg.leaseMs = lease_ms;
      cfg.region = region.empty() ? nullptr : region.c_str();
      c->init_rc_ = sparrowCommJoin(&c->c_, u, &cfg, &rank);
    }
    if (c->init_rc_ != sparrowSuccess) {
      c->init_error_ = sparrowGetLastError(nullptr);
      c->c_ = nullptr;
    }
    return c;
  }
  ~Comm() {
    if (c_) {
      Gil g;
      (void)sparrowCommDestroy(c_);
    }
  }
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  int init_result() const { return int(init_rc_); }
  const std::string& init_error() const { return init_error_; }
  bool alive() const { return c_ != nullptr; }

  int rank() const {
    int r = -1;
    if (c_) sparrowCommUserRank(c_, &r);
    return r;
  }
  // (result, live ranks increasing)
  std::pair<int, std::vector<int>> members() const {
    int n = 0;
    sparrowResult_t rc = sparrowCommGetMembers(c_, nullptr, 0, &n);
    std::vector<int> v(size_t(std::max(n, 0)));
    if (rc == sparrowSuccess && n > 0) rc = sparrowCommGetMembers(c_, v.data(), n, &n);
    return {int(rc), v};
  }
  int size() const {
    int n = 0;
    if (c_) sparrowCommCount(c_, &n);
    return n;
  }
  // One collective (the kinds are the module's OP_SPARSE, OP_DENSE, OP_STAGE).
  enum Kind : int { kSparse = 0, kDense = 1, kStage = 2 };
  struct Op {
    int kind;
    uintptr_t send, recv;
    size_t count;
    int dtype, root;
    uintptr_t stream;
  };
  // The calls of `ops` (more than one: as one group, sparrowGroupStart/End around them, on one
  // thread since a group is per thread), interruptible by Ctrl-C.
  int run(const std::vector<Op>& ops) {
    sparrowComm_t c = c_;
    const bool group = ops.size() != 1;
    return interruptible([c, ops, group] {
      if (group && sparrowGroupStart() != sparrowSuccess) return int(sparrowInvalidUsage);
      int rc = sparrowSuccess;
      for (const Op& o : ops) {
        int r = issue(c, o);
        if (rc == sparrowSuccess) rc = r;
      }
      if (group) {
        int r = sparrowGroupEnd();
        if (rc == sparrowSuccess) rc = r;
      }
      return rc;
    });
  }
  int stage_commit() {
    sparrowComm_t c = c_;
    return interruptible([c] { return int(sparrowStageCommit(c)); });
  }
  py::tuple stage_query() {
    int ready = 0;
    int rc = sparrowStageQuery(c_, &ready);
    return py::make_tuple(rc, ready != 0);
  }
  int reset(uintptr_t buff) { return sparrowSparseBcastReset(c_, ptr(buff)); }
  sparrowComm_t handle() const { return c_; }
  // A call that may block (a model's step), interruptible by Ctrl-C as run() is.
  template <class F>
  int call(F f) {
    return interruptible(std::move(f));
  }
  int async_error() const {
    sparrowResult_t e = sparrowSuccess;
    if (c_) sparrowCommGetAsyncError(c_, &e);
    return int(e);
  }
  std::string last_error() const { return c_ ? sparrowGetLastError(c_) : sparrowGetLastError(nullptr); }
  py::dict stats() const {
    sparrowStats s = SPARROW_STATS_INITIALIZER;
    py::dict d;
    if (!c_ || sparrowCommGetStats(c_, &s) != sparrowSuccess) return d;
    d["ops"] = s.ops;
    d["dense_bytes"] = s.denseBytes;
    d["wire_bytes"] = s.wireBytes;
    d["changed"] = s.changedElements;
    d["density"] = s.density;
    d["encode_s"] = s.encodeSeconds;
    d["apply_s"] = s.applySeconds;
    d["time_s"] = s.totalSeconds;
    d["resyncs"] = s.resyncs;
    d["full"] = bool(s.full);
    d["stage_pending"] = bool(s.stagePending);
    d["stage_ready"] = bool(s.stageReady);
    d["stage_bytes_received"] = s.stageBytesReceived;
    d["staged_bytes"] = s.stagedBytes;
    d["catch_ups"] = s.catchUps;
    d["catch_up_bytes"] = s.catchUpBytes;
    return d;
  }
  py::list peer_stats() const {
    py::list out;
    int n = 0;
    if (!c_ || sparrowCommGetPeerStats(c_, nullptr, 0, &n) != sparrowSuccess || n == 0) return out;
    std::vector<sparrowPeerStats> v(static_cast<size_t>(n));
    if (sparrowCommGetPeerStats(c_, v.data(), n, &n) != sparrowSuccess) return out;
    for (int i = 0; i < n && i < int(v.size()); ++i) {
      py::dict d;
      d["rank"] = v[i].rank;
      d["bytes_sent"] = v[i].bytesSent;
      d["bytes_received"] = v[i].bytesReceived;
      d["first_byte_s"] = v[i].firstByteSeconds;
      d["last_byte_s"] = v[i].lastByteSeconds;
      d["receive_Bps"] = v[i].receiveBytesPerSecond;
      d["rtt_s"] = v[i].rttSeconds;
      out.append(d);
    }
    return out;
  }
  py::dict progress() const {  // safe while another thread is in a collective: no GIL needed for it
    py::dict d;
    unsigned long long got = 0, sent = 0;
    int in = 0;
    if (c_) sparrowCommGetProgress(c_, &got, &sent, &in);
    d["bytes_received"] = got;
    d["bytes_sent"] = sent;
    d["in_call"] = bool(in);
    return d;
  }
  std::string stats_json() const {
    size_t need = 0;
    if (!c_) return "{}";
    sparrowCommGetStatsJson(c_, nullptr, 0, &need);
    std::string j(need, '\0');
    if (sparrowCommGetStatsJson(c_, j.data(), j.size(), &need) != sparrowSuccess) return "{}";
    j.resize(need ? need - 1 : 0);
    return j;
  }
  int destroy() {
    if (!c_) return int(sparrowSuccess);
    sparrowComm_t c = c_;
    c_ = nullptr;
    Gil g;
    return sparrowCommDestroy(c);
  }
  int abort() {
    if (!c_) return int(sparrowSuccess);
    sparrowComm_t c = c_;
    c_ = nullptr;
    Gil g;
    return sparrowCommAbort(c);
  }

 private:
  Comm() = default;
  static int issue(sparrowComm_t c, const Op& o) {
    auto stream = reinterpret_cast<sparrowStream_t>(o.stream);
    auto dt = sparrowDataType_t(o.dtype);
    if (o.kind == kDense) return sparrowBroadcast(ptr(o.send), ptr(o.recv), o.count, dt, o.root, c, stream);
    if (o.kind == kStage) return sparrowSparseBcastStage(ptr(o.send), ptr(o.recv), o.count, dt, o.root, c, stream);
    return sparrowSparseBcast(ptr(o.send), ptr(o.recv), o.count, dt, o.root, c, stream);
  }
  // Runs `call` (which may block up to SPARROW_TIMEOUT_S) on a helper thread while this one, without
  // the GIL, waits in 100 ms slices and runs Python's signal handlers between them (they run only on
  // the main thread: elsewhere the call simply completes). If a handler raises (Ctrl-C's
  // KeyboardInterrupt), the communicator is aborted, which fails every wait of the call at once; the
  // exception propagates once the call returned, and the handle is dead from then on.
  template <class F>
  int interruptible(F call) {
    auto task = std::make_shared<std::packaged_task<int()>>(std::move(call));
    std::future<int> done = task->get_future();
    std::thread helper([task] { (*task)(); });
    std::optional<py::error_already_set> raised;  // fetched with the GIL held; abort and join run without
    for (;;) {
      bool ready;
      {
        Gil g;
        ready = done.wait_for(std::chrono::milliseconds(100)) == std::future_status::ready;
      }
      if (ready) break;
      if (PyErr_CheckSignals() != 0) {
        raised.emplace();
        break;
      }
    }
    sparrowComm_t aborting = raised ? std::exchange(c_, nullptr) : nullptr;
    {
      Gil g;
      if (aborting) (void)sparrowCommAbort(aborting);  // waits (bounded) until the helper's call returned
      helper.join();
    }
    if (raised) throw *raised;
    return done.get();
  }
  static sparrowUniqueId to_id(const py::bytes& uid) {
    std::string id = uid;
    if (id.size() != SPARROW_UNIQUE_ID_BYTES)
      throw py::value_error("unique id must be " + std::to_string(SPARROW_UNIQUE_ID_BYTES) + " bytes, got " +
                            std::to_string(id.size()));
    sparrowUniqueId u;
    memcpy(u.internal, id.data(), sizeof(u.internal));
    return u;
  }
  sparrowComm_t c_ = nullptr;
  sparrowResult_t init_rc_ = sparrowSuccess;
  std::string init_error_;
};


// A model over a communicator (sparrowModel*): tensors as (name, address, dtype, shape, pieces),
// pieces as (logical, dim, start, stop, offset). The Comm must outlive it (the Python layer keeps it).
class Model {
 public:
  using PieceDesc = std::tuple<std::string, int, size_t, size_t, size_t>;
  using TensorDesc = std::tuple<std::string, uintptr_t, int, std::vector<size_t>, std::vector<PieceDesc>>;
  Model(Comm& comm, const std::vector<TensorDesc>& tensors, int root, const std::vector<int>& sources)
      : comm_(comm) {
    std::vector<std::vector<sparrowPiece_t>> pieces(tensors.size());
    std::vector<sparrowTensor_t> ts;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto& [name, addr, dtype, shape, ps] = tensors[i];
      for (const auto& [logical, dim, start, stop, offset] : ps)
        pieces[i].push_back({logical.c_str(), dim, start, stop, offset});
      ts.push_back({name.c_str(), ptr(addr), sparrowDataType_t(dtype), int(shape.size()), shape.data(),
                    pieces[i].empty() ? nullptr : pieces[i].data(), int(pieces[i].size())});
    }
    init_rc_ = sparrowModelCreateSharded(&m_, comm.handle(), ts.data(), int(ts.size()), root,
                                         sources.empty() ? nullptr : sources.data(), int(sources.size()));
    if (init_rc_ != sparrowSuccess) {
      init_error_ = comm.handle() ? sparrowGetLastError(comm.handle()) : sparrowGetLastError(nullptr);
      m_ = nullptr;
    }
  }
  ~Model() { destroy(); }
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  int init_result() const { return int(init_rc_); }
  const std::string& init_error() const { return init_error_; }
  int step() {
    sparrowModel_t m = m_;
    return comm_.call([m] { return int(sparrowModelSync(m)); });
  }
  int stage() {
    sparrowModel_t m = m_;
    return comm_.call([m] { return int(sparrowModelStage(m)); });
  }
  int commit() {
    sparrowModel_t m = m_;
    return comm_.call([m] { return int(sparrowModelCommit(m)); });
  }
  py::tuple version() const {
    unsigned long long v = 0;
    int rc = sparrowModelGetVersion(m_, &v);
    return py::make_tuple(rc, v);
  }
  py::tuple digest(const std::string& name) const {
    unsigned long long d = 0;
    int rc;
    {
      Gil g;
      rc = sparrowModelGetDigest(m_, name.c_str(), &d);
    }
    return py::make_tuple(rc, d);
  }
  py::tuple digest_rows(const std::string& name, unsigned long long start, unsigned long long stop) const {
    unsigned long long d = 0;
    int rc;
    {
      Gil g;
      rc = sparrowModelGetDigestRows(m_, name.c_str(), start, stop, &d);
    }
    return py::make_tuple(rc, d);
  }
  void destroy() {
    if (m_) (void)sparrowModelDestroy(std::exchange(m_, nullptr));
  }

 private:
  Comm& comm_;
  sparrowModel_t m_ = nullptr;
  sparrowResult_t init_rc_ = sparrowSuccess;
  std::string init_error_;
};

}  // namespace

PYBIND11_MODULE(_sparrow, m) {
  m.doc() = "Low-level binding of sparrow's C API; use the `sparrow` package instead.";
  m.attr("UNIQUE_ID_BYTES") = SPARROW_UNIQUE_ID_BYTES;
  m.def("get_unique_id", [] {
    sparrowUniqueId u;
    sparrowResult_t rc;
    {
      Gil g;
      rc = sparrowGetUniqueId(&u);
    }
    if (rc != sparrowSuccess) return py::make_tuple(int(rc), py::bytes(sparrowGetLastError(nullptr)));
    return py::make_tuple(0, py::bytes(u.internal, sizeof(u.internal)));
  });
  m.def("version", [] {
    int v = 0;
    sparrowGetVersion(&v);
    return v;
  });
  sparrowSetErrorEcho(0);  // errors are raised as exceptions: reported once, not also as WARN lines
  m.def("setting", [](const std::string& name) {
    size_t need = 0;
    sparrowResult_t rc = sparrowGetSetting(name.c_str(), nullptr, 0, &need);
    std::string v(need, '\0');
    if (rc == sparrowSuccess) rc = sparrowGetSetting(name.c_str(), v.data(), v.size(), &need);
    if (rc != sparrowSuccess) return py::make_tuple(int(rc), std::string(sparrowGetLastError(nullptr)));
    v.resize(need ? need - 1 : 0);
    return py::make_tuple(0, v);
  });
  m.def("secret_file_key", [](const std::string& path, const std::string& label) {
    unsigned char key[32];
    sparrowResult_t rc = sparrowSecretFileKey(path.c_str(), label.c_str(), key);
    if (rc != sparrowSuccess) return py::make_tuple(int(rc), py::bytes(sparrowGetLastError(nullptr)));
    return py::make_tuple(0, py::bytes(reinterpret_cast<const char*>(key), sizeof key));
  });
  m.def("error_string", [](int rc) { return std::string(sparrowGetErrorString(sparrowResult_t(rc))); });
  m.def("last_error", [] { return std::string(sparrowGetLastError(nullptr)); });
  m.attr("OP_SPARSE") = int(Comm::kSparse);
  m.attr("OP_DENSE") = int(Comm::kDense);
  m.attr("OP_STAGE") = int(Comm::kStage);
  py::class_<Comm::Op>(m, "Op")
      .def(py::init([](int kind, uintptr_t send, uintptr_t recv, size_t count, int dtype, int root, uintptr_t stream) {
        return Comm::Op{kind, send, recv, count, dtype, root, stream};
      }));
  py::class_<Comm>(m, "Comm")
      .def(py::init<int, py::bytes, int, bool, int, const std::string&>(), py::arg("nranks"), py::arg("uid"),
           py::arg("rank"), py::arg("elastic") = false, py::arg("lease_ms") = 0, py::arg("region") = "")
      .def_static("join", &Comm::join, py::arg("uid"), py::arg("rank"), py::arg("lease_ms") = 0, py::arg("region") = "")
      .def_property_readonly("init_result", &Comm::init_result)
      .def_property_readonly("init_error", &Comm::init_error)
      .def_property_readonly("alive", &Comm::alive)
      .def_property_readonly("rank", &Comm::rank)
      .def_property_readonly("size", &Comm::size)
      .def("members", &Comm::members)
      .def("run", &Comm::run)
      .def("stage_query", &Comm::stage_query)
      .def("stage_commit", &Comm::stage_commit)
      .def("reset", &Comm::reset)
      .def("async_error", &Comm::async_error)
      .def("last_error", &Comm::last_error)
      .def("stats", &Comm::stats)
      .def("peer_stats", &Comm::peer_stats)
      .def("progress", &Comm::progress)
      .def("stats_json", &Comm::stats_json)
      .def("destroy", &Comm::destroy)
      .def("abort", &Comm::abort);
  py::class_<Model>(m, "Model")
      .def(py::init<Comm&, const std::vector<Model::TensorDesc>&, int, const std::vector<int>&>(),
           py::keep_alive<1, 2>())
      .def_property_readonly("init_result", &Model::init_result)
      .def_property_readonly("init_error", &Model::init_error)
      .def("step", &Model::step)
      .def("stage", &Model::stage)
      .def("commit", &Model::commit)
      .def("version", &Model::version)
      .def("digest", &Model::digest)
      .def("digest_rows", &Model::digest_rows)
      .def("destroy", &Model::destroy);
}
