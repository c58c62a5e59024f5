#include "tools/ckpt/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/bits.h"
#include "format/checkpoint.h"

namespace sparrow::ckpt {

using nlohmann::json;

uint64_t StTensor::count() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

Result<uint8_t> sparrow_dtype_for(const std::string& d) {
  static const std::map<std::string, uint8_t> m = {
      {"BF16", 9}, {"F16", 6}, {"F32", 7}, {"F64", 8}, {"I8", 0},  {"U8", 1}, {"BOOL", 1},
      {"I32", 2},  {"U32", 3}, {"I64", 4}, {"U64", 5}, {"I16", 6}, {"U16", 6}};
  auto it = m.find(d);
  if (it == m.end()) return InvalidArgument("safetensors dtype " + d + " is not supported");
  return it->second;
}

SafetensorsFile::~SafetensorsFile() {
  if (base_) munmap(const_cast<uint8_t*>(base_), size_);
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return SystemError("opening " + path, errno);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return SystemError("stat " + path, e);
  }
  f->size_ = size_t(st.st_size);
  const std::string what = path + ": not a safetensors file: ";
  if (f->size_ < 8) {
    close(fd);
    return CorruptData(what + std::to_string(f->size_) + " bytes");
  }
  void* m = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);  // prefault: one pass, not a fault per page
  close(fd);
  if (m == MAP_FAILED) return SystemError("mapping " + path, errno);
  f->base_ = static_cast<const uint8_t*>(m);
  madvise(m, f->size_, MADV_SEQUENTIAL);
  const uint64_t hlen = bits::load_u64(f->base_);
  if (hlen > f->size_ - 8 || hlen > (100u << 20))
    return CorruptData(what + "header length " + std::to_string(hlen) + " exceeds the file");
  f->header_.assign(reinterpret_cast<const char*>(f->base_ + 8), hlen);
  f->data_off_ = 8 + hlen;
  json h = json::parse(f->header_, nullptr, false);
  if (h.is_discarded() || !h.is_object()) return CorruptData(what + "its header is not a JSON object");
  for (auto& [name, v] : h.items()) {
    if (name == "__metadata__") continue;
    StTensor t;
    t.name = name;
    if (!v.is_object() || !v.contains("dtype") || !v["dtype"].is_string() || !v.contains("shape") ||
        !v["shape"].is_array() || !v.contains("data_offsets") || !v["data_offsets"].is_array() ||
        v["data_offsets"].size() != 2)
      return CorruptData(what + "tensor '" + name + "' lacks dtype, shape or data_offsets");
    t.dtype = v["dtype"].get<std::string>();
    for (auto& d : v["shape"]) {
      if (!d.is_number_unsigned()) return CorruptData(what + "tensor '" + name + "': bad shape");
      t.shape.push_back(d.get<uint64_t>());
    }
    for (auto& o : v["data_offsets"])
      if (!o.is_number_unsigned()) return CorruptData(what + "tensor '" + name + "': bad data_offsets");
    t.begin = v["data_offsets"][0].get<uint64_t>();
    t.end = v["data_offsets"][1].get<uint64_t>();
    SPARROW_ASSIGN_OR_RETURN(t.sparrow_dtype, sparrow_dtype_for(t.dtype));
    const uint64_t es = format::dtype_size(t.sparrow_dtype);
    if (t.end < t.begin || t.end > f->size_ - f->data_off_ || t.end - t.begin != t.count() * es)
      return CorruptData(what + "tensor '" + name + "': data_offsets [" + std::to_string(t.begin) + ", " +
                         std::to_string(t.end) + ") do not fit its shape or the file (" +
                         std::to_string(f->size_ - f->data_off_) + " data bytes)");
    f->tensors_.push_back(std::move(t));
  }
  std::sort(f->tensors_.begin(), f->tensors_.end(), [](const StTensor& a, const StTensor& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.name < b.name;
  });
  for (size_t i = 1; i < f->tensors_.size(); ++i)
    if (f->tensors_[i].begin < f->tensors_[i - 1].end && f->tensors_[i].end > f->tensors_[i].begin)
      return CorruptData(what + "tensors '" + f->tensors_[i - 1].name + "' and '" + f->tensors_[i].name + "' overlap");
  return f;
}

std::vector<kernels::cpu::TensorSpec> SafetensorsFile::layout() const {
  std::vector<kernels::cpu::TensorSpec> v;
  for (auto& t : tensors_) v.push_back({t.name, t.sparrow_dtype, t.count()});
  return v;
}

Status check_same_layout(const SafetensorsFile& a, const SafetensorsFile& b) {
  if (a.tensors().size() != b.tensors().size())
    return Error(Code::kInvalidUsage, a.path() + " has " + std::to_string(a.tensors().size()) + " tensors, " + b.path() +
                                          " has " + std::to_string(b.tensors().size()));
  for (size_t i = 0; i < a.tensors().size(); ++i) {
    const auto &x = a.tensors()[i], &y = b.tensors()[i];
    if (x.name != y.name || x.dtype != y.dtype || x.shape != y.shape)
      return Error(Code::kInvalidUsage, "tensor " + std::to_string(i) + " differs: '" + x.name + "' " + x.dtype +
                                            " in " + a.path() + ", '" + y.name + "' " + y.dtype + " in " + b.path() +
                                            " (or their shapes differ)");
  }
  return Status::Ok();
}

Status write_like(const SafetensorsFile& like, const std::vector<const uint8_t*>& data, const std::string& path) {
  if (data.size() != like.tensors().size()) return InvalidArgument("write_like: one buffer per tensor expected");
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return SystemError("creating " + tmp, errno);
  auto put = [&](const void* p, size_t n) -> bool {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    while (n) {
      ssize_t w = write(fd, b, std::min<size_t>(n, size_t(1) << 30));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return false;
      b += w;
      n -= size_t(w);
    }
    return true;
  };
  std::vector<uint8_t> len;
  bits::put_u64(len, like.header_json().size());
  bool ok = put(len.data(), 8) && put(like.header_json().data(), like.header_json().size());
  // Tensors in data-offset order; any gap between them is written as zeros.
  uint64_t at = 0;
  static const uint8_t zeros[4096] = {};
  for (size_t i = 0; ok && i < data.size(); ++i) {
    const StTensor& t = like.tensors()[i];
    for (; ok && at < t.begin; at += std::min<uint64_t>(t.begin - at, sizeof zeros))
      ok = put(zeros, std::min<uint64_t>(t.begin - at, sizeof zeros));
    ok = ok && put(data[i], t.end - t.begin);
    at = std::max(at, t.end);
  }
  for (; ok && at < like.data_bytes(); at += std::min<uint64_t>(like.data_bytes() - at, sizeof zeros))
    ok = put(zeros, std::min<uint64_t>(like.data_bytes() - at, sizeof zeros));
  int e = errno;
  if (!ok || fsync(fd) != 0) {
    if (ok) e = errno;
    close(fd);
    unlink(tmp.c_str());
    return SystemError("writing " + tmp, e);
  }
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    e = errno;
    unlink(tmp.c_str());
    return SystemError("renaming " + tmp + " to " + path, e);
  }
  return Status::Ok();
}

}  // namespace sparrow::ckpt
