#include "kernels/device.h"

#include <dlfcn.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/log.h"
#include "core/params.h"

namespace sparrow::kernels {
namespace {
params::StringParam kCuda("CUDA", "auto",
                          "Device buffers: 'auto' loads libsparrow_cuda.so from next to libsparrow (or the "
                          "library path) when a GPU is present; '0' treats every pointer as host memory; "
                          "anything else is the path of the library to load.");
params::StringParam kGpuShadow("GPU_SHADOW", "device",
                               "Where the root keeps the shadow (last sent version) of a device buffer: "
                               "'device' memory, or pinned 'host' memory to save HBM.",
                               {"device", "host"});

std::once_flag g_once;
std::atomic<DeviceOps*> g_ops{nullptr};
std::atomic<bool> g_override{false};
std::string g_reason = "device support not loaded yet";

// Directory of the object this function lives in (libsparrow.so, or an executable linking it statically).
std::string own_dir() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&own_dir), &info) || !info.dli_fname) return {};
  std::string p = info.dli_fname;
  auto slash = p.rfind('/');
  return slash == std::string::npos ? std::string() : p.substr(0, slash);
}

void load() {
  std::string mode = kCuda.get();
  if (mode == "0" || mode == "off" || mode == "none") {
    g_reason = "SPARROW_CUDA=" + mode;
    return;
  }
  std::vector<std::string> candidates;
  if (mode != "auto" && !mode.empty()) {
    candidates.push_back(mode);
  } else {
    std::string dir = own_dir();
    if (!dir.empty()) {
      candidates.push_back(dir + "/libsparrow_cuda.so");
      candidates.push_back(dir + "/../lib/libsparrow_cuda.so");
    }
    candidates.push_back("libsparrow_cuda.so");
  }
  void* h = nullptr;
  std::string errs;
  for (auto& c : candidates) {
    h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h) break;
    const char* e = dlerror();
    errs += "\n  " + c + ": " + (e ? e : "?");
  }
  if (!h) {
    g_reason = "libsparrow_cuda.so not found (build with nvcc available, or set SPARROW_CUDA=<path>):" + errs;
    SPARROW_INFO("no device support: %s", g_reason.c_str());
    return;
  }
  using Factory = DeviceOps* (*)(char* why, size_t why_len);
  auto f = reinterpret_cast<Factory>(dlsym(h, "sparrow_cuda_device_ops_v3"));
  if (!f) {
    g_reason = "libsparrow_cuda.so has no sparrow_cuda_device_ops_v3 (version mismatch?)";
    return;
  }
  char why[512] = {0};
  DeviceOps* ops = f(why, sizeof why);
  if (!ops) {
    g_reason = std::string("CUDA unusable: ") + why;
    SPARROW_INFO("no device support: %s", g_reason.c_str());
    return;
  }
  SPARROW_INFO("device support: %s", ops->name());
  g_ops.store(ops);
}
}  // namespace

DeviceOps* device_ops() {
  if (!g_override.load(std::memory_order_acquire)) std::call_once(g_once, load);
  return g_ops.load(std::memory_order_acquire);
}

void set_device_ops(DeviceOps* ops) {
  g_override.store(true);
  g_ops.store(ops);
  g_reason = ops ? "" : "no device backend installed";
}

std::string device_unavailable_reason() { return g_reason; }

std::string current_gpu_pci() {
  DeviceOps* d = device_ops();
  return d ? d->pci_bus_id() : "";
}

Status device_error(const DeviceOps* d, int err, const char* what) {
  if (err == 0) return Status::Ok();
  return Error(Code::kUnhandledCudaError,
               std::string(what) + ": " + (d ? d->error_string(err) : "error " + std::to_string(err)));
}

Status copy_any(void* dst, const void* src, size_t bytes) {
  if (!bytes || dst == src) return Status::Ok();
  DeviceOps* d = device_ops();
  if (is_device(d, dst) || is_device(d, src)) return device_error(d, d->copy(dst, src, bytes), "device copy");
  memcpy(dst, src, bytes);
  return Status::Ok();
}

bool shadow_on_host() { return kGpuShadow.get() == "host"; }

}  // namespace sparrow::kernels
