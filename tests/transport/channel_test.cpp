// Channel striping (fragments go to the least-queued connection, ties rotate) and the Mailbox's
// handling of a peer that closes its streams.
#include "transport/channel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>

namespace sparrow::transport {
namespace {

// Hands every frame to "the network" at once (queue always empty), like a socket with room.
class InstantConn final : public Conn {
 public:
  explicit InstantConn(int s) : stream_(s) {}
  void send(const FrameHeader&, Payload, SendDone done) override {
    frames++;
    done(Status::Ok());
  }
  size_t queued_bytes() const override { return 0; }
  void close() override {}
  int peer_rank() const override { return 1; }
  std::string peer_address() const override { return "fake"; }
  int stream() const override { return stream_; }
  std::atomic<int> frames{0};

 private:
  int stream_;
};

TEST(ChannelTest, SmallMessagesSpreadOverEveryStream) {
  std::vector<std::shared_ptr<InstantConn>> cs;
  std::vector<ConnPtr> conns;
  for (int i = 0; i < 4; ++i) {
    cs.push_back(std::make_shared<InstantConn>(i));
    conns.push_back(cs.back());
  }
  Channel ch(conns);
  std::vector<uint8_t> data(100, 1);
  for (uint32_t i = 0; i < 8; ++i) {
    auto r = ch.send(MsgKey{1, 1, i}, Payload{data.data(), data.size(), nullptr});
    ASSERT_TRUE(r->wait(std::chrono::steady_clock::now() + std::chrono::seconds(5)).ok());
  }
  // Without rotation every message would take stream 0 (all queues are always empty).
  for (auto& c : cs) EXPECT_EQ(c->frames.load(), 2) << "stream " << c->stream();
}

TEST(MailboxTest, OneStreamClosingCleanlyDoesNotLoseWhatAnotherStillDelivers) {
  // A peer sends its last message on stream B and closes all streams; stream A's close is seen first.
  Mailbox mb("rank 1", 2);
  InstantConn a(0), b(1);
  mb.conn_failed(&a, Status(Code::kPeerLost, "stream 0 closed by the peer"));
  FrameHeader h;
  h.key = MsgKey{1, 7, 0};
  h.total = h.len = 3;
  auto dst = mb.frame_begin(&b, h);
  ASSERT_TRUE(dst.ok());
  memcpy(dst.value(), "abc", 3);
  mb.frame_end(&b, h);
  auto m = mb.recv(h.key, std::chrono::steady_clock::now() + std::chrono::seconds(5));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(std::string(m->begin(), m->end()), "abc");
  // Once every stream is closed, waiting for more fails at once (no timeout).
  mb.conn_failed(&b, Status(Code::kPeerLost, "stream 1 closed by the peer"));
  auto more = mb.recv(MsgKey{1, 8, 0}, std::chrono::steady_clock::now() + std::chrono::seconds(60));
  EXPECT_EQ(more.status().code(), Code::kPeerLost);
}

TEST(MailboxTest, AnyOtherFailureFailsAtOnce) {
  Mailbox mb("rank 1", 4);
  InstantConn a(0);
  mb.conn_failed(&a, Status(Code::kCorruptData, "bad frame"));
  auto m = mb.recv(MsgKey{1, 1, 0}, std::chrono::steady_clock::now() + std::chrono::seconds(60));
  EXPECT_EQ(m.status().code(), Code::kCorruptData);
}

}  // namespace
}  // namespace sparrow::transport
