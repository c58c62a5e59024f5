// What travels between ranks in one collective operation, each message with one encoder and one
// decoder. Every message of operation `seq` is keyed (communicator, seq, sub):
//   sub 0          op header, parent -> children: kind, root, buffers (count, dtype), the ranks that
//                  get a resync straight from the root in this operation, the dense segment size
//   sub 1..        the payload: dense segments; or the sparse checkpoint's header (sub 1), chunks in
//                  the order the root produced them, and the footer (the end marker)
//   kResyncSub     root -> rank: a full snapshot, or the retained deltas from the version the rank
//                  holds to this operation's base ("SPCH" chain message); elastic: a seeder -> rank
//                  (the header's seeds), a full snapshot of this operation's version once the seeder
//                  committed it
//   kAckSub        rank -> root: the operation's status on that rank, whether it asks for a resync
//                  and the version it holds (sent also when its call failed)
//   (any sub)      an abort frame in place of the part a rank waits for: its parent lost its own
//                  parent and passes the failure down (relay.h)
//   kReattachSub   rank -> root (elastic): its parent died or went silent mid-operation; the root
//                  sends it the parts from the one named on (same keys), and it forwards them as before
//   kHoldSub + k   relay -> children (elastic): "I re-attached (or was told to hold on): keep waiting
//                  for me"; a child whose patience runs out takes its parent's k-th hold, if it came,
//                  as a renewed patience instead of re-attaching itself, and passes it down. One byte.
//   kVerdictSub    root -> every rank: the agreed result of an operation whose arguments had to match
//                  (dense broadcasts, the first sparse operation on a buffer set); same shape as an ack
//   kBeatSub + k   rank -> root (elastic): "alive", every quarter lease from the start of an operation
//                  until the rank acknowledges it, so that an operation longer than the lease (a large dense broadcast on
//                  a slow link) does not get its members dropped; one byte
//   kClaimSub      receiver -> the root it named, after a second without its header: "I wait for
//                  you" (root_watch.h); a rank that named another root fails the operation on it
//   kNoticeSub     the rank that found that ranks disagree on the root -> every other rank: the
//                  failure (an abort frame's shape), so that nobody waits for what will not come
//   kHoldingsSub      joiner -> root (elastic, its first sparse operation): the content digests of its
//                  receive buffers; the root looks for the retained version they are and sends the
//                  deltas from it as its resync, else a full snapshot
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "transport/net.h"

namespace sparrow::coll {

struct BufferArg {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  int dtype = 0;
  std::string name;  // what errors call it (empty: "buffer<i>", its place in the operation)
};

using Frame = std::shared_ptr<std::vector<uint8_t>>;
inline Frame share(std::vector<uint8_t>&& v) { return std::make_shared<std::vector<uint8_t>>(std::move(v)); }

constexpr uint32_t kAckSub = 0xfffffff0u, kResyncSub = 0xfffffff1u, kVerdictSub = 0xfffffff2u,
                   kReattachSub = 0xfffffff3u, kJoinSub = 0xfffffff4u, kWelcomeSub = 0xfffffff5u,
                   kHoldingsSub = 0xfffffff6u, kAdoptSub = 0xfffffff7u, kClaimSub = 0xfffffff8u,
                   kNoticeSub = 0xfffffff9u;
// Elastic: a rank's k-th heartbeat to the root during a long operation is sub kBeatSub + k (k < 2^24).
constexpr uint32_t kBeatSub = 0xe0000000u, kMaxBeats = 1u << 24;
// Elastic: a relay's k-th hold to its children is sub kHoldSub + k (k < 2^24).
constexpr uint32_t kHoldSub = 0xd0000000u, kMaxHolds = 1u << 24;
constexpr uint8_t kDense = 1, kSparse = 2;
constexpr uint8_t kOpFull = 1;  // OpHeader::flags: a sparse operation that sends a full version to everyone
// OpHeader::flags: an elastic communicator's operation; the root sends the header to every rank
// itself, listing the members the operation's tree is built over.
constexpr uint8_t kOpElastic = 2;
// OpHeader::flags, with kOpElastic: an operation among some ranks only (a model's split step); its
// members are those of `members` (the communicator's) that are among its participants, which every
// rank knows beforehand.
constexpr uint8_t kOpSubset = 4;

// Where a rank is: what the tree is built from (the rendezvous table's entry for it).
struct Place {
  int32_t rank = 0;
  std::string address, host, region;
};

struct OpHeader {
  uint8_t kind = 0;
  uint8_t flags = 0;
  int32_t root = 0;
  std::vector<std::pair<uint64_t, uint8_t>> bufs;  // count, dtype
  std::vector<int32_t> resync;
  uint64_t segment = 0;
  std::vector<int32_t> members;  // kOpElastic: the live ranks, increasing
  std::vector<Place> moved;      // kOpElastic: members that rejoined, where they are now
  // kOpElastic: (rank, seeder): a resynced rank's full snapshot comes from a member of its region
  // (which sends it once it committed this operation) instead of from the root.
  std::vector<std::pair<int32_t, int32_t>> seeds;
  int seeder_of(int rank) const;             // -1: none (the root sends, if anyone)
  std::vector<int> seeded_by(int rank) const;  // the ranks `rank` seeds
  std::vector<uint8_t> encode() const;
  static Result<OpHeader> decode(const std::vector<uint8_t>& m);
};

// An acknowledgement, and the root's verdict in the same shape.
struct Ack {
  Status status;
  bool resync = false;  // the rank asks to be brought up to date at the next operation
  uint64_t holds = 0;   // the version its buffers hold (what a catch-up starts from; 0: a full snapshot)
  std::vector<uint8_t> encode() const;
  static Result<Ack> decode(const std::vector<uint8_t>& m, const std::string& from);
};

// kInvalidUsage naming both calls when a rank's arguments differ from the root's header.
Status check_header(const OpHeader& h, uint8_t kind, const std::vector<BufferArg>& bufs, int root, int me);
// "root 0, buffers: 1024 x bfloat16 ..." (error messages).
std::string arg_desc(const std::vector<BufferArg>& bufs, int root);
// "header of operation 7", "acknowledgement of operation 7", ... (timeouts name what was awaited).
std::string name_key(const transport::MsgKey& k);
// The checkpoint footer ends a sparse operation's stream.
bool is_footer(const std::vector<uint8_t>& frame);
// An abort frame: sent by a relay in place of the part its children wait for when its own parent
// failed (the status says why). Never a valid op header, checkpoint frame or footer.
std::vector<uint8_t> abort_frame(const Status& why);
bool is_abort(const std::vector<uint8_t>& frame);
Status abort_status(const std::vector<uint8_t>& frame);  // the carried failure (kCorruptData if malformed)

// The messages of one operation on one rank: keyed (communicator, seq, sub), every wait bounded by
// the operation's deadline unless told otherwise. Payloads are kept alive by the send requests.
struct OpWire {
  transport::Net& net;
  uint64_t comm = 0;
  uint64_t seq = 0;
  transport::Deadline deadline;

