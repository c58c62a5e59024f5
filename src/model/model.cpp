// SPDX-License-Identifier: Apache-2.0
#include "model/model.h"

#include <algorithm>
#include <cstring>

#include "collectives/bcast.h"
#include "format/checkpoint.h"
#include "format/digest.h"
#include "kernels/device.h"
#include "model/sources.h"

namespace sparrow::model {
namespace {

// The ranks the root tells (an elastic communicator's live members; every rank otherwise).
std::vector<int> others(coll::Engine& e) {
  std::vector<int> v;
  for (int r : e.members.live())
    if (r != e.rank()) v.push_back(r);
  return v;
}

}  // namespace

// The root's side of the agreement: every rank's check, the first failure (the root's own, `mine`,
// first) as everyone's verdict. An elastic member that does not answer is dropped (as a broadcast
// would), not a failure.
Status root_agrees(coll::Engine& e, const coll::OpWire& w, const Manifest& m, Status mine) {
  const std::vector<int> to = others(e);
  Status sent = w.send(to, kManifestSub, coll::share(m.encode()));
  Status verdict = mine.ok() ? sent : mine;
  for (int r : to) {
    if (!sent.ok()) break;
    auto bytes = w.recv(r, coll::kAckSub);
    if (!bytes.ok() && e.comm.elastic()) {
      e.members.drop(r, w.seq, "no answer to the model's manifest: " + bytes.status().to_string());
      continue;
    }
    if (!bytes.ok() && verdict.ok()) verdict = bytes.status();
    auto ack = bytes.ok() ? coll::Ack::decode(*bytes, "rank " + std::to_string(r)) : Result<coll::Ack>(bytes.status());
    if (bytes.ok() && !ack.ok() && verdict.ok()) verdict = ack.status();
    if (ack.ok() && !ack->status.ok() && verdict.ok())
      verdict = Status(ack->status.code(), "rank " + std::to_string(r) + ": " + ack->status.message());
  }
  Status handed = coll::send_verdict(w, to, verdict);
  return verdict.ok() ? handed : verdict;
}

Result<std::unique_ptr<Model>> Model::create(coll::Engine& e, std::vector<LocalTensor> tensors, int root,
                                             std::vector<int> sources) {
  const int n = e.comm.nranks();
  if (root < 0 || root >= n)
    return InvalidArgument("root " + std::to_string(root) + " out of range for " + std::to_string(n) + " ranks");
  if (sources.size() == 1 && sources[0] == root) sources.clear();
  for (size_t i = 0; i < sources.size(); ++i)
    if (sources[i] < 0 || sources[i] >= n || std::count(sources.begin(), sources.end(), sources[i]) > 1)
      return InvalidArgument("sources: each a distinct rank in [0, " + std::to_string(n) + "), got " +
                             std::to_string(sources[i]));
  if (!sources.empty() && std::find(sources.begin(), sources.end(), root) == sources.end())
    return InvalidArgument("sources: the root (" + std::to_string(root) + ") must be one of them");
  const bool source = std::find(sources.begin(), sources.end(), e.rank()) != sources.end();
  SPARROW_RETURN_IF_ERROR(check_local(tensors, sources.empty() && e.rank() == root));
  if (source) SPARROW_RETURN_IF_ERROR(check_source(tensors));
  if (source && tensors.empty()) return InvalidArgument("a source passes no tensors");
  std::unique_ptr<Model> m(new Model(e, std::move(tensors), root, std::move(sources)));
  if (m->is_source()) m->homes_ = slice_homes(m->locals_);  // (the one root's: every tensor whole)
  return m;
}

bool Model::is_source() const {
  return sharded() ? std::find(sources_.begin(), sources_.end(), e_.rank()) != sources_.end() : is_root();
}

Status Model::agree() {
  SPARROW_RETURN_IF_ERROR(coll::no_stage_pending(e_));
  if (rejoining()) return rejoin();
  const coll::OpWire w = e_.wire(e_.comm.next_seq());
  SPARROW_RETURN_IF_ERROR(sharded() ? agree_sharded(w) : agree_one(w));
  return split(w);
}

Status Model::agree_one(const coll::OpWire& w) {
  if (is_root()) {
    manifest_ = manifest_of(locals_, root_);
    return root_agrees(e_, w, manifest_, Status::Ok());
  }
  SPARROW_ASSIGN_OR_RETURN(auto bytes, w.recv(root_, kManifestSub));
  auto m = Manifest::decode(bytes);
  Status mine = m.ok() ? plan(*m) : m.status();
  if (m.ok() && m->root != root_)
    mine = Error(Code::kInvalidUsage, "the model's root is rank " + std::to_string(m->root) + ", not " +
                                          std::to_string(root_));
  Status sent = w.send({root_}, coll::kAckSub, coll::share(coll::Ack{mine}.encode()));
  if (!mine.ok()) return mine;
  SPARROW_RETURN_IF_ERROR(sent);
  SPARROW_RETURN_IF_ERROR(coll::recv_verdict(w, root_));
  manifest_ = std::move(*m);
  return Status::Ok();
}

Status Model::plan(const Manifest& m) {
  SPARROW_ASSIGN_OR_RETURN(targets_, plan_receiver(m, locals_));
  runs_.assign(m.tensors.size(), {});
  mirrors_.clear();
  mirrors_.resize(m.tensors.size());
  for (size_t l = 0; l < m.tensors.size(); ++l) {
    for (const Projection& p : targets_[l].pieces) runs_[l].push_back(runs_of(m.tensors[l], locals_[p.local], p));
    if (targets_[l].whole >= 0) continue;
    mirrors_[l].resize(m.tensors[l].bytes());
    std::memset(mirrors_[l].data(), 0, mirrors_[l].size());
  }
  return Status::Ok();
}

std::vector<coll::BufferArg> Model::bufs() const {
  std::vector<coll::BufferArg> out;
  for (size_t l = 0; l < manifest_.tensors.size(); ++l) {
    const LogicalTensor& t = manifest_.tensors[l];
    coll::BufferArg b;
    b.count = t.numel();
    b.dtype = t.dtype;
    b.name = t.name;
    if (is_root()) b.send = locals_[l].data;
    else b.recv = const_cast<uint8_t*>(logical_bytes(l));
    out.push_back(std::move(b));
  }
  return out;
}

const uint8_t* Model::logical_bytes(size_t l) const {
  if (split_ && !is_source()) return mirrors_[l].data();
  if (is_root()) return static_cast<const uint8_t*>(locals_[l].data);
  if (targets_[l].whole >= 0) return static_cast<const uint8_t*>(locals_[size_t(targets_[l].whole)].data);
  return mirrors_[l].data();
}

void Model::read_version() {
  coll::BufferKey key;
  std::vector<coll::BufferArg> bs = split_ ? std::vector<coll::BufferArg>{} : bufs();
  bool sends = is_root();
  for (size_t k = 0; split_ && bs.empty() && k < ops_.size(); ++k)  // the first operation it takes part in
    if (takes_part(k)) {
      bs = op_bufs(k);
      sends = ops_[k].source == e_.rank();
    }
  if (bs.empty()) return;
  for (const auto& b : bs) key.push_back(sends ? b.send : b.recv);
  if (sends) {
    auto it = e_.roots.find(key);
    if (it != e_.roots.end() && it->second.enc) version_ = it->second.enc->version();
  } else {
    auto it = e_.recvs.find(key);
    if (it != e_.recvs.end()) version_ = it->second.st.version;
  }
}

Status Model::step() {
  if (!agreed_) SPARROW_RETURN_IF_ERROR(agree());
  agreed_ = true;
  if (!sharded()) welcome_joiners(e_.comm.peek_seq());  // (several sources: at their roll call)
  if (split_) return step_split();
  // A piece that could not be read (device memory) still takes part, and is not written: the mirror
  // is then ahead of it, which the next step's comparison refuses and repairs, as a drifted piece.
  const Status mirrored = is_root() ? Status::Ok() : mirror_pieces();
  Status s = coll::sparse_bcast(e_, bufs(), root_);
  if (s.ok() && !mirrored.ok()) return mirrored;
  if (s.ok() && !is_root()) s = project_pieces();
  if (s.ok()) read_version();
  return s;
}

Status Model::stage() {
  if (!agreed_) SPARROW_RETURN_IF_ERROR(agree());
  agreed_ = true;
  if (!sharded()) welcome_joiners(e_.comm.peek_seq());  // (several sources: at their roll call)
  if (split_) return is_source() ? step_split() : stage_split();
  // (a piece that could not be read: the commit's projection compares it again, and fails or rewrites
  // what differs; the staged step goes on meanwhile, as the other ranks' does)
  if (!is_root()) (void)mirror_pieces();
  Status s = coll::sparse_stage(e_, bufs(), root_);
  if (is_root()) read_version();
  return s;
}

Status Model::commit() {
  if (is_source()) return Status::Ok();
  if (split_) return commit_split();
  Status s = coll::stage_commit(e_);
  if (s.ok() && agreed_) s = project_pieces();
  if (s.ok() && agreed_) read_version();
  return s;
}

void Model::forget() {
  if (!agreed_) return;
  for (size_t k = 0; split_ && k < ops_.size(); ++k)
    if (takes_part(k))
      for (const auto& b : op_bufs(k)) (void)coll::sparse_reset(e_, b.send ? b.send : b.recv);
  if (split_) return;
  for (const auto& b : bufs()) (void)coll::sparse_reset(e_, is_root() ? b.send : b.recv);
}

Result<size_t> Model::logical_index(const std::string& name) const {
  if (!agreed_) return Error(Code::kInvalidUsage, "no step has run yet: the model's tensors are not known");
  const int l = manifest_.find(name);
  if (l < 0) return InvalidArgument("the model has no tensor named '" + name + "'");
  return size_t(l);
}

Result<uint64_t> Model::digest(const std::string& name) const {
  SPARROW_ASSIGN_OR_RETURN(size_t l, logical_index(name));
  return digest_rows(name, 0, rows_of(manifest_.tensors[l].shape));
}

// (a tensor split along another dim than 0 has one entry per block, all with its rows)
Result<uint64_t> Model::digest_rows(const std::string& name, uint64_t start, uint64_t stop) const {
  SPARROW_ASSIGN_OR_RETURN(size_t first, logical_index(name));
  const uint64_t rows = rows_of(manifest_.tensors[first].shape);
  if (start >= stop || stop > rows)
    return InvalidArgument("rows [" + std::to_string(start) + ", " + std::to_string(stop) + ") of '" + name +
                           "', which has " + std::to_string(rows));
  uint64_t sum = 0;
  for (uint32_t l : manifest_.entries(name)) {
    SPARROW_ASSIGN_OR_RETURN(const uint8_t* p, rows_at(l, start, stop));
    SPARROW_ASSIGN_OR_RETURN(uint64_t d, digest_entry(l, p, start, stop));
    sum += d;
  }
  return sum;
}

Result<uint64_t> Model::digest_entry(size_t l, const uint8_t* p, uint64_t start, uint64_t stop) const {
  const LogicalTensor& t = manifest_.tensors[l];
  const uint64_t rows = rows_of(t.shape), row = rows ? t.numel() / rows : 0;
  const size_t esize = format::dtype_size(t.dtype);
  std::vector<uint8_t> host;  // a source's rows in device memory: digested from a host copy
  if (kernels::is_device(kernels::device_ops(), p)) {
    host.resize((stop - start) * row * esize);
    SPARROW_RETURN_IF_ERROR(kernels::copy_any(host.data(), p, host.size()));
    p = host.data();
  }
  if (!t.blocked()) return format::digest_range(0, p, start * row, (stop - start) * row, esize);
  // A block: its runs (each inside one row) at their places in the logical tensor.
  const LocalTensor whole{t.name, nullptr, t.dtype, t.logical_shape(), {}};
  const Projection at{0, Piece{t.name, t.block_dim, 0, t.shape[size_t(t.block_dim)], t.block_start}};
  const uint64_t from = start * row * esize, to = stop * row * esize;
  uint64_t sum = 0;
  for (const Run& r : runs_of(t, whole, at))
    if (r.logical >= from && r.logical < to)
      sum += format::digest_range(0, p + (r.logical - from), r.local / esize, r.bytes / esize, esize);
  return sum;
}

}  // namespace sparrow::model
