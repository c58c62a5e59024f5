// C++ access to what a sparrowComm_t wraps (tools and tests linked to the static library).
#pragma once

#include "comm/comm.h"
#include "sparrow/sparrow.h"

namespace sparrow {
Comm* comm_impl(sparrowComm_t c);
}
