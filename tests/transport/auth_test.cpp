// The handshake's MAC: the built-in SHA-256 / HMAC-SHA256 against the standard test vectors, and
// auth::hmac_sha256 (OpenSSL's when the build has it) equal to the built-in one.
#include "transport/auth.h"

#include <gtest/gtest.h>

#include <string>

#include "harness/util.h"
#include "transport/sha256.h"

namespace sparrow::transport::auth {
namespace {

std::string hex(const std::array<uint8_t, 32>& d) {
  static const char* k = "0123456789abcdef";
  std::string s;
  for (uint8_t b : d) s += std::string{k[b >> 4], k[b & 15]};
  return s;
}
std::span<const uint8_t> bytes(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

TEST(Sha256, StandardVectors) {  // FIPS 180-4 examples
  EXPECT_EQ(hex(sha256(bytes(""))), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex(sha256(bytes("abc"))), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex(sha256(bytes("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"))),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(hex(sha256(bytes(std::string(1000000, 'a')))), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, HmacRfc4231) {
  EXPECT_EQ(hex(hmac_sha256_builtin(bytes(std::string(20, '\x0b')), bytes("Hi There"))),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(hex(hmac_sha256_builtin(bytes("Jefe"), bytes("what do ya want for nothing?"))),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(hex(hmac_sha256_builtin(bytes(std::string(131, '\xaa')),
                                    bytes("Test Using Larger Than Block-Size Key - Hash Key First"))),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(Sha256, LibraryMacEqualsTheBuiltInOne) {
  uint64_t seed = 5;
  for (size_t n : {size_t(0), size_t(1), size_t(55), size_t(56), size_t(63), size_t(64), size_t(65), size_t(1000)}) {
    auto key = test::random_bytes(16, seed++), msg = test::random_bytes(n, seed++);
    EXPECT_EQ(hmac_sha256(key, msg), hmac_sha256_builtin(key, msg)) << n;
  }
  uint8_t a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 5};
  EXPECT_TRUE(equal_ct(a, a, 4));
  EXPECT_FALSE(equal_ct(a, b, 4));
}


// Runs client and server against each other, passing each reply on; the first failure.
Status run_handshake(Handshake& client, Handshake& server) {
  auto msg = client.start();
  Handshake::Msg kind = Handshake::Msg::kHello;
  Handshake* to = &server;
  for (int i = 0; i < 6 && !(client.done() && server.done()); ++i) {
    auto reply = to->take(kind, msg.data(), msg.size());
    if (!reply.ok()) return reply.status();
    kind = to->reply_kind();
    msg = std::move(reply.value());
    to = to == &server ? &client : &server;
  }
  return client.done() && server.done() ? Status::Ok() : Error(Code::kInternalError, "handshake did not finish");
}

const std::vector<uint8_t> kSecret(16, 9);

TEST(Handshake, ClientAndServerAgreeAndTheServerLearnsWhoConnected) {
  auto c = Handshake::client(kSecret, 77, 3, 2, 5);
  auto s = Handshake::server(kSecret, 77, 5);
  EXPECT_EQ(c.expecting(), Handshake::Msg::kChallenge);
  EXPECT_EQ(s.expecting(), Handshake::Msg::kHello);
  ASSERT_TRUE(run_handshake(c, s).ok());
  EXPECT_EQ(s.hello().rank, 3u);
  EXPECT_EQ(s.hello().stream, 2u);
  EXPECT_EQ(c.expecting(), Handshake::Msg::kNone);
}

TEST(Handshake, WrongSecretWrongCommunicatorOrWrongRankIsRefused) {
  {
    auto c = Handshake::client(std::vector<uint8_t>(16, 1), 77, 3, 0, 5);
    auto s = Handshake::server(kSecret, 77, 5);
    EXPECT_EQ(run_handshake(c, s).code(), Code::kAuthError);  // the client sees a server without the secret
  }
  {
    auto c = Handshake::client(kSecret, 78, 3, 0, 5);
    auto s = Handshake::server(kSecret, 77, 5);
    Status r = run_handshake(c, s);
    EXPECT_EQ(r.code(), Code::kAuthError);
    EXPECT_NE(r.message().find("another communicator"), std::string::npos) << r.message();
  }
  {
    auto c = Handshake::client(kSecret, 77, 3, 0, 4);  // expects rank 4, reaches rank 5
    auto s = Handshake::server(kSecret, 77, 5);
    Status r = run_handshake(c, s);
    EXPECT_EQ(r.code(), Code::kAuthError);
    EXPECT_NE(r.message().find("claims to be rank 5"), std::string::npos) << r.message();
  }
}

TEST(Handshake, OutOfOrderOrWrongSizeMessagesEndIt) {
  auto s = Handshake::server(kSecret, 77, 5);
  std::vector<uint8_t> proof(kProofBytes, 0);
  auto r = s.take(Handshake::Msg::kProof, proof.data(), proof.size());  // a proof before any hello
  EXPECT_EQ(r.status().code(), Code::kCorruptData);
  EXPECT_NE(r.status().message().find("waiting for the hello"), std::string::npos) << r.status().message();
  // Once failed, nothing more is taken.
  auto c = Handshake::client(kSecret, 77, 3, 0, 5);
  auto hello = c.start();
  EXPECT_FALSE(s.take(Handshake::Msg::kHello, hello.data(), hello.size()).ok());
  auto s2 = Handshake::server(kSecret, 77, 5);
  EXPECT_EQ(s2.take(Handshake::Msg::kHello, hello.data(), hello.size() - 1).status().code(), Code::kCorruptData);
}

}  // namespace
}  // namespace sparrow::transport::auth
