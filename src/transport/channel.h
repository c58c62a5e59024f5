// Messages over frames: the per-peer Mailbox (reassembly + matching by key) and the striping Channel
// (one message split into fragments over N connections to the same peer, each fragment handed to
// whichever connection has drained its queue, so one slow stream never gates the rest).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "transport/transport.h"

namespace sparrow::transport {

// Wakes a thread that waits for any of several mailboxes (the elastic root waiting for whichever
// rank answers first): bumped whenever one of them completes a message or fails.
class Notifier {
 public:
  uint64_t generation() const;
  void bump();
  // Waits until the generation differs from `seen` or `d` passes; returns the current generation.
  // (Take `seen` before looking at the mailboxes, so that nothing arriving meanwhile is missed.)
  uint64_t wait(uint64_t seen, Deadline d);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t gen_ = 0;
};

// Receives the frames of one peer (from all its streams) and reassembles messages by key.
class Mailbox : public FrameSink {
 public:
  // `streams`: the connections this peer's messages arrive on. One of them closing cleanly does not
  // fail the mailbox while others are open: frames already on those may still be in flight (a peer
  // that sends its last message and closes). All of them closed, or any other failure, does.
  // `notify` (optional, outlives the mailbox) is bumped at every complete message and at failure.
  explicit Mailbox(std::string peer_desc, int streams = 1, Notifier* notify = nullptr)
      : peer_desc_(std::move(peer_desc)), streams_(streams), notify_(notify) {}
  // Waits for the complete message `k` and takes it.
  Result<std::vector<uint8_t>> recv(const MsgKey& k, Deadline d);
  // Like recv, but the payload lands in `dst` (exactly `len` bytes expected): no copy when the
  // message has not started arriving yet. A message of another (non-zero) length under the same key
  // (an abort frame in place of a segment) is not written to `dst`: with `other` it is moved there
  // and Ok returned (the caller tells them apart by `other` being non-empty); without, it is an error.
  Status recv_into(const MsgKey& k, void* dst, size_t len, Deadline d, std::vector<uint8_t>* other = nullptr);
  // Every current and future wait fails with `why` (peer lost, abort). First failure wins.
  void fail(const Status& why);
  Status failure() const;
  // Called (without the mailbox's lock) when a receive that gave up still has a frame being written
  // into the caller's buffer kWriteGrace after its deadline: a peer stalled mid-frame. It must
  // close this peer's connections (their backends then report conn_failed, which releases the
  // frame). The Net sets it; without it such a receive waits one more grace, then returns anyway.
  void set_stall_handler(std::function<void()> h);
  // Connections of this peer that closed so far (without failing the mailbox).
  size_t closed_streams() const;
  // From now on the first connection that closes fails the mailbox, whatever the others do: a set
  // of streams that must arrive whole (a joiner's to rank 0, until it is admitted).
  void fail_on_any_close(bool on);
  // Drops the messages of communicator `comm` older than operation `seq` that arrived whole and that
  // nobody took (an operation this rank gave up on, a resync it no longer waits for), except those
  // with sub `keep_sub` (what this rank takes later: a root's acknowledgements).
  size_t discard_before(uint64_t comm, uint64_t seq, uint32_t keep_sub);
  // The same for the messages with sub `only_sub` alone.
  size_t discard_sub_before(uint64_t comm, uint64_t seq, uint32_t only_sub);
  // This peer's frames of operations seq_lo..seq_hi (of any communicator on this Net): bytes, and
  // when (steady clock, ns) the first and the last of them ended (-1: none). The last 256 operations
  // are kept. Readable from any thread.
  struct Traffic {
    uint64_t bytes = 0;
    int64_t first_ns = -1, last_ns = -1;
    uint64_t streams = 0;  // bit s: stream s carried some of it (streams past 63 count as 63)
  };
  Traffic traffic(uint64_t seq_lo, uint64_t seq_hi) const;

  Result<uint8_t*> frame_begin(Conn* c, const FrameHeader& h) override;
  void frame_end(Conn* c, const FrameHeader& h) override;
  void conn_failed(Conn* c, const Status& why) override;

 private:
  struct InFlight {  // the frame a connection is writing (between frame_begin and frame_end)
    MsgKey key;
    uint32_t len = 0;
  };
  struct Entry {
    uint64_t total = 0;
    uint64_t got = 0;       // bytes whose frames ended
    uint64_t claimed = 0;   // bytes whose frames began
    std::vector<uint8_t> own;
    uint8_t* ext = nullptr;  // caller's buffer (recv_into)
    bool taken_by_waiter = false;
    uint8_t* dest() { return ext ? ext : own.data(); }
  };
  Status wait_locked(std::unique_lock<std::mutex>& lk, const MsgKey& k, Deadline d);
  bool frame_end_locked(Conn* c, const FrameHeader& h);  // true when a message completed
  size_t discard_locked(uint64_t comm, uint64_t seq, const std::function<bool(uint32_t sub)>& which);
  // recv_into giving up: returns once no frame is being written into entry `k`'s caller buffer.
  void release_caller_buffer(std::unique_lock<std::mutex>& lk, const MsgKey& k);
  std::string peer_desc_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<MsgKey, Entry> entries_;
  Status failed_;
  int streams_ = 1;
  Notifier* notify_ = nullptr;
  std::set<Conn*> closed_;  // connections the peer closed
  std::map<Conn*, InFlight> inflight_;
  std::function<void()> on_stall_;
  bool any_close_fails_ = false;
  std::map<uint64_t, Traffic> traffic_;  // by operation sequence number
};

// A send in flight; done when every fragment was handed to the network (or failed).
class SendRequest {
 public:
  Status wait(Deadline d);
  bool done() const;
  void fragment_done(const Status& s);
  explicit SendRequest(size_t fragments) : left_(fragments) {}

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  size_t left_;
  Status status_;
};
using SendRequestPtr = std::shared_ptr<SendRequest>;

// SPARROW_STRIPE_BYTES: fragment size for striping.
size_t stripe_bytes();

class Channel {
 public:
  explicit Channel(std::vector<ConnPtr> conns);
  ~Channel();
  // Queues message `k`; returns at once. `p` must stay valid (or be kept alive by p.keepalive) until
  // the request is done. `max_streams` (0: all) limits the streams its fragments may take to the
  // first max_streams of the channel's (the receiver reassembles from whichever streams they came).
  SendRequestPtr send(const MsgKey& k, Payload p, size_t max_streams = 0);
  size_t streams() const;
  void close();

 private:
  struct Frag {
    FrameHeader h;
    Payload p;
    SendRequestPtr req;
    size_t streams = 0;  // the first `streams` connections may carry it (0: any)
  };
  // Shared with the completion callbacks, so a late completion never touches a destroyed Channel.
  struct Inner : std::enable_shared_from_this<Inner> {
    std::vector<ConnPtr> conns;
    std::mutex mu;
    std::deque<Frag> pending;
    size_t low_water = 0;
    size_t next = 0;  // round-robin start among equally queued connections
    bool pumping = false, again = false;
    void pump();
  };
  std::shared_ptr<Inner> in_;
};

}  // namespace sparrow::transport
