// SPDX-License-Identifier: Apache-2.0
// The backends built into the library, registered with the transport seam (transport.h) the first
// time one is looked up. The one file that knows every backend.
#pragma once

#include <functional>
#include <string>

#include "transport/transport.h"

namespace sparrow::transport {

// Calls `add(name, priority, factory)` for each backend this build has (and, for UCX, this host can load).
void add_builtin_backends(const std::function<void(const std::string&, int, BackendFactory)>& add);

}  // namespace sparrow::transport
