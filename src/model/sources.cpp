// SPDX-License-Identifier: Apache-2.0
#include "model/sources.h"

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <tuple>

#include "format/checkpoint.h"

namespace sparrow::model {
namespace {

std::string dims(const std::vector<uint64_t>& s, size_t skip) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i) o += (i ? ", " : "") + (i == skip ? std::string("*") : std::to_string(s[i]));
  return o + "]";
}

using Held = std::vector<std::tuple<uint64_t, uint64_t, int>>;  // start, stop, rank

// What the sources say about one logical tensor.
struct Seen {
  uint8_t dtype = 0;
  std::vector<uint64_t> shape;  // the first source's (the dim it is split along aside)
  int block_dim = -1;           // -1: split along dim 0 (rows), if at all
  int first = 0;                // that source
  Held rows;                    // not blocked: the rows each source holds
  Held blocks;                  // blocked: each source's elements along block_dim
};

// The dim the sources split it along (shapes may differ there).
size_t split_dim(const LogicalTensor& t) { return t.blocked() ? size_t(t.block_dim) : 0; }

std::string fits(const Seen& a, const LogicalTensor& t, int rank) {
  const size_t d = split_dim(t);
  bool same = a.dtype == t.dtype && a.block_dim == t.block_dim && a.shape.size() == t.shape.size();
  for (size_t i = 0; same && i < t.shape.size(); ++i) same = i == d || a.shape[i] == t.shape[i];
  if (same) return {};
  auto says = [](int r, const std::vector<uint64_t>& s, uint8_t dtype, int bd) {
    return "rank " + std::to_string(r) + " holds " + (bd > 0 ? "columns along dim " + std::to_string(bd) : "rows") +
           " of shape " + dims(s, bd > 0 ? size_t(bd) : 0) + " " + format::dtype_name(dtype);
  };
  return "tensor '" + t.name + "': " + says(a.first, a.shape, a.dtype, a.block_dim) + ", " +
         says(rank, t.shape, t.dtype, t.block_dim);
}

// The ranges `h` must tile [0, end): returns the end, or an error naming the range (`what(a, b)`).
std::string tile(Held& h, const std::function<std::string(uint64_t, uint64_t)>& what, uint64_t* end) {
  std::sort(h.begin(), h.end());
  uint64_t at = 0;
  int last = -1;
  *end = 0;
  for (auto [start, stop, rank] : h) *end = std::max(*end, stop);  // the shape, even when they do not tile
  for (auto [start, stop, rank] : h) {
    if (start > at) return what(at, start) + " are held by no source";
    if (start < at)
      return what(start, std::min(at, stop)) + " are held by ranks " + std::to_string(last) + " and " +
             std::to_string(rank) + " (sources hold every element once: a tensor replicated on several, such as a "
             "norm, is passed by one of them)";
    at = std::max(at, stop);
    last = rank;
  }
  return {};
}

std::string range(uint64_t a, uint64_t b) {
  std::string o = "[";  // (appended: GCC 12 warns, wrongly, of `"[" + std::to_string(a)`)
  o += std::to_string(a);
  o += ", ";
  o += std::to_string(b);
  return o + ")";
}

// f(local index, what travels (an entry of the source's manifest), first row, end row, local row) for
// every slice of the source's tensors, in order.
template <class F>
void each_slice(const std::vector<LocalTensor>& t, F&& f) {
  for (size_t i = 0; i < t.size(); ++i) {
    const LocalTensor& x = t[i];
    if (x.pieces.empty()) {
      f(i, LogicalTensor{x.name, x.dtype, x.shape}, 0, rows_of(x.shape), 0);
      continue;
    }
    for (const Piece& p : x.pieces) {
      LogicalTensor l{p.logical, x.dtype, x.shape};
      if (p.dim > 0) {  // one block, every row
        l.block_dim = p.dim;
        l.block_start = p.start;
        l.full = p.stop;  // (at least)
        f(i, std::move(l), 0, rows_of(x.shape), 0);
        continue;
      }
      l.shape[0] = p.stop;  // the logical tensor has at least these rows
      f(i, std::move(l), p.start, p.stop, p.offset);
    }
  }
}

