// SPDX-License-Identifier: Apache-2.0
// BigAlloc (core/big_alloc.h): large buffers from mmap.
#include "core/big_alloc.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

namespace sparrow {
namespace {

TEST(BigAlloc, LargeBufferIsWritableAndSmallOneToo) {
  BigBytes big(size_t(8) << 20), small(100);
  memset(big.data(), 0xab, big.size());
  memset(small.data(), 0xcd, small.size());
  EXPECT_EQ(big[big.size() - 1], 0xab);
  EXPECT_EQ(small[99], 0xcd);
}

// A range whose shadow still says "poisoned" (as a thread stack's frames do when glibc unmaps the
// stack without AddressSanitizer hearing of it: the raw munmap below) is handed out again by mmap:
// the buffer is addressable all the same, and writing it is no report.
TEST(BigAlloc, MappedBufferIsAddressableWhateverTheSanitizerShadowSaid) {
#if !defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "needs AddressSanitizer (scripts/sanitize.sh asan)";
#else
  const size_t bytes = size_t(8) << 20;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  ASAN_POISON_MEMORY_REGION(p, bytes);
  ASSERT_EQ(syscall(SYS_munmap, p, bytes), 0);  // (not the intercepted munmap)
  BigBytes b(bytes);
  if (static_cast<void*>(b.data()) != p) GTEST_SKIP() << "mmap did not hand out the same range again";
  EXPECT_EQ(__asan_region_is_poisoned(b.data(), bytes), nullptr);
  memset(b.data(), 1, bytes);
  EXPECT_EQ(b[bytes - 1], 1);
#endif
}

}  // namespace
}  // namespace sparrow
