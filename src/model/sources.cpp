// SPDX-License-Identifier: Apache-2.0
#include "model/sources.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>

#include "format/checkpoint.h"

namespace sparrow::model {
namespace {

std::string dims(const std::vector<uint64_t>& s, size_t from) {
  std::string o = "[";
  for (size_t i = from; i < s.size(); ++i) o += (i > from ? ", " : "") + std::to_string(s[i]);
  return o + "]";
}

// What the sources say about one logical tensor.
struct Seen {
  uint8_t dtype = 0;
  std::vector<uint64_t> shape;  // the first source's (dim 0 aside)
  int first = 0;                // that source
  std::vector<std::tuple<uint64_t, uint64_t, int>> rows;  // start, stop, rank
};

std::string fits(const Seen& a, const LogicalTensor& t, int rank, const std::string& name) {
  const bool same = a.dtype == t.dtype && a.shape.size() == t.shape.size() &&
                    std::equal(a.shape.begin() + (a.shape.empty() ? 0 : 1), a.shape.end(),
                               t.shape.begin() + (t.shape.empty() ? 0 : 1));
  if (same) return {};
  return "tensor '" + name + "': rank " + std::to_string(a.first) + " holds rows of shape " + dims(a.shape, 1) + " " +
         format::dtype_name(a.dtype) + ", rank " + std::to_string(rank) + " of shape " + dims(t.shape, 1) + " " +
         format::dtype_name(t.dtype);
}

// The rows of `name` must tile [0, end): returns the end, or an error naming the rows.
std::string tile(Seen& s, const std::string& name, uint64_t* end) {
  std::sort(s.rows.begin(), s.rows.end());
  uint64_t at = 0;
  int last = -1;
  *end = 0;
  for (auto [start, stop, rank] : s.rows) *end = std::max(*end, stop);  // the shape, even when they do not tile
  for (auto [start, stop, rank] : s.rows) {
    if (start > at)
      return "rows [" + std::to_string(at) + ", " + std::to_string(start) + ") of tensor '" + name +
             "' are held by no source";
    if (start < at)
      return "rows [" + std::to_string(start) + ", " + std::to_string(std::min(at, stop)) + ") of tensor '" + name +
             "' are held by ranks " + std::to_string(last) + " and " + std::to_string(rank);
    at = std::max(at, stop);
    last = rank;
  }
  return {};
}

}  // namespace

Status check_source(const std::vector<LocalTensor>& t) {
  for (const auto& x : t) {
    if (x.pieces.empty()) continue;
    const Piece& p = x.pieces[0];
    if (x.pieces.size() != 1 || p.dim != 0 || p.offset != 0 || x.shape.empty() || x.shape[0] != p.len())
      return InvalidArgument("tensor " + x.describe() + ": a source's tensor is a whole logical tensor or one "
                             "piece along dim 0 at offset 0 that fills its rows (a row range, FSDP-style)");
  }
  return Status::Ok();
}

Manifest part_of(const std::vector<LocalTensor>& t, int rank) {
  Manifest m;
  m.root = rank;
  Part part{rank, {}};
  for (const auto& x : t) {
    const bool whole = x.pieces.empty();
    const uint64_t start = whole ? 0 : x.pieces[0].start, stop = whole ? rows_of(x.shape) : x.pieces[0].stop;
    LogicalTensor l{whole ? x.name : x.pieces[0].logical, x.dtype, x.shape};
    if (!l.shape.empty()) l.shape[0] = stop;  // the logical tensor has at least these rows
    part.slices.push_back({uint32_t(m.tensors.size()), start, stop});
    m.tensors.push_back(std::move(l));
  }
  m.parts.push_back(std::move(part));
  return m;
}

Manifest merge_parts(const std::vector<Manifest>& parts, int root) {
  Manifest out;
  out.root = root;
  std::vector<std::string> order;
  std::map<std::string, Seen> seen;
  for (const auto& pm : parts)
    for (const Slice& s : pm.parts.at(0).slices) {
      const LogicalTensor& t = pm.tensors[s.logical];
      auto [it, fresh] = seen.try_emplace(t.name, Seen{t.dtype, t.shape, pm.root, {}});
      if (fresh) order.push_back(t.name);
      if (std::string e = fits(it->second, t, pm.root, t.name); !e.empty()) out.error = e;
      it->second.rows.emplace_back(s.start, s.stop, pm.root);
    }
  std::map<std::string, uint32_t> index;
  for (const auto& name : order) {
    Seen& s = seen[name];
    uint64_t end = 0;
    if (std::string e = tile(s, name, &end); !e.empty() && out.error.empty()) out.error = e;
    std::vector<uint64_t> shape = s.shape;
    if (!shape.empty()) shape[0] = end;
    index[name] = uint32_t(out.tensors.size());
    out.tensors.push_back({name, s.dtype, shape});
  }
  for (const auto& pm : parts) {
    Part p{pm.root, {}};
    for (const Slice& s : pm.parts.at(0).slices) p.slices.push_back({index[pm.tensors[s.logical].name], s.start, s.stop});
    out.parts.push_back(std::move(p));
  }
  return out;
}

}  // namespace sparrow::model
