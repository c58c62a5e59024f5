// One encode pass of DeltaEncoder (delta.h): the chunks are extracted and encoded on the worker
// pool, each framed on its own; codec choice is the format's (format/codec_choice.h); the pass
// orchestrates: inputs, shadow placement, one chunk at a time (full or delta), streaming hand-off,
// and the footer with the new digests and the stats.
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>

#include "core/clock.h"
#include "core/log.h"
#include "core/parallel.h"
#include "format/codec_choice.h"
#include "format/digest.h"
#include "kernels/cpu/delta.h"

namespace sparrow::kernels::cpu {

using format::ChunkHeader;
using format::IndexCodec;
using format::ValueCodec;

namespace {


struct Block {
  uint32_t tensor;
  uint64_t begin;
  uint32_t n;
};

std::vector<Block> make_blocks(const std::vector<TensorSpec>& ts, uint32_t ce) {
  std::vector<Block> b;
  for (uint32_t t = 0; t < ts.size(); ++t)
    for (uint64_t e = 0; e < ts[t].count; e += ce) b.push_back({t, e, uint32_t(std::min<uint64_t>(ce, ts[t].count - e))});
  return b;
}

struct EncScratch {
  std::vector<uint32_t> pos;
  std::vector<uint8_t> oldv, newv, idx, best, host;  // host: a device chunk's bytes
  std::vector<uint8_t> base;  // adopt_view: the chunk's base bytes (extraction refreshes them here)
  format::CodecScratch codec;
};

void merge(EncodeStats& a, const EncodeStats& b) {
  a.elements += b.elements;
  a.changes += b.changes;
  a.chunks += b.chunks;
  a.dense_chunks += b.dense_chunks;
  a.index_bytes += b.index_bytes;
  a.value_bytes += b.value_bytes;
  for (int i = 0; i < format::kNumIndexCodecs; ++i) a.index_codec_chunks[i] += b.index_codec_chunks[i];
  for (int i = 0; i < format::kNumValueCodecs; ++i) a.value_codec_chunks[i] += b.value_codec_chunks[i];
  a.leb128_overwrite_bytes += b.leb128_overwrite_bytes;
  a.index_entropy_bits += b.index_entropy_bits;
  a.sparse_index_bytes += b.sparse_index_bytes;
  a.sparse_changes += b.sparse_changes;
  a.extract_seconds += b.extract_seconds;
  a.encode_seconds += b.encode_seconds;
}

// One chunk being encoded by one worker.
struct Chunk {
  const Block& b;
  size_t bi;
  uint32_t es;
  bool dv;               // a device buffer
  const uint8_t* cur;    // the current values (a host copy, for a device chunk sent dense)
  const uint8_t* dcur;   // the buffer's own address (the device address for a device buffer)
  uint8_t* sh;           // its shadow (null: none kept)
  EncodeStats& ws;
  EncScratch& s;
  ChunkHeader h;
  std::span<const uint8_t> vals;
  const uint32_t* pos = nullptr;  // the chunk's changes (in the worker's scratch, or a device
  const uint8_t* oldv = nullptr;  // tensor's pinned list)
  const uint8_t* newv = nullptr;
};

// A device tensor's changes of this pass, taken off the device in one go (Pass::device_changes).
struct TensorChanges {
  bool ready = false;
  std::vector<uint64_t> offsets;  // chunk i's changes are entries offsets[i] .. offsets[i + 1]
  const uint32_t* pos = nullptr;
  const uint8_t* oldv = nullptr;
  const uint8_t* newv = nullptr;
};

}  // namespace

struct DeltaEncoder::Pass {
  Pass(DeltaEncoder& enc, std::span<const void* const> cur, const EncodeOptions& o, bool f, const FrameFn* chunk_fn)
      : e(enc), current(cur), opt(o), full(f), on_chunk(chunk_fn) {}
  DeltaEncoder& e;
  std::span<const void* const> current;
  const EncodeOptions& opt;
  bool full;
  const FrameFn* on_chunk;  // null: not streaming (one buffer)
  bool view = false;        // adopt_view: base digests come out of this pass
  uint32_t ce = 0;
  int threads = 1;
  ExtractFn extract = nullptr;
  DeviceOps* dev = nullptr;
  std::vector<uint8_t> on_dev;
  std::vector<Block> blocks;
  std::vector<uint64_t> base_dig, dig;
  std::vector<std::vector<uint8_t>> frames;
  std::vector<EncodeStats> wstats;
  std::vector<EncScratch> scratch;
  std::vector<TensorChanges> dchg;  // per tensor
  std::mutex err_mu;
  Status first_error;
  std::atomic<uint64_t> streamed{0}, streamed_bytes{0};

