#include "collectives/retain.h"

#include <unistd.h>

#include <algorithm>

#include "core/log.h"
#include "core/params.h"
#include "core/bits.h"
#include "format/checkpoint.h"
#include "format/container.h"

namespace sparrow::coll {

namespace {

params::IntParam kRetainSteps("RETAIN_STEPS", 8,
                              "Deltas the root keeps so that a receiver that fell behind catches up by the ones it "
                              "missed instead of a full snapshot (0: none; memory: that many deltas).",
                              0, 1 << 20);
params::StringParam kRetainDir("RETAIN_DIR", "",
                               "Directory for the retained deltas as step files (step-<version>.spd) instead of "
                               "memory; empty: memory.");
params::IntParam kAnchorEvery("RETAIN_ANCHOR_EVERY", 0,
                              "With SPARROW_RETAIN_DIR: also write a full snapshot (anchor-<version>.spd) every this "
                              "many versions, so the chain can be rebuilt from disk (0: never).",
                              0, 1 << 30);

std::string step_metadata(uint64_t base, uint64_t version, const char* kind) {
  return "{\"kind\":\"" + std::string(kind) + "\",\"base_version\":" + std::to_string(base) +
         ",\"new_version\":" + std::to_string(version) + "}";
}

// The checkpoint of `frames` with its chunks in (tensor, element) order.
Result<Bytes> ordered_checkpoint(const std::vector<std::shared_ptr<Bytes>>& frames, format::Header* hdr) {
  if (frames.size() < 2) return CorruptData("a retained step needs a header and a footer");
  size_t used = 0;
  SPARROW_ASSIGN_OR_RETURN(*hdr, format::parse_header(*frames.front(), &used));
  struct Ref {
    uint32_t t;
    uint64_t e;
    const Bytes* f;
  };
  std::vector<Ref> chunks;
  size_t total = frames.front()->size() + frames.back()->size();
  for (size_t i = 1; i + 1 < frames.size(); ++i) {
    SPARROW_ASSIGN_OR_RETURN(format::ChunkView c, format::parse_chunk(*frames[i], *hdr, &used));
    chunks.push_back({c.h.tensor, c.h.elem_begin, frames[i].get()});
    total += frames[i]->size();
  }
  std::sort(chunks.begin(), chunks.end(), [](const Ref& a, const Ref& b) { return a.t != b.t ? a.t < b.t : a.e < b.e; });
  Bytes out;
  out.reserve(total);
  out.insert(out.end(), frames.front()->begin(), frames.front()->end());
  for (auto& c : chunks) out.insert(out.end(), c.f->begin(), c.f->end());
  out.insert(out.end(), frames.back()->begin(), frames.back()->end());
  return out;
}

}  // namespace

RetainedSteps::RetainedSteps()
    : keep_(size_t(kRetainSteps.get())), dir_(kRetainDir.get()), anchor_every_(uint64_t(kAnchorEvery.get())) {}

Status RetainedSteps::add(const std::vector<std::shared_ptr<Bytes>>& frames) {
  if (!enabled()) return Status::Ok();
  if (frames.empty()) return CorruptData("a retained step needs a header and a footer");
  size_t used = 0;
  SPARROW_ASSIGN_OR_RETURN(format::Header h, format::parse_header(*frames.front(), &used));
  if (!steps_.empty() && steps_.back().version != h.base_version) steps_.clear();  // not consecutive
  Step s{h.base_version, h.new_version, {}, {}, ""};
  for (auto& t : h.tensors) s.base_digests.push_back(t.base_digest);
  if (dir_.empty()) {
    s.frames = frames;  // held as sent; put in order only if a catch-up asks for it (load)
  } else {
    SPARROW_ASSIGN_OR_RETURN(Bytes ck, ordered_checkpoint(frames, &h));
    s.path = dir_ + "/step-" + std::to_string(h.new_version) + ".spd";
    Status w = format::write_file_atomic(s.path, format::encode_step_file(ck, step_metadata(h.base_version, h.new_version, "delta")));
    if (!w.ok()) return std::move(w).context("retaining step " + std::to_string(h.new_version) + " in " + dir_);
  }
  steps_.push_back(std::move(s));
  while (steps_.size() > keep_) {
    if (!steps_.front().path.empty()) ::unlink(steps_.front().path.c_str());
    steps_.pop_front();
  }
  prune_anchors();
  return Status::Ok();
}

uint64_t RetainedSteps::version_with(const std::vector<uint64_t>& digests) const {
  for (auto& s : steps_)
    if (s.base_digests == digests) return s.base;
  return 0;
}

bool RetainedSteps::wants_anchor(uint64_t version) const {
  return enabled() && !dir_.empty() && anchor_every_ > 0 && version % anchor_every_ == 0;
}

Status RetainedSteps::add_anchor(uint64_t version, std::span<const uint8_t> snapshot) {
  std::string path = dir_ + "/anchor-" + std::to_string(version) + ".spd";
  Status w = format::write_file_atomic(path, format::encode_step_file(snapshot, step_metadata(0, version, "anchor")));
  if (!w.ok()) return std::move(w).context("writing the anchor of version " + std::to_string(version) + " in " + dir_);
  anchors_.push_back({version, path});
  prune_anchors();
  return Status::Ok();
}

// Keeps the newest anchor and those from which the retained deltas still lead on.
void RetainedSteps::prune_anchors() {
  const uint64_t oldest = steps_.empty() ? UINT64_MAX : steps_.front().base;
  while (anchors_.size() > 1 && anchors_.front().first < oldest) {
    ::unlink(anchors_.front().second.c_str());
    anchors_.pop_front();
  }
}

Result<SharedBytes> RetainedSteps::load(const Step& s) const {
  if (!s.frames.empty()) {
    format::Header h;
    SPARROW_ASSIGN_OR_RETURN(Bytes ck, ordered_checkpoint(s.frames, &h));
    return std::make_shared<const Bytes>(std::move(ck));
  }
  SPARROW_ASSIGN_OR_RETURN(Bytes file, format::read_file(s.path));
  SPARROW_ASSIGN_OR_RETURN(format::StepFile sf, format::decode_step_file(file));
  return std::make_shared<const Bytes>(std::move(sf.payload));
}

std::optional<std::vector<SharedBytes>> RetainedSteps::chain(uint64_t from, uint64_t to) const {
  std::vector<SharedBytes> out;
  if (from == to) return out;
  auto it = std::find_if(steps_.begin(), steps_.end(), [&](const Step& s) { return s.base == from; });
  for (; it != steps_.end(); ++it) {
    auto b = load(*it);
    if (!b.ok()) {
      SPARROW_WARN("cannot read retained step %llu: %s", (unsigned long long)it->version, b.status().message().c_str());
      return std::nullopt;
    }
    out.push_back(std::move(b.value()));
    if (it->version == to) return out;
  }
  return std::nullopt;
}

void RetainedSteps::clear() {
  for (auto& s : steps_)
    if (!s.path.empty()) ::unlink(s.path.c_str());
  steps_.clear();
}

Bytes encode_chain_message(const std::vector<SharedBytes>& links) {
  Bytes o;
  size_t total = 8;
  for (auto& l : links) total += 8 + l->size();
  o.reserve(total);
  bits::put_u32(o, kChainMagic);
  bits::put_u32(o, uint32_t(links.size()));
  for (auto& l : links) {
    bits::put_u64(o, l->size());
    o.insert(o.end(), l->begin(), l->end());
  }
  return o;
}

bool is_chain_message(std::span<const uint8_t> m) { return m.size() >= 8 && bits::load_u32(m.data()) == kChainMagic; }

Result<std::vector<std::span<const uint8_t>>> decode_chain_message(std::span<const uint8_t> m) {
  if (!is_chain_message(m)) return CorruptData("not a catch-up chain");
  const uint32_t n = bits::load_u32(m.data() + 4);
  std::vector<std::span<const uint8_t>> out;
  size_t off = 8;
  for (uint32_t i = 0; i < n; ++i) {
    if (m.size() - off < 8) return CorruptData("catch-up chain truncated");
    const uint64_t len = bits::load_u64(m.data() + off);
    off += 8;
    if (len > m.size() - off) return CorruptData("catch-up chain truncated");
    out.push_back(m.subspan(off, size_t(len)));
    off += size_t(len);
  }
  if (off != m.size()) return CorruptData("trailing bytes after a catch-up chain");
  return out;
}

}  // namespace sparrow::coll
