#include "transport/auth.h"

#if SPARROW_HAVE_OPENSSL
#include <openssl/evp.h>
#include <openssl/hmac.h>
#endif
#include <sys/random.h>

#include <cerrno>
#include <algorithm>
#include <cstring>

#include "core/params.h"
#include "core/bits.h"
#include "transport/sha256.h"

namespace sparrow::transport::auth {
namespace {
params::IntParam kAuthTimeoutMs("AUTH_TIMEOUT_MS", 5000,
                                "Time a new connection has to authenticate, on every transport, before it is dropped.",
                                10, 600000);
constexpr uint64_t kHelloMagic = 0x4f4c454857525053ull;      // "SPRWHELO"
constexpr uint64_t kChallengeMagic = 0x4c41484357525053ull;  // "SPRWCHAL"
constexpr uint64_t kWelcomeMagic = 0x454d4f4357525053ull;    // "SPRWCOME"

std::array<uint8_t, 32> hmac(const std::vector<uint8_t>& key, const std::vector<const std::vector<uint8_t>*>& parts) {
  std::vector<uint8_t> msg;
  for (auto* p : parts) msg.insert(msg.end(), p->begin(), p->end());
  return hmac_sha256(key, msg);
}
}  // namespace

int64_t timeout_ms() { return kAuthTimeoutMs.get(); }

std::array<uint8_t, 32> hmac_sha256(std::span<const uint8_t> key, std::span<const uint8_t> msg) {
#if SPARROW_HAVE_OPENSSL
  std::array<uint8_t, 32> out{};
  unsigned int len = 32;
  HMAC(EVP_sha256(), key.data(), int(key.size()), msg.data(), msg.size(), out.data(), &len);
  return out;
#else
  return hmac_sha256_builtin(key, msg);
#endif
}

std::array<uint8_t, kHelloBytes> Hello::encode() const {
  std::vector<uint8_t> v;
  bits::put_u64(v, kHelloMagic);
  bits::put_u16(v, version);
  bits::put_u16(v, stream);
  bits::put_u32(v, rank);
  bits::put_u64(v, comm_id);
  v.insert(v.end(), nonce.begin(), nonce.end());
  v.push_back(uint8_t(mode));
  v.resize(48, 0);
  v.insert(v.end(), pub.begin(), pub.end());
  std::array<uint8_t, kHelloBytes> a{};
  memcpy(a.data(), v.data(), kHelloBytes);
  return a;
}

Result<Hello> Hello::decode(const uint8_t* p) {
  if (bits::load_u64(p) != kHelloMagic) return Error(Code::kAuthError, "not a sparrow hello");
  Hello h;
  h.version = uint16_t(p[8] | p[9] << 8);
  h.stream = uint16_t(p[10] | p[11] << 8);
  h.rank = bits::load_u32(p + 12);
  h.comm_id = bits::load_u64(p + 16);
  memcpy(h.nonce.data(), p + 24, 16);
  if (h.version != kProtocolVersion)
    return Error(Code::kAuthError, "peer speaks protocol version " + std::to_string(h.version) + ", this build " +
                                       std::to_string(kProtocolVersion));
  if (p[40] > uint8_t(seal::Mode::kEncrypt)) return CorruptData("hello asks for an unknown protection mode");
  h.mode = seal::Mode(p[40]);
  memcpy(h.pub.data(), p + 48, seal::kPublicBytes);
  return h;
}

Status random_bytes(void* out, size_t n) {
  uint8_t* p = static_cast<uint8_t*>(out);
  while (n > 0) {
    ssize_t r = getrandom(p, n, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      return SystemError("getrandom", errno);
    }
    p += r;
    n -= size_t(r);
  }
  return Status::Ok();
}

std::array<uint8_t, 16> random_nonce() {
  std::array<uint8_t, 16> n{};
  if (!random_bytes(n.data(), n.size()).ok()) abort();  // the kernel's CSPRNG does not fail after boot
  return n;
}

std::array<uint8_t, kChallengeBytes> make_challenge(const std::vector<uint8_t>& secret, const uint8_t* hello,
                                                    uint32_t server_rank, seal::Mode mode,
                                                    const std::array<uint8_t, seal::kPublicBytes>& pub) {
  std::vector<uint8_t> head;
  bits::put_u64(head, kChallengeMagic);
  bits::put_u32(head, server_rank);
  bits::put_u32(head, uint32_t(mode));
  auto n = random_nonce();
  head.insert(head.end(), n.begin(), n.end());
  head.insert(head.end(), pub.begin(), pub.end());
  std::vector<uint8_t> label = {'s', 'e', 'r', 'v', 'e', 'r'}, h(hello, hello + kHelloBytes);
  auto mac = hmac(secret, {&label, &h, &head});
  std::array<uint8_t, kChallengeBytes> out{};
  memcpy(out.data(), head.data(), kChallengeHeadBytes);
  memcpy(out.data() + kChallengeHeadBytes, mac.data(), 32);
  return out;
}

Result<seal::Mode> challenge_mode(const uint8_t* challenge) {
  const uint32_t m = bits::load_u32(challenge + 12);
  if (m > uint32_t(seal::Mode::kEncrypt)) return CorruptData("challenge names an unknown protection mode");
  return seal::Mode(m);
}

Result<uint32_t> check_challenge(const std::vector<uint8_t>& secret, const uint8_t* hello, const uint8_t* ch) {
  if (bits::load_u64(ch) != kChallengeMagic) return Error(Code::kAuthError, "peer did not answer with a sparrow challenge");
  std::vector<uint8_t> label = {'s', 'e', 'r', 'v', 'e', 'r'}, h(hello, hello + kHelloBytes),
                       head(ch, ch + kChallengeHeadBytes);
  auto mac = hmac(secret, {&label, &h, &head});
  if (!equal_ct(mac.data(), ch + kChallengeHeadBytes, 32))
    return Error(Code::kAuthError, "peer failed to prove it knows the communicator secret");
  return bits::load_u32(ch + 8);
}

std::array<uint8_t, kProofBytes> make_proof(const std::vector<uint8_t>& secret, const uint8_t* hello,
                                            const uint8_t* challenge) {
  std::vector<uint8_t> label = {'c', 'l', 'i', 'e', 'n', 't'}, h(hello, hello + kHelloBytes),
                       c(challenge, challenge + kChallengeBytes);
  return hmac(secret, {&label, &h, &c});
}

bool check_proof(const std::vector<uint8_t>& secret, const uint8_t* hello, const uint8_t* challenge,
                 const uint8_t* proof) {
  auto want = make_proof(secret, hello, challenge);
  return equal_ct(want.data(), proof, kProofBytes);
}

std::array<uint8_t, kWelcomeBytes> welcome() {
  std::array<uint8_t, kWelcomeBytes> w{};
  bits::store_u64(w.data(), kWelcomeMagic);
  return w;
}

bool is_welcome(const uint8_t* p) { return bits::load_u64(p) == kWelcomeMagic; }

const char* msg_name(Handshake::Msg m) {
  switch (m) {
    case Handshake::Msg::kHello: return "hello";
    case Handshake::Msg::kChallenge: return "challenge";
    case Handshake::Msg::kProof: return "proof";
    case Handshake::Msg::kWelcome: return "welcome";
    case Handshake::Msg::kNone: break;
  }
  return "nothing";
}

namespace {
// This side's ephemeral key; a failure to make one fails the handshake at its first message.
std::shared_ptr<const seal::Ephemeral> ephemeral(Status* err) {
  auto e = seal::Ephemeral::make();
  if (!e.ok()) {
    *err = e.status();
    return std::make_shared<const seal::Ephemeral>();
  }
  return std::make_shared<const seal::Ephemeral>(std::move(e).value());
}
}  // namespace

Handshake Handshake::client(const std::vector<uint8_t>& secret, uint64_t comm_id, int my_rank, int stream,
                            int server_rank, seal::Mode want) {
  Handshake h;
  h.want_ = want;
  h.eph_ = ephemeral(&h.init_);
  h.secret_ = secret;
  h.comm_id_ = comm_id;
  h.my_rank_ = my_rank;
  h.server_rank_ = server_rank;
  h.client_ = true;
  h.state_ = kAwaitChallenge;
  h.hello_.stream = uint16_t(stream);
  h.hello_.rank = uint32_t(my_rank);
  h.hello_.comm_id = comm_id;
  h.hello_.nonce = random_nonce();
  h.hello_.mode = want;
  h.hello_.pub = h.eph_->pub;
  h.hello_bytes_ = h.hello_.encode();
  return h;
}

Handshake Handshake::server(const std::vector<uint8_t>& secret, uint64_t comm_id, int my_rank, seal::Mode want) {
  Handshake h;
  h.want_ = want;
  h.eph_ = ephemeral(&h.init_);
  h.secret_ = secret;
  h.comm_id_ = comm_id;
  h.my_rank_ = my_rank;
  return h;
}

std::vector<uint8_t> Handshake::start() const {
  if (!client_) return {};
  return std::vector<uint8_t>(hello_bytes_.begin(), hello_bytes_.end());
}

Handshake::Msg Handshake::expecting() const {
  switch (state_) {
    case kAwaitHello: return Msg::kHello;
    case kAwaitChallenge: return Msg::kChallenge;
    case kAwaitProof: return Msg::kProof;
    case kAwaitWelcome: return Msg::kWelcome;
    default: return Msg::kNone;
  }
}

size_t Handshake::expect_bytes() const {
  switch (expecting()) {
    case Msg::kHello: return kHelloBytes;
    case Msg::kChallenge: return kChallengeBytes;
    case Msg::kProof: return kProofBytes;
    case Msg::kWelcome: return kWelcomeBytes;
    case Msg::kNone: break;
  }
  return 0;
}

Result<std::vector<uint8_t>> Handshake::take(Msg kind, const uint8_t* p, size_t n) {
  const Msg want = expecting();
  if (kind != want || n != expect_bytes()) {
    state_ = kFailed;
    return CorruptData(std::string("unexpected ") + msg_name(kind) + " (" + std::to_string(n) + " bytes) while waiting for " +
                       (want == Msg::kNone ? std::string("nothing") : std::string("the ") + msg_name(want)));
  }
  Result<std::vector<uint8_t>> r = std::vector<uint8_t>{};
  reply_ = Msg::kNone;
  if (!init_.ok()) {
    state_ = kFailed;
    return init_;
  }
  switch (want) {
    case Msg::kHello: r = on_hello(p); break;
    case Msg::kChallenge: r = on_challenge(p); break;
    case Msg::kProof: r = on_proof(p); break;
    case Msg::kWelcome:
      if (is_welcome(p)) state_ = kDone;
      else r = Error(Code::kAuthError, "peer refused the connection");
      break;
    case Msg::kNone: break;
  }
  if (!r.ok()) state_ = kFailed;
  return r;
}

// Server: a client's hello for this communicator; the challenge proves this server knows the secret.
Result<std::vector<uint8_t>> Handshake::on_hello(const uint8_t* p) {
  SPARROW_ASSIGN_OR_RETURN(hello_, Hello::decode(p));
  if (hello_.comm_id != comm_id_) return Error(Code::kAuthError, "hello for another communicator");
  memcpy(hello_bytes_.data(), p, kHelloBytes);
  const seal::Mode mode = std::max(hello_.mode, want_);  // the stronger of the two asks
  challenge_ = make_challenge(secret_, p, uint32_t(my_rank_), mode, eph_->pub);
  SPARROW_RETURN_IF_ERROR(derive_keys(mode, hello_.pub.data()));  // used only once the proof holds
  state_ = kAwaitProof;
  reply_ = Msg::kChallenge;
  return std::vector<uint8_t>(challenge_.begin(), challenge_.end());
}

// Client: the server proved the secret and names its rank; the proof answers its nonce.
Result<std::vector<uint8_t>> Handshake::on_challenge(const uint8_t* p) {
  SPARROW_ASSIGN_OR_RETURN(uint32_t rank, check_challenge(secret_, hello_bytes_.data(), p));
  if (server_rank_ >= 0 && rank != uint32_t(server_rank_))
    return Error(Code::kAuthError, "peer claims to be rank " + std::to_string(int(rank)));
  memcpy(challenge_.data(), p, kChallengeBytes);
  SPARROW_ASSIGN_OR_RETURN(seal::Mode mode, challenge_mode(p));
  if (mode < want_)
    return Error(Code::kAuthError, std::string("peer agreed to protection '") + seal::mode_name(mode) +
                                       "', weaker than the '" + seal::mode_name(want_) + "' asked for");
  if (mode != seal::Mode::kOff && !seal::available())
    return Error(Code::kAuthError, std::string("peer requires protection '") + seal::mode_name(mode) +
                                       "' (its SPARROW_ENCRYPT), which this build cannot provide (no OpenSSL libcrypto)");
  SPARROW_RETURN_IF_ERROR(derive_keys(mode, p + 32));
  state_ = kAwaitWelcome;
  reply_ = Msg::kProof;
  auto proof = make_proof(secret_, hello_bytes_.data(), challenge_.data());
  return std::vector<uint8_t>(proof.begin(), proof.end());
}

// Server: the client's proof; the welcome ends the handshake.
Result<std::vector<uint8_t>> Handshake::on_proof(const uint8_t* p) {
  if (!check_proof(secret_, hello_bytes_.data(), challenge_.data(), p))
    return Error(Code::kAuthError, "wrong proof: the peer does not know the communicator secret");
  state_ = kDone;
  reply_ = Msg::kWelcome;
  auto w = welcome();
  return std::vector<uint8_t>(w.begin(), w.end());
}

Status Handshake::derive_keys(seal::Mode mode, const uint8_t* peer_pub) {
  std::vector<uint8_t> transcript(hello_bytes_.begin(), hello_bytes_.end());
  transcript.insert(transcript.end(), challenge_.begin(), challenge_.end());
  SPARROW_ASSIGN_OR_RETURN(keys_, seal::derive(mode, secret_, *eph_, peer_pub, transcript));
  return Status::Ok();
}

std::unique_ptr<seal::Cipher> Handshake::sender() const {
  if (!done() || keys_.mode == seal::Mode::kOff) return nullptr;
  return std::make_unique<seal::Cipher>(keys_.mode, client_ ? keys_.client_to_server : keys_.server_to_client);
}

std::unique_ptr<seal::Cipher> Handshake::receiver() const {
  if (!done() || keys_.mode == seal::Mode::kOff) return nullptr;
  return std::make_unique<seal::Cipher>(keys_.mode, client_ ? keys_.server_to_client : keys_.client_to_server);
}

}  // namespace sparrow::transport::auth
