#include "kernels/cuda/kernels.h"

#include <cuda_runtime.h>

#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>
#include <thrust/iterator/counting_iterator.h>

namespace sparrow::kernels::cuda {
namespace {

constexpr int kThreads = 256;
inline unsigned blocks_for(uint64_t n) { return unsigned((n + kThreads - 1) / kThreads); }
inline size_t align_up(size_t x) { return (x + 255) & ~size_t(255); }

// Bitwise comparison through the unsigned integer of the element's size: no float semantics, so
// -0.0 vs +0.0 and NaN payloads count as changes exactly as on the CPU.
template <typename T>
struct Differs {
  const T* cur;
  const T* shadow;
  __device__ __forceinline__ bool operator()(uint32_t i) const { return cur[i] != shadow[i]; }
};

template <typename T>
__global__ void finish_extract(const T* __restrict__ cur, T* __restrict__ shadow, const uint32_t* __restrict__ pos,
                               const uint32_t* __restrict__ count, T* __restrict__ old_vals, T* __restrict__ new_vals) {
  uint32_t j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= *count) return;
  uint32_t i = pos[j];
  T nv = cur[i];
  old_vals[j] = shadow[i];
  new_vals[j] = nv;
  shadow[i] = nv;
}

template <typename T>
int select_changes(void* temp, size_t& temp_bytes, const T* cur, const T* shadow, uint32_t n, uint32_t* pos,
                   uint32_t* count, cudaStream_t st) {
  return int(cub::DeviceSelect::If(temp, temp_bytes, thrust::counting_iterator<uint32_t>(0), pos, count, n,
                                   Differs<T>{cur, shadow}, st));
}

template <typename T>
int extract_t(const void* cur, void* shadow, uint32_t n, uint32_t* pos, void* old_vals, void* new_vals,
              uint32_t* count, void* scratch, size_t scratch_bytes, cudaStream_t st) {
  if (n == 0) return int(cudaMemsetAsync(count, 0, sizeof(uint32_t), st));
  size_t need = 0;
  int e = select_changes<T>(nullptr, need, nullptr, nullptr, n, nullptr, nullptr, st);
  if (e) return e;
  if (scratch_bytes < need) return int(cudaErrorInvalidValue);
  e = select_changes<T>(scratch, need, static_cast<const T*>(cur), static_cast<const T*>(shadow), n, pos, count, st);
  if (e) return e;
  finish_extract<T><<<blocks_for(n), kThreads, 0, st>>>(static_cast<const T*>(cur), static_cast<T*>(shadow), pos,
                                                           count, static_cast<T*>(old_vals), static_cast<T*>(new_vals));
  return int(cudaGetLastError());
}

__device__ __forceinline__ uint32_t gap_at(const uint32_t* pos, uint32_t j) {
  return j == 0 ? pos[0] : pos[j] - pos[j - 1] - 1;
}
__device__ __forceinline__ uint32_t leb_len(uint32_t v) {
  return v < (1u << 7) ? 1 : v < (1u << 14) ? 2 : v < (1u << 21) ? 3 : v < (1u << 28) ? 4 : 5;
}

__global__ void leb_sizes(const uint32_t* pos, const uint32_t* count, uint32_t max_k, uint32_t* sizes) {
  uint32_t j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= max_k) return;
  sizes[j] = j < *count ? leb_len(gap_at(pos, j)) : 0;
}

__global__ void leb_write(const uint32_t* pos, const uint32_t* count, const uint32_t* sizes, const uint32_t* offsets,
                          uint8_t* out, uint32_t* out_bytes) {
  uint32_t j = blockIdx.x * blockDim.x + threadIdx.x;
  const uint32_t k = *count;
  if (j == 0 && k == 0) *out_bytes = 0;
  if (j >= k) return;
  uint32_t v = gap_at(pos, j);
  uint8_t* o = out + offsets[j];
  while (v >= 0x80) {
    *o++ = uint8_t(v | 0x80);
    v >>= 7;
  }
  *o = uint8_t(v);
  if (j == k - 1) *out_bytes = offsets[j] + sizes[j];
}

template <typename T>
__global__ void gather_k(const T* __restrict__ base, const uint32_t* __restrict__ pos, uint32_t k, T* __restrict__ out) {
  uint32_t j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j < k) out[j] = base[pos[j]];
}

template <typename T>
__global__ void scatter_k(T* __restrict__ base, const uint32_t* __restrict__ pos, uint32_t k, const T* __restrict__ vals) {
  uint32_t j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j < k) base[pos[j]] = vals[j];
}