  Status check();
  Status place_shadow();
  format::Header header() const;
  void run();
  Status device_changes();
  Status extract_tensor(uint32_t t, TensorChanges& tc);
  Status chunk(size_t bi, int w);
  Status full_chunk(Chunk& c);
  Status delta_chunk(Chunk& c);
  Status sparse_or_dense(Chunk& c, size_t k, double t1);
  Status dense_chunk(Chunk& c, bool compress);
  Status to_host(Chunk& c);
  void emit(Chunk& c);
  void finish(format::Header& hd, std::vector<uint8_t>& out, EncodeStats* st, double wall0, bool streaming);
};

Status DeltaEncoder::Pass::check() {
  const auto& ts = e.tensors_;
  if (current.size() != ts.size())
    return InvalidArgument("encoder has " + std::to_string(ts.size()) + " tensors, got " +
                           std::to_string(current.size()) + " buffers");
  for (size_t t = 0; t < ts.size(); ++t) {
    if (ts[t].elem_size() == 0) return InvalidArgument("tensor '" + ts[t].name + "': unknown datatype");
    if (ts[t].count > format::kMaxTensorElems) return InvalidArgument("tensor '" + ts[t].name + "' too large");
    if (ts[t].count && !current[t]) return InvalidArgument("tensor '" + ts[t].name + "': null buffer");
  }
  ce = opt.chunk_elems ? opt.chunk_elems : default_chunk_elems();
  if (ce > format::kMaxChunkElems) return InvalidArgument("chunk_elems too large");
  threads = opt.threads > 0 ? opt.threads : kernel_threads();
  extract = extract_fn(isa_supported(opt.isa) ? opt.isa : Isa::kScalar);
  return Status::Ok();
}

// Device buffers: the shadow follows the buffer. A buffer that moved between host and device since
// the last version starts over with a full snapshot; a full one (re)allocates the shadow.
Status DeltaEncoder::Pass::place_shadow() {
  const auto& ts = e.tensors_;
  dev = device_ops();
  on_dev.assign(ts.size(), 0);
  for (size_t t = 0; t < ts.size(); ++t) on_dev[t] = ts[t].count && is_device(dev, current[t]);
  if (!full) {
    for (size_t t = 0; t < ts.size(); ++t)
      if (bool(on_dev[t]) != (t < e.dshadow_.size() && e.dshadow_[t] != nullptr)) full = true;
    if (full) SPARROW_INFO("a buffer moved between host and device memory: sending a full snapshot");
  }
  if (!full) return Status::Ok();
  e.shadow_.assign(ts.size(), {});
  e.free_device_shadow();
  if (!e.keep_shadow_) return Status::Ok();
  e.dshadow_.assign(ts.size(), nullptr);
  e.dev_ = dev;
  e.dshadow_host_ = shadow_on_host();
  for (size_t t = 0; t < ts.size(); ++t) {
    if (!on_dev[t]) {
      e.shadow_[t].resize(ts[t].bytes());
    } else if (int err = dev->alloc(&e.dshadow_[t], ts[t].bytes(), e.dshadow_host_)) {
      e.dshadow_[t] = nullptr;
      return device_error(dev, err, "allocating the shadow of a device buffer")
          .context("tensor '" + ts[t].name + "' (" + std::to_string(ts[t].bytes()) + " bytes)");
    }
  }
  return Status::Ok();
}

format::Header DeltaEncoder::Pass::header() const {
  format::Header hd;
  hd.flags = full ? format::kFlagFull : 0;
  hd.base_version = full ? 0 : e.version_;
  hd.new_version = e.version_ + 1;
  hd.chunk_elems = ce;
  for (size_t t = 0; t < e.tensors_.size(); ++t) {
    format::TensorEntry te;
    te.name = e.tensors_[t].name;
    te.dtype = e.tensors_[t].dtype;
    te.elem_size = uint8_t(e.tensors_[t].elem_size());
    te.count = e.tensors_[t].count;
    te.base_digest = full ? 0 : e.digests_[t];
    hd.tensors.push_back(std::move(te));
  }
  return hd;
}

void DeltaEncoder::Pass::run() {
  blocks = make_blocks(e.tensors_, ce);
  base_dig.assign(view ? blocks.size() : 0, 0);
  frames.assign(blocks.size(), {});
  dig.assign(blocks.size(), 0);
  wstats.assign(size_t(threads), {});
  scratch.resize(size_t(threads));
  first_error = device_changes();
  if (!first_error.ok()) return;
  parallel_for(blocks.size(), threads, [&](size_t bi, int w) {
    Status s = chunk(bi, w);
    if (s.ok()) return;
    std::lock_guard<std::mutex> lk(err_mu);
    if (first_error.ok()) first_error = std::move(s);
  });
}

// A delta's device tensors: each one's changes come off the device in one pass (count, then collect
// into pinned memory the encoder keeps) rather than in a round trip per chunk, which left the host
// waiting on the device once per chunk. A tensor with more changes than a sixteenth of its elements
// (most of its chunks go dense then) is extracted chunk by chunk instead.
Status DeltaEncoder::Pass::device_changes() {
  dchg.assign(e.tensors_.size(), {});
  if (full || view || !e.keep_shadow_) return Status::Ok();
  const double t0 = now_s();
  e.dchanges_.resize(e.tensors_.size());
  for (uint32_t t = 0; t < e.tensors_.size(); ++t)
    if (on_dev[t]) SPARROW_RETURN_IF_ERROR(extract_tensor(t, dchg[t]));
  wstats[0].extract_seconds += now_s() - t0;
  return Status::Ok();
}

Status DeltaEncoder::Pass::extract_tensor(uint32_t t, TensorChanges& tc) {
  const uint64_t n = e.tensors_[t].count;
  const uint32_t es = e.tensors_[t].elem_size();
  auto& room = e.dchanges_[t];
  tc.offsets.assign((n + ce - 1) / ce + 1, 0);
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto* p = static_cast<uint8_t*>(room.p);
    const size_t o_old = room.capacity * 4, o_new = o_old + room.capacity * es;
    tc.pos = reinterpret_cast<const uint32_t*>(p);
    tc.oldv = p + o_old;
    tc.newv = p + o_new;
    SPARROW_RETURN_IF_ERROR(device_error(
        dev, dev->extract_chunks(current[t], e.dshadow_[t], n, es, ce, tc.offsets.data(), reinterpret_cast<uint32_t*>(p),
                                 p + o_old, p + o_new, room.capacity),
        "extracting changes on the device"));
    const uint64_t total = tc.offsets.back();
    if (total <= room.capacity) {
      tc.ready = true;
      return Status::Ok();
    }
    if (total > n / 16) return Status::Ok();  // chunk by chunk; nothing was changed
    if (room.p) dev->free(room.p, true);
    room = {};
    const uint64_t cap = total + total / 4 + 4096;
    if (int err = dev->alloc(&room.p, cap * (4 + 2 * size_t(es)), true))
      return device_error(dev, err, "allocating pinned memory for a device buffer's changes");
    room.capacity = cap;
  }
  return Status::Ok();  // the buffer changed between the two counts: chunk by chunk
}

