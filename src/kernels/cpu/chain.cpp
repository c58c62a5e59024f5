// Catching up over a chain of deltas: a receiver k versions behind gets the k deltas it missed and
// applies them as one change set. Per block, the chunks of successive deltas are decoded in order,
// each against the block's contents as the deltas before it left them (the targets' values, overlaid
// with the changes composed so far), and the changes are merged; every delta's resulting digests are
// checked as one checkpoint's would be. Nothing is written until the whole chain verified, and then
// only the composed changes, once.
#include <cstring>
#include <map>

#include "core/parallel.h"
#include "format/block_sum.h"
#include "format/digest.h"
#include "kernels/cpu/apply_internal.h"
#include "kernels/cpu/extract.h"

namespace sparrow::kernels::cpu {

using namespace detail;

namespace {

// One delta of a chain, parsed: chunks may come in any order (as a stream delivers them).
using Link = format::CheckpointView;

Result<Link> parse_link(std::span<const uint8_t> in, size_t index) {
  const std::string where = "delta " + std::to_string(index + 1) + " of the chain";
  auto l = format::parse_checkpoint(in, format::ChunkOrder::kAny);
  if (!l.ok()) return std::move(l).take_status().context(where);
  if (l->header.full()) return CorruptData(where + " is a full snapshot (a chain holds deltas)");
  return l;
}

// Link j must apply to what link j-1 leads to: same tensors and chunking, consecutive versions.
Status check_continuity(const Link& prev, const Link& next, size_t j) {
  const auto& a = prev.header;
  const auto& b = next.header;
  bool same = a.chunk_elems == b.chunk_elems && a.tensors.size() == b.tensors.size();
  for (size_t t = 0; same && t < a.tensors.size(); ++t)
    same = a.tensors[t].count == b.tensors[t].count && a.tensors[t].dtype == b.tensors[t].dtype;
  if (!same) return CorruptData("delta " + std::to_string(j + 1) + " of the chain has another layout or chunking");
  if (b.base_version != a.new_version)
    return CorruptData("the chain has a gap: delta " + std::to_string(j + 1) + " applies to version " +
                       std::to_string(b.base_version) + ", the one before leads to " + std::to_string(a.new_version));
  for (size_t t = 0; t < b.tensors.size(); ++t)
    if (b.tensors[t].base_digest != prev.footer.new_digests[t])
      return CorruptData("delta " + std::to_string(j + 1) + " of the chain applies to other contents of tensor '" +
                         b.tensors[t].name + "' than the one before leads to");
  return Status::Ok();
}

// A chunk of one link, and where its digest change goes.
struct ChunkRef {
  size_t link;
  const format::ChunkView* c;
  uint64_t* dig;
};

// Folds `sg` (a block's changes by one delta) into `m` (the block's changes composed so far).
void fold(Staged& m, Staged&& sg, uint32_t es) {
  const size_t bytes = size_t(sg.h.elem_count) * es;
  if (sg.dense) {  // the whole range: nothing earlier survives
    if (sg.dense != sg.vals.data()) sg.vals.assign(sg.dense, sg.dense + bytes);
    m.vals = std::move(sg.vals);
    m.dense = m.vals.data();
    m.pos.clear();
  } else if (m.dense) {
    scatter(m.vals.data(), sg.pos.data(), sg.pos.size(), es, sg.vals.data());
  } else if (m.pos.empty()) {
    m.pos = std::move(sg.pos);
    m.vals = std::move(sg.vals);
    m.sum_delta = sg.sum_delta;
  } else {  // merge two sorted position lists; the later delta's value wins (the sum changes add up:
            // sg was staged against m's values)
    m.sum_delta = format::block_sum_add(m.sum_delta, sg.sum_delta);
    std::vector<uint32_t> pos;
    std::vector<uint8_t> vals;
    pos.reserve(m.pos.size() + sg.pos.size());
    vals.reserve((m.pos.size() + sg.pos.size()) * es);
    size_t i = 0, j = 0;
    auto take = [&](const Staged& s, size_t k) {
      pos.push_back(s.pos[k]);
      vals.insert(vals.end(), s.vals.begin() + k * es, s.vals.begin() + (k + 1) * es);
    };
    while (i < m.pos.size() || j < sg.pos.size()) {
      if (j == sg.pos.size() || (i < m.pos.size() && m.pos[i] < sg.pos[j])) take(m, i++);
      else {
        if (i < m.pos.size() && m.pos[i] == sg.pos[j]) ++i;
        take(sg, j++);
      }
    }
    m.pos = std::move(pos);
    m.vals = std::move(vals);
  }
  m.h = sg.h;
}

// Composes one block: its chunks in chain order, each decoded against the block as the earlier ones
// left it. The result is what the block's write will be.
Status compose_block(const std::vector<Link>& links, const std::vector<ChunkRef>& refs, std::span<void* const> targets,
                     DeviceOps* dev, const std::vector<uint8_t>& on_dev, StageScratch& s, std::vector<uint8_t>& tmp,
                     Staged& m) {
  for (const ChunkRef& r : refs) {
    const format::Header& h = links[r.link].header;
    const format::ChunkView& c = *r.c;
    const uint32_t t = c.h.tensor, es = h.tensors[t].elem_size;
    const uint8_t* base = static_cast<const uint8_t*>(targets[t]) + c.h.elem_begin * es;
    bool base_dev = on_dev[t];
    const Staged* over = nullptr;
    if (m.dense) {
      base = m.dense;
      base_dev = false;
    } else if (!m.pos.empty() && c.h.index_codec == format::IndexCodec::kDense) {
      // A dense chunk over composed sparse changes: decode it against the block's composed bytes.
      size_t bytes = 0;
      SPARROW_ASSIGN_OR_RETURN(const uint8_t* p, host_block(h, targets, dev, on_dev, t, c.h.elem_begin / h.chunk_elems, tmp, &bytes));
      if (p != tmp.data()) tmp.assign(p, p + bytes);
      scatter(tmp.data(), m.pos.data(), m.pos.size(), es, m.vals.data());
      base = tmp.data();
      base_dev = false;
    } else if (!m.pos.empty()) {
      over = &m;
    }
    Staged sg;
    Status e = stage_chunk(h, c, base, base_dev, dev, s, sg, over);
    if (!e.ok()) return chunk_context(std::move(e), h, c.h, 0).context("delta " + std::to_string(r.link + 1) + " of the chain");
    *r.dig = sg.dig;
    fold(m, std::move(sg), es);
  }
  return Status::Ok();
}

// Every link's resulting digests, from the receiver's and the chunks' digest changes.
Status check_link_digests(const std::vector<Link>& links, const std::vector<std::vector<uint64_t>>& digs,
                          const ReceiverState& state) {
  std::vector<uint64_t> nd = state.digests;
  for (size_t j = 0; j < links.size(); ++j) {
    for (size_t i = 0; i < links[j].chunks.size(); ++i) nd[links[j].chunks[i].h.tensor] += digs[j][i];
    for (size_t t = 0; t < nd.size(); ++t)
      if (nd[t] != links[j].footer.new_digests[t])
        return VersionMismatch("tensor '" + links[j].header.tensors[t].name + "': delta " + std::to_string(j + 1) +
                               " of the chain does not lead to version " + std::to_string(links[j].header.new_version) +
                               " (the buffer differs from version " + std::to_string(links[0].header.base_version) + ")");
  }
  return Status::Ok();
}

}  // namespace

Status ApplySession::prepare_chain(std::span<const std::span<const uint8_t>> in,
                                   std::vector<std::shared_ptr<const std::vector<uint8_t>>> owners) {
  Impl& im = *im_;
  if (im.have_header || im.prepared) return Error(Code::kInvalidUsage, "prepare_chain on a session already in use");
  if (in.empty()) return InvalidArgument("an empty chain");
  const double t0 = now_s();
  std::vector<Link> links;
  for (size_t j = 0; j < in.size(); ++j) {
    SPARROW_ASSIGN_OR_RETURN(Link l, parse_link(in[j], j));
    if (j) SPARROW_RETURN_IF_ERROR(check_continuity(links.back(), l, j));
    im.wire += in[j].size();
    links.push_back(std::move(l));
  }
  SPARROW_RETURN_IF_ERROR(check_receiver(links[0].header, im.targets, im.layout, *im.state));
  if (im.opt.verify_base) {
    im.base = verify_base_contents(links[0].header, im.targets, *im.state, im.dev, im.on_dev, im.threads);
    SPARROW_RETURN_IF_ERROR(base_verdict(links[0].header, im.base));
  }
  // Every touched block with its chunks in chain order.
  std::vector<std::vector<uint64_t>> digs(links.size());
  std::map<std::pair<uint32_t, uint64_t>, std::vector<ChunkRef>> by_block;
  for (size_t j = 0; j < links.size(); ++j) {
    digs[j].assign(links[j].chunks.size(), 0);
    for (size_t i = 0; i < links[j].chunks.size(); ++i) {
      const auto& c = links[j].chunks[i];
      by_block[{c.h.tensor, c.h.elem_begin}].push_back({j, &c, &digs[j][i]});
    }
  }
  std::vector<const std::vector<ChunkRef>*> blocks;
  for (auto& [k, v] : by_block) blocks.push_back(&v);
  std::vector<Staged> staged(blocks.size());
  std::vector<Status> errs(blocks.size());
  std::vector<StageScratch> scratch(std::max(1, im.threads));
  std::vector<std::vector<uint8_t>> tmp(std::max(1, im.threads));
  parallel_for(blocks.size(), im.threads, [&](size_t b, int w) {
    errs[b] = compose_block(links, *blocks[b], im.targets, im.dev, im.on_dev, scratch[w], tmp[w], staged[b]);
  });
  for (auto& e : errs) SPARROW_RETURN_IF_ERROR(e);
  SPARROW_RETURN_IF_ERROR(check_link_digests(links, digs, *im.state));
  im.h = links.back().header;
  im.footer = links.back().footer;
  for (auto& sg : staged) {
    im.changes += sg.dense ? sg.h.elem_count : sg.pos.size();
  }
  im.staged = std::move(staged);
  im.frames = std::move(owners);
  im.have_header = true;
  im.prepared = true;
  im.decode_s = now_s() - t0;
  return Status::Ok();
}

uint64_t ApplySession::base_version() const { return im_->h.base_version; }

}  // namespace sparrow::kernels::cpu
