// An allocator for large byte buffers (the encoder's shadow of the model): memory from mmap with
// transparent huge pages requested (one page fault per 2 MiB instead of per 4 KiB when the kernel
// allows it, "madvise" mode included), and elements left uninitialised on resize (the buffer is
// always written before it is read, so no zero-filling pass over gigabytes), on the NUMA node of the
// NIC sparrow's threads run near when one is known (core/affinity.h).
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>
#include <vector>

#include "core/affinity.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

namespace sparrow {

template <class T>
struct BigAlloc {
  using value_type = T;
  static constexpr size_t kMmapFrom = size_t(4) << 20;
  BigAlloc() = default;
  template <class U>
  BigAlloc(const BigAlloc<U>&) {}
  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kMmapFrom) return static_cast<T*>(::operator new(bytes));
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
#if defined(__SANITIZE_ADDRESS__)
    // Fresh pages are addressable, whatever AddressSanitizer's shadow still says of the range: memory
    // unmapped without the sanitizer hearing of it (glibc freeing thread stacks; in a forked child,
    // plausibly its parent's threads' stacks) keeps the shadow of its poisoned frames, and an mmap at
    // that address inherits it. A forked test rank's receive into its dense staging was reported in
    // "a stack" twice, ASan failing to describe it.
    ASAN_UNPOISON_MEMORY_REGION(p, bytes);
#endif
#ifdef MADV_HUGEPAGE
    ::madvise(p, bytes, MADV_HUGEPAGE);
#endif
    affinity::prefer_memory_node(p, bytes);  // near the NIC, before the first touch
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kMmapFrom) ::operator delete(p);
    else ::munmap(p, bytes);
  }
  template <class U>
  void construct(U* p) {
    ::new (static_cast<void*>(p)) U;  // default-initialisation: no zeroing
  }
  template <class U, class... A>
  void construct(U* p, A&&... a) {
    ::new (static_cast<void*>(p)) U(std::forward<A>(a)...);
  }
  template <class U>
  bool operator==(const BigAlloc<U>&) const { return true; }
};

using BigBytes = std::vector<uint8_t, BigAlloc<uint8_t>>;

}  // namespace sparrow