Status DeltaEncoder::Pass::chunk(size_t bi, int w) {
  const Block& b = blocks[bi];
  const uint32_t es = e.tensors_[b.tensor].elem_size();
  const bool dv = on_dev[b.tensor];
  const uint8_t* cur = static_cast<const uint8_t*>(current[b.tensor]) + b.begin * es;
  uint8_t* sh = !e.keep_shadow_ || view ? nullptr
                : dv                    ? static_cast<uint8_t*>(e.dshadow_[b.tensor]) + b.begin * es
                                        : e.shadow_[b.tensor].data() + b.begin * es;
  EncScratch& s = scratch[w];
  if (view) {  // the base is the caller's (read-only): a copy of the chunk, digested while in cache
    s.base.assign(e.borrowed_[b.tensor] + b.begin * es, e.borrowed_[b.tensor] + (b.begin + b.n) * es);
    base_dig[bi] = format::digest_range(b.tensor, s.base.data(), b.begin, b.n, es);
    sh = s.base.data();
  }
  Chunk c{b, bi, es, dv, cur, cur, sh, wstats[w], s, {}, {}};
  c.ws.elements += b.n;
  c.h.tensor = b.tensor;
  c.h.elem_begin = b.begin;
  c.h.elem_count = b.n;
  return full ? full_chunk(c) : delta_chunk(c);
}

