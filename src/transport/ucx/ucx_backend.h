// The UCX backend (UCP active messages over whatever UCX transports are available: tcp, shared
// memory, verbs). Same Backend interface and conformance suite as TCP; connections authenticate with
// the same HMAC challenge, carried in the first active messages.
#pragma once

#include <memory>

#include "transport/transport.h"

namespace sparrow::transport {

bool ucx_available();
Result<std::unique_ptr<Backend>> make_ucx_backend(const BackendOptions& o);

}  // namespace sparrow::transport
