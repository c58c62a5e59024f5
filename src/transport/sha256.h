// SHA-256 and HMAC-SHA256 (FIPS 180-4, RFC 2104), for builds without OpenSSL: the connection
// handshake's MAC (auth.cpp uses OpenSSL's libcrypto when the build found it, else this).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace sparrow::transport::auth {

std::array<uint8_t, 32> sha256(std::span<const uint8_t> msg);
std::array<uint8_t, 32> hmac_sha256_builtin(std::span<const uint8_t> key, std::span<const uint8_t> msg);
// Equal in constant time (no early exit on the first differing byte).
bool equal_ct(const uint8_t* a, const uint8_t* b, size_t n);

}  // namespace sparrow::transport::auth
