#include "transport/ucx/ucx_backend.h"
namespace sparrow::transport {
bool ucx_available() { return false; }
Result<std::unique_ptr<Backend>> make_ucx_backend(const BackendOptions&) { return InvalidArgument("ucx: WIP"); }
}