// A device chunk's bytes on the host (for dense chunks only: sparse ones need just the changes).
Status DeltaEncoder::Pass::to_host(Chunk& c) {
  if (!c.dv) return Status::Ok();
  c.s.host.resize(size_t(c.b.n) * c.es);
  SPARROW_RETURN_IF_ERROR(device_error(dev, dev->copy(c.s.host.data(), c.dcur, c.s.host.size()), "copying a chunk to the host"));
  c.cur = c.s.host.data();
  return Status::Ok();
}

// The frame is done: handed to the stream at once, or kept for the one-buffer checkpoint.
void DeltaEncoder::Pass::emit(Chunk& c) {
  format::write_chunk(c.h, c.s.idx, c.vals, frames[c.bi]);
  if (!on_chunk) return;
  ++streamed;
  streamed_bytes += frames[c.bi].size();
  (*on_chunk)(std::move(frames[c.bi]));
  frames[c.bi] = {};
}

Status DeltaEncoder::Pass::full_chunk(Chunk& c) {
  const double t0 = now_s();
  const size_t bytes = size_t(c.b.n) * c.es;
  SPARROW_RETURN_IF_ERROR(to_host(c));
  if (c.sh && c.dv) SPARROW_RETURN_IF_ERROR(device_error(dev, dev->copy(c.sh, c.dcur, bytes), "refreshing the shadow"));
  else if (c.sh) memcpy(c.sh, c.cur, bytes);
  dig[c.bi] = format::digest_range(c.b.tensor, c.cur, c.b.begin, c.b.n, c.es);
  const double t1 = now_s();
  SPARROW_ASSIGN_OR_RETURN(ValueCodec vc, format::dense_values(c.cur, c.b.n, c.es, opt.compress_dense && !opt.paper_format,
                                                               opt.zstd_level, c.s.codec, &c.vals));
  c.h.change_count = c.b.n;
  c.h.index_codec = IndexCodec::kDense;
  c.h.value_codec = vc;
  c.s.idx.clear();
  emit(c);
  c.ws.changes += c.b.n;
  c.ws.chunks++;
  c.ws.dense_chunks++;
  c.ws.value_bytes += c.vals.size();
  c.ws.index_codec_chunks[int(IndexCodec::kDense)]++;
  c.ws.value_codec_chunks[int(vc)]++;
  c.ws.leb128_overwrite_bytes += format::kChunkHeaderBytes + bytes;
  c.ws.extract_seconds += t1 - t0;
  c.ws.encode_seconds += now_s() - t1;
  return Status::Ok();
}

