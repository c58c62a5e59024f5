#include "format/container.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/bits.h"
#include "format/digest.h"

namespace sparrow::format {
using namespace bits;  // the byte and bit primitives (core/bits.h)

std::vector<uint8_t> encode_step_file(std::span<const uint8_t> checkpoint, const std::string& metadata) {
  std::vector<uint8_t> o;
  o.insert(o.end(), kStepFileMagic, kStepFileMagic + 8);
  put_u32(o, kStepFileVersion);
  put_u32(o, uint32_t(metadata.size()));
  put_u64(o, checkpoint.size());
  const size_t sum_at = o.size();
  put_u64(o, 0);
  o.insert(o.end(), metadata.begin(), metadata.end());
  o.insert(o.end(), checkpoint.begin(), checkpoint.end());
  const uint64_t sum = checksum(o.data() + kStepFilePrefix, o.size() - kStepFilePrefix);  // metadata ‖ payload
  for (int i = 0; i < 8; ++i) o[sum_at + i] = uint8_t(sum >> (8 * i));
  return o;
}

Result<StepFile> decode_step_file(std::span<const uint8_t> in) {
  if (in.size() < kStepFilePrefix) return CorruptData("step file: " + std::to_string(in.size()) + " bytes, too short");
  if (memcmp(in.data(), kStepFileMagic, 8) != 0)
    return CorruptData("not a sparrow step file (bad magic; a raw checkpoint starts with 'SPRW' and no 'STEP')");
  const uint32_t ver = load_u32(in.data() + 8);
  if (ver != kStepFileVersion)
    return Error(Code::kVersionMismatch, "step file container version " + std::to_string(ver) +
                                             " (this build reads version " + std::to_string(kStepFileVersion) + ")");
  const uint32_t meta_len = load_u32(in.data() + 12);
  const uint64_t pay_len = load_u64(in.data() + 16);
  const uint64_t pay_sum = load_u64(in.data() + 24);
  if (meta_len > kMaxStepMetadata) return CorruptData("step file: metadata length " + std::to_string(meta_len));
  if (in.size() - kStepFilePrefix < meta_len || in.size() - kStepFilePrefix - meta_len != pay_len)
    return CorruptData("step file: " + std::to_string(in.size()) + " bytes, the container says " +
                       std::to_string(kStepFilePrefix + uint64_t(meta_len) + pay_len) + " (truncated or extended)");
  auto pay = in.subspan(kStepFilePrefix + meta_len);
  if (checksum(in.data() + kStepFilePrefix, in.size() - kStepFilePrefix) != pay_sum)
    return CorruptData("step file: checksum mismatch (metadata or payload corrupt)");
  StepFile f;
  f.metadata.assign(reinterpret_cast<const char*>(in.data() + kStepFilePrefix), meta_len);
  f.payload.assign(pay.begin(), pay.end());
  return f;
}

Status write_file_atomic(const std::string& path, std::span<const uint8_t> bytes) {
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return SystemError("creating " + tmp, errno);
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t w = write(fd, bytes.data() + off, std::min<size_t>(bytes.size() - off, size_t(1) << 30));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int e = errno;
      close(fd);
      unlink(tmp.c_str());
      return SystemError("writing " + tmp, e);
    }
    off += size_t(w);
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    int e = errno;
    unlink(tmp.c_str());
    return SystemError("flushing " + tmp, e);
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    unlink(tmp.c_str());
    return SystemError("renaming " + tmp + " to " + path, e);
  }
  return Status::Ok();
}

Result<std::vector<uint8_t>> read_file(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return SystemError("opening " + path, errno);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return SystemError("stat " + path, e);
  }
  std::vector<uint8_t> v(size_t(st.st_size));
  size_t off = 0;
  while (off < v.size()) {
    ssize_t r = read(fd, v.data() + off, v.size() - off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      int e = r == 0 ? EIO : errno;
      close(fd);
      return SystemError("reading " + path + (r == 0 ? " (file shrank while reading)" : ""), e);
    }
    off += size_t(r);
  }
  close(fd);
  return v;
}

}  // namespace sparrow::format
