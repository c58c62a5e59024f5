// Net: one rank's view of the other ranks of a communicator: a backend, a Mailbox per peer, and a
// striping Channel per peer, established on first use (the lower rank connects, the higher accepts).
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "transport/channel.h"
#include "transport/transport.h"

namespace sparrow::transport {

// SPARROW_NSTREAMS: parallel connections per peer for bulk data.
int default_streams();

class Net {
 public:
  // Creates the backend (SPARROW_TRANSPORT unless `backend` is given) and starts listening.
  // `bind_host`: the address to listen on and advertise (empty: net::local_host()).
  static Result<std::unique_ptr<Net>> create(const Identity& id, int nranks, int nstreams, const std::string& backend = "",
                                             const std::string& bind_host = "");
  ~Net();
  const std::string& address() const { return address_; }
  const char* backend_name() const { return be_->name(); }
  Backend& backend() { return *be_; }
  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  int nstreams() const { return nstreams_; }
  void set_addresses(std::vector<std::string> addrs);
  const std::string& address_of(int r) const { return addrs_[r]; }

  // Queues a message to `peer`; establishes the channel if needed (within deadline d). `max_streams`
  // (0: all): how many of the channel's streams may carry it (Channel::send).
  Result<SendRequestPtr> send(int peer, const MsgKey& k, Payload p, Deadline d, size_t max_streams = 0);
  Result<std::vector<uint8_t>> recv(int peer, const MsgKey& k, Deadline d);
  // A message of another length under `k` goes to `other` (Mailbox::recv_into).
  Status recv_into(int peer, const MsgKey& k, void* dst, size_t len, Deadline d, std::vector<uint8_t>* other = nullptr);
  // Ensures the channel to `peer` exists (both sides must call it, directly or through send/recv).
  Status connect(int peer, Deadline d);
  bool has_channel(int peer) const {
    std::lock_guard<std::mutex> lk(mu_);
    return peer >= 0 && peer < nranks_ && chans_[peer] != nullptr;
  }
  // Elastic membership (set_elastic() first). disconnect: closes every connection to `peer` and
  // fails its waits (a dropped member). A later connection from that rank, proving the secret (a
  // restarted process), starts the slot afresh, from whichever side it connects; so does revive(),
  // which also sets the slot's new address (a member that rejoined elsewhere).
  void set_elastic() { elastic_ = true; }
  void disconnect(int peer, const Status& why);
  void revive(int peer, const std::string& address);
  // A joiner: it connects out to rank 0 itself (which does not know its address yet), and rank 0
  // accepts that connection from a higher rank because the slot is free. Until admitted() its
  // streams to rank 0 must stay whole: rank 0 closing any of them (it refused it: the slot was not
  // free yet) fails the attempt at once, so the joiner tries again instead of waiting for an answer
  // to a request that may never have arrived.
  void set_joiner();
  void admitted();
  // Rank 0: the slot of a joiner (a higher rank whose streams come to this rank) is not whole: not
  // every stream connected yet, or one of them closed. A send to it would wait for the rest, or go
  // into a dead connection; the root neither admits nor waits for such a slot.
  bool incomplete_joiner(int peer) const;
  // A complete message `k` from `peer` if one has arrived: no waiting, no connecting.
  Result<std::vector<uint8_t>> poll(int peer, const MsgKey& k);
  // Bumped whenever any peer's mailbox completes a message or fails (waiting for whichever peer
  // answers first: Notifier::wait).
  Notifier& arrivals() { return arrivals_; }
  // Fails every wait and connection, now and later; idempotent.
  void abort(const Status& why);
  Status aborted() const;
  // Per-peer traffic of the current operation: begin_traffic(seq_lo, seq_hi) (at the start of each
  // collective: its operation numbers) selects the messages counted; traffic() reads them, from any
  // thread. Times are seconds since begin_traffic() (0: it had arrived before).
  struct PeerTraffic {
    uint64_t sent = 0, received = 0;
    double first_s = -1, last_s = -1;  // first and last byte received from the peer (-1: none)
    int streams = 0;                   // how many of the peer's streams carried what was received
  };
  void begin_traffic(uint64_t seq_lo, uint64_t seq_hi);
  PeerTraffic traffic(int peer) const;
  uint64_t bytes_sent() const;      // this operation, to every peer
  uint64_t bytes_received() const;  // this operation, from every peer
  // Mailbox::discard_before on every peer's mailbox; the number of messages dropped.
  size_t discard_before(uint64_t comm, uint64_t seq, uint32_t keep_sub) {
    size_t n = 0;
    for (int r = 0; r < nranks_; ++r) n += box(r)->discard_before(comm, seq, keep_sub);
    return n;
  }
  size_t discard_sub_before(uint64_t comm, uint64_t seq, uint32_t only_sub) {
    size_t n = 0;
    for (int r = 0; r < nranks_; ++r) n += box(r)->discard_sub_before(comm, seq, only_sub);
    return n;
  }

