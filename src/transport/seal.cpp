#include "transport/seal.h"

#if SPARROW_HAVE_OPENSSL
#include <openssl/crypto.h>
#include <openssl/evp.h>
#endif

#include <cstring>
#include <mutex>

#include "core/log.h"
#include "core/params.h"
#include "transport/auth.h"
#include "transport/sha256.h"
#include "transport/socket.h"

namespace sparrow::transport::seal {
namespace {

params::StringParam kEncrypt("ENCRYPT", "auto",
                             "Protection of every connection's frames after the handshake: auto (on for connections "
                             "that leave the host, off on loopback), on (AES-256-GCM), integrity (authenticated, not "
                             "encrypted) or off.",
                             {"auto", "on", "integrity", "off"});

void cleanse(void* p, size_t n) {
#if SPARROW_HAVE_OPENSSL
  OPENSSL_cleanse(p, n);
#else
  volatile uint8_t* v = static_cast<volatile uint8_t*>(p);
  while (n--) *v++ = 0;
#endif
}

// HKDF-Expand (RFC 5869) for outputs of at most one block.
std::array<uint8_t, 32> expand(const std::array<uint8_t, 32>& prk, const char* label) {
  std::vector<uint8_t> info(label, label + strlen(label));
  info.push_back(1);
  return auth::hmac_sha256(prk, info);
}

DirectionKeys direction(const std::array<uint8_t, 32>& prk, const char* key_label, const char* iv_label) {
  DirectionKeys d;
  auto k = expand(prk, key_label), iv = expand(prk, iv_label);
  memcpy(d.key.data(), k.data(), kKeyBytes);
  memcpy(d.iv.data(), iv.data(), kIvBytes);
  cleanse(k.data(), k.size());
  return d;
}

}  // namespace

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::kOff: return "off";
    case Mode::kIntegrity: return "integrity";
    case Mode::kEncrypt: return "on";
  }
  return "?";
}

std::string setting() { return kEncrypt.get(); }

bool available() { return SPARROW_HAVE_OPENSSL; }

void warn_if_unavailable_once() {
  static std::once_flag once;
  if (available() || setting() != "auto") return;
  std::call_once(once, [] {
    SPARROW_WARN("SPARROW_ENCRYPT=auto: this build has no OpenSSL libcrypto, so frames travel unencrypted and "
                 "without a keyed tag on every connection");
  });
}

Result<Mode> wanted(const std::string& peer_address) { return wanted_for(net::is_loopback(peer_address)); }

Result<Mode> wanted_for(bool loopback) {
  const std::string s = setting();
  if (s == "off") return Mode::kOff;
  if (s == "auto") {
    if (!available()) {
      warn_if_unavailable_once();
      return Mode::kOff;
    }
    return loopback ? Mode::kOff : Mode::kEncrypt;
  }
  if (!available())
    return Error(Code::kInvalidUsage, "SPARROW_ENCRYPT=" + s + " cannot be provided: this build of sparrow has no OpenSSL libcrypto "
                        "(AES-GCM, X25519); rebuild with libssl-dev installed or set SPARROW_ENCRYPT=off");
  return s == "on" ? Mode::kEncrypt : Mode::kIntegrity;
}

#if SPARROW_HAVE_OPENSSL

Result<Ephemeral> Ephemeral::make() {
  Ephemeral e;
  SPARROW_RETURN_IF_ERROR(auth::random_bytes(e.priv.data(), e.priv.size()));
  EVP_PKEY* k = EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, nullptr, e.priv.data(), e.priv.size());
  size_t len = e.pub.size();
  const bool ok = k && EVP_PKEY_get_raw_public_key(k, e.pub.data(), &len) == 1 && len == e.pub.size();
  EVP_PKEY_free(k);
  if (!ok) return InternalError("X25519: could not make an ephemeral key");
  return e;
}