// The merged entries of one logical tensor.
void add_entries(const std::string& name, Seen& s, Manifest& out, std::map<std::pair<std::string, uint64_t>, uint32_t>& index) {
  uint64_t end = 0;
  if (s.block_dim < 0) {
    std::string e = tile(s.rows, [&](uint64_t a, uint64_t b) { return "rows " + range(a, b) + " of tensor '" + name + "'"; }, &end);
    if (!e.empty() && out.error.empty()) out.error = e;
    std::vector<uint64_t> shape = s.shape;
    if (!shape.empty()) shape[0] = end;
    index[{name, 0}] = uint32_t(out.tensors.size());
    out.tensors.push_back({name, s.dtype, shape});
    return;
  }
  const std::string along = " along dim " + std::to_string(s.block_dim) + " of tensor '" + name + "'";
  std::string e = tile(s.blocks, [&](uint64_t a, uint64_t b) { return "elements " + range(a, b) + along; }, &end);
  if (!e.empty() && out.error.empty()) out.error = e;
  for (auto [start, stop, rank] : s.blocks) {
    if (index.count({name, start})) continue;  // (two sources with the same block: the error above)
    LogicalTensor b{name, s.dtype, s.shape, s.block_dim, start, end};
    b.shape[size_t(s.block_dim)] = stop - start;
    index[{name, start}] = uint32_t(out.tensors.size());
    out.tensors.push_back(std::move(b));
  }
}

}  // namespace

Status check_source(const std::vector<LocalTensor>& t) {
  for (const auto& x : t) {
    if (x.pieces.empty()) continue;
    const Piece& p = x.pieces[0];
    const bool rows = std::all_of(x.pieces.begin(), x.pieces.end(), [](const Piece& q) { return q.dim == 0; });
    const bool block = x.pieces.size() == 1 && p.dim > 0 && p.offset == 0 && x.shape[size_t(p.dim)] == p.len();
    if (!rows && !block)
      return InvalidArgument("tensor " + x.describe() + ": a source's tensor is a whole logical tensor, pieces "
                             "along dim 0 (rows), or one piece along another dim that fills it (some columns "
                             "of every row)");
  }
  return Status::Ok();
}

Manifest part_of(const std::vector<LocalTensor>& t, int rank) {
  Manifest m;
  m.root = rank;
  Part part{rank, {}};
  each_slice(t, [&](size_t, LogicalTensor l, uint64_t start, uint64_t stop, uint64_t) {
    part.slices.push_back({uint32_t(m.tensors.size()), start, stop});
    m.tensors.push_back(std::move(l));
  });
  m.parts.push_back(std::move(part));
  return m;
}

std::vector<SliceHome> slice_homes(const std::vector<LocalTensor>& t) {
  std::vector<SliceHome> v;
  each_slice(t, [&](size_t i, const LogicalTensor&, uint64_t, uint64_t, uint64_t row) { v.push_back({i, row}); });
  return v;
}

Manifest merge_parts(const std::vector<Manifest>& parts, int root) {
  Manifest out;
  out.root = root;
  std::vector<std::string> order;
  std::map<std::string, Seen> seen;
  for (const auto& pm : parts)
    for (const Slice& s : pm.parts.at(0).slices) {
      const LogicalTensor& t = pm.tensors[s.logical];
      auto [it, fresh] = seen.try_emplace(t.name, Seen{t.dtype, t.shape, t.block_dim, pm.root, {}, {}});
      if (fresh) order.push_back(t.name);
      if (std::string e = fits(it->second, t, pm.root); !e.empty() && out.error.empty()) out.error = e;
      if (t.blocked()) it->second.blocks.emplace_back(t.block_start, t.block_start + t.shape[size_t(t.block_dim)], pm.root);
      else it->second.rows.emplace_back(s.start, s.stop, pm.root);
    }
  std::map<std::pair<std::string, uint64_t>, uint32_t> index;  // (name, block start) -> entry
  for (const auto& name : order) add_entries(name, seen[name], out, index);
  for (const auto& pm : parts) {
    Part p{pm.root, {}};
    for (const Slice& s : pm.parts.at(0).slices) {
      const LogicalTensor& t = pm.tensors[s.logical];
      p.slices.push_back({index[{t.name, t.blocked() ? t.block_start : 0}], s.start, s.stop});
    }
    out.parts.push_back(std::move(p));
  }
  if (!out.error.empty()) out.parts.clear();  // (every rank fails with the error: nothing travels)
  return out;
}

}  // namespace sparrow::model
