// SPDX-License-Identifier: Apache-2.0
// A model as its ranks describe it: every rank's local tensors are pieces of the logical model (the
// trainer's tensors, by name and global shape). The manifest is the root's list of logical tensors,
// the order they travel in; a receiver matches its tensors to it by name, and a receiver's local
// tensor may hold pieces of several logical tensors (a fused qkv_proj) or a slice of one (a
// tensor-parallel shard), each a range along one dimension.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/bits.h"
#include "core/status.h"

namespace sparrow::model {

// local[..., offset : offset + (stop - start), ...] along `dim` holds logical[..., start:stop, ...];
// every other dimension is the same in both.
struct Piece {
  std::string logical;
  int dim = 0;
  uint64_t start = 0, stop = 0, offset = 0;
  uint64_t len() const { return stop - start; }
};

// A tensor of this rank: contiguous, row-major.
struct LocalTensor {
  std::string name;
  void* data = nullptr;  // a source reads it; a receiver writes it
  uint8_t dtype = 0;
  std::vector<uint64_t> shape;
  std::vector<Piece> pieces;  // empty: the whole logical tensor `name`
  uint64_t numel() const;
  std::string describe() const;  // "'qkv_proj' [96, 32] bfloat16"
};

// A tensor as it travels. Usually a whole logical tensor. With several sources, a logical tensor that
// the sources split along a dimension other than 0 (a row-parallel linear of a tensor-parallel
// trainer: each source holds some of its columns, every row) travels as one block per source:
// entries of the same name, `shape` the block's, elements [block_start, block_start + shape[block_dim])
// along block_dim of the logical tensor, whose extent there is `full`.
struct LogicalTensor {
  std::string name;
  uint8_t dtype = 0;
  std::vector<uint64_t> shape;
  int block_dim = -1;  // -1: the whole logical tensor (or its rows, split among sources)
  uint64_t block_start = 0, full = 0;
  uint64_t numel() const;
  uint64_t bytes() const;
  bool blocked() const { return block_dim > 0; }
  std::vector<uint64_t> logical_shape() const;  // the logical tensor's (the block's, `full` along block_dim)
};

// Sharded sources: the rows (dim 0) [start, stop) of logical tensor `logical` (an index into the
// manifest's tensors; a 0-dimensional tensor has one row).
struct Slice {
  uint32_t logical = 0;
  uint64_t start = 0, stop = 0;
};
// What one source sends: its slices, in the order of its local tensors and their pieces (sources.h).
struct Part {
  int32_t rank = 0;
  std::vector<Slice> slices;
};

struct Manifest {
  int32_t root = 0;
  std::vector<LogicalTensor> tensors;  // the order they travel in (one source)
  // Several sources: each one's part, in the order the parts travel (empty: the root sends every
  // tensor whole).
  std::vector<Part> parts;
  // Set by the root when the sources' tensors do not make one model: every rank fails with it.
  std::string error;
  std::vector<uint8_t> encode() const;
  static Result<Manifest> decode(std::span<const uint8_t> m);
  int find(const std::string& name) const;  // index (of its first block), or -1
  std::vector<uint32_t> entries(const std::string& name) const;  // every entry (block) of it, in order
};

// A slice on the wire (u32 logical, u64 start, u64 stop), and read back: kCorruptData, prefixed with
// `what`, for one outside `m`'s tensors (an unknown tensor, no rows, past its last row).
void put_slice(std::vector<uint8_t>& o, const Slice& s);
Status read_slice(bits::ByteReader& r, const Manifest& m, const std::string& what, Slice* s);

// A rank's own tensors, before anything travels: unique names, known dtypes, shapes whose size fits,
// pieces inside the local tensor's bounds and not overlapping each other there. A single source's
// (the root's, `source`) tensors must be whole logical tensors.
Status check_local(const std::vector<LocalTensor>& t, bool source);
// The source's manifest: its tensors, in its order.
Manifest manifest_of(const std::vector<LocalTensor>& t, int root);

uint64_t rows_of(const std::vector<uint64_t>& shape);  // dim 0 (1 for a 0-dimensional tensor)

// Where a receiver puts each logical tensor: straight into a local tensor that is the whole of it,
// or into a host copy (the mirror) whose changes are then projected onto the local pieces that name
// it (a logical tensor no local tensor names lands in a mirror too and goes no further).
struct Projection {
  size_t local = 0;  // index into the rank's local tensors
  Piece piece;       // of the manifest's entry (a block: start and stop within the block)
  // A block along another dim than the piece's: its elements along `cross_dim` lie at `cross_offset`
  // on in the local tensor (-1: none; every dim but the piece's is the same on both sides).
  int cross_dim = -1;
  uint64_t cross_offset = 0;
};
struct Target {
  int whole = -1;  // the local tensor that is the whole logical tensor, or -1: a mirror
  std::vector<Projection> pieces;
};
// kInvalidUsage naming the tensor when a local tensor does not fit the manifest: an unknown name, a
// dtype, shape or range that differs from the root's.
Result<std::vector<Target>> plan_receiver(const Manifest& m, const std::vector<LocalTensor>& locals);

// The byte runs a piece covers: (offset into the logical tensor, offset into the local one, length).
struct Run {
  uint64_t logical = 0, local = 0, bytes = 0;
};
std::vector<Run> runs_of(const LogicalTensor& l, const LocalTensor& t, const Projection& p);

// Copies the runs where they differ, in 64-byte lines (reads both sides, writes only what changed):
// logical -> local (`to_local`: projecting a new version) or local -> logical (mirroring what the
// local tensor holds). Returns the bytes written.
uint64_t copy_changed(const std::vector<Run>& runs, const uint8_t* from, uint8_t* to, bool to_local);
// Whether the local tensor holds exactly the logical tensor's bytes in every run.
bool runs_match(const std::vector<Run>& runs, const uint8_t* logical, const uint8_t* local);

}  // namespace sparrow::model
