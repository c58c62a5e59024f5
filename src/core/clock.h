// SPDX-License-Identifier: Apache-2.0
// The library's clock for timings and phases: monotonic seconds (std::chrono::steady_clock).
// Deadlines for waits are transport::Deadline (transport/transport.h).
#pragma once

#include <chrono>

namespace sparrow {

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace sparrow
