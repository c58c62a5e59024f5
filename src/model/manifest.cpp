// SPDX-License-Identifier: Apache-2.0
#include "model/manifest.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "core/bits.h"
#include "format/checkpoint.h"

namespace sparrow::model {
namespace {

constexpr uint32_t kManifestMagic = 0x4d525053u;  // "SPRM"
constexpr uint32_t kMaxDims = 16, kMaxName = 1024;

uint64_t product(const std::vector<uint64_t>& shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) n = d && n > UINT64_MAX / d ? UINT64_MAX : n * d;
  return n;
}

std::string shape_str(const std::vector<uint64_t>& s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i) o += (i ? ", " : "") + std::to_string(s[i]);
  return o + "]";
}

std::string piece_str(const Piece& p) {
  return "'" + p.logical + "'[" + std::to_string(p.start) + ":" + std::to_string(p.stop) + "] along dim " +
         std::to_string(p.dim) + " at offset " + std::to_string(p.offset);
}

Status check_shape(const std::string& what, uint8_t dtype, const std::vector<uint64_t>& shape) {
  if (format::dtype_size(dtype) == 0) return InvalidArgument(what + ": unknown datatype " + std::to_string(dtype));
  if (shape.size() > kMaxDims) return InvalidArgument(what + ": more than 16 dimensions");
  if (product(shape) > (uint64_t(1) << 48)) return InvalidArgument(what + ": more than 2^48 elements");
  return Status::Ok();
}

// A piece against its own local tensor (the logical side is checked against the manifest).
Status check_piece_locally(const LocalTensor& t, const Piece& p) {
  const std::string what = "tensor " + t.describe() + ", piece " + piece_str(p);
  if (p.logical.empty() || p.logical.size() > kMaxName) return InvalidArgument(what + ": a logical name is 1..1024 characters");
  if (p.dim < 0 || size_t(p.dim) >= t.shape.size())
    return InvalidArgument(what + ": dim out of range for " + std::to_string(t.shape.size()) + " dimension(s)");
  if (p.stop <= p.start) return InvalidArgument(what + ": stop must be greater than start");
  if (p.offset > t.shape[size_t(p.dim)] || p.len() > t.shape[size_t(p.dim)] - p.offset)
    return InvalidArgument(what + ": runs past the local tensor's " + std::to_string(t.shape[size_t(p.dim)]) +
                           " along dim " + std::to_string(p.dim));
  return Status::Ok();
}

// Pieces of one local tensor may not write the same elements: along one dim, disjoint offsets.
Status check_disjoint(const LocalTensor& t) {
  for (size_t i = 0; i < t.pieces.size(); ++i)
    for (size_t j = i + 1; j < t.pieces.size(); ++j) {
      const Piece &a = t.pieces[i], &b = t.pieces[j];
      const bool apart = a.dim == b.dim && (a.offset + a.len() <= b.offset || b.offset + b.len() <= a.offset);
      if (!apart)
        return InvalidArgument("tensor " + t.describe() + ": pieces " + piece_str(a) + " and " + piece_str(b) +
                               (a.dim == b.dim ? " overlap" : " are along different dims (they would overlap)"));
    }
  return Status::Ok();
}

Status check_one(const LocalTensor& t, bool source) {
  if (t.name.empty() || t.name.size() > kMaxName) return InvalidArgument("a tensor name is 1..1024 characters");
  SPARROW_RETURN_IF_ERROR(check_shape("tensor '" + t.name + "'", t.dtype, t.shape));
  if (!t.data && t.numel() > 0) return InvalidArgument("tensor '" + t.name + "': data is NULL");
  if (source && !t.pieces.empty())
    return InvalidArgument("tensor '" + t.name + "': the root's tensors must be whole logical tensors (a single "
                           "source holds the whole model; pieces describe receivers' layouts)");
  for (const Piece& p : t.pieces) SPARROW_RETURN_IF_ERROR(check_piece_locally(t, p));
  return check_disjoint(t);
}