namespace {
Result<std::array<uint8_t, 32>> x25519(const Ephemeral& mine, const uint8_t peer_pub[kPublicBytes]) {
  EVP_PKEY* me = EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, nullptr, mine.priv.data(), mine.priv.size());
  EVP_PKEY* peer = EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, nullptr, peer_pub, kPublicBytes);
  EVP_PKEY_CTX* ctx = me ? EVP_PKEY_CTX_new(me, nullptr) : nullptr;
  std::array<uint8_t, 32> out{};
  size_t len = out.size();
  const bool ok = me && peer && ctx && EVP_PKEY_derive_init(ctx) == 1 && EVP_PKEY_derive_set_peer(ctx, peer) == 1 &&
                  EVP_PKEY_derive(ctx, out.data(), &len) == 1 && len == out.size();
  EVP_PKEY_CTX_free(ctx);
  EVP_PKEY_free(peer);
  EVP_PKEY_free(me);
  // A low-order public key gives the all-zero secret (OpenSSL refuses it too): the peer is not honest.
  static const std::array<uint8_t, 32> zero{};
  if (!ok || auth::equal_ct(out.data(), zero.data(), 32))
    return Error(Code::kAuthError, "the peer's X25519 key is not valid");
  return out;
}
}  // namespace

struct Cipher::Ctx {
  EVP_CIPHER_CTX* c = EVP_CIPHER_CTX_new();
  bool encrypting = false;
  ~Ctx() { EVP_CIPHER_CTX_free(c); }
};

Cipher::Cipher(Mode mode, const DirectionKeys& k) : mode_(mode), k_(k), ctx_(std::make_unique<Ctx>()) {}

Cipher::~Cipher() { cleanse(&k_, sizeof k_); }

// Keys the context for the next record with its own nonce (the IV xor the record number).
Status Cipher::start_record(bool encrypt, uint64_t record) {
  if (!ctx_->c) return InternalError("AES-GCM: no cipher context");
  std::array<uint8_t, kIvBytes> nonce = k_.iv;
  for (int i = 0; i < 8; ++i) nonce[kIvBytes - 1 - i] ^= uint8_t(record >> (8 * i));
  record_ = record;
  const int ok = encrypt ? EVP_EncryptInit_ex(ctx_->c, EVP_aes_256_gcm(), nullptr, k_.key.data(), nonce.data())
                         : EVP_DecryptInit_ex(ctx_->c, EVP_aes_256_gcm(), nullptr, k_.key.data(), nonce.data());
  ctx_->encrypting = encrypt;
  return ok == 1 ? Status::Ok() : InternalError("AES-GCM: could not start a record");
}

Status Cipher::seal(const uint8_t* in, size_t n, uint8_t* out, uint8_t tag[kTagBytes]) {
  SPARROW_RETURN_IF_ERROR(start_record(true, seq_++));
  int len = 0;
  bool ok = true;
  for (size_t off = 0; ok && off < n;) {  // EVP takes int lengths
    const int step = int(std::min<size_t>(n - off, 1u << 30));
    ok = mode_ == Mode::kEncrypt ? EVP_EncryptUpdate(ctx_->c, out + off, &len, in + off, step) == 1
                                 : EVP_EncryptUpdate(ctx_->c, nullptr, &len, in + off, step) == 1;
    off += size_t(step);
  }
  ok = ok && EVP_EncryptFinal_ex(ctx_->c, nullptr, &len) == 1 &&
       EVP_CIPHER_CTX_ctrl(ctx_->c, EVP_CTRL_GCM_GET_TAG, int(kTagBytes), tag) == 1;
  return ok ? Status::Ok() : InternalError("AES-GCM: sealing a record failed");
}

Status Cipher::begin() { return start_record(false, seq_++); }

