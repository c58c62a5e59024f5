// The TCP backend: one epoll progress thread per backend, non-blocking sockets, MSG_NOSIGNAL, the
// authentication handshake run as a state machine on the progress thread (so junk, half-open
// connections and port scans never block it), frames written with writev straight from the caller's
// buffers.
#pragma once

#include <memory>

#include "transport/transport.h"

namespace sparrow::transport {

Result<std::unique_ptr<Backend>> make_tcp_backend(const BackendOptions& o);

}  // namespace sparrow::transport
