#include "kernels/cuda/kernels.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>
#include <thrust/iterator/counting_iterator.h>

#include "format/block_sum.h"

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

// ---- whole-buffer extraction: tiles of kTile elements that never straddle a chunk; a thread holds
// kItems consecutive elements of its tile (vector loads when aligned), so a tile's changes are ranked
// in order by one block scan.
constexpr unsigned kItems = 16, kTile = kThreads * kItems;

struct Tiling {
  uint64_t n;
  uint32_t ce;
  uint32_t tiles_per_chunk;
  uint64_t ntiles;
  bool vec;  // cur and shadow 16-byte aligned at every tile start
};

Tiling tiling(const void* cur, const void* shadow, uint64_t n, uint32_t s, uint32_t ce) {
  Tiling t{n, ce, (ce + kTile - 1) / kTile, 0, false};
  const uint64_t nchunks = (n + ce - 1) / ce;
  t.ntiles = nchunks * t.tiles_per_chunk;
  t.vec = (reinterpret_cast<uintptr_t>(cur) | reinterpret_cast<uintptr_t>(shadow)) % 16 == 0 && (uint64_t(ce) * s) % 16 == 0;
  return t;
}

// The tile's first element (global) and its element count (0 for a tile past a short last chunk).
__device__ __forceinline__ uint64_t tile_span(const Tiling& t, uint64_t tile, uint32_t* in_chunk, uint32_t* count) {
  const uint64_t c = tile / t.tiles_per_chunk;
  const uint32_t j = uint32_t(tile % t.tiles_per_chunk) * kTile;
  const uint64_t chunk_n = min(uint64_t(t.ce), t.n - c * t.ce);
  *in_chunk = j;
  *count = j < chunk_n ? uint32_t(min(uint64_t(kTile), chunk_n - j)) : 0;
  return c * t.ce + j;
}

// A thread's kItems elements, loadable as 16-byte vectors.
template <typename T>
union Items {
  uint4 v[kItems * sizeof(T) / 16];
  T e[kItems];
};

// This thread's kItems elements of the tile at p (those past m read as zero).
template <typename T>
__device__ __forceinline__ void load_items(const T* p, uint32_t first, uint32_t m, bool vec, Items<T>& x) {
  if (vec && first + kItems <= m) {
    const uint4* v = reinterpret_cast<const uint4*>(p + first);
#pragma unroll
    for (unsigned i = 0; i < kItems * sizeof(T) / 16; ++i) x.v[i] = v[i];
    return;
  }
#pragma unroll
  for (unsigned i = 0; i < kItems; ++i) x.e[i] = first + i < m ? p[first + i] : T(0);
}

template <typename T>
__device__ __forceinline__ uint32_t diff_mask(const T* cur, const T* shadow, uint64_t g, uint32_t m, bool vec, Items<T>& c,
                                              Items<T>& o) {
  const uint32_t first = threadIdx.x * kItems;
  load_items(cur + g, first, m, vec, c);
  load_items(shadow + g, first, m, vec, o);
  uint32_t mask = 0;
#pragma unroll
  for (unsigned i = 0; i < kItems; ++i) mask |= uint32_t(c.e[i] != o.e[i]) << i;
  return mask;
}

template <typename T>
__global__ void count_k(const T* __restrict__ cur, const T* __restrict__ shadow, Tiling t, uint64_t* __restrict__ counts) {
  using Reduce = cub::BlockReduce<uint32_t, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  for (uint64_t tile = blockIdx.x; tile < t.ntiles; tile += gridDim.x) {
    uint32_t j = 0, m = 0;
    const uint64_t g = tile_span(t, tile, &j, &m);
    Items<T> c, o;
    const uint32_t k = m ? __popc(diff_mask(cur, shadow, g, m, t.vec, c, o)) : 0;
    const uint32_t sum = Reduce(tmp).Sum(k);
    if (threadIdx.x == 0) counts[tile] = sum;
    __syncthreads();  // tmp is reused by the next tile
  }
}

