// A stand-in for GPU memory on machines without one: "device" allocations are addresses in a region
// the host cannot touch (PROT_NONE), backed by a second, writable mapping of the same memfd that only
// this backend uses. Any code path that dereferences a device pointer on the host crashes the test;
// the backend's operations (extraction, block sums, gather, scatter, copy) run the CPU kernels on the
// backing view.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "format/block_sum.h"
#include "kernels/cpu/extract.h"
#include "kernels/device.h"

namespace sparrow::test {

class FakeDevice final : public kernels::DeviceOps {
 public:
  explicit FakeDevice(size_t capacity = size_t(1) << 30) : cap_(capacity) {
    fd_ = memfd_create("sparrow-fake-device", 0);
    if (fd_ < 0 || ftruncate(fd_, off_t(cap_)) != 0) abort();
    dev_ = static_cast<uint8_t*>(mmap(nullptr, cap_, PROT_NONE, MAP_SHARED, fd_, 0));
    back_ = static_cast<uint8_t*>(mmap(nullptr, cap_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0));
    if (dev_ == MAP_FAILED || back_ == MAP_FAILED) abort();
  }
  ~FakeDevice() override {
    munmap(dev_, cap_);
    munmap(back_, cap_);
    close(fd_);
  }

  // Device allocation for tests (never freed: the arena is sparse and lives as long as the test).
  void* malloc_device(size_t bytes) {
    std::lock_guard<std::mutex> lk(mu_);
    size_t off = (top_ + 255) & ~size_t(255);
    if (off + bytes > cap_) return nullptr;
    top_ = off + bytes;
    return dev_ + off;
  }
  // Host-side access for test setup and checks (what cudaMemcpy would do).
  void upload(void* dst, const void* src, size_t n) { memcpy(back(dst), src, n); }
  void download(void* dst, const void* src, size_t n) { memcpy(dst, back(src), n); }

  std::atomic<int> extracts{0}, extract_chunk_calls{0}, block_sum_calls{0}, gathers{0}, scatters{0}, copies{0}, syncs{0}, allocs{0}, host_allocs{0};
  std::atomic<int> fail_scatter_after{-1};  // >= 0: the (n+1)-th scatter/copy-to-device fails
  void* last_stream = nullptr;

  std::string pci;                    // what pci_bus_id() answers
  mutable std::atomic<int> pci_asks{0};
  std::string pci_bus_id() const override {
    ++pci_asks;
    return pci;
  }

  const char* name() const override { return "fake-device (tests)"; }
  std::string error_string(int err) const override { return "fake device error " + std::to_string(err); }
  bool is_device(const void* p) const override {
    auto* b = static_cast<const uint8_t*>(p);
    return b >= dev_ && b < dev_ + cap_;
  }
  int sync_stream(void* stream) override {
    syncs++;
    last_stream = stream;
    return 0;
  }
  int alloc(void** p, size_t bytes, bool host) override {
    if (host) {
      host_allocs++;
      *p = ::malloc(bytes ? bytes : 1);
      return *p ? 0 : ENOMEM;
    }
    allocs++;
    *p = malloc_device(bytes);
    return *p ? 0 : ENOMEM;
  }
  void free(void* p, bool host) override {
    if (host) ::free(p);
  }
  int copy(void* dst, const void* src, size_t bytes) override {
    copies++;
    if (is_device(dst) && injected_failure()) return 7;
    memcpy(back(dst), back(src), bytes);
    return 0;
  }
  int extract(const void* cur, void* shadow, uint32_t n, uint32_t s, uint32_t* pos, uint8_t* old_vals,
              uint8_t* new_vals, size_t* changes) override {
    if (!is_device(cur)) return 3;  // the contract: cur is device memory
    extracts++;
    *changes = kernels::cpu::extract_scalar(static_cast<const uint8_t*>(back(cur)), static_cast<uint8_t*>(back(shadow)),
                                            n, s, pos, old_vals, new_vals);
    return 0;
  }
  int extract_chunks(const void* cur, void* shadow, uint64_t n, uint32_t s, uint32_t ce, uint64_t* chunk_offsets,
                     uint32_t* pos, uint8_t* old_vals, uint8_t* new_vals, uint64_t capacity) override {
    if (!is_device(cur) || !ce) return 3;
    extract_chunk_calls++;
    const auto* c = static_cast<const uint8_t*>(back(cur));
    auto* sh = static_cast<uint8_t*>(back(shadow));
    uint64_t total = 0, i = 0;
    for (uint64_t b = 0; b < n; b += ce, ++i) {
      chunk_offsets[i] = total;
      for (uint64_t e = b; e < std::min<uint64_t>(n, b + ce); ++e) total += memcmp(c + e * s, sh + e * s, s) != 0;
    }
    chunk_offsets[i] = total;
    if (total > capacity) return 0;
    i = 0;
    for (uint64_t b = 0; b < n; b += ce, ++i) {
      const uint64_t at = chunk_offsets[i];
      kernels::cpu::extract_scalar(c + b * s, sh + b * s, uint32_t(std::min<uint64_t>(ce, n - b)), s, pos + at,
                                   old_vals + at * s, new_vals + at * s);
    }
    return 0;
  }
  int block_sums(const void* base, size_t bytes, size_t block_bytes, uint64_t* out) override {
    if (!is_device(base) || !block_bytes) return 3;
    block_sum_calls++;
    const auto* p = static_cast<const uint8_t*>(back(base));
    for (size_t off = 0; off < bytes; off += block_bytes) *out++ = format::block_sum(p + off, std::min(block_bytes, bytes - off));
    return 0;
  }
  int gather(const void* base, const uint32_t* pos, size_t k, uint32_t s, uint8_t* out) override {
    if (!is_device(base)) return 3;
    gathers++;
    kernels::cpu::gather(static_cast<const uint8_t*>(back(base)), pos, k, s, out);
    return 0;
  }
  int scatter(void* base, const uint32_t* pos, size_t k, uint32_t s, const uint8_t* vals) override {
    if (!is_device(base)) return 3;
    scatters++;
    if (injected_failure()) return 7;
    kernels::cpu::scatter(static_cast<uint8_t*>(back(base)), pos, k, s, vals);
    return 0;
  }

 private:
  bool injected_failure() {
    int f = fail_scatter_after.load();
    while (f >= 0) {
      if (f == 0) return true;
      if (fail_scatter_after.compare_exchange_weak(f, f - 1)) return false;
    }
    return false;
  }
  void* back(const void* p) const {
    auto* b = static_cast<const uint8_t*>(p);
    return is_device(p) ? back_ + (b - dev_) : const_cast<void*>(p);
  }
  size_t cap_;
  int fd_ = -1;
  uint8_t* dev_ = nullptr;
  uint8_t* back_ = nullptr;
  std::mutex mu_;
  size_t top_ = 0;
};

// Installs a FakeDevice for the lifetime of the guard.
struct FakeDeviceScope {
  FakeDevice dev;
  FakeDeviceScope() { kernels::set_device_ops(&dev); }
  ~FakeDeviceScope() { kernels::set_device_ops(nullptr); }
};

}  // namespace sparrow::test
