#include "bootstrap/secret.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/params.h"
#include "transport/auth.h"

namespace sparrow::bootstrap {
namespace {

params::StringParam kSecretFile("SECRET_FILE", "",
                                "A file (mode 0600 or stricter) holding a secret every rank shares: the communicator "
                                "secret comes from it, and unique ids carry none. Empty: the id carries the secret.");
constexpr size_t kMaxSecretFileBytes = 64 << 10;

Status refuse(const std::string& path, const std::string& why) {
  return Error(Code::kInvalidUsage, "SPARROW_SECRET_FILE=" + path + ": " + why);
}

// The file's bytes, once its type, owner-only permissions and size are checked on the open file.
Result<std::string> read_private(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return refuse(path, std::string("cannot open it: ") + strerror(errno));
  struct stat st {};
  std::string data;
  Status s;
  if (fstat(fd, &st) != 0) s = refuse(path, std::string("cannot stat it: ") + strerror(errno));
  else if (!S_ISREG(st.st_mode)) s = refuse(path, "not a regular file");
  else if (st.st_mode & (S_IRWXG | S_IRWXO)) {
    char mode[8];
    snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
    s = refuse(path, std::string("its group or others may read or write it (mode ") + mode + "); chmod 600 " + path);
  } else if (size_t(st.st_size) > kMaxSecretFileBytes) {
    s = refuse(path, "over 64 KiB: not a secret file");
  } else {
    data.resize(size_t(st.st_size));
    size_t got = 0;
    while (got < data.size()) {
      ssize_t r = read(fd, data.data() + got, data.size() - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += size_t(r);
    }
    data.resize(got);
  }
  close(fd);
  if (!s.ok()) return s;
  return data;
}

}  // namespace

Result<std::array<uint8_t, 32>> secret_file_key(const std::string& named, const std::string& label) {
  const std::string path = named.empty() ? kSecretFile.get() : named;
  if (path.empty()) return Error(Code::kInvalidUsage, "no secret file named, and SPARROW_SECRET_FILE is not set");
  SPARROW_ASSIGN_OR_RETURN(std::string data, read_private(path));
  while (!data.empty() && (data.back() == '\n' || data.back() == '\r' || data.back() == ' ' || data.back() == '\t'))
    data.pop_back();
  if (data.size() < kMinSecretFileBytes)
    return refuse(path, "holds " + std::to_string(data.size()) + " bytes; a secret needs at least " +
                            std::to_string(kMinSecretFileBytes) + " (e.g. head -c 32 /dev/urandom | base64 > " + path + ")");
  std::vector<uint8_t> key(label.begin(), label.end());
  return transport::auth::hmac_sha256(key, std::vector<uint8_t>(data.begin(), data.end()));
}

Result<std::vector<uint8_t>> read_secret_file(const std::string& path) {
  SPARROW_ASSIGN_OR_RETURN(auto mac, secret_file_key(path, "sparrow secret file v1"));
  return std::vector<uint8_t>(mac.begin(), mac.begin() + 16);
}

Result<std::optional<std::vector<uint8_t>>> secret_from_file() {
  const std::string path = kSecretFile.get();
  if (path.empty()) return std::optional<std::vector<uint8_t>>();
  SPARROW_ASSIGN_OR_RETURN(auto s, read_secret_file(path));
  return std::optional<std::vector<uint8_t>>(std::move(s));
}

std::array<uint8_t, 16> fingerprint(const std::vector<uint8_t>& secret) {
  const std::string label = "sparrow secret fingerprint v1";
  auto mac = transport::auth::hmac_sha256(secret, std::vector<uint8_t>(label.begin(), label.end()));
  std::array<uint8_t, 16> out{};
  std::copy(mac.begin(), mac.begin() + 16, out.begin());
  return out;
}

}  // namespace sparrow::bootstrap