// A piece against the logical tensor it names.
Status fit_piece(const LogicalTensor& l, const LocalTensor& t, const Piece& p) {
  const std::string what = "tensor " + t.describe() + ", piece " + piece_str(p);
  if (l.dtype != t.dtype)
    return Error(Code::kInvalidUsage, what + ": dtype differs from the root's " + format::dtype_name(l.dtype));
  if (l.shape.size() != t.shape.size())
    return Error(Code::kInvalidUsage, what + ": the root's tensor has shape " + shape_str(l.shape));
  for (size_t d = 0; d < l.shape.size(); ++d)
    if (int(d) != p.dim && l.shape[d] != t.shape[d])
      return Error(Code::kInvalidUsage, what + ": dim " + std::to_string(d) + " differs from the root's shape " +
                                            shape_str(l.shape));
  if (p.stop > l.shape[size_t(p.dim)])
    return Error(Code::kInvalidUsage, what + ": past the end of the root's shape " + shape_str(l.shape));
  return Status::Ok();
}

Status fit_whole(const LogicalTensor& l, const LocalTensor& t) {
  if (l.dtype != t.dtype || l.shape != t.shape)
    return Error(Code::kInvalidUsage, "tensor " + t.describe() + " differs from the root's '" + l.name + "' " +
                                          shape_str(l.shape) + " " + format::dtype_name(l.dtype));
  return Status::Ok();
}

Status unknown(const Manifest& m, const std::string& what, const std::string& name) {
  std::string some;
  for (size_t i = 0; i < m.tensors.size() && i < 3; ++i) some += (i ? ", '" : "'") + m.tensors[i].name + "'";
  return Error(Code::kInvalidUsage, what + ": the root has no tensor named '" + name + "' (it has " +
                                        std::to_string(m.tensors.size()) + ": " + some +
                                        (m.tensors.size() > 3 ? ", ...)" : ")"));
}

}  // namespace

uint64_t LocalTensor::numel() const { return product(shape); }
uint64_t rows_of(const std::vector<uint64_t>& shape) { return shape.empty() ? 1 : shape[0]; }
std::string LocalTensor::describe() const {
  return "'" + name + "' " + shape_str(shape) + " " + format::dtype_name(dtype);
}
uint64_t LogicalTensor::numel() const { return product(shape); }
uint64_t LogicalTensor::bytes() const { return numel() * format::dtype_size(dtype); }
std::vector<uint64_t> LogicalTensor::logical_shape() const {
  std::vector<uint64_t> s = shape;
  if (blocked()) s[size_t(block_dim)] = full;
  return s;
}

std::vector<uint8_t> Manifest::encode() const {
  std::vector<uint8_t> o;
  bits::put_u32(o, kManifestMagic);
  bits::put_u32(o, uint32_t(root));
  bits::put_u32(o, uint32_t(tensors.size()));
  for (const auto& t : tensors) {
    bits::put_u32(o, uint32_t(t.name.size()));
    o.insert(o.end(), t.name.begin(), t.name.end());
    bits::put_u8(o, t.dtype);
    bits::put_u8(o, uint8_t(t.shape.size()));
    for (uint64_t d : t.shape) bits::put_u64(o, d);
    bits::put_u8(o, uint8_t(t.blocked() ? t.block_dim : 0));  // (0: not a block)
    if (t.blocked()) {
      bits::put_u64(o, t.block_start);
      bits::put_u64(o, t.full);
    }
  }
  bits::put_u32(o, uint32_t(parts.size()));
  for (const auto& p : parts) {
    bits::put_u32(o, uint32_t(p.rank));
    bits::put_u32(o, uint32_t(p.slices.size()));
    for (const auto& s : p.slices) put_slice(o, s);
  }
  bits::put_u32(o, uint32_t(error.size()));
  o.insert(o.end(), error.begin(), error.end());
  return o;
}

