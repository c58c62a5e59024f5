// Device (GPU) memory behind one small interface, so that the codec and the collectives handle device
// buffers without depending on CUDA at build or load time.
//
// The CUDA implementation lives in libsparrow_cuda.so (src/kernels/cuda/), built when nvcc is found,
// and is loaded with dlopen the first time a collective asks (SPARROW_CUDA=0 turns that off). Without
// it, or without a usable GPU, device_ops() is null and every pointer is a host pointer. Tests install
// a host-memory stand-in with set_device_ops() whose "device" addresses fault when the host touches
// them, so the plumbing is checked on machines without a GPU.
//
// Threading: every method may be called from several threads at once (the encoder's workers); each
// call is synchronous for its calling thread (results are in host memory when it returns). Methods
// return 0 on success or a backend error code that error_string() describes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace sparrow::kernels {

class DeviceOps {
 public:
  virtual ~DeviceOps() = default;
  virtual const char* name() const = 0;
  virtual std::string error_string(int err) const = 0;
  // True for memory the host must not dereference (device or managed memory).
  virtual bool is_device(const void* p) const = 0;
  // Waits until the work queued on `stream` (a cudaStream_t; null: the default stream) is done.
  virtual int sync_stream(void* stream) = 0;
  // The root's shadow copy: device memory, or pinned host memory the device can read (`host`).
  virtual int alloc(void** p, size_t bytes, bool host) = 0;
  virtual void free(void* p, bool host) = 0;
  // Copies between any two of host and device memory.
  virtual int copy(void* dst, const void* src, size_t bytes) = 0;
  // One chunk of extraction (the contract of kernels::cpu::extract_scalar, with `cur` and `shadow` on
  // the device or `shadow` in pinned host memory): pos/old_vals/new_vals are host arrays of n entries.
  virtual int extract(const void* cur, void* shadow, uint32_t n, uint32_t s, uint32_t* pos, uint8_t* old_vals,
                      uint8_t* new_vals, size_t* changes) = 0;
  // Extraction of a whole device buffer of n elements in chunks of chunk_elems (the last may be
  // shorter) in two passes over it on the device, instead of one round trip per chunk. chunk_offsets
  // (host, nchunks + 1 entries) gets where each chunk's changes start in the buffer's list of changes;
  // the last entry is the total. When the total fits in `capacity`, pos (positions within their
  // chunk), old_vals and new_vals (host arrays; pinned ones are filled fastest) get every change in
  // order and the shadow is refreshed; otherwise both are left as they were.
  virtual int extract_chunks(const void* cur, void* shadow, uint64_t n, uint32_t s, uint32_t chunk_elems,
                             uint64_t* chunk_offsets, uint32_t* pos, uint8_t* old_vals, uint8_t* new_vals,
                             uint64_t capacity) = 0;
  // Block sums (format/block_sum.h) of the consecutive blocks of block_bytes bytes of the `bytes`
  // bytes at `base` (device memory; the last block may be shorter) into the host array `out` of
  // ceil(bytes / block_bytes) entries. Only the sums cross to the host: base verification of a device
  // buffer costs a read of it on the device, not a copy of it.
  virtual int block_sums(const void* base, size_t bytes, size_t block_bytes, uint64_t* out) = 0;
  // Receiver side, `base` on the device, positions and values in host memory.
  virtual int gather(const void* base, const uint32_t* pos, size_t k, uint32_t s, uint8_t* out) = 0;
  virtual int scatter(void* base, const uint32_t* pos, size_t k, uint32_t s, const uint8_t* vals) = 0;
  // The PCI bus id (dddd:bb:dd.f) of the calling thread's current device, "" when it has none: the
  // GPU whose nearest NIC a communicator listens on (topology/nic.h).
  virtual std::string pci_bus_id() const { return ""; }
};

// The process's device backend (loaded once), or null when there is none.
DeviceOps* device_ops();
// Tests: replaces the backend (null restores "none"); not thread-safe against running collectives.
void set_device_ops(DeviceOps* ops);
// The calling thread's current GPU's PCI bus id as the backend writes it ("" without a device backend).
std::string current_gpu_pci();
// Why device_ops() is null (for error messages), e.g. "libsparrow_cuda.so not found".
std::string device_unavailable_reason();

inline bool is_device(const DeviceOps* d, const void* p) { return d && p && d->is_device(p); }
// Wraps a backend error code as a Status naming the operation.
Status device_error(const DeviceOps* d, int err, const char* what);
// memcpy that also handles device memory on either side.
Status copy_any(void* dst, const void* src, size_t bytes);

// SPARROW_GPU_SHADOW=device|host: where the root keeps the shadow of a device buffer.
bool shadow_on_host();

}  // namespace sparrow::kernels