template <typename T>
__global__ void collect_k(const T* __restrict__ cur, T* __restrict__ shadow, Tiling t, const uint64_t* __restrict__ offsets,
                          uint32_t* __restrict__ pos, T* __restrict__ old_vals, T* __restrict__ new_vals) {
  using Scan = cub::BlockScan<uint32_t, kThreads>;
  __shared__ typename Scan::TempStorage tmp;
  for (uint64_t tile = blockIdx.x; tile < t.ntiles; tile += gridDim.x) {
    uint32_t j = 0, m = 0;
    const uint64_t g = tile_span(t, tile, &j, &m);
    if (m == 0) continue;  // the same for every thread of the block
    Items<T> c, o;
    uint32_t mask = diff_mask(cur, shadow, g, m, t.vec, c, o), rank = 0;
    Scan(tmp).ExclusiveSum(uint32_t(__popc(mask)), rank);
    uint64_t at = offsets[tile] + rank;
    const uint32_t first = threadIdx.x * kItems;
#pragma unroll
    for (unsigned i = 0; i < kItems; ++i) {
      if (!(mask >> i & 1)) continue;
      pos[at] = j + first + i;
      old_vals[at] = o.e[i];
      new_vals[at] = c.e[i];
      shadow[g + first + i] = c.e[i];
      ++at;
    }
    __syncthreads();
  }
}

// chunk_offsets[c] = the offset of the chunk's first tile; the last entry is the total.
__global__ void chunk_offsets_k(const uint64_t* counts, const uint64_t* offsets, Tiling t, uint64_t nchunks, uint64_t* out) {
  const uint64_t c = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c < nchunks) out[c] = offsets[c * t.tiles_per_chunk];
  if (c == nchunks) out[c] = t.ntiles ? offsets[t.ntiles - 1] + counts[t.ntiles - 1] : 0;
}

unsigned tile_grid(uint64_t ntiles) { return unsigned(std::min<uint64_t>(ntiles ? ntiles : 1, 1u << 16)); }

template <typename T>
struct CountChanges {
  static int run(const void* cur, const void* shadow, const Tiling& t, uint64_t* counts, cudaStream_t st) {
    count_k<T><<<tile_grid(t.ntiles), kThreads, 0, st>>>(static_cast<const T*>(cur), static_cast<const T*>(shadow), t, counts);
    return int(cudaGetLastError());
  }
};
template <typename T>
struct CollectChanges {
  static int run(const void* cur, void* shadow, const Tiling& t, const uint64_t* offsets, uint32_t* pos, void* o, void* nw,
                 cudaStream_t st) {
    collect_k<T><<<tile_grid(t.ntiles), kThreads, 0, st>>>(static_cast<const T*>(cur), static_cast<T*>(shadow), t, offsets,
                                                           pos, static_cast<T*>(o), static_cast<T*>(nw));
    return int(cudaGetLastError());
  }
};

