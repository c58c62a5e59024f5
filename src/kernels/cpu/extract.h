// CPU change extraction: the one pass over a chunk that finds changed elements.
//
// For n elements of `s` bytes (1, 2, 4 or 8), compares `cur` against `shadow` bit for bit; for every
// element that differs it appends the element index to pos, the old (shadow) bits to old_vals and the
// new bits to new_vals, and refreshes the shadow with the new bits. Returns the number of changes.
// pos, old_vals and new_vals need room for n entries. Unchanged shadow memory is only read.
//
// Three implementations with identical results: scalar (the oracle), AVX2, AVX-512 (BW). The best one
// the CPU supports is picked at run time; SPARROW_CPU_ISA=scalar|avx2|avx512 caps it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sparrow::kernels::cpu {

enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };
const char* isa_name(Isa i);
bool isa_supported(Isa i);
Isa best_isa();  // highest supported, capped by SPARROW_CPU_ISA

using ExtractFn = size_t (*)(const uint8_t* cur, uint8_t* shadow, uint32_t n, uint32_t s, uint32_t* pos,
                             uint8_t* old_vals, uint8_t* new_vals);
ExtractFn extract_fn(Isa i);

size_t extract_scalar(const uint8_t*, uint8_t*, uint32_t, uint32_t, uint32_t*, uint8_t*, uint8_t*);
size_t extract_avx2(const uint8_t*, uint8_t*, uint32_t, uint32_t, uint32_t*, uint8_t*, uint8_t*);
size_t extract_avx512(const uint8_t*, uint8_t*, uint32_t, uint32_t, uint32_t*, uint8_t*, uint8_t*);

// Shared tail/slow path: handles elements [from, n) one at a time, appending after `k` changes.
size_t extract_tail(const uint8_t* cur, uint8_t* shadow, uint32_t from, uint32_t n, uint32_t s, uint32_t* pos,
                    uint8_t* old_vals, uint8_t* new_vals, size_t k);

// The vector kernels read kExtractStepBytes of each array per step and ask for the lines
// kPrefetchAhead bytes ahead of it: 2 KB measured best on one core, about 1.4x (AVX2) and 1.14x
// (AVX-512) over leaving it to the hardware prefetchers (docs/codec.md).
constexpr uint32_t kExtractStepBytes = 256;
constexpr uint32_t kPrefetchAhead = 2048;

// Asks for the lines of one step kPrefetchAhead bytes past `p` (a hint: addresses past the end of
// the buffer are fine, they do not fault).
[[gnu::always_inline]] static inline void prefetch_step(const uint8_t* p) {
  const uintptr_t ahead = reinterpret_cast<uintptr_t>(p) + kPrefetchAhead;
  for (uint32_t l = 0; l < kExtractStepBytes; l += 64) __builtin_prefetch(reinterpret_cast<const void*>(ahead + l), 0, 3);
}

// (static: each ISA-specific file compiles its own copy with its own target flags.)
// Records the elements of one vector block whose bits differ, given a bitmask over the block's
// elements (bit j = element base + j differs).
[[gnu::always_inline]] static inline size_t record_mask(uint64_t mask, uint32_t base, const uint8_t* cur, uint8_t* shadow, uint32_t s,
                          uint32_t* pos, uint8_t* old_vals, uint8_t* new_vals, size_t k) {
  while (mask) {
    uint32_t i = base + uint32_t(__builtin_ctzll(mask));
    mask &= mask - 1;
    pos[k] = i;
    const uint8_t* c = cur + size_t(i) * s;
    uint8_t* sh = shadow + size_t(i) * s;
    switch (s) {
      case 1: old_vals[k] = *sh; new_vals[k] = *c; *sh = *c; break;
      case 2: __builtin_memcpy(old_vals + 2 * k, sh, 2); __builtin_memcpy(new_vals + 2 * k, c, 2); __builtin_memcpy(sh, c, 2); break;
      case 4: __builtin_memcpy(old_vals + 4 * k, sh, 4); __builtin_memcpy(new_vals + 4 * k, c, 4); __builtin_memcpy(sh, c, 4); break;
      default: __builtin_memcpy(old_vals + 8 * k, sh, 8); __builtin_memcpy(new_vals + 8 * k, c, 8); __builtin_memcpy(sh, c, 8); break;
    }
    ++k;
  }
  return k;
}

// Receiver side helpers: gather the bits at positions, scatter new bits to positions.
void gather(const uint8_t* src, const uint32_t* pos, size_t k, uint32_t s, uint8_t* out);
void scatter(uint8_t* dst, const uint32_t* pos, size_t k, uint32_t s, const uint8_t* vals);

}  // namespace sparrow::kernels::cpu
