// Sealed frames: the records themselves, then two ranks over real TCP sockets with a
// man-in-the-middle proxy between them that reads, alters, replays, drops, reorders and injects.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

#include "core/params.h"
#include "harness/net_harness.h"
#include "harness/util.h"
#include "transport/auth.h"
#include "transport/channel.h"
#include "transport/seal.h"
#include "transport/socket.h"
#include "transport/transport.h"
#if SPARROW_HAVE_UCX
#include "transport/ucx/ucx_backend.h"
#endif

namespace sparrow::transport {
namespace {

using seal::Cipher;
using seal::Mode;

const std::vector<uint8_t> kSecret(16, 9);

// Client and server of one handshake, run to the end.
struct Pair {
  auth::Handshake c, s;
  Status run() {
    std::vector<uint8_t> msg = c.start();
    auth::Handshake* to = &s;
    auth::Handshake::Msg kind = auth::Handshake::Msg::kHello;
    while (!msg.empty()) {
      auto r = to->take(kind, msg.data(), msg.size());
      if (!r.ok()) return r.status();
      kind = to->reply_kind();
      msg = std::move(r).value();
      to = to == &s ? &c : &s;
    }
    return c.done() && s.done() ? Status::Ok() : InternalError("handshake did not finish");
  }
};

Pair handshake(Mode client_wants, Mode server_wants) {
  return Pair{auth::Handshake::client(kSecret, 5, 0, 0, 1, client_wants),
              auth::Handshake::server(kSecret, 5, 1, server_wants)};
}

TEST(Seal, BothSidesAgreeOnTheStrongerModeAndTheSameKeys) {
  if (!seal::available()) GTEST_SKIP() << "built without OpenSSL";
  for (auto [a, b] : {std::pair{Mode::kOff, Mode::kEncrypt}, std::pair{Mode::kIntegrity, Mode::kOff},
                      std::pair{Mode::kEncrypt, Mode::kIntegrity}}) {
    auto p = handshake(a, b);
    ASSERT_TRUE(p.run().ok());
    EXPECT_EQ(p.c.keys().mode, std::max(a, b));
    EXPECT_EQ(p.s.keys().mode, std::max(a, b));
    EXPECT_EQ(p.c.keys().client_to_server.key, p.s.keys().client_to_server.key);
    EXPECT_EQ(p.c.keys().server_to_client.iv, p.s.keys().server_to_client.iv);
    EXPECT_NE(p.c.keys().client_to_server.key, p.c.keys().server_to_client.key) << "a key per direction";
  }
  // Two connections with the same secret get different keys (ephemeral X25519 each time).
  auto p1 = handshake(Mode::kEncrypt, Mode::kOff), p2 = handshake(Mode::kEncrypt, Mode::kOff);
  ASSERT_TRUE(p1.run().ok());
  ASSERT_TRUE(p2.run().ok());
  EXPECT_NE(p1.c.keys().client_to_server.key, p2.c.keys().client_to_server.key);
}

TEST(Seal, ADowngradedChallengeIsRefused) {
  if (!seal::available()) GTEST_SKIP() << "built without OpenSSL";
  // An on-path attacker who rewrites the agreed mode to off in the challenge breaks its MAC.
  auto p = handshake(Mode::kEncrypt, Mode::kEncrypt);
  auto hello = p.c.start();
  auto ch = p.s.take(auth::Handshake::Msg::kHello, hello.data(), hello.size());
  ASSERT_TRUE(ch.ok());
  (*ch)[12] = 0;  // the mode
  auto r = p.c.take(auth::Handshake::Msg::kChallenge, ch->data(), ch->size());
  EXPECT_EQ(r.status().code(), Code::kAuthError) << r.status().to_string();
  // A server that agrees to less than the client asked for (it computes the MAC honestly) is refused too.
  auto q = handshake(Mode::kEncrypt, Mode::kOff);
  hello = q.c.start();
  auto weak = auth::make_challenge(kSecret, hello.data(), 1, Mode::kOff);
  r = q.c.take(auth::Handshake::Msg::kChallenge, weak.data(), weak.size());
  EXPECT_EQ(r.status().code(), Code::kAuthError);
  EXPECT_NE(r.status().message().find("weaker"), std::string::npos) << r.status().message();
}

TEST(Seal, RecordsRoundTripAndAnyChangeFailsTheTag) {
  if (!seal::available()) GTEST_SKIP() << "built without OpenSSL";
  for (Mode m : {Mode::kEncrypt, Mode::kIntegrity}) {
    auto p = handshake(m, m);
    ASSERT_TRUE(p.run().ok());
    auto tx = p.c.sender();
    auto rx = p.s.receiver();
    ASSERT_TRUE(tx && rx);
    auto plain = test::random_bytes(100000, 3);
    std::vector<uint8_t> wire(plain.size());
    uint8_t tag[seal::kTagBytes];
    ASSERT_TRUE(tx->seal(plain.data(), plain.size(), wire.data(), tag).ok());
    if (m == Mode::kIntegrity) wire = plain;  // integrity: the bytes travel as they are
    else EXPECT_NE(wire, plain);
    auto got = wire;
    // Opened in pieces, as a socket delivers them.
    ASSERT_TRUE(rx->begin().ok());
    ASSERT_TRUE(rx->update(got.data(), 7).ok());
    ASSERT_TRUE(rx->update(got.data() + 7, got.size() - 7).ok());
    ASSERT_TRUE(rx->finish(tag).ok());
    EXPECT_EQ(got, plain);
    // The same record again (a replay) has the wrong number: refused.
    got = wire;
    EXPECT_EQ(rx->open(got.data(), got.size(), tag).code(), Code::kAuthError);
    // A fresh receiver; a flipped bit in the record refuses it.
    auto rx2 = p.s.receiver();
    got = wire;
    got[500] ^= 1;
    EXPECT_EQ(rx2->open(got.data(), got.size(), tag).code(), Code::kAuthError);
  }
}

TEST(Seal, AutoIsOnOffTheHostAndOffOnLoopback) {
  ASSERT_TRUE(params::set_override("ENCRYPT", "auto").ok());
  EXPECT_EQ(seal::wanted("127.0.0.1:5000").value(), Mode::kOff);
  EXPECT_EQ(seal::wanted("[::1]:5000").value(), Mode::kOff);
  EXPECT_EQ(seal::wanted("10.1.2.3:5000").value(), seal::available() ? Mode::kEncrypt : Mode::kOff);
  ASSERT_TRUE(params::set_override("ENCRYPT", "integrity").ok());
  auto w = seal::wanted("127.0.0.1:5000");
  if (seal::available()) EXPECT_EQ(w.value(), Mode::kIntegrity);
  else EXPECT_EQ(w.status().code(), Code::kInvalidUsage) << "asked-for protection fails closed";
  EXPECT_FALSE(params::set_override("ENCRYPT", "yes").ok());
  params::clear_overrides();
}

// ---- a man in the middle -----------------------------------------------------------------------------

// Between rank 0 (which connects) and rank 1. It forwards the handshake untouched, then cuts rank
// 0's byte stream into frames of `frame_bytes` and hands each to `tamper`, which returns what goes on
// to rank 1 in its place. Everything it forwarded from rank 0 is kept in `seen`.
class Proxy {
 public:
  using Tamper = std::function<std::vector<std::vector<uint8_t>>(size_t index, std::vector<uint8_t> frame)>;
  Proxy(std::string target, size_t frame_bytes, Tamper t)
      : target_(std::move(target)), frame_(frame_bytes), tamper_(std::move(t)) {
    std::string bound;
    lfd_ = net::listen_on("127.0.0.1", &bound).value();
    net::set_nonblocking(lfd_, false);
    address_ = bound;
    thread_ = std::thread([this] { run(); });
  }
  ~Proxy() {
    stop_ = true;
    thread_.join();
    for (int fd : {lfd_, cfd_, sfd_})
      if (fd >= 0) ::close(fd);
  }
  const std::string& address() const { return address_; }
  std::vector<uint8_t> seen() {
    std::lock_guard<std::mutex> lk(mu_);
    return seen_;
  }