 private:
  Net() = default;
  FrameSink* on_accept(const ConnPtr& c);
  Result<Channel*> channel(int peer, Deadline d, bool dial_back);
  // channel(): this rank connects the streams (a lower rank, or a joiner to rank 0) ...
  Result<Channel*> dial_locked(std::unique_lock<std::mutex>& lk, int peer, Deadline d);
  // ... or waits for the peer's (dialling it itself past a grace, in a fixed communicator).
  Result<Channel*> await_locked(std::unique_lock<std::mutex>& lk, int peer, Deadline d, bool dial_back);
  Result<Channel*> install_locked(int peer, std::vector<ConnPtr> conns);
  std::string desc(int peer) const;
  // The peer's current mailbox (a revived slot gets a new one; the old ones stay alive, failed, for
  // waiters that still hold them).
  Mailbox* box(int peer) const {
    std::lock_guard<std::mutex> lk(mu_);
    return mail_[size_t(peer)].get();
  }
  bool revivable_locked(int peer) const;
  // A mailbox for `peer` whose stall handler closes that peer's connections (close_stalled), as
  // long as it is the peer's current mailbox.
  std::unique_ptr<Mailbox> make_mailbox(int peer);
  void close_stalled(int peer, const Mailbox* m);
  // Every stream of `peer` that connects to this rank has been accepted.
  bool all_streams_accepted_locked(int peer) const;
  void reset_slot_locked(int peer, bool reversed, bool fresh);

  int rank_ = 0, nranks_ = 0, nstreams_ = 1;
  std::string address_;
  std::vector<std::string> addrs_;
  Notifier arrivals_;                            // outlives the mailboxes (declared before them)
  std::vector<std::unique_ptr<Mailbox>> mail_;  // destroyed after the backend (declared first)
  std::unique_ptr<Backend> be_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::vector<ConnPtr>> accepted_;  // [peer][stream]
  std::vector<std::unique_ptr<Channel>> chans_;
  std::set<int> connecting_;  // peers a thread is connecting to right now
  bool elastic_ = false, joiner_ = false, joining_ = false;
  // [peer] disconnected: dropped; reversed: a higher rank connected to us (a joiner, to rank 0);
  // fresh: a new process connected into a free slot (revive() keeps those connections).
  std::vector<uint8_t> disconnected_, reversed_, fresh_;
  std::vector<std::unique_ptr<Mailbox>> retired_mail_;
  std::vector<std::unique_ptr<Channel>> retired_chans_;
  Status aborted_;
  mutable std::mutex sent_mu_;
  std::vector<std::map<uint64_t, uint64_t>> sent_;  // [peer][seq]: bytes handed to the transport
  std::atomic<uint64_t> seq_lo_{0}, seq_hi_{0};
  std::atomic<int64_t> traffic_t0_ns_{0};
};

}  // namespace sparrow::transport
