// The step file: one sparse delta checkpoint on disk (`.spd`). A small container header (magic,
// container version, step metadata as JSON text, the payload's length, a checksum of both) followed by the
// checkpoint exactly as it travels on the wire (docs/format.md, "Step files").
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace sparrow::format {

constexpr char kStepFileMagic[8] = {'S', 'P', 'R', 'W', 'S', 'T', 'E', 'P'};
constexpr uint32_t kStepFileVersion = 1;
constexpr size_t kStepFilePrefix = 32;  // bytes before the metadata
constexpr uint32_t kMaxStepMetadata = 16u << 20;

struct StepFile {
  std::string metadata;          // JSON object text (UTF-8); "{}" when there is none
  std::vector<uint8_t> payload;  // the checkpoint: header, chunks, footer
};

// The container's bytes for a checkpoint and its metadata.
std::vector<uint8_t> encode_step_file(std::span<const uint8_t> checkpoint, const std::string& metadata);
// Parses and checks the container (magic, version, lengths, payload checksum); the payload itself is
// checked by parse_checkpoint / apply_checkpoint.
Result<StepFile> decode_step_file(std::span<const uint8_t> bytes);

// Writes `bytes` to `path` atomically: a temporary file in the same directory, fsync, rename. A
// failure leaves no partial file at `path` (an existing file there is kept).
Status write_file_atomic(const std::string& path, std::span<const uint8_t> bytes);
Result<std::vector<uint8_t>> read_file(const std::string& path);

}  // namespace sparrow::format