template <template <typename> class F, typename... A>
int by_size(uint32_t s, A... a) {
  switch (s) {
    case 1: return F<uint8_t>::run(a...);
    case 2: return F<uint16_t>::run(a...);
    case 4: return F<uint32_t>::run(a...);
    case 8: return F<uint64_t>::run(a...);
  }
  return int(cudaErrorInvalidValue);
}

template <typename T>
struct ScratchOf {
  static int run(uint32_t n, size_t* bytes) {
    *bytes = 0;
    return select_changes<T>(nullptr, *bytes, nullptr, nullptr, n, nullptr, nullptr, nullptr);
  }
};
template <typename T>
struct Extract {
  static int run(const void* cur, void* shadow, uint32_t n, uint32_t* pos, void* o, void* nw, uint32_t* count,
                 void* scratch, size_t sb, cudaStream_t st) {
    return extract_t<T>(cur, shadow, n, pos, o, nw, count, scratch, sb, st);
  }
};
template <typename T>
struct Gather {
  static int run(const void* base, const uint32_t* pos, uint32_t k, void* out, cudaStream_t st) {
    if (k == 0) return 0;
    gather_k<T><<<blocks_for(k), kThreads, 0, st>>>(static_cast<const T*>(base), pos, k, static_cast<T*>(out));
    return int(cudaGetLastError());
  }
};
template <typename T>
struct Scatter {
  static int run(void* base, const uint32_t* pos, uint32_t k, const void* vals, cudaStream_t st) {
    if (k == 0) return 0;
    scatter_k<T><<<blocks_for(k), kThreads, 0, st>>>(static_cast<T*>(base), pos, k, static_cast<const T*>(vals));
    return int(cudaGetLastError());
  }
};

}  // namespace

int extract_scratch_bytes(uint32_t n, uint32_t s, size_t* bytes) { return by_size<ScratchOf>(s, n, bytes); }

int extract(const void* cur, void* shadow, uint32_t n, uint32_t s, uint32_t* pos, void* old_vals, void* new_vals,
            uint32_t* count, void* scratch, size_t scratch_bytes, Stream stream) {
  return by_size<Extract>(s, cur, shadow, n, pos, old_vals, new_vals, count, scratch, scratch_bytes,
                          static_cast<cudaStream_t>(stream));
}

int leb128_scratch_bytes(uint32_t max_k, size_t* bytes) {
  size_t scan = 0;
  int e = int(cub::DeviceScan::ExclusiveSum(nullptr, scan, static_cast<uint32_t*>(nullptr),
                                            static_cast<uint32_t*>(nullptr), max_k ? max_k : 1));
  *bytes = 2 * align_up(size_t(max_k ? max_k : 1) * sizeof(uint32_t)) + align_up(scan);
  return e;
}

int encode_leb128(const uint32_t* pos, const uint32_t* count, uint32_t max_k, uint8_t* out, uint32_t* out_bytes,
                  void* scratch, size_t scratch_bytes, Stream stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  size_t need = 0;
  if (int e = leb128_scratch_bytes(max_k, &need)) return e;
  if (scratch_bytes < need) return int(cudaErrorInvalidValue);
  const uint32_t m = max_k ? max_k : 1;
  auto* sizes = static_cast<uint32_t*>(scratch);
  auto* offsets = reinterpret_cast<uint32_t*>(static_cast<char*>(scratch) + align_up(m * sizeof(uint32_t)));
  void* temp = static_cast<char*>(scratch) + 2 * align_up(m * sizeof(uint32_t));
  size_t temp_bytes = scratch_bytes - 2 * align_up(m * sizeof(uint32_t));
  leb_sizes<<<blocks_for(m), kThreads, 0, st>>>(pos, count, max_k, sizes);
  if (max_k == 0) cudaMemsetAsync(sizes, 0, sizeof(uint32_t), st);
  if (int e = int(cub::DeviceScan::ExclusiveSum(temp, temp_bytes, sizes, offsets, m, st))) return e;
  leb_write<<<blocks_for(m), kThreads, 0, st>>>(pos, count, sizes, offsets, out, out_bytes);
  return int(cudaGetLastError());
}

int gather(const void* base, const uint32_t* pos, uint32_t k, uint32_t s, void* out, Stream stream) {
  return by_size<Gather>(s, base, pos, k, out, static_cast<cudaStream_t>(stream));
}

int scatter(void* base, const uint32_t* pos, uint32_t k, uint32_t s, const void* vals, Stream stream) {
  return by_size<Scatter>(s, base, pos, k, vals, static_cast<cudaStream_t>(stream));
}

}  // namespace sparrow::kernels::cuda
