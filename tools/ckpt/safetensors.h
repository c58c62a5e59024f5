// safetensors files (the Hugging Face format): an 8-byte little-endian header length, a JSON header
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, ..., "__metadata__": {...}} and the
// tensors' bytes. Read by mapping the file (no copy of the model); written atomically.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/cpu/delta.h"

namespace sparrow::ckpt {

struct StTensor {
  std::string name;
  std::string dtype;            // safetensors' name: BF16, F32, I64, ...
  std::vector<uint64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range in the data section
  uint8_t sparrow_dtype = 0;    // the sparrowDataType_t carrying these bits (same element size)
  uint64_t count() const;
};

// sparrow compares bits, so any element type travels as a sparrow type of its size: BF16/F16/F32/F64,
// I8/U8/I32/U32/I64/U64 as themselves, BOOL as uint8, I16/U16 as float16 bits. Others: error.
Result<uint8_t> sparrow_dtype_for(const std::string& st_dtype);

class SafetensorsFile {
 public:
  // Maps `path` read-only and parses its header; every tensor's range is checked against the file.
  static Result<std::unique_ptr<SafetensorsFile>> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // In file order (by data offset); the layout sparrow's checkpoint uses.
  const std::vector<StTensor>& tensors() const { return tensors_; }
  const std::string& header_json() const { return header_; }
  const uint8_t* data(const StTensor& t) const { return base_ + data_off_ + t.begin; }
  uint64_t data_bytes() const { return size_ - data_off_; }
  std::vector<kernels::cpu::TensorSpec> layout() const;

 private:
  SafetensorsFile() = default;
  std::string path_, header_;
  std::vector<StTensor> tensors_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0, data_off_ = 0;
};

// The same tensors (names, dtypes, shapes, order): what a step between two files needs.
Status check_same_layout(const SafetensorsFile& a, const SafetensorsFile& b);

// Writes a file with `like`'s header (names, dtypes, shapes, offsets) and the given tensor bytes
// (one buffer per tensor, in `like.tensors()` order), atomically.
Status write_like(const SafetensorsFile& like, const std::vector<const uint8_t*>& data, const std::string& path);

}  // namespace sparrow::ckpt
