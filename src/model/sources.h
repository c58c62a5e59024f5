// SPDX-License-Identifier: Apache-2.0
// Several sources (sharded trainers): each source rank holds row ranges (dim 0) of logical tensors,
// FSDP-style, and sends them itself. At a model's first step every source describes its part to the
// root, which merges the parts into the model's manifest, checking that they make one model: every
// row of every logical tensor held by exactly one source, dtypes and other dimensions alike.
#pragma once

#include <vector>

#include "core/status.h"
#include "model/manifest.h"

namespace sparrow::model {

// A source's own tensors: whole logical tensors (no pieces) or exactly one piece along dim 0 at
// offset 0 that fills the local tensor's rows. kInvalidArgument naming the tensor otherwise.
Status check_source(const std::vector<LocalTensor>& t);
// What source `rank` tells the root: a manifest of its tensors under their logical names (dim 0 up to
// the end of its slice) and one part listing its slices.
Manifest part_of(const std::vector<LocalTensor>& t, int rank);
// The root's merge of the parts (in the order of the sources): the model's manifest, with `error`
// set (naming the tensor and the ranks) when the parts do not make one model.
Manifest merge_parts(const std::vector<Manifest>& parts, int root);

}  // namespace sparrow::model
