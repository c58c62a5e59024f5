// Channel striping (fragments go to the least-queued connection, ties rotate) and the Mailbox's
// handling of a peer that closes its streams.
#include "transport/channel.h"

#include <gtest/gtest.h>

#include <thread>

#include <atomic>
#include <future>
#include <cstring>
#include <functional>
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

std::vector<std::shared_ptr<InstantConn>> instant_conns(int n) {
  std::vector<std::shared_ptr<InstantConn>> cs;
  for (int i = 0; i < n; ++i) cs.push_back(std::make_shared<InstantConn>(i));
  return cs;
}

std::vector<ConnPtr> as_conns(const std::vector<std::shared_ptr<InstantConn>>& cs) { return {cs.begin(), cs.end()}; }

TEST(ChannelTest, SmallMessagesSpreadOverEveryStream) {
  auto cs = instant_conns(4);
  Channel ch(as_conns(cs));
  std::vector<uint8_t> data(100, 1);
  for (uint32_t i = 0; i < 8; ++i) {
    auto r = ch.send(MsgKey{1, 1, i}, Payload{data.data(), data.size(), nullptr});
    ASSERT_TRUE(r->wait(std::chrono::steady_clock::now() + std::chrono::seconds(5)).ok());
  }
  // Without rotation every message would take stream 0 (all queues are always empty).
  for (auto& c : cs) EXPECT_EQ(c->frames.load(), 2) << "stream " << c->stream();
}

