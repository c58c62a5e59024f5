// The communicator secret from a file every rank holds (SPARROW_SECRET_FILE), instead of inside the
// unique id. With it the id carries no credential, only a fingerprint that tells a rank whose file
// differs from rank 0's at init (a clear error, not an authentication failure per connection), and
// may be shared over an untrusted channel.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace sparrow::bootstrap {

constexpr size_t kMinSecretFileBytes = 16;

// The 16-byte communicator secret derived from SPARROW_SECRET_FILE's contents (trailing whitespace
// dropped), or nullopt when the setting is empty. Refused with the reason (kInvalidUsage): a file that
// is missing, not a regular file, readable or writable by its group or others, shorter than 16
// bytes or over 64 KiB.
Result<std::optional<std::vector<uint8_t>>> secret_from_file();
// The same for a named file (tests, tools).
Result<std::vector<uint8_t>> read_secret_file(const std::string& path);
// HMAC-SHA256 keyed by `label` of the file's contents (trailing whitespace dropped), after the same
// checks: the key of a purpose of its own (the communicator secret is label "sparrow secret file
// v1"; the Python rendezvous uses "sparrow rendezvous v1"). `path` empty: SPARROW_SECRET_FILE
// (kInvalidUsage when that is not set either).
Result<std::array<uint8_t, 32>> secret_file_key(const std::string& path, const std::string& label);
// What the id carries in place of a secret from a file: a keyed hash of it, which identifies the
// secret without revealing it.
std::array<uint8_t, 16> fingerprint(const std::vector<uint8_t>& secret);

}  // namespace sparrow::bootstrap