void put_slice(std::vector<uint8_t>& o, const Slice& s) {
  bits::put_u32(o, s.logical);
  bits::put_u64(o, s.start);
  bits::put_u64(o, s.stop);
}

Status read_slice(bits::ByteReader& r, const Manifest& m, const std::string& what, Slice* s) {
  SPARROW_RETURN_IF_ERROR(r.u32(&s->logical));
  SPARROW_RETURN_IF_ERROR(r.u64(&s->start));
  SPARROW_RETURN_IF_ERROR(r.u64(&s->stop));
  if (s->logical >= m.tensors.size() || s->stop <= s->start || s->stop > rows_of(m.tensors[s->logical].shape))
    return CorruptData(what + ": rows out of the model's tensors' range");
  return Status::Ok();
}

namespace {
Status read_block(bits::ByteReader& r, LogicalTensor& t) {
  uint8_t dim = 0;
  SPARROW_RETURN_IF_ERROR(r.u8(&dim));
  if (dim == 0) return Status::Ok();
  SPARROW_RETURN_IF_ERROR(r.u64(&t.block_start));
  SPARROW_RETURN_IF_ERROR(r.u64(&t.full));
  t.block_dim = dim;
  if (dim >= t.shape.size() || t.shape[dim] == 0 || t.block_start > t.full || t.shape[dim] > t.full - t.block_start ||
      !check_shape(t.name, t.dtype, t.logical_shape()).ok())
    return CorruptData("model manifest: tensor '" + t.name + "': a block outside its tensor");
  return Status::Ok();
}

Status decode_parts(bits::ByteReader& r, Manifest& out) {
  uint32_t n = 0;
  SPARROW_RETURN_IF_ERROR(r.u32(&n));
  if (n > (1u << 20)) return CorruptData("model manifest: " + std::to_string(n) + " parts");
  for (uint32_t i = 0; i < n; ++i) {
    Part p;
    uint32_t rank = 0, k = 0;
    SPARROW_RETURN_IF_ERROR(r.u32(&rank));
    SPARROW_RETURN_IF_ERROR(r.u32(&k));
    if (k > out.tensors.size()) return CorruptData("model manifest: a part with too many slices");
    p.rank = int32_t(rank);
    for (uint32_t j = 0; j < k; ++j) {
      Slice s;
      SPARROW_RETURN_IF_ERROR(read_slice(r, out, "model manifest", &s));
      p.slices.push_back(s);
    }
    out.parts.push_back(std::move(p));
  }
  uint32_t len = 0;
  const uint8_t* e = nullptr;
  SPARROW_RETURN_IF_ERROR(r.u32(&len));
  SPARROW_RETURN_IF_ERROR(r.bytes(len, &e));
  out.error.assign(reinterpret_cast<const char*>(e), len);
  return Status::Ok();
}
}  // namespace

Result<Manifest> Manifest::decode(std::span<const uint8_t> m) {
  bits::ByteReader r(m, "model manifest");
  uint32_t magic = 0, root = 0, n = 0;
  SPARROW_RETURN_IF_ERROR(r.u32(&magic));
  if (magic != kManifestMagic) return CorruptData("not a model manifest");
  SPARROW_RETURN_IF_ERROR(r.u32(&root));
  SPARROW_RETURN_IF_ERROR(r.u32(&n));
  Manifest out;
  out.root = int32_t(root);
  for (uint32_t i = 0; i < n; ++i) {
    LogicalTensor t;
    uint32_t len = 0;
    uint8_t nd = 0;
    const uint8_t* p = nullptr;
    SPARROW_RETURN_IF_ERROR(r.u32(&len));
    if (len == 0 || len > kMaxName) return CorruptData("model manifest: a name of " + std::to_string(len) + " bytes");
    SPARROW_RETURN_IF_ERROR(r.bytes(len, &p));
    t.name.assign(reinterpret_cast<const char*>(p), len);
    SPARROW_RETURN_IF_ERROR(r.u8(&t.dtype));
    SPARROW_RETURN_IF_ERROR(r.u8(&nd));
    if (nd > kMaxDims) return CorruptData("model manifest: " + std::to_string(nd) + " dimensions");
    t.shape.resize(nd);
    for (auto& d : t.shape) SPARROW_RETURN_IF_ERROR(r.u64(&d));
    if (!check_shape(t.name, t.dtype, t.shape).ok()) return CorruptData("model manifest: tensor '" + t.name + "'");
    SPARROW_RETURN_IF_ERROR(read_block(r, t));
    out.tensors.push_back(std::move(t));
  }
  SPARROW_RETURN_IF_ERROR(decode_parts(r, out));
  if (r.remaining()) return CorruptData("model manifest: trailing bytes");
  return out;
}

