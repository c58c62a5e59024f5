// The in-process loopback backend: backends in one process reach each other by address
// ("loop:<n>"), frames are copied and delivered by each backend's progress thread. It exists for
// deterministic failure tests: faults can be injected per backend.
#pragma once

#include <memory>
#include <string>

#include "transport/transport.h"

namespace sparrow::transport {

struct LoopbackFaults {
  int delay_us = 0;              // every delivered frame waits this long
  int fail_after_frames = -1;    // >= 0: after this many more delivered frames, drop every connection (peer lost)
  bool error_next_send = false;  // the next send on any connection fails once, without dropping it
  bool stall = false;            // stop delivering (frames queue up) until cleared
};

Result<std::unique_ptr<Backend>> make_loopback_backend(const BackendOptions& o);
// Faults of the loopback backend listening at `address` (applies to frames it *receives*, and to
// sends from its connections for error_next_send). Returns false if there is no such backend.
bool set_loopback_faults(const std::string& address, const LoopbackFaults& f);

}  // namespace sparrow::transport
