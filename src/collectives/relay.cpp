#include "collectives/relay.h"

#include "core/log.h"

namespace sparrow::coll {

Result<Frame> Relay::next(uint32_t sub) {
  SPARROW_ASSIGN_OR_RETURN(auto m, w_.recv(parent_, sub));
  Frame f = share(std::move(m));
  SPARROW_RETURN_IF_ERROR(w_.send(kids_, sub, f, &reqs_));
  if (sub != 0) bytes_ += f->size();
  parts_++;
  SPARROW_TRACE("operation %llu: part %u (%zu bytes) from rank %d, forwarded to %zu child(ren)",
                (unsigned long long)w_.seq, sub, f->size(), parent_, kids_.size());
  return f;
}

Status Relay::next_into(uint32_t sub, uint8_t* dst, size_t n) {
  SPARROW_RETURN_IF_ERROR(w_.net.recv_into(parent_, w_.key(sub), dst, n, w_.deadline));
  for (int kid : kids_) {
    auto r = w_.net.send(kid, w_.key(sub), transport::Payload{dst, n, nullptr}, w_.deadline);
    if (!r.ok()) return r.status();
    reqs_.push_back(r.value());
  }
  bytes_ += n;
  parts_++;
  return Status::Ok();
}

Status Relay::finish() {
  Status s = wait_all(reqs_, w_.deadline);
  reqs_.clear();
  return s;
}

}  // namespace sparrow::coll
