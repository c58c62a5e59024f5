// SPDX-License-Identifier: Apache-2.0
#include "model/split.h"

#include <algorithm>

#include "core/bits.h"

namespace sparrow::model {
namespace {

constexpr uint32_t kRowsMagic = 0x53524f57;  // "WORS"
constexpr uint32_t kNeedsMagic = 0x5344454e;  // "NEDS"

void put_rows(std::vector<uint8_t>& o, const std::vector<Slice>& rows) {
  bits::put_u32(o, uint32_t(rows.size()));
  for (const Slice& s : rows) put_slice(o, s);
}

Status read_rows(bits::ByteReader& r, const Manifest& m, std::vector<Slice>* out) {
  uint32_t n = 0;
  SPARROW_RETURN_IF_ERROR(r.u32(&n));
  if (n > r.remaining() / 20) return CorruptData("a receiver's rows: " + std::to_string(n) + " ranges in " +
                                                 std::to_string(r.remaining()) + " bytes");
  for (uint32_t i = 0; i < n; ++i) {
    Slice s;
    SPARROW_RETURN_IF_ERROR(read_slice(r, m, "a receiver's rows", &s));
    if (!out->empty() && std::make_pair(s.logical, s.start) <= std::make_pair(out->back().logical, out->back().stop))
      return CorruptData("a receiver's rows: ranges out of order or overlapping");
    out->push_back(s);
  }
  return Status::Ok();
}

// The receivers whose rows cover rows [a, b) of `l` (a and b among every receiver's boundaries, so
// each covers all of it or none).
std::vector<int> wanting(const Needs& needs, uint32_t l, uint64_t a, uint64_t b) {
  std::vector<int> v;
  for (const auto& [rank, rows] : needs)
    if (covers(rows, l, a, b)) v.push_back(rank);
  return v;
}

// Rows [s.start, s.stop) of s.logical cut at every receiver's boundaries inside them.
std::vector<uint64_t> cuts(const Needs& needs, const Slice& s) {
  std::vector<uint64_t> c = {s.start, s.stop};
  for (const auto& [rank, rows] : needs)
    for (const Slice& r : rows)
      if (r.logical == s.logical)
        for (uint64_t x : {r.start, r.stop})
          if (x > s.start && x < s.stop) c.push_back(x);
  std::sort(c.begin(), c.end());
  c.erase(std::unique(c.begin(), c.end()), c.end());
  return c;
}

void add_segment(SplitOp& op, const Segment& g) {
  Segment* last = op.segments.empty() ? nullptr : &op.segments.back();
  if (last && last->slice == g.slice && last->stop == g.start) {
    last->stop = g.stop;
    return;
  }
  op.segments.push_back(g);
}

}  // namespace

std::vector<Slice> needed_rows(const Manifest& m, const std::vector<Target>& targets) {
  std::vector<Slice> out;
  for (uint32_t l = 0; l < targets.size(); ++l) {
    const uint64_t rows = rows_of(m.tensors[l].shape);
    std::vector<std::pair<uint64_t, uint64_t>> v;
    if (targets[l].whole >= 0) v.emplace_back(0, rows);
    for (const Projection& p : targets[l].pieces)
      v.emplace_back(p.piece.dim == 0 ? p.piece.start : 0, p.piece.dim == 0 ? p.piece.stop : rows);
    std::sort(v.begin(), v.end());
    for (auto [a, b] : v) {
      if (a >= b) continue;
      if (!out.empty() && out.back().logical == l && a <= out.back().stop) out.back().stop = std::max(out.back().stop, b);
      else out.push_back({l, a, b});
    }
  }
  return out;
}

bool covers(const std::vector<Slice>& rows, uint32_t l, uint64_t start, uint64_t stop) {
  for (const Slice& s : rows)
    if (s.logical == l && s.start <= start && stop <= s.stop) return true;
  return false;
}

std::vector<uint8_t> encode_rows(const std::vector<Slice>& rows) {
  std::vector<uint8_t> o;
  bits::put_u32(o, kRowsMagic);
  put_rows(o, rows);
  return o;
}

Result<std::vector<Slice>> decode_rows(std::span<const uint8_t> b, const Manifest& m) {
  bits::ByteReader r(b, "a receiver's rows");
  uint32_t magic = 0;
  SPARROW_RETURN_IF_ERROR(r.u32(&magic));
  if (magic != kRowsMagic) return CorruptData("not a receiver's rows");
  std::vector<Slice> rows;
  SPARROW_RETURN_IF_ERROR(read_rows(r, m, &rows));
  if (r.remaining()) return CorruptData("a receiver's rows: trailing bytes");
  return rows;
}

std::vector<uint8_t> encode_needs(const Needs& n) {
  std::vector<uint8_t> o;
  bits::put_u32(o, kNeedsMagic);
  bits::put_u32(o, uint32_t(n.size()));
  for (const auto& [rank, rows] : n) {
    bits::put_u32(o, uint32_t(rank));
    put_rows(o, rows);
  }
  return o;
}

Result<Needs> decode_needs(std::span<const uint8_t> b, const Manifest& m) {
  bits::ByteReader r(b, "the receivers' rows");
  uint32_t magic = 0, n = 0;
  SPARROW_RETURN_IF_ERROR(r.u32(&magic));
  if (magic != kNeedsMagic) return CorruptData("not the receivers' rows");
  SPARROW_RETURN_IF_ERROR(r.u32(&n));
  if (n > r.remaining() / 8) return CorruptData("the receivers' rows: " + std::to_string(n) + " receivers");
  Needs out;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t rank = 0;
    SPARROW_RETURN_IF_ERROR(r.u32(&rank));
    if (!out.empty() && int(rank) <= out.back().first) return CorruptData("the receivers' rows: ranks out of order");
    out.emplace_back(int(rank), std::vector<Slice>{});
    SPARROW_RETURN_IF_ERROR(read_rows(r, m, &out.back().second));
  }
  if (r.remaining()) return CorruptData("the receivers' rows: trailing bytes");
  return out;
}

std::vector<SplitOp> split_step(const std::vector<Part>& parts, const Needs& needs) {
  std::vector<SplitOp> out;
  for (const Part& p : parts) {
    const size_t first = out.size();
    for (uint32_t i = 0; i < p.slices.size(); ++i) {
      const std::vector<uint64_t> c = cuts(needs, p.slices[i]);
      for (size_t j = 0; j + 1 < c.size(); ++j) {
        std::vector<int> to = wanting(needs, p.slices[i].logical, c[j], c[j + 1]);
        if (to.empty()) continue;  // nobody holds these rows
        to.insert(std::upper_bound(to.begin(), to.end(), p.rank), p.rank);
        auto it = std::find_if(out.begin() + long(first), out.end(), [&](const SplitOp& o) { return o.participants == to; });
        if (it == out.end()) it = out.insert(out.end(), SplitOp{p.rank, std::move(to), {}});
        add_segment(*it, {p.slices[i].logical, c[j], c[j + 1], i, p.slices[i].start});
      }
    }
  }
  return out;
}

Part whole_part(const Manifest& m) {
  Part p{m.root, {}};
  for (uint32_t l = 0; l < m.tensors.size(); ++l) p.slices.push_back({l, 0, rows_of(m.tensors[l].shape)});
  return p;
}

}  // namespace sparrow::model