 private:
  // Reads exactly n bytes from fd (false at a close, an error or when the test ends).
  bool read_n(int fd, uint8_t* p, size_t n) {
    while (n > 0 && !stop_) {
      pollfd pf{fd, POLLIN, 0};
      if (poll(&pf, 1, 50) <= 0) continue;
      ssize_t r = recv(fd, p, n, 0);
      if (r <= 0) return false;
      p += r;
      n -= size_t(r);
    }
    return n == 0;
  }
  void forward(const std::vector<uint8_t>& b) {
    if (b.empty()) return;
    (void)!send(sfd_, b.data(), b.size(), MSG_NOSIGNAL);
    std::lock_guard<std::mutex> lk(mu_);
    seen_.insert(seen_.end(), b.begin(), b.end());
  }
  void run() {
    pollfd pf{lfd_, POLLIN, 0};
    while (!stop_ && poll(&pf, 1, 50) <= 0) {
    }
    if (stop_) return;
    cfd_ = accept(lfd_, nullptr, nullptr);
    auto s = net::connect_to(target_, test::soon(5));
    if (cfd_ < 0 || !s.ok()) return;
    sfd_ = s.value();
    net::set_nonblocking(sfd_, false);
    std::thread back([this] {  // rank 1 -> rank 0, untouched
      uint8_t buf[4096];
      while (!stop_) {
        pollfd p{sfd_, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0) continue;
        ssize_t r = recv(sfd_, buf, sizeof buf, 0);
        if (r <= 0 || send(cfd_, buf, size_t(r), MSG_NOSIGNAL) != r) break;
      }
      shutdown(cfd_, SHUT_RDWR);
    });
    std::vector<uint8_t> hello(auth::kHelloBytes), proof(auth::kProofBytes);
    if (read_n(cfd_, hello.data(), hello.size()) && (forward(hello), read_n(cfd_, proof.data(), proof.size()))) {
      forward(proof);
      std::vector<uint8_t> f(frame_);
      for (size_t i = 0; read_n(cfd_, f.data(), f.size()); ++i)
        for (auto& out : tamper_(i, f)) forward(out);
    }
    shutdown(sfd_, SHUT_RDWR);
    back.join();
  }
  std::string target_, address_;
  size_t frame_;
  Tamper tamper_;
  int lfd_ = -1, cfd_ = -1, sfd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<uint8_t> seen_;
};

constexpr size_t kMsgBytes = 4096, kMsgs = 6;

std::vector<uint8_t> pattern(size_t i, size_t bytes = kMsgBytes) {
  const char* p = "SPARROW-WEIGHTS-PATTERN-";
  std::vector<uint8_t> v(bytes);
  for (size_t k = 0; k < v.size(); ++k) v[k] = uint8_t(p[k % strlen(p)]);
  v[0] = uint8_t(i);
  return v;
}

// What rank 1 got for each message: the bytes, or the error.
struct Outcome {
  std::vector<Result<std::vector<uint8_t>>> got;
  std::vector<uint8_t> wire;  // rank 0's bytes as the proxy saw them
};

// Rank 0 sends `msgs` to rank 1 (from a thread of its own); what rank 1 got for each.
std::vector<Result<std::vector<uint8_t>>> send_and_receive(const std::vector<std::unique_ptr<Net>>& nets,
                                                   const std::vector<std::vector<uint8_t>>& msgs) {
  std::thread sender([&] {
    for (size_t i = 0; i < msgs.size(); ++i)
      (void)nets[0]->send(1, MsgKey{42, i, 0}, Payload{msgs[i].data(), msgs[i].size(), nullptr}, test::soon(5));
  });
  std::vector<Result<std::vector<uint8_t>>> got;
  for (size_t i = 0; i < msgs.size(); ++i) got.push_back(nets[1]->recv(0, MsgKey{42, i, 0}, test::soon(3)));
  sender.join();
  return got;
}

// Rank 0 sends kMsgs messages of kMsgBytes to rank 1 through the proxy, one stream, protection `mode`.
Outcome through_proxy(const std::string& mode, Proxy::Tamper tamper) {
  EXPECT_TRUE(params::set_override("ENCRYPT", mode).ok());
  const size_t frame = kFrameHeaderBytes + kMsgBytes + (mode == "off" ? 0 : 2 * seal::kTagBytes);
  auto nets = test::make_nets("tcp", 2, 1);
  Proxy proxy(nets[1]->address(), frame, std::move(tamper));
  nets[0]->set_addresses({nets[0]->address(), proxy.address()});
  std::vector<std::vector<uint8_t>> msgs;
  for (size_t i = 0; i < kMsgs; ++i) msgs.push_back(pattern(i));
  Outcome o;
  o.got = send_and_receive(nets, msgs);
  nets.clear();
  o.wire = proxy.seen();
  params::clear_overrides();
  return o;
}

bool contains(const std::vector<uint8_t>& hay, const std::string& needle) {
  return std::search(hay.begin(), hay.end(), needle.begin(), needle.end()) != hay.end();
}

// Every message either arrived bit-exact or failed; the first `intact` arrived, the rest failed
// with an authentication error.
void expect_refused_after(const Outcome& o, size_t intact, size_t bytes = kMsgBytes) {
  ASSERT_EQ(o.got.size(), kMsgs);
  for (size_t i = 0; i < kMsgs; ++i) {
    if (i < intact) {
      ASSERT_TRUE(o.got[i].ok()) << "message " << i << ": " << o.got[i].status().to_string();
      EXPECT_EQ(o.got[i].value(), pattern(i, bytes)) << "message " << i;
    } else {
      ASSERT_FALSE(o.got[i].ok()) << "message " << i << " was delivered after the stream was tampered with";
    }
  }
  EXPECT_EQ(o.got[intact].status().code(), Code::kAuthError) << o.got[intact].status().to_string();
}

using Frames = std::vector<std::vector<uint8_t>>;

TEST(SealedTcp, ThroughAnHonestProxyEverythingArrivesAndNoWeightIsReadable) {
  if (!seal::available()) GTEST_SKIP() << "built without OpenSSL";
  auto pass = [](size_t, std::vector<uint8_t> f) { return Frames{f}; };
  for (const char* mode : {"on", "integrity", "off"}) {
    auto o = through_proxy(mode, pass);
    for (size_t i = 0; i < kMsgs; ++i) {
      ASSERT_TRUE(o.got[i].ok()) << mode << ", message " << i << ": " << o.got[i].status().to_string();
      EXPECT_EQ(o.got[i].value(), pattern(i)) << mode;
    }
    EXPECT_EQ(o.wire.size(), auth::kHelloBytes + auth::kProofBytes +
                                 kMsgs * (kFrameHeaderBytes + kMsgBytes + (std::string(mode) == "off" ? 0 : 32)))
        << mode << ": the proxy saw other bytes than the frames it expects";
    // Encrypted, the pattern is nowhere on the wire; authenticated only, it travels in the clear.
    EXPECT_EQ(contains(o.wire, "SPARROW-WEIGHTS-PATTERN-"), std::string(mode) != "on") << mode;
  }
}

TEST(SealedTcp, AFlippedByteIsRefusedWhereItIsNotSealedItGoesThrough) {
  if (!seal::available()) GTEST_SKIP() << "built without OpenSSL";
  auto flip = [](size_t i, std::vector<uint8_t> f) {
    if (i == 2) f[f.size() / 2] ^= 0x20;
    return Frames{f};
  };
  for (const char* mode : {"on", "integrity"}) {
    SCOPED_TRACE(mode);
    expect_refused_after(through_proxy(mode, flip), 2);
  }
  // The control: without sealing, the transport delivers the altered bytes (the collectives' XXH3
  // checksums are what catch them there, and an attacker can recompute those).
  auto off = through_proxy("off", flip);
  ASSERT_TRUE(off.got[2].ok());
  EXPECT_NE(off.got[2].value(), pattern(2));
}

TEST(SealedTcp, AFlippedHeaderByteIsRefusedBeforeTheHeaderIsActedOn) {
  if (!seal::available()) GTEST_SKIP() << "built without OpenSSL";
  auto flip = [](size_t i, std::vector<uint8_t> f) {
    if (i == 1) f[20] ^= 1;  // inside the header's record: in integrity mode the key's sequence number
    return Frames{f};
  };
  for (const char* mode : {"on", "integrity"}) {
    SCOPED_TRACE(mode);
    expect_refused_after(through_proxy(mode, flip), 1);
  }
}

TEST(SealedTcp, ReplayedDroppedReorderedAndInjectedFramesAreRefused) {
  if (!seal::available()) GTEST_SKIP() << "built without OpenSSL";
  std::vector<uint8_t> held;
  const std::pair<const char*, Proxy::Tamper> cases[] = {
      {"replay", [](size_t i, std::vector<uint8_t> f) { return i == 2 ? Frames{f, f} : Frames{f}; }},
      {"drop", [](size_t i, std::vector<uint8_t> f) { return i == 2 ? Frames{} : Frames{f}; }},
      {"reorder",
       [&held](size_t i, std::vector<uint8_t> f) {
         if (i == 2) {
           held = f;
           return Frames{};
         }
         return i == 3 ? Frames{f, held} : Frames{f};
       }},
      {"inject", [](size_t i, std::vector<uint8_t> f) { return i == 2 ? Frames{test::random_bytes(100, 8), f} : Frames{f}; }},
  };
  for (const auto& [what, tamper] : cases) {
    SCOPED_TRACE(what);
    // A replayed frame is the one already delivered: message 2 arrives once, then the copy is refused.
    expect_refused_after(through_proxy("on", tamper), std::string(what) == "replay" ? 3 : 2);
  }
}


// ---- the same over UCX: the suite's wire hook sees (and alters) each frame as it goes out ----------
#if SPARROW_HAVE_UCX

bool have_ucx() {
  auto names = backend_names();
  return std::find(names.begin(), names.end(), "ucx") != names.end();
}

// What went on the wire, frame by frame: the active message's header and data.
struct Wire {
  std::mutex mu;
  std::vector<std::pair<std::vector<uint8_t>, std::vector<uint8_t>>> frames;
};
using UcxTamper = std::function<void(size_t index, uint8_t* hdr, size_t hlen, uint8_t* data, size_t len)>;

// Rank 0 sends kMsgs messages of `bytes` (4 KiB travels eagerly, 1 MiB by rendezvous) to rank 1 over
// UCX, one stream, protection `mode`; `tamper` may alter each frame on its way.
Outcome through_ucx(const std::string& mode, size_t bytes, UcxTamper tamper, Wire* wire = nullptr) {
  EXPECT_TRUE(params::set_override("ENCRYPT", mode).ok());
  std::atomic<size_t> index{0};
  set_ucx_wire_hook([&](uint8_t* h, size_t hl, uint8_t* d, size_t l) {
    if (hl == 0) return;  // the goodbye that closes the connection (not a frame)
    const size_t i = index++;
    if (tamper) tamper(i, h, hl, d, l);
    if (!wire) return;
    std::lock_guard<std::mutex> lk(wire->mu);
    wire->frames.emplace_back(std::vector<uint8_t>(h, h + hl), std::vector<uint8_t>(d, d + l));
  });
  Outcome o;
  std::vector<std::vector<uint8_t>> msgs;  // (outlive the nets: a failed send may leave a frame queued)
  for (size_t i = 0; i < kMsgs; ++i) msgs.push_back(pattern(i, bytes));
  {
    auto nets = test::make_nets("ucx", 2, 1);
    o.got = send_and_receive(nets, msgs);
  }
  set_ucx_wire_hook(nullptr);
  params::clear_overrides();
  return o;
}

constexpr size_t kSizes[] = {kMsgBytes, size_t(1) << 20};
// A message travels as frames of at most stripe_bytes() (channel.h): 1 MiB as several.
size_t frames_per(size_t bytes) { return (bytes + stripe_bytes() - 1) / stripe_bytes(); }

TEST(SealedUcx, EveryFrameIsSealedAndNoWeightIsReadable) {
  if (!seal::available() || !have_ucx()) GTEST_SKIP() << "needs OpenSSL and UCX";
  for (size_t bytes : kSizes)
    for (const char* mode : {"on", "integrity", "off"}) {
      SCOPED_TRACE(std::string(mode) + ", " + std::to_string(bytes) + " bytes");
      Wire wire;
      auto o = through_ucx(mode, bytes, nullptr, &wire);
      for (size_t i = 0; i < kMsgs; ++i) {
        ASSERT_TRUE(o.got[i].ok()) << "message " << i << ": " << o.got[i].status().to_string();
        EXPECT_EQ(o.got[i].value(), pattern(i, bytes));
      }
      ASSERT_EQ(wire.frames.size(), kMsgs * frames_per(bytes));
      std::vector<uint8_t> all;
      for (auto& [h, d] : wire.frames) {
        EXPECT_EQ(h.size(), kFrameHeaderBytes + (std::string(mode) == "off" ? 0 : 2 * seal::kTagBytes));
        EXPECT_EQ(d.size(), std::min(bytes, stripe_bytes()));
        all.insert(all.end(), h.begin(), h.end());
        all.insert(all.end(), d.begin(), d.end());
      }
      EXPECT_EQ(contains(all, "SPARROW-WEIGHTS-PATTERN-"), std::string(mode) != "on");
    }
}

// As expect_refused_after, except that messages before the tampered one may fail too: a payload UCX
// fetches by rendezvous after the handler returns can still be in flight when a later frame's
// header fails its tag and ends the connection. Whatever arrived is bit-exact.
void expect_refused_from(const Outcome& o, size_t bad, size_t bytes) {
  ASSERT_EQ(o.got.size(), kMsgs);
  size_t first_failed = kMsgs;
  for (size_t i = 0; i < kMsgs; ++i) {
    if (o.got[i].ok()) {
      ASSERT_LT(i, bad) << "message " << i << " was delivered after the stream was tampered with";
      EXPECT_EQ(o.got[i].value(), pattern(i, bytes)) << "message " << i;
    } else if (first_failed == kMsgs) {
      first_failed = i;
    }
  }
  ASSERT_LE(first_failed, bad);
  EXPECT_EQ(o.got[first_failed].status().code(), Code::kAuthError) << o.got[first_failed].status().to_string();
}

TEST(SealedUcx, AFlippedPayloadOrHeaderByteIsRefused) {
  if (!seal::available() || !have_ucx()) GTEST_SKIP() << "needs OpenSSL and UCX";
  for (size_t bytes : kSizes)
    for (const char* mode : {"on", "integrity"}) {
      SCOPED_TRACE(std::string(mode) + ", " + std::to_string(bytes) + " bytes");
      const size_t per = frames_per(bytes);
      auto payload = [per](size_t i, uint8_t*, size_t, uint8_t* d, size_t l) {
        if (i == 2 * per) d[l / 2] ^= 0x20;  // message 2's first frame
      };
      auto header = [per](size_t i, uint8_t* h, size_t, uint8_t*, size_t) {
        if (i == per) h[3] ^= 1;  // message 1's
      };
      expect_refused_from(through_ucx(mode, bytes, payload), 2, bytes);
      expect_refused_from(through_ucx(mode, bytes, header), 1, bytes);
    }
  // The control: unsealed, the transport delivers the altered bytes.
  auto off = through_ucx("off", kMsgBytes, [](size_t i, uint8_t*, size_t, uint8_t* d, size_t l) {
    if (i == 2) d[l / 2] ^= 0x20;
  });
  ASSERT_TRUE(off.got[2].ok());
  EXPECT_NE(off.got[2].value(), pattern(2));
}

TEST(SealedUcx, AFrameReplayedInPlaceOfTheNextIsRefused) {
  if (!seal::available() || !have_ucx()) GTEST_SKIP() << "needs OpenSSL and UCX";
  for (size_t bytes : kSizes) {
    SCOPED_TRACE(bytes);
    std::vector<uint8_t> held_h, held_d;
    const size_t per = frames_per(bytes);
    auto replay = [&](size_t i, uint8_t* h, size_t hl, uint8_t* d, size_t l) {  // message 1's first frame again
      if (i == per) held_h.assign(h, h + hl), held_d.assign(d, d + l);
      if (i == 2 * per && held_h.size() == hl && held_d.size() == l) {
        std::copy(held_h.begin(), held_h.end(), h);
        std::copy(held_d.begin(), held_d.end(), d);
      }
    };
    expect_refused_from(through_ucx("on", bytes, replay), 2, bytes);
  }
}
// The goodbye that closes a connection is sealed as its frames are: the orderly close reads as the
// peer closing (kPeerLost); a goodbye altered on the way (or one an attacker made up) is an
// authentication failure naming the peer, not an orderly close. Unsealed, it is the one plain byte.
TEST(SealedUcx, TheGoodbyeIsSealedAndAnAlteredOneIsRefused) {
  if (!seal::available() || !have_ucx()) GTEST_SKIP() << "needs OpenSSL and UCX";
  for (const char* mode : {"on", "integrity", "off"})
    for (bool alter : {false, true}) {
      SCOPED_TRACE(std::string(mode) + (alter ? ", altered" : ", as sent"));
      ASSERT_TRUE(params::set_override("ENCRYPT", mode).ok());
      std::atomic<size_t> bye_len{0};
      set_ucx_wire_hook([&](uint8_t*, size_t hl, uint8_t* d, size_t l) {
        if (hl != 0) return;
        bye_len = l;
        if (alter) d[0] ^= 1;
      });
      auto nets = test::make_nets("ucx", 2, 1);
      const auto first = send_and_receive(nets, {pattern(0)});
      ASSERT_TRUE(first[0].ok()) << first[0].status().to_string();
      nets[0].reset();  // closes its connection: the goodbye
      auto next = nets[1]->recv(0, MsgKey{42, 1, 0}, test::soon(10));
      set_ucx_wire_hook(nullptr);
      params::clear_overrides();
      ASSERT_FALSE(next.ok());
      EXPECT_EQ(bye_len.load(), std::string(mode) == "off" ? 1u : 1u + seal::kTagBytes);
      const bool refused = alter && std::string(mode) != "off";
      EXPECT_EQ(next.status().code(), refused ? Code::kAuthError : Code::kPeerLost) << next.status().to_string();
      if (refused) EXPECT_NE(next.status().message().find("goodbye"), std::string::npos) << next.status().to_string();
    }
}

#endif  // SPARROW_HAVE_UCX

}  // namespace
}  // namespace sparrow::transport