Status DeltaEncoder::Pass::delta_chunk(Chunk& c) {
  EncScratch& s = c.s;
  const uint32_t n = c.b.n, es = c.es;
  if (s.pos.size() < n || s.oldv.size() < size_t(n) * es) {
    s.pos.resize(std::max<size_t>(s.pos.size(), ce));
    s.oldv.resize(size_t(ce) * es);
    s.newv.resize(size_t(ce) * es);
  }
  const double t0 = now_s();
  size_t k = 0;
  c.pos = s.pos.data();
  c.oldv = s.oldv.data();
  c.newv = s.newv.data();
  if (const TensorChanges& tc = dchg[c.b.tensor]; tc.ready) {  // taken off the device already
    const size_t i = c.b.begin / ce, at = tc.offsets[i];
    k = tc.offsets[i + 1] - at;
    c.pos = tc.pos + at;
    c.oldv = tc.oldv + at * es;
    c.newv = tc.newv + at * es;
  } else if (c.dv) {
    SPARROW_RETURN_IF_ERROR(device_error(
        dev, dev->extract(c.dcur, c.sh, n, es, s.pos.data(), s.oldv.data(), s.newv.data(), &k), "extracting changes on the device"));
  } else {
    k = extract(c.cur, c.sh, n, es, s.pos.data(), s.oldv.data(), s.newv.data());
  }
  const double t1 = now_s();
  c.ws.extract_seconds += t1 - t0;
  if (k == 0) return Status::Ok();
  dig[c.bi] = format::digest_deltas(c.b.tensor, c.b.begin, c.pos, k, es, c.oldv, c.newv);
  return sparse_or_dense(c, k, t1);
}

// The k changes as an index and values, or the whole range when that is not smaller.
Status DeltaEncoder::Pass::sparse_or_dense(Chunk& c, size_t k, double t1) {
  EncScratch& s = c.s;
  const uint32_t n = c.b.n, es = c.es;
  const size_t raw = size_t(n) * es;
  const format::IndexChoice ix = format::choose_index(c.pos, k, n, opt.paper_format);
  c.ws.leb128_overwrite_bytes += format::kChunkHeaderBytes + std::min(ix.leb128_bytes + k * es, raw);
  IndexCodec ic = ix.codec;
  ValueCodec vc = ValueCodec::kOverwrite;
  if (ix.bytes + k * es >= raw) {
    SPARROW_RETURN_IF_ERROR(dense_chunk(c, opt.compress_dense && !opt.paper_format));
    ic = IndexCodec::kDense;
    vc = c.h.value_codec;
  } else {
    const format::ValueChoiceOptions vo{opt.paper_format, opt.try_xor, opt.zstd_level, opt.value_sample, opt.link_Bps, threads};
    SPARROW_ASSIGN_OR_RETURN(vc, format::choose_values(c.oldv, c.newv, k, es, true, vo, s.codec, s.best));
    if (ix.bytes + s.best.size() >= raw) {
      SPARROW_RETURN_IF_ERROR(dense_chunk(c, false));
      ic = IndexCodec::kDense;
      vc = c.h.value_codec;
    } else {
      c.h.change_count = uint32_t(k);
      c.vals = s.best;
      s.idx.clear();
      format::encode_index(ic, c.pos, k, n, ix.golomb_m, s.idx);
      c.ws.index_entropy_bits += format::index_entropy_bits(n, k);
      c.ws.sparse_index_bytes += s.idx.size();
      c.ws.sparse_changes += k;
    }
  }
  c.h.index_codec = ic;
  c.h.value_codec = vc;
  emit(c);
  c.ws.changes += k;
  c.ws.chunks++;
  c.ws.index_bytes += s.idx.size();
  c.ws.value_bytes += c.vals.size();
  c.ws.index_codec_chunks[int(ic)]++;
  c.ws.value_codec_chunks[int(vc)]++;
  c.ws.encode_seconds += now_s() - t1;
  return Status::Ok();
}

// Not smaller than the raw chunk: the whole range (zstd on byte planes when `compress`).
Status DeltaEncoder::Pass::dense_chunk(Chunk& c, bool compress) {
  SPARROW_RETURN_IF_ERROR(to_host(c));
  SPARROW_ASSIGN_OR_RETURN(c.h.value_codec, format::dense_values(c.cur, c.b.n, c.es, compress, opt.zstd_level, c.s.codec, &c.vals));
  c.h.change_count = c.b.n;
  c.s.idx.clear();
  c.ws.dense_chunks++;
  return Status::Ok();
}

