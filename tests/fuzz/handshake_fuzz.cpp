// libFuzzer target for what a stranger or an on-path attacker can put on a connection: the
// handshake's messages (parsed before and while the peer proves itself) and sealed records (opened
// after it). Any input must be refused or, for records, opened only when its tag holds; never crash,
// hang or read out of bounds (ASan/UBSan).
//
// The first byte picks the role: 0 a server taking a hello then a proof, 1 a client taking a
// challenge then a welcome, 2 a receiver opening a sealed frame (header record, payload record in
// the pieces the input's second byte gives). Seeds are real messages (`handshake_fuzz --write-seeds
// DIR`; scripts/fuzz.sh runs it all).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "seeds.h"
#include "transport/auth.h"
#include "transport/seal.h"
#include "transport/transport.h"

using namespace sparrow::transport;

namespace {

const std::vector<uint8_t> kSecret(16, 5);
constexpr uint64_t kComm = 99;

struct World {
  seal::SessionKeys keys;
  std::vector<std::vector<uint8_t>> seeds;
  World() {
    auto c = auth::Handshake::client(kSecret, kComm, 0, 0, 1, seal::Mode::kEncrypt);
    auto s = auth::Handshake::server(kSecret, kComm, 1, seal::Mode::kEncrypt);
    auto hello = c.start();
    auto challenge = s.take(auth::Handshake::Msg::kHello, hello.data(), hello.size()).value();
    auto proof = c.take(auth::Handshake::Msg::kChallenge, challenge.data(), challenge.size()).value();
    auto welcome = s.take(auth::Handshake::Msg::kProof, proof.data(), proof.size()).value();
    if (!c.take(auth::Handshake::Msg::kWelcome, welcome.data(), welcome.size()).ok()) abort();
    keys = c.keys();
    seeds.push_back(with_role(0, hello, proof));
    seeds.push_back(with_role(1, challenge, welcome));
    seeds.push_back(sealed_frame(c));
  }
  static std::vector<uint8_t> with_role(uint8_t role, const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
    std::vector<uint8_t> v{role};
    v.insert(v.end(), a.begin(), a.end());
    v.insert(v.end(), b.begin(), b.end());
    return v;
  }
  // Role 2: the split byte, a frame header's record and tag, a 300-byte payload and its tag.
  static std::vector<uint8_t> sealed_frame(const auth::Handshake& c) {
    auto tx = c.sender();
    FrameHeader h;
    h.key = MsgKey{kComm, 1, 0};
    h.total = h.len = 300;
    std::vector<uint8_t> hdr(kFrameHeaderBytes + seal::kTagBytes), pay(300, 0x5a), tag(seal::kTagBytes);
    h.encode(hdr.data());
    if (!tx->seal(hdr.data(), kFrameHeaderBytes, hdr.data(), hdr.data() + kFrameHeaderBytes).ok()) abort();
    if (!tx->seal(pay.data(), pay.size(), pay.data(), tag.data()).ok()) abort();
    std::vector<uint8_t> v{2, 100};
    for (auto* p : {&hdr, &pay, &tag}) v.insert(v.end(), p->begin(), p->end());
    return v;
  }
};

World& world() {
  static World w;
  return w;
}

void server_side(const uint8_t* p, size_t n) {
  auto s = auth::Handshake::server(kSecret, kComm, 1, seal::Mode::kIntegrity);
  if (n < auth::kHelloBytes) return;
  if (!s.take(auth::Handshake::Msg::kHello, p, auth::kHelloBytes).ok()) return;
  p += auth::kHelloBytes;
  n -= auth::kHelloBytes;
  (void)s.take(auth::Handshake::Msg::kProof, p, std::min(n, auth::kProofBytes));
  if (s.done() && !s.sender()) abort();  // a fuzzer that forged a proof would end here
}

void client_side(const uint8_t* p, size_t n) {
  auto c = auth::Handshake::client(kSecret, kComm, 0, 0, 1, seal::Mode::kEncrypt);
  (void)c.start();
  if (n < auth::kChallengeBytes) return;
  if (!c.take(auth::Handshake::Msg::kChallenge, p, auth::kChallengeBytes).ok()) return;
  (void)c.take(auth::Handshake::Msg::kWelcome, p + auth::kChallengeBytes, std::min(n - auth::kChallengeBytes, auth::kWelcomeBytes));
}

// A receiver's reading of one sealed frame, as the TCP backend does it: the header's record must
// open before its length is used; the payload is opened in the pieces the input says.
void open_frame(const uint8_t* p, size_t n) {
  if (n < 1 + kFrameHeaderBytes + seal::kTagBytes) return;
  const size_t piece = std::max<size_t>(1, p[0]);
  ++p;
  --n;
  seal::Cipher rx(seal::Mode::kEncrypt, world().keys.client_to_server);
  std::vector<uint8_t> hdr(p, p + kFrameHeaderBytes);
  if (!rx.open(hdr.data(), hdr.size(), p + kFrameHeaderBytes).ok()) return;
  auto h = FrameHeader::decode(hdr.data());
  if (!h.ok()) return;
  p += kFrameHeaderBytes + seal::kTagBytes;
  n -= kFrameHeaderBytes + seal::kTagBytes;
  if (n < size_t(h->len) + seal::kTagBytes) return;
  std::vector<uint8_t> pay(p, p + h->len);
  if (!rx.begin().ok()) abort();
  for (size_t off = 0; off < pay.size(); off += piece)
    if (!rx.update(pay.data() + off, std::min(piece, pay.size() - off)).ok()) abort();
  if (rx.finish(p + h->len).ok() && pay != std::vector<uint8_t>(pay.size(), 0x5a)) {
    fprintf(stderr, "a record opened with other bytes than were sealed\n");
    abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  sparrow::fuzz::write_seeds_if_asked(*argc, *argv, [] { return world().seeds; });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  switch (data[0] % 3) {
    case 0: server_side(data + 1, size - 1); break;
    case 1: client_side(data + 1, size - 1); break;
    default: open_frame(data + 1, size - 1); break;
  }
  return 0;
}
