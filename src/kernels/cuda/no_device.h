// SPDX-License-Identifier: Apache-2.0
// Why CUDA offers no device on this host, in words a user can act on (libsparrow_cuda's INFO line
// and sparrow-gpu-bench's error). Needs the CUDA runtime's header.
#pragma once

#include <cuda_runtime.h>
#include <unistd.h>

namespace sparrow::kernels::cuda {

// `e`: what cudaGetDeviceCount returned (cudaSuccess with a count of 0 included). Without an NVIDIA
// driver the runtime's word is "CUDA driver version is insufficient", which means no GPU here.
inline const char* no_device_reason(cudaError_t e) {
  const bool no_gpu = e == cudaSuccess || e == cudaErrorNoDevice ||
                      (e == cudaErrorInsufficientDriver && access("/dev/nvidiactl", F_OK) != 0);
  return no_gpu ? "no GPU on this host" : cudaGetErrorString(e);
}

}  // namespace sparrow::kernels::cuda
