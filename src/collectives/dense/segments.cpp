// SPDX-License-Identifier: Apache-2.0
#include "collectives/dense/segments.h"

#include <algorithm>

#include "core/clock.h"
#include "core/params.h"
#include "kernels/device.h"

namespace sparrow::coll::dense {
namespace {
params::IntParam kSegment("SEGMENT_BYTES", 4 << 20, "Segment size of the pipelined dense broadcast.", 64 << 10, 1 << 30);
}  // namespace

size_t segment_bytes() { return size_t(kSegment.get()); }

size_t segments(size_t bytes, size_t seg) { return bytes == 0 ? 0 : (bytes + seg - 1) / seg; }
size_t bytes_of(const BufferArg& b) { return b.count * format::dtype_size(uint8_t(b.dtype)); }
size_t bytes_of(const std::pair<uint64_t, uint8_t>& hb) { return hb.first * format::dtype_size(hb.second); }

OpHeader dense_header(const std::vector<BufferArg>& bufs, int root) {
  OpHeader h;
  h.kind = kDense;
  h.root = root;
  for (auto& b : bufs) h.bufs.push_back({b.count, uint8_t(b.dtype)});
  h.segment = size_t(kSegment.get());
  return h;
}

// The root's data of `b` in host memory: the send buffer itself, or (a device buffer) its copy in
// `staging` (the transport reads host memory).
Result<const uint8_t*> host_source(const BufferArg& b, std::vector<uint8_t>& staging) {
  const uint8_t* src = static_cast<const uint8_t*>(b.send);
  const size_t bytes = bytes_of(b);
  if (!bytes || !kernels::is_device(kernels::device_ops(), src)) return src;
  staging.resize(bytes);
  SPARROW_RETURN_IF_ERROR(kernels::copy_any(staging.data(), src, bytes));
  return static_cast<const uint8_t*>(staging.data());
}

// `bytes` from `src` in segments of `seg`, parts first_sub.. (each also into `parts`, when given);
// returns the part after the last.
uint32_t send_segments(const uint8_t* src, size_t bytes, size_t seg, uint32_t first_sub, Fanout& out, Parts* parts) {
  uint32_t sub = first_sub;
  for (size_t i = 0; i < segments(bytes, seg); ++i, ++sub) {
    const size_t off = i * seg, n = std::min(seg, bytes - off);
    out.send_borrowed(sub, src + off, n);
    if (parts) (*parts)[sub] = transport::Payload{src + off, n, nullptr};
  }
  return sub;
}

// The segments of one buffer (parts first_sub..) into `dst`, each forwarded as it lands.
Status receive_segments(Relay& relay, uint8_t* dst, size_t bytes, size_t seg, uint32_t first_sub) {
  for (size_t i = 0; i < segments(bytes, seg); ++i) {
    const size_t off = i * seg;
    SPARROW_RETURN_IF_ERROR(relay.next_into(uint32_t(first_sub + i), dst + off, std::min(seg, bytes - off)));
  }
  return Status::Ok();
}

// The root's own receive buffer gets the data too (when it is not the send buffer).
Status copy_to_recv(const BufferArg& b, const uint8_t* src) {
  if (!b.recv || b.recv == b.send || !bytes_of(b)) return Status::Ok();
  return kernels::copy_any(b.recv, src, bytes_of(b));
}

void record(Engine& e, const std::vector<BufferArg>& bufs, const std::vector<DenseOp>& ops, int root, double t0) {
  const int me = e.rank();
  const bool placed = !ops.empty() && ops[0].tree.parent.size() > size_t(me);
  record_traffic(e, me == root || !placed ? -1 : ops[0].tree.parent[me],
                 placed ? ops[0].tree.children[me] : std::vector<int>{});
  auto& st = e.stats;
  st.ops++;
  st.dense_bytes = st.changed = 0;
  for (auto& b : bufs) {
    st.dense_bytes += bytes_of(b);
    st.changed += b.count;
  }
  st.wire_bytes = st.dense_bytes;
  st.elements = st.changed;
  st.density = 1.0;
  st.encode_s = st.apply_s = 0;
  st.total_s = now_s() - t0;
  st.full = true;
  log_step(e, "broadcast");
}

}  // namespace sparrow::coll::dense
