// Who is still in an elastic communicator, as this rank knows it. The root decides (it drops a rank
// that died or stayed silent past the lease) and lists the members in every operation's header; the
// other ranks adopt that list. A fixed communicator's members are all its ranks, always. Read by
// sparrowCommGetMembers from any thread (hence the mutex).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace sparrow::coll {

class Members {
 public:
  explicit Members(int nranks) : live_(size_t(nranks), 1), told_(size_t(nranks), 0) {}
  std::vector<int> live() const;  // increasing
  bool is_live(int r) const;
  bool all_live() const;
  uint64_t drops() const;
  // The root drops `r` (INFO: "rank 3 dropped from the elastic communicator at operation 7: ...").
  void drop(int r, uint64_t seq, const std::string& why);
  // A receiver adopts the root's list (an operation's header). Ranks missing from it are dropped;
  // the ranks this call dropped are returned.
  std::vector<int> assign(const std::vector<int32_t>& live);
  // The root takes `r` back (a process that joined into its slot).
  void admit(int r);
  // A slot with no member yet (the communicator may grow into it): not live, sent nothing, no drop.
  void vacate(int r);
  // The root's bookkeeping for dropped ranks it could not reach: they are not sent headers again.
  void mark_unreachable(int r);
  bool unreachable(int r) const;

 private:
  mutable std::mutex mu_;
  std::vector<uint8_t> live_, told_;
  uint64_t drops_ = 0;
};

}  // namespace sparrow::coll
