// Channel striping: fragments go to the least-queued connection, and ties rotate.
#include "transport/channel.h"

#include <gtest/gtest.h>

#include <atomic>

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

}  // namespace
}  // namespace sparrow::transport
