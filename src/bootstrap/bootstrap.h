// Bootstrap: the unique id and the rendezvous store.
//
// sparrowGetUniqueId creates a random communicator id and 128-bit secret and starts a rendezvous
// store in the calling process (one epoll thread, port 0). The 128-byte id carries the store's
// address and the secret. Each rank connects to the store (authenticating with the secret like any
// connection), registers its listening address, host and region, and receives everyone's once all
// ranks registered. The store then shuts itself down.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "transport/transport.h"

namespace sparrow::bootstrap {

constexpr size_t kIdBytes = 128;

struct IdData {
  uint64_t comm_id = 0;
  std::vector<uint8_t> secret;  // 16 bytes
  std::string store_address;
  // The secret came from SPARROW_SECRET_FILE (secret.h): the id carries its fingerprint instead, and
  // decoding it reads the file again (every rank must hold the same secret).
  bool secret_from_file = false;
};
void encode_id(const IdData& d, uint8_t out[kIdBytes]);
Result<IdData> decode_id(const uint8_t in[kIdBytes]);

// Creates a fresh id and starts its store in this process.
Result<IdData> create_id();

struct RankInfo {
  std::string address, host, region;
  int nstreams = 1;
  // The communicator's kind as this rank created it: every rank must agree (checked by the store).
  int elastic = 0, lease_ms = 0;
};

// Registers `me` as `rank` of `nranks` and returns every rank's info (index = rank). The store is
// always reached over TCP, whatever transport the communicator uses. `slots` (0: nranks): how many
// ranks an elastic communicator may grow to (SPARROW_MAX_RANKS; every rank must give the same); the
// table then has that many entries, those past nranks vacant (no address) until a joiner takes one.
Result<std::vector<RankInfo>> exchange(const IdData& id, int rank, int nranks, const RankInfo& me,
                                       transport::Deadline d, int slots = 0);

// An elastic communicator's table, from its store (which serves for as long as its process runs),
// for a process that joins as `rank` (sparrowCommJoin); kInvalidUsage with kNotComplete in the
// message while its ranks are still registering.
inline constexpr const char* kNotComplete = "the communicator is not complete yet";
Result<std::vector<RankInfo>> lookup(const IdData& id, int rank, transport::Deadline d);

// sparrowCommJoin with *rank = -1: a free slot (one rank 0 let go of) from the store, held for the
// joiner for `ttl_ms` (the time it may take to be admitted); kInvalidUsage with the store's reason
// when none is free now (kNoFreeSlot: every slot is a live member).
inline constexpr const char* kNoFreeSlot = "no free slot: every rank is a live member";
inline constexpr const char* kAllClaimed = "every free slot is claimed by another joiner";
Result<int> claim_slot(const IdData& id, int ttl_ms, transport::Deadline d);

// Rank 0 of an elastic communicator tells its store which slots are free whenever that changes
// (publish: the latest list wins), from a thread of its own so that no collective waits on the
// store. If the store cannot be reached (it lives in the process that made the id, which may have
// ended), it says so once and stops: joiners then name their slot.
class SlotBoard {
 public:
  explicit SlotBoard(IdData id);
  ~SlotBoard();
  SlotBoard(const SlotBoard&) = delete;
  SlotBoard& operator=(const SlotBoard&) = delete;
  void publish(std::vector<int> free_slots);

 private:
  void run();
  IdData id_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
  std::vector<int> last_;  // the latest list; has_pending_ until the thread sent it
  bool has_pending_ = false, stop_ = false, gave_up_ = false;
};

// Ends this process's store of communicator `comm_id`, if it has one (an elastic communicator's
// serves until then: its rank destroying the communicator here ends it).
void end_store(uint64_t comm_id);

// Stores started by this process that have not finished yet (tests).
size_t live_stores();

}  // namespace sparrow::bootstrap
