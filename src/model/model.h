// SPDX-License-Identifier: Apache-2.0
// A model synchronised as one versioned sparse step per call (sparrowModel_t): the root's named
// tensors travel as one sparse broadcast; each receiver matches them to its own tensors by name and
// layout (manifest.h).
//
// The first step agrees on the manifest: the root sends it to every rank, each checks its tensors
// against it, and the root's verdict (the first rank's failure, naming the tensor) is every rank's
// result. Then, every step, the sparse broadcast runs over the logical tensors in the manifest's
// order: a receiver's whole local tensors are its receive buffers, written in place; logical
// tensors that it holds as pieces land in a host mirror, and the changed lines are projected onto
// the pieces after the step verified. Before each step the pieces are compared with the mirror, and
// what differs (the user wrote into a piece) is copied into the mirror, so that the broadcast's own
// base verification refuses the step (kVersionMismatch, nothing written) and the next step brings a
// full snapshot, which the projection writes back: the pieces behave as the mirror's memory does.
// Pieces may be device memory: read back to the host to be compared, the changed elements written
// to the device (project.cpp).
//
// On a fixed communicator, the first step also agrees on which rows each receiver needs (split.h):
// when some receiver needs less than the whole model (a tensor-parallel shard), or several sources
// send, a step is split into operations among each source and the receivers of each set of rows, so
// that a shard receives only the changes in its pieces. Such a step lands in host mirrors of every
// logical tensor a receiver holds and is projected onto its tensors once every operation of the step
// verified (sharded.cpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collectives/protocol.h"
#include "collectives/state.h"
#include "core/big_alloc.h"
#include "model/manifest.h"
#include "model/sources.h"
#include "model/split.h"

namespace sparrow::model {

class Model {
 public:
  // Checks this rank's tensors (nothing travels until the first step). `e` must outlive the model.
  // `sources`: the ranks holding the trainer's weights, the root among them (empty: the root alone);
  // with several, each holds row ranges of logical tensors (sources.h) and sends them itself.
  static Result<std::unique_ptr<Model>> create(coll::Engine& e, std::vector<LocalTensor> tensors, int root,
                                               std::vector<int> sources = {});

  Status step();    // one version: pushed by the root, received and projected by the others
  Status stage();   // receivers: receive in the background, keep reading the current version
  Status commit();  // receivers: switch to the staged version (the root: nothing to do)
  // The version this rank holds (the root: the last one it sent); the same on every rank that holds
  // it; 0 before the first step.
  uint64_t version() const { return version_; }
  // The content digest (format/digest.h, tensor 0) of logical tensor `name` as this rank holds it:
  // equal on ranks that hold the same bits. kInvalidUsage on a rank that holds only some of its rows.
  Result<uint64_t> digest(const std::string& name) const;
  // ... of its rows [start, stop), on any rank that holds them: the digests of rows that tile a
  // tensor add up (mod 2^64) to the tensor's digest.
  Result<uint64_t> digest_rows(const std::string& name, uint64_t start, uint64_t stop) const;
  // Bytes written into local pieces by the last step's projection.
  uint64_t projected_bytes() const { return projected_; }
  const Manifest& manifest() const { return manifest_; }
  // Drops the collectives' state of this model's buffers (a staged step pending: nothing to drop).
  void forget();

