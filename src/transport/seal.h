// Protection of a connection's frames after the handshake (auth.h): AES-256-GCM records with keys
// per connection and direction.
//
// Keys: HKDF-SHA256 over the communicator secret and an X25519 shared secret of two ephemeral keys
// (one per side, made for this connection, exchanged in the handshake and bound into its MACs), with
// the handshake's transcript as salt. A leaked communicator secret therefore does not decrypt
// recorded traffic. Nonce of record n: the direction's 12-byte IV xor n (as TLS 1.3); a replayed,
// reordered, dropped or injected record fails its tag, and a failed tag fails the connection.
//
// Modes (SPARROW_ENCRYPT): off (frames as they are), integrity (a GMAC tag on every record; bytes in
// the clear), on (encrypted and tagged), auto (on for a connection that leaves the host, off on
// loopback). The two ends of a connection agree on the stronger of the modes they ask for.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace sparrow::transport::seal {

enum class Mode : uint8_t { kOff = 0, kIntegrity = 1, kEncrypt = 2 };
const char* mode_name(Mode m);  // "off", "integrity", "on"
constexpr size_t kTagBytes = 16, kKeyBytes = 32, kIvBytes = 12, kPublicBytes = 32;

// SPARROW_ENCRYPT for a connection to or from `peer_address` ("host:port"): auto resolves to on
// unless the address is loopback. Fails closed (kInvalidUsage, with the reason) when the mode asked
// for is not off and this build cannot provide it (no OpenSSL libcrypto).
Result<Mode> wanted(const std::string& peer_address);
// The same for a connection on loopback or one that leaves the host.
Result<Mode> wanted_for(bool loopback);
// The setting as written ("auto", "on", "integrity", "off").
std::string setting();
// Whether this build can seal frames (it has OpenSSL's AES-GCM and X25519).
bool available();
// auto on a build that cannot seal: every connection stays off; says so once (WARN).
void warn_if_unavailable_once();

// One side's ephemeral X25519 key pair (random; zeros in a build without OpenSSL).
struct Ephemeral {
  std::array<uint8_t, 32> priv{};
  std::array<uint8_t, kPublicBytes> pub{};
  static Result<Ephemeral> make();
  ~Ephemeral();
};

struct DirectionKeys {
  std::array<uint8_t, kKeyBytes> key{};
  std::array<uint8_t, kIvBytes> iv{};
};
struct SessionKeys {
  Mode mode = Mode::kOff;
  DirectionKeys client_to_server, server_to_client;
};
// Both sides' keys from the secret, this side's private key, the peer's public key and the
// handshake transcript (hello and challenge as sent).
Result<SessionKeys> derive(Mode mode, const std::vector<uint8_t>& secret, const Ephemeral& mine,
                           const uint8_t peer_pub[kPublicBytes], const std::vector<uint8_t>& transcript);

// One direction's records. A record is either a whole buffer (seal / open) or a payload sealed
// whole and opened as it arrives (begin, update over consecutive pieces, finish with the tag).
class Cipher {
 public:
  Cipher(Mode mode, const DirectionKeys& k);
  ~Cipher();
  Cipher(const Cipher&) = delete;
  Cipher& operator=(const Cipher&) = delete;
  Mode mode() const { return mode_; }
  // Sends: n bytes at `in` as the next record. Encrypt mode writes the ciphertext to `out` (may be
  // `in`); integrity mode leaves `out` alone (the bytes travel as they are). Writes the tag.
  Status seal(const uint8_t* in, size_t n, uint8_t* out, uint8_t tag[kTagBytes]);
  // Receives: the next record, whole (decrypted in place in encrypt mode).
  Status open(uint8_t* p, size_t n, const uint8_t tag[kTagBytes]);
  // Receives the next record piece by piece, each decrypted in place as it arrives.
  Status begin();
  Status update(uint8_t* p, size_t n);
  Status finish(const uint8_t tag[kTagBytes]);
  // A record whose bytes arrive later than the next one's (a transport that fetches large payloads
  // after reading the following headers): reserve() takes its number now, in order, and open_at()
  // opens it, whole, when it is there.
  uint64_t reserve() { return seq_++; }
  Status open_at(uint64_t record, uint8_t* p, size_t n, const uint8_t tag[kTagBytes]);
  uint64_t records() const { return seq_; }

 private:
  Status start_record(bool encrypt, uint64_t record);
  Mode mode_;
  DirectionKeys k_;
  uint64_t seq_ = 0, record_ = 0;  // the next record's number; the one being sealed or opened
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

}  // namespace sparrow::transport::seal
