// The UCX backend (UCP active messages over whatever UCX transports are available: tcp, shared
// memory, verbs). Same Backend interface and conformance suite as TCP; connections authenticate with
// the same HMAC challenge, carried in the first active messages, and seal their frames as TCP's do
// (SPARROW_ENCRYPT, seal.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "transport/transport.h"

namespace sparrow::transport {

bool ucx_available();
Result<std::unique_ptr<Backend>> make_ucx_backend(const BackendOptions& o);

// Tests (the suite's man in the middle): sees, and may change, every frame as it goes on the wire
// (the active message's header and data, after sealing), in every UCX backend of the process, and
// the goodbye that closes a connection (header_len 0). An empty function removes it.
using UcxWireHook = std::function<void(uint8_t* header, size_t header_len, uint8_t* data, size_t len)>;
void set_ucx_wire_hook(UcxWireHook hook);

}  // namespace sparrow::transport
