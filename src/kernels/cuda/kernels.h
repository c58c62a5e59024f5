// CUDA kernels for the sparse delta checkpoint, with a CUB-shaped host API: ask for the scratch size,
// pass scratch memory and a stream; nothing allocates or synchronises behind the caller's back. All
// pointers are device pointers (or host memory the device can read, e.g. a pinned shadow); results
// are ready when the stream reaches them. Return values are cudaError_t codes (0 = success).
//
// The CPU kernels (src/kernels/cpu) are the oracle: tests/kernels/cuda compares them bit for bit.
// This header needs no CUDA headers, so host C++ code (and CPU-only builds of the tests) can use it.
#pragma once

#include <cstddef>
#include <cstdint>

struct CUstream_st;

namespace sparrow::kernels::cuda {

using Stream = CUstream_st*;

// Extraction of one chunk of n elements of s bytes (1, 2, 4, 8): for each i where cur[i] and
// shadow[i] differ bitwise, in increasing order, writes i to pos, the shadow's bits to old_vals and
// cur's bits to new_vals, and refreshes shadow[i]; *count (device) = number of changes. pos/old_vals/
// new_vals need room for n entries.
int extract_scratch_bytes(uint32_t n, uint32_t s, size_t* bytes);
int extract(const void* cur, void* shadow, uint32_t n, uint32_t s, uint32_t* pos, void* old_vals, void* new_vals,
            uint32_t* count, void* scratch, size_t scratch_bytes, Stream stream);

// Extraction of a whole buffer of n elements of s bytes, in chunks of chunk_elems (the last may be
// shorter), in two passes over the buffer rather than one call per chunk:
// - count_changes: chunk_offsets (device, nchunks + 1 entries) = where each chunk's changes start in
//   the buffer's list of changes; the last entry is the total. Reads only.
// - collect_changes (after count_changes, same scratch, nothing in between): for every change, in
//   increasing order, its position within its chunk to pos, the shadow's bits to old_vals, cur's bits
//   to new_vals (room for the total), and refreshes the shadow.
int changes_scratch_bytes(uint64_t n, uint32_t chunk_elems, size_t* bytes);
int count_changes(const void* cur, const void* shadow, uint64_t n, uint32_t s, uint32_t chunk_elems,
                  uint64_t* chunk_offsets, void* scratch, size_t scratch_bytes, Stream stream);
int collect_changes(const void* cur, void* shadow, uint64_t n, uint32_t s, uint32_t chunk_elems, uint32_t* pos,
                    void* old_vals, void* new_vals, void* scratch, size_t scratch_bytes, Stream stream);

// The format's leb128 index codec (docs/format.md: gaps pos[0], pos[i] - pos[i-1] - 1, unsigned
// LEB128) for the *count (device) positions at pos; at most max_k. out needs 5 * max_k bytes;
// *out_bytes (device) = encoded length. Byte-identical to format::encode_index(kLeb128, ...).
int leb128_scratch_bytes(uint32_t max_k, size_t* bytes);
int encode_leb128(const uint32_t* pos, const uint32_t* count, uint32_t max_k, uint8_t* out, uint32_t* out_bytes,
                  void* scratch, size_t scratch_bytes, Stream stream);

// Block sums (format/block_sum.h) of the consecutive blocks of block_bytes bytes of the `bytes` bytes at
// p (the last block may be shorter): sums (device) gets 2 * nblocks lanes, lane a of block b at
// sums[2b], lane b at sums[2b + 1]; the 64-bit sum is (a << 32) | b. Any alignment of p.
int block_sums(const void* p, uint64_t bytes, uint64_t block_bytes, uint32_t* sums, Stream stream);

// Receivers: out[j] = base[pos[j]] and base[pos[j]] = vals[j], for j < k, elements of s bytes.
int gather(const void* base, const uint32_t* pos, uint32_t k, uint32_t s, void* out, Stream stream);
int scatter(void* base, const uint32_t* pos, uint32_t k, uint32_t s, const void* vals, Stream stream);

}  // namespace sparrow::kernels::cuda
