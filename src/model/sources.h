// SPDX-License-Identifier: Apache-2.0
// Several sources (sharded trainers): each source rank holds parts of logical tensors and sends them
// itself. A source's local tensor is a whole logical tensor; or holds pieces along dim 0 (row ranges:
// an FSDP shard, or a tensor-parallel trainer's column-parallel shard, fused or padded); or one piece
// along another dim that fills it (a tensor-parallel trainer's row-parallel shard: some columns of
// every row). At a model's first step every source describes its part to the root, which merges the
// parts into the model's manifest, checking that they make one model: every element of every logical
// tensor held by exactly one source, dtypes and other dimensions alike. A logical tensor split along
// a dim other than 0 travels as one block per source (manifest.h).
#pragma once

#include <cstddef>
#include <vector>

#include "core/status.h"
#include "model/manifest.h"

namespace sparrow::model {

// kInvalidArgument naming the tensor for a source's tensor that is none of the above.
Status check_source(const std::vector<LocalTensor>& t);
// What source `rank` tells the root: a manifest of what it holds under the logical names (dim 0 up to
// the end of its rows; a block up to its end) and one part listing its slices.
Manifest part_of(const std::vector<LocalTensor>& t, int rank);
// Where the source holds each of those slices (in the part's order): its local tensor, and the local
// row the slice's first row is at.
struct SliceHome {
  size_t local = 0;
  uint64_t row = 0;
};
std::vector<SliceHome> slice_homes(const std::vector<LocalTensor>& t);
// The root's merge of the parts (in the order of the sources): the model's manifest, with `error`
// set (naming the tensor and the ranks) when the parts do not make one model.
Manifest merge_parts(const std::vector<Manifest>& parts, int root);

}  // namespace sparrow::model
