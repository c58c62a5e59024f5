// SPDX-License-Identifier: Apache-2.0
// Which rows each receiver needs, and the operations a model's step is split into, so that a
// tensor-parallel shard receives only the changes that fall in its pieces.
//
// A receiver needs, of each logical tensor, the rows (dim 0) its pieces cover: a piece along dim 0
// names its rows, a piece along another dim (a row-parallel slice) needs every row, a whole tensor
// every row, a tensor it does not hold none. At a model's first step every receiver tells the root
// its rows and the root tells every rank the table, so that all ranks cut each source's part the same
// way: at every receiver's row boundaries, each segment going to the receivers whose rows cover it.
// Segments with the same receivers travel as one operation among the source and those receivers
// (the other ranks skip it); segments nobody needs do not travel.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "core/status.h"
#include "model/manifest.h"

namespace sparrow::model {

// The rows a receiver needs: merged, in increasing (logical, start) order.
std::vector<Slice> needed_rows(const Manifest& m, const std::vector<Target>& targets);
// Whether `rows` (as needed_rows gives them) cover rows [start, stop) of logical tensor `l`.
bool covers(const std::vector<Slice>& rows, uint32_t l, uint64_t start, uint64_t stop);

// Every receiver's rows, by rank (increasing).
using Needs = std::vector<std::pair<int, std::vector<Slice>>>;
std::vector<uint8_t> encode_rows(const std::vector<Slice>& rows);
// kCorruptData for junk or rows outside `m`'s tensors.
Result<std::vector<Slice>> decode_rows(std::span<const uint8_t> b, const Manifest& m);
std::vector<uint8_t> encode_needs(const Needs& n);
Result<Needs> decode_needs(std::span<const uint8_t> b, const Manifest& m);

// One operation of a step: rows of the source's part, sent to `participants` (the source among
// them, increasing).
struct Segment {
  uint32_t logical = 0;
  uint64_t start = 0, stop = 0;
  uint32_t slice = 0;      // the source's slice (its local tensor) these rows are in
  uint64_t slice_start = 0;  // ... and that slice's first row (the local tensor's row 0)
};
struct SplitOp {
  int source = 0;
  std::vector<int> participants;
  std::vector<Segment> segments;
};
// The operations of a step, in the order every rank runs them: per part (in order), one per set of
// receivers, in the order of their first segment.
std::vector<SplitOp> split_step(const std::vector<Part>& parts, const Needs& needs);
// The one source's part: every tensor whole, in the manifest's order.
Part whole_part(const Manifest& m);

}  // namespace sparrow::model
