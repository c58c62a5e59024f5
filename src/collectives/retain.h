// The deltas a root keeps so that a receiver that fell behind (it timed out, or refused a step it
// had no base for) catches up by the deltas it missed instead of a full snapshot. In memory, or as
// step files in a directory (SPARROW_RETAIN_DIR), with optional full anchors there for recovery from
// disk (`sparrow-ckpt apply`).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace sparrow::coll {

using Bytes = std::vector<uint8_t>;
using SharedBytes = std::shared_ptr<const Bytes>;

class RetainedSteps {
 public:
  RetainedSteps();  // from SPARROW_RETAIN_STEPS / _DIR / _ANCHOR_EVERY
  bool enabled() const { return keep_ > 0; }
  // One delta as it was streamed (header, chunks in any order, footer): in memory its frames are held
  // as they are, and a catch-up gets them as one checkpoint with its chunks in order (a valid step
  // file), as the step files on disk are written. The oldest beyond SPARROW_RETAIN_STEPS is dropped.
  Status add(const std::vector<std::shared_ptr<Bytes>>& frames);
  // A full snapshot of `version` is due as an anchor (SPARROW_RETAIN_DIR with _ANCHOR_EVERY).
  bool wants_anchor(uint64_t version) const;
  Status add_anchor(uint64_t version, std::span<const uint8_t> snapshot);
  // The consecutive retained deltas leading from version `from` to version `to` (none when from ==
  // to), or nothing if they are not all retained.
  std::optional<std::vector<SharedBytes>> chain(uint64_t from, uint64_t to) const;
  // The retained version whose content digests (one per tensor) are `digests`: the base of a
  // retained delta; 0 when none is.
  uint64_t version_with(const std::vector<uint64_t>& digests) const;
  // A new base (a full version): earlier deltas no longer lead anywhere.
  void clear();
  size_t size() const { return steps_.size(); }

 private:
  struct Step {
    uint64_t base = 0, version = 0;
    std::vector<uint64_t> base_digests;  // the base version's content digests (the header's)
    std::vector<std::shared_ptr<Bytes>> frames;  // in memory (as streamed), or
    std::string path;                            // on disk
  };
  Result<SharedBytes> load(const Step& s) const;
  void prune_anchors();
  size_t keep_ = 0;
  std::string dir_;
  uint64_t anchor_every_ = 0;
  std::deque<Step> steps_;
  std::deque<std::pair<uint64_t, std::string>> anchors_;
};

// The message that carries a catch-up chain to a receiver (instead of a full snapshot): a magic, the
// number of deltas, then each as (u64 length, bytes).
constexpr uint32_t kChainMagic = 0x48435053;  // "SPCH"
Bytes encode_chain_message(const std::vector<SharedBytes>& links);
bool is_chain_message(std::span<const uint8_t> m);
Result<std::vector<std::span<const uint8_t>>> decode_chain_message(std::span<const uint8_t> m);

}  // namespace sparrow::coll
