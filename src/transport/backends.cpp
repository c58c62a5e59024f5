// SPDX-License-Identifier: Apache-2.0
#include "transport/backends.h"

#include "transport/loopback/loopback.h"
#include "transport/tcp/tcp_backend.h"
#if SPARROW_HAVE_UCX
#include "transport/ucx/ucx_backend.h"
#endif

namespace sparrow::transport {

void add_builtin_backends(const std::function<void(const std::string&, int, BackendFactory)>& add) {
  // TCP first: it works everywhere and is what this project measures against iperf3. UCX is selected
  // explicitly (SPARROW_TRANSPORT=ucx) until it beats TCP on the links at hand.
  add("tcp", 100, make_tcp_backend);
#if SPARROW_HAVE_UCX
  if (ucx_available()) add("ucx", 50, make_ucx_backend);
#endif
  add("loopback", 0, make_loopback_backend);  // in-process (tests): never chosen automatically
}

}  // namespace sparrow::transport
