#include "kernels/cpu/extract.h"

#include <cstring>

#include "core/params.h"

namespace sparrow::kernels::cpu {
namespace {
params::StringParam kCpuIsa("CPU_ISA", "auto", "Highest CPU instruction set for extraction kernels.",
                            {"auto", "scalar", "avx2", "avx512"});
}

const char* isa_name(Isa i) {
  switch (i) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "?";
}

bool isa_supported(Isa i) {
  __builtin_cpu_init();
  switch (i) {
    case Isa::kScalar: return true;
    case Isa::kAvx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi2");
    case Isa::kAvx512: return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                              __builtin_cpu_supports("avx512vl");
  }
  return false;
}

Isa best_isa() {
  std::string cap = kCpuIsa.get();
  Isa limit = cap == "scalar" ? Isa::kScalar : cap == "avx2" ? Isa::kAvx2 : Isa::kAvx512;
  for (int i = int(limit); i > 0; --i)
    if (isa_supported(Isa(i))) return Isa(i);
  return Isa::kScalar;
}

ExtractFn extract_fn(Isa i) {
  switch (i) {
    case Isa::kAvx512: return extract_avx512;
    case Isa::kAvx2: return extract_avx2;
    default: return extract_scalar;
  }
}

size_t extract_tail(const uint8_t* cur, uint8_t* shadow, uint32_t from, uint32_t n, uint32_t s, uint32_t* pos,
                    uint8_t* old_vals, uint8_t* new_vals, size_t k) {
  for (uint32_t i = from; i < n; ++i) {
    const uint8_t* c = cur + size_t(i) * s;
    uint8_t* sh = shadow + size_t(i) * s;
    if (memcmp(c, sh, s) != 0) {
      pos[k] = i;
      memcpy(old_vals + k * s, sh, s);
      memcpy(new_vals + k * s, c, s);
      memcpy(sh, c, s);
      ++k;
    }
  }
  return k;
}

namespace {
template <typename T>
size_t extract_scalar_t(const uint8_t* cur, uint8_t* shadow, uint32_t n, uint32_t* pos, uint8_t* oldv,
                        uint8_t* newv) {
  size_t k = 0;
  for (uint32_t i = 0; i < n; ++i) {
    T a, b;
    memcpy(&a, cur + size_t(i) * sizeof(T), sizeof(T));
    memcpy(&b, shadow + size_t(i) * sizeof(T), sizeof(T));
    if (a != b) {
      pos[k] = i;
      memcpy(oldv + k * sizeof(T), &b, sizeof(T));
      memcpy(newv + k * sizeof(T), &a, sizeof(T));
      memcpy(shadow + size_t(i) * sizeof(T), &a, sizeof(T));
      ++k;
    }
  }
  return k;
}
}  // namespace

size_t extract_scalar(const uint8_t* cur, uint8_t* shadow, uint32_t n, uint32_t s, uint32_t* pos, uint8_t* oldv,
                      uint8_t* newv) {
  switch (s) {
    case 1: return extract_scalar_t<uint8_t>(cur, shadow, n, pos, oldv, newv);
    case 2: return extract_scalar_t<uint16_t>(cur, shadow, n, pos, oldv, newv);
    case 4: return extract_scalar_t<uint32_t>(cur, shadow, n, pos, oldv, newv);
    default: return extract_scalar_t<uint64_t>(cur, shadow, n, pos, oldv, newv);
  }
}

void gather(const uint8_t* src, const uint32_t* pos, size_t k, uint32_t s, uint8_t* out) {
  switch (s) {
    case 1: for (size_t i = 0; i < k; ++i) out[i] = src[pos[i]]; break;
    case 2: for (size_t i = 0; i < k; ++i) memcpy(out + 2 * i, src + 2 * size_t(pos[i]), 2); break;
    case 4: for (size_t i = 0; i < k; ++i) memcpy(out + 4 * i, src + 4 * size_t(pos[i]), 4); break;
    default: for (size_t i = 0; i < k; ++i) memcpy(out + 8 * i, src + 8 * size_t(pos[i]), 8); break;
  }
}

namespace {

// The positions of a chunk's changes increase, but ~100 elements apart at 1% density: too irregular
// for the hardware prefetchers, so each write is a cache miss (a read for ownership) of its own.
// Asking for the line kScatterAhead positions ahead keeps that many in flight: the write pass went
// from 13.2 to 6.9 ns per change on one core (sparrow-codec-bench, docs/codec.md). (The same for
// gather's reads made no difference there.)
constexpr size_t kScatterAhead = 16;

template <typename T>
void scatter_t(uint8_t* dst, const uint32_t* pos, size_t k, const uint8_t* vals) {
  size_t i = 0;
  for (; i + kScatterAhead < k; ++i) {
    __builtin_prefetch(dst + sizeof(T) * size_t(pos[i + kScatterAhead]), 1);
    memcpy(dst + sizeof(T) * size_t(pos[i]), vals + sizeof(T) * i, sizeof(T));
  }
  for (; i < k; ++i) memcpy(dst + sizeof(T) * size_t(pos[i]), vals + sizeof(T) * i, sizeof(T));
}

}  // namespace

void scatter(uint8_t* dst, const uint32_t* pos, size_t k, uint32_t s, const uint8_t* vals) {
  switch (s) {
    case 1: return scatter_t<uint8_t>(dst, pos, k, vals);
    case 2: return scatter_t<uint16_t>(dst, pos, k, vals);
    case 4: return scatter_t<uint32_t>(dst, pos, k, vals);
    default: return scatter_t<uint64_t>(dst, pos, k, vals);
  }
}

}  // namespace sparrow::kernels::cpu