// Scratch: tile counts, tile offsets, the scan's temporary storage.
struct ChangesScratch {
  uint64_t* counts;
  uint64_t* offsets;
  void* temp;
  size_t temp_bytes;
};
int changes_layout(uint64_t ntiles, void* scratch, size_t scratch_bytes, ChangesScratch* out) {
  const uint64_t m = ntiles ? ntiles : 1;
  size_t scan = 0;
  int e = int(cub::DeviceScan::ExclusiveSum(nullptr, scan, static_cast<uint64_t*>(nullptr), static_cast<uint64_t*>(nullptr), m));
  if (e) return e;
  const size_t need = 2 * align_up(m * 8) + align_up(scan);
  if (!scratch) {
    out->temp_bytes = need;
    return 0;
  }
  if (scratch_bytes < need) return int(cudaErrorInvalidValue);
  auto* b = static_cast<char*>(scratch);
  *out = {reinterpret_cast<uint64_t*>(b), reinterpret_cast<uint64_t*>(b + align_up(m * 8)), b + 2 * align_up(m * 8), scan};
  return 0;
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

// ---- block sums: one warp sums a run of windows of one block, each lane a slice of every window.
namespace bs = format::block_sum_detail;
constexpr unsigned kWindowBytes = 2 * bs::kWindowWords;  // 1 KiB: 32 lanes x 2 x 16 bytes
constexpr unsigned kRunWindows = 16;                     // windows per warp task (one atomic per lane a/b)

struct SumWeights {
  int16_t a[bs::kWindowWords];
  int16_t b[bs::kWindowWords];
};

__device__ __forceinline__ void madd8(uint4 x, const int16_t* wa, const int16_t* wb, uint32_t& sa, uint32_t& sb) {
  const uint32_t v[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int32_t lo = int16_t(v[i] & 0xffff), hi = int16_t(v[i] >> 16);
    sa += uint32_t(int32_t(wa[2 * i]) * lo + int32_t(wa[2 * i + 1]) * hi);
    sb += uint32_t(int32_t(wb[2 * i]) * lo + int32_t(wb[2 * i + 1]) * hi);
  }
}

// This lane's share of the inner sums of one window of `bytes` bytes at w (bytes < 1 KiB or unaligned).
__device__ __forceinline__ void window_slice_bytes(const uint8_t* w, uint32_t bytes, const int16_t* wa,
                                                   const int16_t* wb, unsigned lane, uint32_t& sa, uint32_t& sb) {
  for (uint32_t q = lane; 2 * q < bytes; q += 32) {
    uint16_t v = w[2 * q];
    if (2 * q + 1 < bytes) v = uint16_t(v | uint16_t(w[2 * q + 1]) << 8);
    const int32_t x = int16_t(v);
    sa += uint32_t(int32_t(wa[q]) * x);
    sb += uint32_t(int32_t(wb[q]) * x);
  }
}

__global__ void block_sums_k(const uint8_t* __restrict__ p, uint64_t bytes, uint64_t block_bytes, uint64_t wpb,
                             uint64_t runs_per_block, uint64_t runs, SumWeights wt, uint32_t* __restrict__ sums) {
  __shared__ __align__(16) int16_t wa[bs::kWindowWords], wb[bs::kWindowWords];
  for (unsigned i = threadIdx.x; i < bs::kWindowWords; i += blockDim.x) {
    wa[i] = wt.a[i];
    wb[i] = wt.b[i];
  }
  __syncthreads();
  const unsigned lane = threadIdx.x & 31, warps = blockDim.x / 32;
  const bool vec = (reinterpret_cast<uintptr_t>(p) % 16) == 0 && block_bytes % 16 == 0;
  for (uint64_t r = uint64_t(blockIdx.x) * warps + threadIdx.x / 32; r < runs; r += uint64_t(gridDim.x) * warps) {
    const uint64_t blk = r / runs_per_block, w0 = (r % runs_per_block) * kRunWindows;
    const uint64_t bbeg = blk * block_bytes, bend = min(bbeg + block_bytes, bytes);
    uint32_t ha = 0, hb = 0;
    for (uint64_t w = w0; w < min(w0 + kRunWindows, wpb); ++w) {
      const uint64_t beg = bbeg + w * kWindowBytes;
      if (beg >= bend) break;
      const uint32_t n = uint32_t(min(uint64_t(kWindowBytes), bend - beg));
      uint32_t sa = 0, sb = 0;
      if (vec && n == kWindowBytes) {
        const uint4* v = reinterpret_cast<const uint4*>(p + beg);
        const uint4 x0 = __ldg(v + lane), x1 = __ldg(v + 32 + lane);
        madd8(x0, wa + 8 * lane, wb + 8 * lane, sa, sb);
        madd8(x1, wa + 8 * (32 + lane), wb + 8 * (32 + lane), sa, sb);
      } else {
        window_slice_bytes(p + beg, n, wa, wb, lane, sa, sb);
      }
      ha += bs::key_a(w) * sa;  // the key multiplies the lane sums: linear, so reduce once at the end
      hb += bs::key_b(w) * sb;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      ha += __shfl_xor_sync(0xffffffffu, ha, o);
      hb += __shfl_xor_sync(0xffffffffu, hb, o);
    }
    if (lane == 0) {
      atomicAdd(&sums[2 * blk], ha);
      atomicAdd(&sums[2 * blk + 1], hb);
    }
  }
}

SumWeights sum_weights() {
  static constexpr std::array<int16_t, bs::kWindowWords> a = bs::make_weights(bs::kSeedA), b = bs::make_weights(bs::kSeedB);
  SumWeights w{};
  for (unsigned i = 0; i < bs::kWindowWords; ++i) {
    w.a[i] = a[i];
    w.b[i] = b[i];
  }
  return w;
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

int changes_scratch_bytes(uint64_t n, uint32_t chunk_elems, size_t* bytes) {
  if (!chunk_elems) return int(cudaErrorInvalidValue);
  ChangesScratch l{};
  const int e = changes_layout(tiling(nullptr, nullptr, n, 1, chunk_elems).ntiles, nullptr, 0, &l);
  *bytes = l.temp_bytes;
  return e;
}

int count_changes(const void* cur, const void* shadow, uint64_t n, uint32_t s, uint32_t chunk_elems,
                  uint64_t* chunk_offsets, void* scratch, size_t scratch_bytes, Stream stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (!chunk_elems) return int(cudaErrorInvalidValue);
  const Tiling t = tiling(cur, shadow, n, s, chunk_elems);
  ChangesScratch l{};
  if (int e = changes_layout(t.ntiles, scratch, scratch_bytes, &l)) return e;
  const uint64_t nchunks = (n + chunk_elems - 1) / chunk_elems;
  if (t.ntiles) {
    if (int e = by_size<CountChanges>(s, cur, shadow, t, l.counts, st)) return e;
    if (int e = int(cub::DeviceScan::ExclusiveSum(l.temp, l.temp_bytes, l.counts, l.offsets, t.ntiles, st))) return e;
  }
  chunk_offsets_k<<<unsigned((nchunks + 1 + kThreads - 1) / kThreads), kThreads, 0, st>>>(l.counts, l.offsets, t, nchunks,
                                                                                         chunk_offsets);
  return int(cudaGetLastError());
}

int collect_changes(const void* cur, void* shadow, uint64_t n, uint32_t s, uint32_t chunk_elems, uint32_t* pos,
                    void* old_vals, void* new_vals, void* scratch, size_t scratch_bytes, Stream stream) {
  if (!chunk_elems) return int(cudaErrorInvalidValue);
  const Tiling t = tiling(cur, shadow, n, s, chunk_elems);
  ChangesScratch l{};
  if (int e = changes_layout(t.ntiles, scratch, scratch_bytes, &l)) return e;
  if (!t.ntiles) return 0;
  return by_size<CollectChanges>(s, cur, shadow, t, l.offsets, pos, old_vals, new_vals, static_cast<cudaStream_t>(stream));
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

int block_sums(const void* p, uint64_t bytes, uint64_t block_bytes, uint32_t* sums, Stream stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (block_bytes == 0) return int(cudaErrorInvalidValue);
  const uint64_t nblocks = (bytes + block_bytes - 1) / block_bytes;
  if (nblocks == 0) return 0;
  if (int e = int(cudaMemsetAsync(sums, 0, nblocks * 2 * sizeof(uint32_t), st))) return e;
  const uint64_t wpb = (block_bytes + kWindowBytes - 1) / kWindowBytes, rpb = (wpb + kRunWindows - 1) / kRunWindows;
  const uint64_t runs = nblocks * rpb, warps = kThreads / 32;
  const unsigned grid = unsigned(std::min<uint64_t>((runs + warps - 1) / warps, 1u << 16));
  static const SumWeights wt = sum_weights();
  block_sums_k<<<grid, kThreads, 0, st>>>(static_cast<const uint8_t*>(p), bytes, block_bytes, wpb, rpb, runs, wt, sums);
  return int(cudaGetLastError());
}

int gather(const void* base, const uint32_t* pos, uint32_t k, uint32_t s, void* out, Stream stream) {
  return by_size<Gather>(s, base, pos, k, out, static_cast<cudaStream_t>(stream));
}

int scatter(void* base, const uint32_t* pos, uint32_t k, uint32_t s, const void* vals, Stream stream) {
  return by_size<Scatter>(s, base, pos, k, vals, static_cast<cudaStream_t>(stream));
}

}  // namespace sparrow::kernels::cuda
