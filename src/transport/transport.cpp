#include "transport/transport.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <atomic>
#include <mutex>

#include "core/params.h"
#include "core/bits.h"
#include "transport/backends.h"

namespace sparrow::transport {
namespace {

params::StringParam kTransport("TRANSPORT", "auto", "Transport backend: auto (best viable), tcp, ucx or loopback (in-process, tests).",
                               {"auto", "tcp", "ucx", "loopback"});
params::IntParam kTimeout("TIMEOUT_S", 300, "Seconds any blocking wait may take before it fails with sparrowTimeout.", 1, 86400 * 7);

struct Entry {
  std::string name;
  int priority;
  BackendFactory f;
};

std::mutex g_mu;
std::vector<Entry>& registry() {
  static std::vector<Entry> r;
  return r;
}

void register_builtins_locked() {
  static bool done = false;
  if (done) return;
  done = true;
  add_builtin_backends([](const std::string& name, int priority, BackendFactory f) {
    registry().push_back({name, priority, std::move(f)});
  });
}

}  // namespace

void FrameHeader::encode(uint8_t out[kFrameHeaderBytes]) const {
  std::vector<uint8_t> v;
  v.reserve(kFrameHeaderBytes);
  bits::put_u32(v, kFrameMagic);
  bits::put_u32(v, 0);
  bits::put_u64(v, key.comm);
  bits::put_u64(v, key.seq);
  bits::put_u32(v, key.sub);
  bits::put_u32(v, frag);
  bits::put_u64(v, offset);
  bits::put_u64(v, total);
  bits::put_u32(v, len);
  bits::put_u32(v, 0);
  memcpy(out, v.data(), kFrameHeaderBytes);
}

Result<FrameHeader> FrameHeader::decode(const uint8_t in[kFrameHeaderBytes]) {
  if (bits::load_u32(in) != kFrameMagic) return CorruptData("bad frame magic");
  if (bits::load_u32(in + 4) != 0 || bits::load_u32(in + 52) != 0) return CorruptData("bad frame flags");
  FrameHeader h;
  h.key.comm = bits::load_u64(in + 8);
  h.key.seq = bits::load_u64(in + 16);
  h.key.sub = bits::load_u32(in + 24);
  h.frag = bits::load_u32(in + 28);
  h.offset = bits::load_u64(in + 32);
  h.total = bits::load_u64(in + 40);
  h.len = bits::load_u32(in + 48);
  if (h.offset > h.total || h.len > h.total - h.offset) return CorruptData("frame beyond its message");
  return h;
}

namespace {
std::atomic<KeyNamer> g_namer{nullptr};
}  // namespace

void set_key_namer(KeyNamer f) { g_namer = f; }

std::string describe_key(const MsgKey& k) {
  if (KeyNamer f = g_namer.load()) return f(k);
  return "message " + std::to_string(k.seq) + "." + std::to_string(k.sub);
}

void register_backend(const std::string& name, int priority, BackendFactory f) {
  std::lock_guard<std::mutex> lk(g_mu);
  register_builtins_locked();
  registry().push_back({name, priority, std::move(f)});
}

std::vector<std::string> backend_names() {
  std::lock_guard<std::mutex> lk(g_mu);
  register_builtins_locked();
  auto r = registry();
  std::stable_sort(r.begin(), r.end(), [](const Entry& a, const Entry& b) { return a.priority > b.priority; });
  std::vector<std::string> out;
  for (auto& e : r) out.push_back(e.name);
  return out;
}

Result<std::unique_ptr<Backend>> create_backend(const std::string& name, const BackendOptions& o) {
  BackendFactory f;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    register_builtins_locked();
    for (auto& e : registry())
      if (e.name == name) f = e.f;
  }
  if (!f && !SPARROW_HAVE_UCX && name.rfind("ucx", 0) == 0)
    return InvalidArgument("transport '" + name + "': this build of sparrow has no UCX (configure it with libucx-dev installed)");
  if (!f) return InvalidArgument("unknown or unavailable transport '" + name + "'");
  return f(o);
}

std::string configured_transport() { return kTransport.get(); }

Result<std::unique_ptr<Backend>> create_configured_backend(const BackendOptions& o) {
  std::string want = configured_transport();
  if (want != "auto") return create_backend(want, o);
  Status last = InvalidArgument("no transport backend available");
  for (const std::string& n : backend_names()) {
    if (n == "loopback") continue;  // in-process only: never chosen automatically
    auto b = create_backend(n, o);
    if (b.ok()) return b;
    last = b.status();
  }
  return last;
}

double timeout_seconds() { return double(kTimeout.get()); }

}  // namespace sparrow::transport
