// The sparse delta checkpoint: one byte format for the wire and for disk (docs/format.md).
//
//   checkpoint := header chunk* footer
//
// Every frame carries its own XXH3-64 checksum, so a stream can be verified (and relayed) chunk by
// chunk; the header is complete before the first chunk exists and the footer is written after the
// last, so an encoder can stream. Parsing is defensive: any malformed, truncated, bit-flipped or
// mis-versioned input yields a specific error, and the parsers never read outside their input.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "format/index_codec.h"
#include "format/value_codec.h"

namespace sparrow::format {

constexpr uint32_t kHeaderMagic = 0x57525053;  // "SPRW" little-endian
constexpr uint32_t kChunkMagic = 0x4b435053;   // "SPCK"
constexpr uint32_t kFooterMagic = 0x54465053;  // "SPFT"
constexpr uint16_t kFormatVersion = 1;
constexpr uint16_t kFlagFull = 1;  // full snapshot: every block present, base ignored
constexpr size_t kHeaderFixedBytes = 40;
constexpr size_t kTensorEntryFixedBytes = 24;
constexpr size_t kChunkHeaderBytes = 48;
constexpr uint32_t kMaxTensors = 1u << 24;
constexpr uint32_t kMaxChunkElems = 1u << 30;
constexpr uint64_t kMaxTensorElems = 1ull << 48;

// sparrowDataType_t numbering (== ncclDataType_t). Returns 0 for an unknown id.
uint32_t dtype_size(uint8_t dtype);
const char* dtype_name(uint8_t dtype);
// The dtype of a name ("bfloat16"), -1 if none; all names, comma-separated (messages).
int dtype_from_name(std::string_view name);
std::string dtype_names();

struct TensorEntry {
  std::string name;
  uint8_t dtype = 0;
  uint8_t elem_size = 0;
  uint64_t count = 0;
  uint64_t base_digest = 0;
};

struct Header {
  uint16_t flags = 0;
  uint64_t base_version = 0;
  uint64_t new_version = 0;
  uint32_t chunk_elems = 0;
  std::vector<TensorEntry> tensors;
  bool full() const { return flags & kFlagFull; }
  uint64_t blocks(uint32_t t) const { return (tensors[t].count + chunk_elems - 1) / chunk_elems; }
};

struct ChunkHeader {
  uint32_t tensor = 0;
  uint64_t elem_begin = 0;
  uint32_t elem_count = 0;
  uint32_t change_count = 0;
  IndexCodec index_codec = IndexCodec::kDense;
  ValueCodec value_codec = ValueCodec::kOverwrite;
  uint32_t index_bytes = 0;
  uint32_t value_bytes = 0;
};

struct ChunkView {
  ChunkHeader h;
  std::span<const uint8_t> index;
  std::span<const uint8_t> values;
  size_t frame_bytes() const { return kChunkHeaderBytes + index.size() + values.size(); }
};

struct Footer {
  uint64_t chunk_count = 0;
  std::vector<uint64_t> new_digests;  // one per tensor
};

struct CheckpointView {
  Header header;
  std::vector<ChunkView> chunks;
  Footer footer;
  size_t header_bytes = 0;
};

void write_header(const Header& h, std::vector<uint8_t>& out);
// Appends one chunk frame; index/value byte counts are taken from the spans.
void write_chunk(ChunkHeader h, std::span<const uint8_t> index, std::span<const uint8_t> values,
                 std::vector<uint8_t>& out);
void write_footer(const Footer& f, std::vector<uint8_t>& out);

// Frame parsers. `consumed` receives the frame's length. They check structure and checksums, and
// for chunks the relation to the header (tensor id, block grid, counts, codec ids), not the payload's
// decoding (see decode_index / decode_values).
Result<Header> parse_header(std::span<const uint8_t> in, size_t* consumed);
Result<ChunkView> parse_chunk(std::span<const uint8_t> in, const Header& h, size_t* consumed);
Result<Footer> parse_footer(std::span<const uint8_t> in, const Header& h, size_t* consumed);

// A whole checkpoint: header, chunks in strictly increasing (tensor, elem_begin) order (kAny: in any
// order, as a stream delivers them, but none twice), footer whose chunk count matches, and nothing
// after it. A full snapshot must hold every block.
enum class ChunkOrder { kIncreasing, kAny };
Result<CheckpointView> parse_checkpoint(std::span<const uint8_t> in, ChunkOrder order = ChunkOrder::kIncreasing);

}  // namespace sparrow::format
