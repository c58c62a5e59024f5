// Mutual challenge-response authentication for every connection (transport streams and the bootstrap
// store). Both sides prove knowledge of the communicator's 128-bit secret with HMAC-SHA256 over fresh
// nonces; the secret never travels. The server parses nothing but a fixed-size hello before the
// client has proven itself.
//
//   client -> server  HELLO      40 bytes: magic, protocol version, stream, rank, comm id, client nonce
//   server -> client  CHALLENGE  64 bytes: magic, server rank, server nonce, HMAC("server" | hello | nonce_s | rank_s)
//   client -> server  PROOF      32 bytes: HMAC("client" | hello | nonce_s)
//   server -> client  WELCOME     8 bytes: magic
// The labels differ, so a server cannot be used as an oracle for the client's proof.
#pragma once

#include <array>
#include <span>
#include <cstdint>
#include <vector>

#include "core/status.h"

namespace sparrow::transport::auth {

constexpr uint16_t kProtocolVersion = 1;
constexpr size_t kHelloBytes = 40, kChallengeBytes = 64, kProofBytes = 32, kWelcomeBytes = 8;
constexpr uint32_t kNoRank = 0xffffffffu;  // the bootstrap store's "rank"

struct Hello {
  uint16_t version = kProtocolVersion;
  uint16_t stream = 0;
  uint32_t rank = 0;
  uint64_t comm_id = 0;
  std::array<uint8_t, 16> nonce{};
  std::array<uint8_t, kHelloBytes> encode() const;
  static Result<Hello> decode(const uint8_t* p);
};

// SPARROW_AUTH_TIMEOUT_MS: how long a new connection has to complete the handshake (every backend).
int64_t timeout_ms();
// HMAC-SHA256: OpenSSL's libcrypto when the build found it, else the built-in one (sha256.h).
std::array<uint8_t, 32> hmac_sha256(std::span<const uint8_t> key, std::span<const uint8_t> msg);
std::array<uint8_t, 16> random_nonce();
Status random_bytes(void* out, size_t n);

std::array<uint8_t, kChallengeBytes> make_challenge(const std::vector<uint8_t>& secret, const uint8_t* hello,
                                                    uint32_t server_rank);
// Checks a challenge on the client side; returns the server rank it names.
Result<uint32_t> check_challenge(const std::vector<uint8_t>& secret, const uint8_t* hello, const uint8_t* challenge);
std::array<uint8_t, kProofBytes> make_proof(const std::vector<uint8_t>& secret, const uint8_t* hello,
                                            const uint8_t* challenge);
bool check_proof(const std::vector<uint8_t>& secret, const uint8_t* hello, const uint8_t* challenge,
                 const uint8_t* proof);
std::array<uint8_t, kWelcomeBytes> welcome();
bool is_welcome(const uint8_t* p);

}  // namespace sparrow::transport::auth