 private:
  Model(coll::Engine& e, std::vector<LocalTensor> t, int root, std::vector<int> sources)
      : e_(e), locals_(std::move(t)), root_(root), sources_(std::move(sources)) {}
  bool is_root() const { return e_.rank() == root_; }
  bool sharded() const { return sources_.size() > 1; }
  bool is_source() const;
  bool takes_part(size_t k) const;  // in operation k of a split step
  // In none (it holds no row of the model): its version counts the steps, which every source's
  // version does too (one per step, resyncs included).
  bool takes_no_part() const;
  Status agree();                        // the first step: manifest, plan, verdict, split
  Status agree_one(const coll::OpWire& w);
  // A rank that rejoined an elastic communicator into a slot of a model agreed before (rejoin.cpp):
  // the root sends each joiner it admits at a step's start what it missed; the joiner plans with it.
  // The root (rank 0): admits the waiting joiners ahead of operation `seq` (the step's first) and
  // sends each the agreement; returns them.
  std::vector<int> welcome_joiners(uint64_t seq);
  bool rejoining() const;  // a joiner that has taken part in no operation yet
  Status rejoin();
  void adopt_plan(const Needs& needs);   // the operations of a step, this rank's rows and mirrors
  Status split(const coll::OpWire& w);   // every receiver's rows, and the operations of a step
  Result<Needs> share_needs(const coll::OpWire& w);
  Result<size_t> logical_index(const std::string& name) const;  // kInvalidUsage before the first step
  std::vector<int> receivers() const;
  Status plan(const Manifest& m);        // a receiver's targets and mirrors
  std::vector<coll::BufferArg> bufs() const;
  const uint8_t* logical_bytes(size_t l) const;  // where this rank holds logical tensor l
  // project.cpp: a receiver's pieces (host or device memory) and its mirrors.
  Status mirror_pieces();                // local pieces -> mirror where they differ (before a step)
  // mirror -> local pieces where they differ (after one), and what drift is judged by: a split step's
  // checksums of the pieces (sums_), a device tensor's block sums (device_sums_).
  Status project_pieces();
  Result<const uint8_t*> host_view(size_t t) const;  // local tensor t's bytes (device: a host copy)
  template <class F>
  void each_piece_of(size_t t, F&& f) const;  // f(logical, piece) for every piece held in local t
  bool has_pieces(size_t t) const;
  uint64_t runs_sum(size_t t, const uint8_t* view) const;  // checksum of local t's runs, read at `view`
  // Device tensor t holds what was last projected into it, by block sums computed on the device
  // (false when unknown or they differ, padding included).
  bool device_unchanged(size_t t) const;
  void read_version();
  // Several sources, or receivers that need different rows (sharded.cpp): the agreement on the
  // merged parts, the step (its operations, each among a source and some receivers), the receivers'
  // buffers inside their mirrors, the check that a receiver's tensors still hold what was projected
  // into them.
  Status agree_sharded(const coll::OpWire& w);
  // Several sources on an elastic communicator: the sources agree on the members of this step
  // (roll_call.cpp); a source that does not answer fails the step.
  Status roll_call();
  Status root_roll_call(const coll::OpWire& w);
  Status step_split();
  Status stage_split();   // a receiver: every operation it takes part in staged as one step
  void beat_ahead();      // an elastic receiver: alive to every operation's source from the step's start
  Status commit_split();
  Status finish_split(Status first, bool refuse);
  void mirror_wholes();  // a receiver's whole tensors land in mirrors too
  std::vector<coll::BufferArg> op_bufs(size_t k) const;  // operation k, as this rank sends or receives it
  Result<const uint8_t*> rows_at(size_t l, uint64_t start, uint64_t stop) const;  // where this rank holds them
  // A source: where it holds row `row` (counted from the slice's first) of slice i of its part.
  const uint8_t* in_slice(size_t i, uint64_t row, uint64_t row_bytes) const;
  // The digest of rows [start, stop) of entry l (held at `p`, host or device), at their places in
  // the logical tensor.
  Result<uint64_t> digest_entry(size_t l, const uint8_t* p, uint64_t start, uint64_t stop) const;
  bool drifted() const;  // a piece no longer holds what was projected (or cannot be read)
  Status project_all();  // project_pieces(); one that failed part-way is rewritten at the next step

  coll::Engine& e_;
  std::vector<LocalTensor> locals_;
  int root_;
  std::vector<int> sources_;
  std::vector<SplitOp> ops_;  // a split step's operations (split.h), the same on every rank
  std::vector<SliceHome> homes_;  // a source: where it holds each slice of its part (sources.h)
  bool split_ = false;        // a step runs ops_ (else: one operation of every tensor whole)
  std::vector<Slice> held_;   // a receiver: the rows it needs (and holds) of each logical tensor
  std::vector<uint8_t> needs_wire_;  // the root of a split step: every receiver's rows (for joiners)
  std::vector<uint64_t> sums_;  // a split receiver's local tensors: checksums of what was projected
  bool repair_ = false;         // ... one of them was written to: the next step rewrites them

  bool agreed_ = false;
  Manifest manifest_;
  std::vector<Target> targets_;  // receivers, per logical tensor
  std::vector<std::vector<std::vector<Run>>> runs_;  // per logical tensor, per piece
  std::vector<std::vector<uint8_t, BigAlloc<uint8_t>>> mirrors_;  // per logical tensor (empty: whole)
  uint64_t version_ = 0, projected_ = 0;
  mutable std::vector<uint8_t, BigAlloc<uint8_t>> scratch_;  // host copy of a device tensor
  std::vector<std::vector<uint64_t>> device_sums_;  // device tensors: block sums of what was projected
};

// A model's agreement is an operation of its own: sources send their parts to the root (kPartSub),
// the root sends the manifest to every rank (kManifestSub); acknowledgements and the verdict as usual;
// then (fixed communicators) every receiver sends the root its rows (kRowsSub) and the root sends
// every rank the table (kNeedsSub).
constexpr uint32_t kManifestSub = 1, kPartSub = 2, kRowsSub = 3, kNeedsSub = 4;
// The sources' roll call at the start of a step on an elastic communicator (roll_call.cpp), keyed in
// the number of the step's first operation (apart from any sub an operation uses): a source's members
// to the root, the root's members of the step and verdict to each source.
constexpr uint32_t kRollSub = 0xc0000000u, kRollLiveSub = 0xc0000001u, kRollVerdictSub = 0xc0000002u,
                   kRollJoinedSub = 0xc0000004u;  // (the root to each source: the joiners it admitted, where they are)
// What the root sends a rank that rejoins an agreed model, in the number of the step's first
// operation: the manifest and, for a split step, every receiver's rows (rejoin.cpp).
constexpr uint32_t kRejoinSub = 0xc0000003u;
// The root's side of it: sends `m`, collects every rank's check, and sends the first failure (its
// own, `mine`, first) as everyone's verdict, which it returns.
Status root_agrees(coll::Engine& e, const coll::OpWire& w, const Manifest& m, Status mine);

}  // namespace sparrow::model