// A sender with several children gives each a share of its streams (Fanout): a message limited to
// the first k streams never takes another, whatever the queues say; unlimited ones still take all.
TEST(ChannelTest, MessageLimitedToKStreamsTakesOnlyTheFirstK) {
  auto cs = instant_conns(4);
  Channel ch(as_conns(cs));
  std::vector<uint8_t> data(3 * stripe_bytes() + 5, 1);  // four fragments per message
  auto deadline = [] { return std::chrono::steady_clock::now() + std::chrono::seconds(5); };
  for (uint32_t i = 0; i < 3; ++i)
    ASSERT_TRUE(ch.send(MsgKey{1, 1, i}, Payload{data.data(), data.size(), nullptr}, 2)->wait(deadline()).ok());
  EXPECT_EQ(cs[0]->frames.load(), 6);
  EXPECT_EQ(cs[1]->frames.load(), 6);
  EXPECT_EQ(cs[2]->frames.load(), 0);
  EXPECT_EQ(cs[3]->frames.load(), 0);
  ASSERT_TRUE(ch.send(MsgKey{1, 1, 3}, Payload{data.data(), data.size(), nullptr}, 1)->wait(deadline()).ok());
  EXPECT_EQ(cs[0]->frames.load(), 10);
  ASSERT_TRUE(ch.send(MsgKey{1, 1, 4}, Payload{data.data(), data.size(), nullptr}, 9)->wait(deadline()).ok());
  ASSERT_TRUE(ch.send(MsgKey{1, 1, 5}, Payload{data.data(), data.size(), nullptr})->wait(deadline()).ok());
  for (auto& c : {cs[2], cs[3]}) EXPECT_EQ(c->frames.load(), 2) << "stream " << c->stream();
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

// Delivers a whole single-frame message `key` into `mb`.
void deliver(Mailbox& mb, Conn* c, MsgKey key) {
  FrameHeader h;
  h.key = key;
  h.total = h.len = 1;
  auto dst = mb.frame_begin(c, h);
  ASSERT_TRUE(dst.ok());
  *dst.value() = 'x';
  mb.frame_end(c, h);
}

TEST(MailboxTest, DiscardKeepsTheSubItIsToldToAndWakesTheNotifier) {
  Notifier n;
  Mailbox mb("rank 1", 1, &n);
  InstantConn a(0);
  const uint64_t g0 = n.generation();
  deliver(mb, &a, MsgKey{1, 3, 5});           // a part of an abandoned operation
  deliver(mb, &a, MsgKey{1, 3, 0xfffffff0u});  // an acknowledgement the root drains later
  deliver(mb, &a, MsgKey{1, 4, 5});           // the current operation
  EXPECT_EQ(n.generation(), g0 + 3) << "every complete message bumps the notifier";
  EXPECT_EQ(mb.discard_before(1, 4, 0xfffffff0u), 1u);
  const auto now = std::chrono::steady_clock::now();
  EXPECT_EQ(mb.recv(MsgKey{1, 3, 5}, now).status().code(), Code::kTimeout);
  EXPECT_TRUE(mb.recv(MsgKey{1, 3, 0xfffffff0u}, now).ok());
  EXPECT_TRUE(mb.recv(MsgKey{1, 4, 5}, now).ok());
  // A waiter on the notifier wakes at a failure, not at its deadline.
  std::thread t([&] { mb.fail(Status(Code::kPeerLost, "gone")); });
  const uint64_t g = n.wait(g0 + 3, std::chrono::steady_clock::now() + std::chrono::seconds(60));
  t.join();
  EXPECT_GT(g, g0 + 3);
}

// Delivers `text` as the whole single-frame message `key`.
void deliver_text(Mailbox& mb, Conn* c, MsgKey key, const std::string& text) {
  FrameHeader h;
  h.key = key;
  h.total = h.len = text.size();
  auto dst = mb.frame_begin(c, h);
  ASSERT_TRUE(dst.ok()) << dst.status().to_string();
  memcpy(dst.value(), text.data(), text.size());
  mb.frame_end(c, h);
}

TEST(MailboxTest, MessageOfAnotherLengthGoesAsideInsteadOfIntoTheCallersBuffer) {
  // A relay waits for an 8-byte segment in its own buffer; its parent sends a 3-byte abort frame
  // under the same key instead. Whether the frame comes before or after the wait began, the caller's
  // buffer is untouched and the frame comes back whole.
  for (bool early : {true, false}) {
    Mailbox mb("rank 1", 1);
    InstantConn a(0);
    const MsgKey k{1, 9, 2};
    if (early) deliver_text(mb, &a, k, "abc");
    std::string buf(8, '.');
    std::vector<uint8_t> other;
    std::thread late;
    if (!early) late = std::thread([&] { deliver_text(mb, &a, k, "abc"); });
    Status s = mb.recv_into(k, buf.data(), buf.size(), std::chrono::steady_clock::now() + std::chrono::seconds(30), &other);
    if (late.joinable()) late.join();
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(std::string(other.begin(), other.end()), "abc") << (early ? "early" : "late");
    EXPECT_EQ(buf, std::string(8, '.'));
  }
  // Without `other` it is an error naming both lengths, and the right length still lands in place.
  Mailbox mb("rank 1", 1);
  InstantConn a(0);
  deliver_text(mb, &a, MsgKey{1, 9, 3}, "abc");
  std::string buf(8, '.');
  Status s = mb.recv_into(MsgKey{1, 9, 3}, buf.data(), buf.size(), std::chrono::steady_clock::now());
  EXPECT_EQ(s.code(), Code::kInvalidUsage);
  std::vector<uint8_t> other;
  std::thread t([&] { deliver_text(mb, &a, MsgKey{1, 9, 4}, "12345678"); });
  s = mb.recv_into(MsgKey{1, 9, 4}, buf.data(), buf.size(), std::chrono::steady_clock::now() + std::chrono::seconds(30), &other);
  t.join();
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(other.empty());
  EXPECT_EQ(buf, "12345678");
}

// A receive into the caller's buffer that times out while a message is arriving (the first of its
// two fragments landed in that buffer) keeps what landed: the next receive gets the message whole.
// (The fragment went with the buffer's registration, and the message never completed: a relay's
// child whose patience ran out just as its parent's part began to arrive never got that part.)
TEST(MailboxTest, ReceiveThatTimesOutMidMessageKeepsWhatArrived) {
  Mailbox mb("rank 1", 1);
  InstantConn a(0);
  bool landed_in_callers_buffer = false;
  for (uint32_t attempt = 0; attempt < 200 && !landed_in_callers_buffer; ++attempt) {
    const MsgKey k{1, 9, 100 + attempt};
    std::string buf(8, '.');
    Status first;
    std::thread rx([&] {
      first = mb.recv_into(k, buf.data(), buf.size(), std::chrono::steady_clock::now() + std::chrono::milliseconds(200));
    });
    for (int i = 0; i < 1000; ++i) std::this_thread::yield();  // (the receive usually registers first)
    FrameHeader h;
    h.key = k;
    h.total = 8;
    h.len = 4;
    auto dst = mb.frame_begin(&a, h);
    ASSERT_TRUE(dst.ok());
    landed_in_callers_buffer = dst.value() == reinterpret_cast<uint8_t*>(buf.data());
    memcpy(dst.value(), "1234", 4);
    mb.frame_end(&a, h);
    rx.join();
    EXPECT_EQ(first.code(), Code::kTimeout);
    h.offset = 4;
    dst = mb.frame_begin(&a, h);
    ASSERT_TRUE(dst.ok());
    memcpy(dst.value(), "5678", 4);
    mb.frame_end(&a, h);
    std::string again(8, '.');
    Status s = mb.recv_into(k, again.data(), again.size(), std::chrono::steady_clock::now() + std::chrono::seconds(10));
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(again, "12345678");
  }
  EXPECT_TRUE(landed_in_callers_buffer) << "the case was never produced (each fragment arrived before the receive)";
}

// A receive into the caller's buffer that fails while a frame is being written there (frame_begin
// done, frame_end not yet) returns only once that frame ended or its connection failed: returning
// earlier let the transport write into memory the caller had reused (a mailbox failing because its
// peer was dropped did return at once, and ASan caught a relay's late frame in a freed buffer).
// `finish` ends the frame's story; the receive must still be waiting just before it.
void receive_gives_up_mid_frame(Mailbox& mb, InstantConn& a, const std::function<void()>& give_up,
                                const std::function<void()>& finish, Code want) {
  for (uint32_t attempt = 0; attempt < 200; ++attempt) {
    const MsgKey k{1, 11, 100 + attempt};
    std::string buf(8, '.');
    auto rx = std::async(std::launch::async, [&] {
      return mb.recv_into(k, buf.data(), buf.size(), std::chrono::steady_clock::now() + std::chrono::milliseconds(100));
    });
    for (int i = 0; i < 1000; ++i) std::this_thread::yield();  // (the receive usually registers first)
    FrameHeader h;
    h.key = k;
    h.total = 8;
    h.len = 4;
    auto dst = mb.frame_begin(&a, h);
    ASSERT_TRUE(dst.ok());
    if (dst.value() != reinterpret_cast<uint8_t*>(buf.data())) {  // arrived first: not the case
      mb.frame_end(&a, h);
      rx.wait();
      continue;
    }
    give_up();
    EXPECT_EQ(rx.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout)
        << "the receive returned while a frame was still being written into its buffer";
    memcpy(dst.value(), "1234", 4);  // the transport's late write: still the receive's buffer
    finish();
    ASSERT_EQ(rx.wait_for(std::chrono::seconds(20)), std::future_status::ready);
    EXPECT_EQ(rx.get().code(), want);
    return;
  }
  FAIL() << "the case was never produced (each frame arrived before the receive)";
}

TEST(MailboxTest, FailedReceiveWaitsForAFrameBeingWrittenIntoItsBuffer) {
  Mailbox mb("rank 1", 1);
  InstantConn a(0);
  receive_gives_up_mid_frame(
      mb, a, [&] { mb.fail(Error(Code::kPeerLost, "rank 1 was dropped")); },
      [&] { mb.conn_failed(&a, Error(Code::kPeerLost, "connection closed")); }, Code::kPeerLost);
}

TEST(MailboxTest, PeerStalledMidFrameHasItsConnectionsClosed) {
  Mailbox mb("rank 1", 1);
  InstantConn a(0);
  std::atomic<int> stalls{0};
  mb.set_stall_handler([&] {
    ++stalls;
    mb.conn_failed(&a, Error(Code::kPeerLost, "closed: stalled mid-frame"));
  });
  receive_gives_up_mid_frame(mb, a, [] {}, [] {}, Code::kTimeout);  // (the deadline passes by itself)
  EXPECT_EQ(stalls.load(), 1);
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