int Manifest::find(const std::string& name) const {
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].name == name) return int(i);
  return -1;
}

std::vector<uint32_t> Manifest::entries(const std::string& name) const {
  std::vector<uint32_t> v;
  for (uint32_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].name == name) v.push_back(i);
  return v;
}

Status check_local(const std::vector<LocalTensor>& t, bool source) {
  std::map<std::string, int> seen;
  for (const auto& x : t) {
    SPARROW_RETURN_IF_ERROR(check_one(x, source));
    if (seen[x.name]++) return InvalidArgument("tensor name '" + x.name + "' appears twice");
  }
  if (source && t.empty()) return InvalidArgument("the root passes no tensors");
  return Status::Ok();
}

Manifest manifest_of(const std::vector<LocalTensor>& t, int root) {
  Manifest m;
  m.root = root;
  for (const auto& x : t) m.tensors.push_back({x.name, x.dtype, x.shape});
  return m;
}

namespace {

// Where piece `p` of local tensor `local` lands in entry `b` of its logical tensor: the piece itself
// (not a block), its part inside the block (along the block's dim), or the block's elements at their
// place in it (along another dim). False when it misses the block.
bool onto(const LogicalTensor& b, size_t local, const Piece& p, Projection* out) {
  if (!b.blocked()) {
    *out = {local, p};
    return true;
  }
  const uint64_t c0 = b.block_start, c1 = c0 + b.shape[size_t(b.block_dim)];
  if (p.dim != b.block_dim) {
    *out = {local, p, b.block_dim, c0};
    return true;
  }
  const uint64_t a = std::max(p.start, c0), z = std::min(p.stop, c1);
  if (a >= z) return false;
  *out = {local, Piece{p.logical, p.dim, a - c0, z - c0, p.offset + (a - p.start)}};
  return true;
}

LogicalTensor whole_of(const LogicalTensor& b) { return {b.name, b.dtype, b.logical_shape()}; }

// Local tensor i holds piece `p` of the logical tensor whose entries are `ids`.
void place(const Manifest& m, const std::vector<uint32_t>& ids, size_t i, const Piece& p, std::vector<Target>& out) {
  for (uint32_t id : ids) {
    Projection pr;
    if (onto(m.tensors[id], i, p, &pr)) out[id].pieces.push_back(std::move(pr));
  }
}

}  // namespace