  transport::MsgKey key(uint32_t sub) const { return transport::MsgKey{comm, seq, sub}; }
  // Sends `m` to each of `to` (appending the requests to `reqs` when given). One that cannot be
  // sent to does not stop the others; the first such failure is returned.
  Status send(const std::vector<int>& to, uint32_t sub, const Frame& m,
              std::vector<transport::SendRequestPtr>* reqs = nullptr) const;
  Result<std::vector<uint8_t>> recv(int from, uint32_t sub) const { return recv(from, sub, deadline); }
  Result<std::vector<uint8_t>> recv(int from, uint32_t sub, transport::Deadline d) const;
  // The same wire for another operation of the same communicator.
  OpWire for_seq(uint64_t s) const { return OpWire{net, comm, s, deadline}; }
};

// sparrowCommJoin: the joiner's request to rank 0 (key: seq 0, kJoinSub) and rank 0's answer (seq 0,
// kWelcomeSub): whether it was admitted, the operation it takes part in first, every rank's place
// and the probe table (every rank must build the same trees).
struct Welcome {
  Status status;
  uint64_t first_seq = 0;
  std::vector<Place> places;
  std::vector<double> rtt_s, bw_Bps;
  std::vector<uint8_t> encode() const;
  static Result<Welcome> decode(const std::vector<uint8_t>& m);
};
std::vector<uint8_t> encode_place(const Place& p);
Result<Place> decode_place(const std::vector<uint8_t>& m);
// A list of places (a model's roll call names the joiners it admitted); kCorruptData, prefixed with
// `what`, for junk.
std::vector<uint8_t> encode_places(const std::vector<Place>& v);
Result<std::vector<Place>> decode_places(const std::vector<uint8_t>& m, const std::string& what);

// An elastic rank asks the root for the parts of this operation from `from_sub` on.
std::vector<uint8_t> reattach_request(uint32_t from_sub);
Result<uint32_t> decode_reattach(const std::vector<uint8_t>& m);

// A joiner tells the root the content digests of its receive buffers (one per tensor) in its first
// operation, so that a restarted worker that still holds an older version catches up by the
// retained deltas from it instead of a full snapshot.
std::vector<uint8_t> holds_message(const std::vector<uint64_t>& digests);
Result<std::vector<uint64_t>> decode_holds(const std::vector<uint8_t>& m);

// What the root's verdict tells the other ranks when the agreement found `agreed`: a mismatch of
// arguments (kInvalidUsage) fails the operation everywhere; a failure of one rank of its own (lost,
// timed out, corrupt data there) is that rank's and the root's to report, not its peers' (they hold
// the data, bit-exact).
Status verdict_for_others(const Status& agreed);
// The root's verdict on operation w.seq to `to`, handed to the transport before it returns (the
// caller may destroy the communicator next).
Status send_verdict(const OpWire& w, const std::vector<int>& to, const Status& verdict);
// The root's verdict on operation w.seq: its agreed status (or why it did not arrive).
Status recv_verdict(const OpWire& w, int root);
// Waits until every request was handed to the transport; the first failure.
Status wait_all(std::vector<transport::SendRequestPtr>& reqs, transport::Deadline d);

// An operation's header as it came (a relay forwards the frame) and decoded.
struct ReceivedHeader {
  Frame frame;
  OpHeader h;
};

}  // namespace sparrow::coll
