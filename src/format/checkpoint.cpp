#include "format/checkpoint.h"

#include <set>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "core/bits.h"
#include "format/digest.h"

namespace sparrow::format {
using namespace bits;  // the byte and bit primitives (core/bits.h)

uint32_t dtype_size(uint8_t dtype) {
  static const uint32_t kSizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
  return dtype < 10 ? kSizes[dtype] : 0;
}

namespace {
constexpr const char* kDtypeNames[] = {"int8",  "uint8",   "int32",   "uint32",  "int64",
                                       "uint64", "float16", "float32", "float64", "bfloat16"};
}  // namespace

const char* dtype_name(uint8_t dtype) { return dtype < 10 ? kDtypeNames[dtype] : "unknown"; }

int dtype_from_name(std::string_view name) {
  for (int t = 0; t < 10; ++t)
    if (name == kDtypeNames[t]) return t;
  return -1;
}

std::string dtype_names() {
  std::string s;
  for (int t = 0; t < 10; ++t) s += std::string(t ? ", " : "") + kDtypeNames[t];
  return s;
}

void write_header(const Header& h, std::vector<uint8_t>& out) {
  size_t start = out.size();
  size_t total = kHeaderFixedBytes + 8;
  for (auto& t : h.tensors) total += kTensorEntryFixedBytes + t.name.size();
  put_u32(out, kHeaderMagic);
  put_u16(out, kFormatVersion);
  put_u16(out, h.flags);
  put_u64(out, h.base_version);
  put_u64(out, h.new_version);
  put_u32(out, h.chunk_elems);
  put_u32(out, uint32_t(h.tensors.size()));
  put_u32(out, uint32_t(total));
  put_u32(out, 0);
  for (auto& t : h.tensors) {
    put_u64(out, t.count);
    put_u8(out, t.dtype);
    put_u8(out, t.elem_size);
    put_u16(out, uint16_t(t.name.size()));
    put_u32(out, 0);
    put_u64(out, t.base_digest);
    out.insert(out.end(), t.name.begin(), t.name.end());
  }
  put_u64(out, checksum(out.data() + start, out.size() - start));
}

static uint64_t chunk_checksum(const uint8_t* frame_head, std::span<const uint8_t> a, std::span<const uint8_t> b) {
  XXH3_state_t st;
  XXH3_64bits_reset(&st);
  XXH3_64bits_update(&st, frame_head, 40);
  XXH3_64bits_update(&st, a.data(), a.size());
  XXH3_64bits_update(&st, b.data(), b.size());
  return XXH3_64bits_digest(&st);
}

void write_chunk(ChunkHeader h, std::span<const uint8_t> index, std::span<const uint8_t> values,
                 std::vector<uint8_t>& out) {
  size_t start = out.size();
  put_u32(out, kChunkMagic);
  put_u32(out, h.tensor);
  put_u64(out, h.elem_begin);
  put_u32(out, h.elem_count);
  put_u32(out, h.change_count);
  put_u8(out, uint8_t(h.index_codec));
  put_u8(out, uint8_t(h.value_codec));
  put_u16(out, 0);
  put_u32(out, uint32_t(index.size()));
  put_u32(out, uint32_t(values.size()));
  put_u32(out, 0);
  uint64_t c = chunk_checksum(out.data() + start, index, values);
  put_u64(out, c);
  out.insert(out.end(), index.begin(), index.end());
  out.insert(out.end(), values.begin(), values.end());
}

void write_footer(const Footer& f, std::vector<uint8_t>& out) {
  size_t start = out.size();
  put_u32(out, kFooterMagic);
  put_u32(out, uint32_t(f.new_digests.size()));
  put_u64(out, f.chunk_count);
  for (uint64_t d : f.new_digests) put_u64(out, d);
  put_u64(out, checksum(out.data() + start, out.size() - start));
}

Result<Header> parse_header(std::span<const uint8_t> in, size_t* consumed) {
  if (in.size() < 4) return CorruptData("checkpoint header truncated: " + std::to_string(in.size()) + " bytes");
  if (load_u32(in.data()) != kHeaderMagic) return CorruptData("not a sparrow checkpoint (bad header magic)");
  if (in.size() < kHeaderFixedBytes + 8)
    return CorruptData("checkpoint header truncated: " + std::to_string(in.size()) + " bytes");
  ByteReader r(in, "checkpoint header");
  uint32_t magic, nt, total, reserved;
  uint16_t ver;
  Header h;
  (void)r.u32(&magic);
  (void)r.u16(&ver);
  if (ver != kFormatVersion)
    return VersionMismatch("checkpoint format version " + std::to_string(ver) + " is not supported (this build reads version " +
                           std::to_string(kFormatVersion) + ")");
  (void)r.u16(&h.flags);
  (void)r.u64(&h.base_version);
  (void)r.u64(&h.new_version);
  (void)r.u32(&h.chunk_elems);
  (void)r.u32(&nt);
  (void)r.u32(&total);
  (void)r.u32(&reserved);
  if (total < kHeaderFixedBytes + 8 || total > in.size())
    return CorruptData("checkpoint header truncated or length field corrupt (" + std::to_string(total) + " bytes claimed, " +
                       std::to_string(in.size()) + " available)");
  uint64_t want = load_u64(in.data() + total - 8);
  if (checksum(in.data(), total - 8) != want) return CorruptData("checkpoint header checksum mismatch");
  if (h.flags & ~kFlagFull) return CorruptData("checkpoint header has unknown flags " + std::to_string(h.flags));
  if (reserved != 0) return CorruptData("checkpoint header reserved field is not zero");
  if (h.chunk_elems == 0 || h.chunk_elems > kMaxChunkElems) return CorruptData("chunk size out of range");
  if (nt > kMaxTensors) return CorruptData("tensor count out of range");
  if (h.full() ? h.base_version != 0 : h.new_version <= h.base_version)
    return CorruptData("version step " + std::to_string(h.base_version) + " -> " + std::to_string(h.new_version) +
                       " is invalid");
  ByteReader body(in.subspan(0, total - 8), "checkpoint tensor table");
  const uint8_t* skip;
  (void)body.bytes(kHeaderFixedBytes, &skip);
  h.tensors.resize(nt);
  for (uint32_t i = 0; i < nt; ++i) {
    TensorEntry& t = h.tensors[i];
    uint16_t name_len;
    uint32_t res;
    const uint8_t* name;
    SPARROW_RETURN_IF_ERROR(body.u64(&t.count));
    SPARROW_RETURN_IF_ERROR(body.u8(&t.dtype));
    SPARROW_RETURN_IF_ERROR(body.u8(&t.elem_size));
    SPARROW_RETURN_IF_ERROR(body.u16(&name_len));
    SPARROW_RETURN_IF_ERROR(body.u32(&res));
    SPARROW_RETURN_IF_ERROR(body.u64(&t.base_digest));
    SPARROW_RETURN_IF_ERROR(body.bytes(name_len, &name));
    t.name.assign(reinterpret_cast<const char*>(name), name_len);
    if (res != 0) return CorruptData("tensor " + std::to_string(i) + ": reserved field is not zero");
    if (dtype_size(t.dtype) == 0) return CorruptData("tensor " + std::to_string(i) + ": unknown datatype " + std::to_string(t.dtype));
    if (dtype_size(t.dtype) != t.elem_size)
      return CorruptData("tensor " + std::to_string(i) + ": element size does not match datatype");
    if (t.count > kMaxTensorElems) return CorruptData("tensor " + std::to_string(i) + ": element count out of range");
  }
  if (body.remaining() != 0) return CorruptData("checkpoint header length does not match its tensor table");
  *consumed = total;
  return h;
}

Result<ChunkView> parse_chunk(std::span<const uint8_t> in, const Header& h, size_t* consumed) {
  if (in.size() < kChunkHeaderBytes) return CorruptData("chunk frame truncated");
  const uint8_t* p = in.data();
  if (load_u32(p) != kChunkMagic) return CorruptData("bad chunk magic");
  ChunkView v;
  ChunkHeader& c = v.h;
  c.tensor = load_u32(p + 4);
  c.elem_begin = load_u64(p + 8);
  c.elem_count = load_u32(p + 16);
  c.change_count = load_u32(p + 20);
  uint8_t ic = p[24], vc = p[25];
  uint16_t res16 = uint16_t(p[26] | p[27] << 8);
  c.index_bytes = load_u32(p + 28);
  c.value_bytes = load_u32(p + 32);
  uint32_t res32 = load_u32(p + 36);
  uint64_t payload = uint64_t(c.index_bytes) + c.value_bytes;
  if (payload > in.size() - kChunkHeaderBytes) return CorruptData("chunk frame truncated (payload)");
  v.index = in.subspan(kChunkHeaderBytes, c.index_bytes);
  v.values = in.subspan(kChunkHeaderBytes + c.index_bytes, c.value_bytes);
  if (chunk_checksum(p, v.index, v.values) != load_u64(p + 40)) return CorruptData("chunk checksum mismatch");
  std::string where = "chunk (tensor " + std::to_string(c.tensor) + ", element " + std::to_string(c.elem_begin) + ")";
  if (res16 != 0 || res32 != 0) return CorruptData(where + ": reserved field is not zero");
  if (c.tensor >= h.tensors.size()) return CorruptData(where + ": unknown tensor id");
  const TensorEntry& t = h.tensors[c.tensor];
  if (c.elem_begin % h.chunk_elems != 0 || c.elem_begin >= t.count) return CorruptData(where + ": start is off the chunk grid");
  if (c.elem_count != std::min<uint64_t>(h.chunk_elems, t.count - c.elem_begin))
    return CorruptData(where + ": element count does not match the chunk grid");
  if (ic >= kNumIndexCodecs) return CorruptData(where + ": unknown index codec " + std::to_string(ic));
  if (vc >= kNumValueCodecs) return CorruptData(where + ": unknown value codec " + std::to_string(vc));
  c.index_codec = IndexCodec(ic);
  c.value_codec = ValueCodec(vc);
  if (c.change_count == 0 || c.change_count > c.elem_count) return CorruptData(where + ": change count out of range");
  if (c.index_codec == IndexCodec::kDense && c.change_count != c.elem_count)
    return CorruptData(where + ": a dense chunk must cover every element");
  if (h.full() && c.index_codec != IndexCodec::kDense) return CorruptData(where + ": full snapshot chunk is not dense");
  if (h.full() && value_codec_needs_old(c.value_codec)) return CorruptData(where + ": full snapshot chunk uses old values");
  *consumed = kChunkHeaderBytes + payload;
  return v;
}

Result<Footer> parse_footer(std::span<const uint8_t> in, const Header& h, size_t* consumed) {
  if (in.size() < 4 || load_u32(in.data()) != kFooterMagic) return CorruptData("checkpoint footer missing or corrupt");
  size_t total = 16 + 8 * h.tensors.size() + 8;
  if (in.size() < total) return CorruptData("checkpoint footer truncated");
  if (checksum(in.data(), total - 8) != load_u64(in.data() + total - 8)) return CorruptData("checkpoint footer checksum mismatch");
  if (load_u32(in.data() + 4) != h.tensors.size()) return CorruptData("footer tensor count differs from header");
  Footer f;
  f.chunk_count = load_u64(in.data() + 8);
  f.new_digests.resize(h.tensors.size());
  for (size_t i = 0; i < h.tensors.size(); ++i) f.new_digests[i] = load_u64(in.data() + 16 + 8 * i);
  *consumed = total;
  return f;
}

Result<CheckpointView> parse_checkpoint(std::span<const uint8_t> in, ChunkOrder order) {
  CheckpointView cv;
  std::set<std::pair<uint64_t, uint64_t>> seen;  // kAny: the chunks found so far
  size_t off = 0, n = 0;
  SPARROW_ASSIGN_OR_RETURN(cv.header, parse_header(in, &n));
  cv.header_bytes = n;
  off = n;
  const Header& h = cv.header;
  uint64_t prev_t = 0, prev_b = 0;
  bool first = true;
  while (true) {
    if (off + 4 > in.size()) return CorruptData("checkpoint truncated after " + std::to_string(cv.chunks.size()) + " chunks (no footer)");
    uint32_t magic = load_u32(in.data() + off);
    if (magic == kFooterMagic) break;
    auto ch = parse_chunk(in.subspan(off), h, &n);
    if (!ch.ok()) return std::move(ch).take_status().context("chunk " + std::to_string(cv.chunks.size()) + " at byte " + std::to_string(off));
    const ChunkHeader& c = ch->h;
    if (order == ChunkOrder::kAny) {
      if (!seen.insert({c.tensor, c.elem_begin}).second)
        return CorruptData("chunk " + std::to_string(cv.chunks.size()) + " duplicated");
    } else if (!first && (c.tensor < prev_t || (c.tensor == prev_t && c.elem_begin <= prev_b))) {
      return CorruptData("chunk " + std::to_string(cv.chunks.size()) + " out of order or duplicated");
    }
    first = false;
    prev_t = c.tensor;
    prev_b = c.elem_begin;
    cv.chunks.push_back(std::move(ch.value()));
    off += n;
  }
  SPARROW_ASSIGN_OR_RETURN(cv.footer, parse_footer(in.subspan(off), h, &n));
  off += n;
  if (cv.footer.chunk_count != cv.chunks.size())
    return CorruptData("footer counts " + std::to_string(cv.footer.chunk_count) + " chunks, found " + std::to_string(cv.chunks.size()));
  if (off != in.size()) return CorruptData(std::to_string(in.size() - off) + " trailing bytes after the checkpoint footer");
  if (h.full()) {
    uint64_t blocks = 0;
    for (uint32_t t = 0; t < h.tensors.size(); ++t) blocks += h.blocks(t);
    if (blocks != cv.chunks.size()) return CorruptData("full snapshot is missing chunks");
  }
  return cv;
}

}  // namespace sparrow::format