Status Cipher::update(uint8_t* p, size_t n) {
  int len = 0;
  for (size_t off = 0; off < n;) {
    const int step = int(std::min<size_t>(n - off, 1u << 30));
    const int ok = mode_ == Mode::kEncrypt ? EVP_DecryptUpdate(ctx_->c, p + off, &len, p + off, step)
                                           : EVP_DecryptUpdate(ctx_->c, nullptr, &len, p + off, step);
    if (ok != 1) return InternalError("AES-GCM: opening a record failed");
    off += size_t(step);
  }
  return Status::Ok();
}

Status Cipher::finish(const uint8_t tag[kTagBytes]) {
  int len = 0;
  if (EVP_CIPHER_CTX_ctrl(ctx_->c, EVP_CTRL_GCM_SET_TAG, int(kTagBytes), const_cast<uint8_t*>(tag)) != 1)
    return InternalError("AES-GCM: could not set the tag");
  if (EVP_DecryptFinal_ex(ctx_->c, nullptr, &len) != 1)
    return Error(Code::kAuthError, std::string("a record failed its ") + (mode_ == Mode::kEncrypt ? "AES-GCM" : "GMAC") +
                                       " tag (record " + std::to_string(record_) +
                                       "): altered, replayed, reordered, dropped or injected bytes on the path");
  return Status::Ok();
}

#else  // no OpenSSL: wanted() never asks for a mode other than off, so nothing below seals

Result<Ephemeral> Ephemeral::make() { return Ephemeral{}; }

namespace {
Result<std::array<uint8_t, 32>> x25519(const Ephemeral&, const uint8_t*) {
  return Error(Code::kInvalidUsage, "X25519 needs OpenSSL's libcrypto, which this build lacks");
}
}  // namespace

struct Cipher::Ctx {};
Cipher::Cipher(Mode mode, const DirectionKeys& k) : mode_(mode), k_(k), ctx_(std::make_unique<Ctx>()) {}
Cipher::~Cipher() { cleanse(&k_, sizeof k_); }
Status Cipher::start_record(bool, uint64_t) { return Error(Code::kInvalidUsage, "AES-GCM needs OpenSSL's libcrypto, which this build lacks"); }
Status Cipher::seal(const uint8_t*, size_t, uint8_t*, uint8_t*) { return start_record(true, 0); }
Status Cipher::begin() { return start_record(false, 0); }
Status Cipher::update(uint8_t*, size_t) { return start_record(false, 0); }
Status Cipher::finish(const uint8_t*) { return start_record(false, 0); }

#endif

Ephemeral::~Ephemeral() { cleanse(priv.data(), priv.size()); }

Status Cipher::open(uint8_t* p, size_t n, const uint8_t tag[kTagBytes]) { return open_at(seq_++, p, n, tag); }

Status Cipher::open_at(uint64_t record, uint8_t* p, size_t n, const uint8_t tag[kTagBytes]) {
  SPARROW_RETURN_IF_ERROR(start_record(false, record));
  SPARROW_RETURN_IF_ERROR(update(p, n));
  return finish(tag);
}

Result<SessionKeys> derive(Mode mode, const std::vector<uint8_t>& secret, const Ephemeral& mine,
                           const uint8_t peer_pub[kPublicBytes], const std::vector<uint8_t>& transcript) {
  SessionKeys s;
  s.mode = mode;
  if (mode == Mode::kOff) return s;
  SPARROW_ASSIGN_OR_RETURN(auto dh, x25519(mine, peer_pub));
  const auto salt = auth::sha256(transcript);
  std::vector<uint8_t> ikm(secret);
  ikm.insert(ikm.end(), dh.begin(), dh.end());
  auto prk = auth::hmac_sha256(salt, ikm);  // HKDF-Extract
  s.client_to_server = direction(prk, "sparrow v2 client->server key", "sparrow v2 client->server iv");
  s.server_to_client = direction(prk, "sparrow v2 server->client key", "sparrow v2 server->client iv");
  cleanse(ikm.data(), ikm.size());
  cleanse(dh.data(), dh.size());
  cleanse(prk.data(), prk.size());
  return s;
}

}  // namespace sparrow::transport::seal
