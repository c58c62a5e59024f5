// Mutual challenge-response authentication for every connection (transport streams and the bootstrap
// store). Both sides prove knowledge of the communicator's 128-bit secret with HMAC-SHA256 over fresh
// nonces; the secret never travels. The server parses nothing but a fixed-size hello before the
// client has proven itself. Each side also sends an ephemeral X25519 public key and the protection
// it asks for (seal.h); both are covered by the MACs, so neither can be swapped or downgraded on
// the path, and the session keys come from the secret and the two keys together.
//
//   client -> server  HELLO      80 bytes: magic, protocol version, stream, rank, comm id, client nonce,
//                                          mode asked, X25519 key
//   server -> client  CHALLENGE  96 bytes: magic, server rank, mode agreed, server nonce, X25519 key,
//                                          HMAC("server" | hello | the 64 bytes before it)
//   client -> server  PROOF      32 bytes: HMAC("client" | hello | challenge)
//   server -> client  WELCOME     8 bytes: magic
// The labels differ, so a server cannot be used as an oracle for the client's proof.
#pragma once

#include <array>
#include <memory>
#include <span>
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "transport/seal.h"

namespace sparrow::transport::auth {

constexpr uint16_t kProtocolVersion = 2;
constexpr size_t kHelloBytes = 80, kChallengeHeadBytes = 64, kChallengeBytes = 96, kProofBytes = 32, kWelcomeBytes = 8;
constexpr uint32_t kNoRank = 0xffffffffu;  // the bootstrap store's "rank"

struct Hello {
  uint16_t version = kProtocolVersion;
  uint16_t stream = 0;
  uint32_t rank = 0;
  uint64_t comm_id = 0;
  std::array<uint8_t, 16> nonce{};
  seal::Mode mode = seal::Mode::kOff;  // the protection the client asks for
  std::array<uint8_t, seal::kPublicBytes> pub{};
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
                                                    uint32_t server_rank, seal::Mode mode = seal::Mode::kOff,
                                                    const std::array<uint8_t, seal::kPublicBytes>& pub = {});
// Checks a challenge on the client side; returns the server rank it names.
Result<uint32_t> check_challenge(const std::vector<uint8_t>& secret, const uint8_t* hello, const uint8_t* challenge);
// The mode a (checked) challenge agreed on.
Result<seal::Mode> challenge_mode(const uint8_t* challenge);
std::array<uint8_t, kProofBytes> make_proof(const std::vector<uint8_t>& secret, const uint8_t* hello,
                                            const uint8_t* challenge);
bool check_proof(const std::vector<uint8_t>& secret, const uint8_t* hello, const uint8_t* challenge,
                 const uint8_t* proof);
std::array<uint8_t, kWelcomeBytes> welcome();
bool is_welcome(const uint8_t* p);

// One side of the handshake as a state machine, written once for every backend: the backend
// carries the messages (TCP: in order on the stream; UCX: one active message each, tagged with its
// kind) and the handshake decides what they mean. A failure is final: the backend drops the
// connection (kAuthError: the peer does not know the secret or claims another identity;
// kCorruptData: a malformed or unexpected message).
class Handshake {
 public:
  enum class Msg : uint8_t { kHello, kChallenge, kProof, kWelcome, kNone };
  // A client that will send `stream`'s hello as rank `my_rank` to the server it expects to be
  // `server_rank`, asking for protection `want`.
  static Handshake client(const std::vector<uint8_t>& secret, uint64_t comm_id, int my_rank, int stream,
                          int server_rank, seal::Mode want = seal::Mode::kOff);
  // A server of communicator `comm_id`, rank `my_rank`, that asks for at least `want`.
  static Handshake server(const std::vector<uint8_t>& secret, uint64_t comm_id, int my_rank,
                          seal::Mode want = seal::Mode::kOff);

  // The client's first message (the hello); nothing for a server.
  std::vector<uint8_t> start() const;
  // What the peer sends next, and its size (kNone / 0 once done or failed).
  Msg expecting() const;
  size_t expect_bytes() const;
  // Takes the peer's next message (of kind `kind`, as the transport tagged it; a stream passes
  // expecting()). Returns what to send back (kind reply_kind(); may be empty).
  Result<std::vector<uint8_t>> take(Msg kind, const uint8_t* p, size_t n);
  Msg reply_kind() const { return reply_; }
  bool done() const { return state_ == kDone; }
  bool is_client() const { return client_; }
  // Server: the client's hello (its rank and stream), once taken.
  const Hello& hello() const { return hello_; }
  // Once done: the agreed protection and this connection's keys (seal.h).
  const seal::SessionKeys& keys() const { return keys_; }
  // This side's cipher for what it sends, and for what it receives (nullptr when the mode is off).
  std::unique_ptr<seal::Cipher> sender() const;
  std::unique_ptr<seal::Cipher> receiver() const;

 private:
  enum State : uint8_t { kAwaitHello, kAwaitChallenge, kAwaitProof, kAwaitWelcome, kDone, kFailed };
  Result<std::vector<uint8_t>> on_hello(const uint8_t* p);
  Result<std::vector<uint8_t>> on_challenge(const uint8_t* p);
  Result<std::vector<uint8_t>> on_proof(const uint8_t* p);
  Status derive_keys(seal::Mode mode, const uint8_t* peer_pub);
  std::vector<uint8_t> secret_;
  uint64_t comm_id_ = 0;
  int my_rank_ = 0, server_rank_ = -1;
  bool client_ = false;
  State state_ = kAwaitHello;
  Msg reply_ = Msg::kNone;
  Hello hello_;
  std::array<uint8_t, kHelloBytes> hello_bytes_{};
  std::array<uint8_t, kChallengeBytes> challenge_{};
  seal::Mode want_ = seal::Mode::kOff;
  std::shared_ptr<const seal::Ephemeral> eph_;  // this side's X25519 key (shared: a Handshake is copied)
  Status init_;  // making the key failed (then every take() does)
  seal::SessionKeys keys_;
};
const char* msg_name(Handshake::Msg m);

}  // namespace sparrow::transport::auth