// The footer (chunk count, new digests), the one-buffer checkpoint's assembly, the stats.
void DeltaEncoder::Pass::finish(format::Header& hd, std::vector<uint8_t>& out, EncodeStats* st, double wall0,
                                bool streaming) {
  const auto& ts = e.tensors_;
  if (view) {
    e.digests_.assign(ts.size(), 0);
    for (size_t i = 0; i < blocks.size(); ++i) e.digests_[blocks[i].tensor] += base_dig[i];
    for (size_t t = 0; t < ts.size(); ++t) hd.tensors[t].base_digest = e.digests_[t];
    e.borrowed_.clear();
  }
  std::vector<uint64_t> nd = full ? std::vector<uint64_t>(ts.size(), 0) : e.digests_;
  size_t total = 0, nchunks = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    nd[blocks[i].tensor] += dig[i];
    total += frames[i].size();
    nchunks += !frames[i].empty();
  }
  out.clear();
  std::vector<uint8_t> hbytes;
  format::write_header(hd, streaming ? hbytes : out);
  const size_t header_bytes = streaming ? hbytes.size() : out.size();
  if (!streaming) {
    out.reserve(header_bytes + total + 32 + 8 * ts.size());
    for (auto& f : frames) {
      out.insert(out.end(), f.begin(), f.end());
      std::vector<uint8_t>().swap(f);
    }
  } else {
    nchunks = streamed.load();
  }
  format::Footer ft;
  ft.chunk_count = nchunks;
  ft.new_digests = nd;
  format::write_footer(ft, out);
  EncodeStats agg;
  for (auto& w : wstats) merge(agg, w);
  for (auto& t : ts) agg.dense_bytes += t.bytes();
  // Header and footer are the same in both formats.
  const size_t frame_overhead = streaming ? header_bytes + out.size() : out.size() - total;
  agg.wire_bytes = streaming ? frame_overhead + streamed_bytes.load() : out.size();
  agg.leb128_overwrite_bytes += frame_overhead;
  agg.wall_seconds = now_s() - wall0;
  *st = agg;
  e.digests_ = std::move(nd);
}

Status DeltaEncoder::encode_impl(std::span<const void* const> current, const EncodeOptions& opt, bool full,
                                 EncodeStats* st, std::vector<uint8_t>& out, const FrameFn* on_header,
                                 const FrameFn* on_chunk) {
  const double wall0 = now_s();
  const bool streaming = on_header && on_chunk;
  Pass p(*this, current, opt, full, streaming ? on_chunk : nullptr);
  SPARROW_RETURN_IF_ERROR(p.check());
  SPARROW_RETURN_IF_ERROR(p.place_shadow());
  format::Header hd = p.header();
  p.view = !borrowed_.empty() && !p.full;
  if (p.view && streaming) return Error(Code::kInvalidUsage, "an encoder that adopted a view cannot stream");
  if (streaming) {
    std::vector<uint8_t> h;
    format::write_header(hd, h);
    (*on_header)(std::move(h));
  }
  p.run();
  if (!p.first_error.ok()) return p.first_error.context("encoding version " + std::to_string(version_ + 1));
  p.finish(hd, out, st, wall0, streaming);
  version_++;
  have_shadow_ = keep_shadow_ && !p.view;  // a view's encoder holds no shadow afterwards
  SPARROW_TRACE("encoded version %llu (%s): %llu changes in %llu chunks, %llu -> %llu bytes", (unsigned long long)version_,
                p.full ? "full" : "delta", (unsigned long long)st->changes, (unsigned long long)st->chunks,
                (unsigned long long)st->dense_bytes, (unsigned long long)st->wire_bytes);
  return Status::Ok();
}

}  // namespace sparrow::kernels::cpu