Result<std::vector<Target>> plan_receiver(const Manifest& m, const std::vector<LocalTensor>& locals) {
  std::vector<Target> out(m.tensors.size());
  for (size_t i = 0; i < locals.size(); ++i) {
    const LocalTensor& t = locals[i];
    if (t.pieces.empty()) {
      const std::vector<uint32_t> ids = m.entries(t.name);
      if (ids.empty()) return unknown(m, "tensor " + t.describe(), t.name);
      const LogicalTensor& first = m.tensors[ids[0]];
      SPARROW_RETURN_IF_ERROR(fit_whole(whole_of(first), t));
      if (!first.blocked()) out[ids[0]].whole = int(i);
      else place(m, ids, i, Piece{t.name, first.block_dim, 0, first.full, 0}, out);  // (each block at its place)
      continue;
    }
    for (const Piece& p : t.pieces) {
      const std::vector<uint32_t> ids = m.entries(p.logical);
      if (ids.empty()) return unknown(m, "tensor " + t.describe() + ", piece " + piece_str(p), p.logical);
      SPARROW_RETURN_IF_ERROR(fit_piece(whole_of(m.tensors[ids[0]]), t, p));
      place(m, ids, i, p, out);
    }
  }
  for (size_t l = 0; l < out.size(); ++l)
    if (out[l].whole >= 0 && !out[l].pieces.empty())
      return InvalidArgument("'" + m.tensors[l].name + "' is held whole by a local tensor and as pieces of '" +
                             locals[out[l].pieces[0].local].name + "': one or the other");
  return out;
}

// The runs of a box: along every dim, the entry's elements [from, from + len) at [to, to + len) in the
// local tensor. The innermost dims both sides hold whole make each run one stretch of bytes.
std::vector<Run> runs_of(const LogicalTensor& l, const LocalTensor& t, const Projection& pr) {
  const Piece& p = pr.piece;
  const size_t nd = l.shape.size();
  const uint64_t es = format::dtype_size(l.dtype);
  std::vector<uint64_t> from(nd, 0), to(nd, 0), len = l.shape;
  from[size_t(p.dim)] = p.start;
  to[size_t(p.dim)] = p.offset;
  len[size_t(p.dim)] = p.len();
  if (pr.cross_dim >= 0) to[size_t(pr.cross_dim)] = pr.cross_offset;
  size_t k = nd;  // dims [k, nd) are whole on both sides
  uint64_t inner = es;
  while (k > 0 && len[k - 1] == l.shape[k - 1] && len[k - 1] == t.shape[k - 1]) inner *= len[--k];
  if (k == 0) return {Run{0, 0, inner}};
  --k;  // the innermost dim that is not: runs of len[k] * inner bytes, one per index of dims [0, k)
  std::vector<uint64_t> ls(nd, inner / es), ts(nd, inner / es);  // strides in elements
  for (size_t d = k; d-- > 0;) {
    ls[d] = ls[d + 1] * l.shape[d + 1];
    ts[d] = ts[d + 1] * t.shape[d + 1];
  }
  std::vector<Run> runs;
  std::vector<uint64_t> idx(k, 0);
  for (;;) {
    uint64_t a = from[k] * ls[k], b = to[k] * ts[k];
    for (size_t d = 0; d < k; ++d) {
      a += (from[d] + idx[d]) * ls[d];
      b += (to[d] + idx[d]) * ts[d];
    }
    runs.push_back({a * es, b * es, len[k] * inner});
    size_t d = k;
    while (d > 0 && ++idx[d - 1] == len[d - 1]) idx[--d] = 0;
    if (d == 0) break;
  }
  return runs;
}

uint64_t copy_changed(const std::vector<Run>& runs, const uint8_t* from, uint8_t* to, bool to_local) {
  constexpr uint64_t kLine = 64;
  uint64_t written = 0;
  for (const Run& r : runs) {
    const uint8_t* s = from + (to_local ? r.logical : r.local);
    uint8_t* d = to + (to_local ? r.local : r.logical);
    for (uint64_t off = 0; off < r.bytes; off += kLine) {
      const uint64_t n = std::min(kLine, r.bytes - off);
      if (std::memcmp(s + off, d + off, n) != 0) {
        std::memcpy(d + off, s + off, n);
        written += n;
      }
    }
  }
  return written;
}

bool runs_match(const std::vector<Run>& runs, const uint8_t* logical, const uint8_t* local) {
  for (const Run& r : runs)
    if (std::memcmp(logical + r.logical, local + r.local, r.bytes) != 0) return false;
  return true;
}

}  // namespace sparrow::model
