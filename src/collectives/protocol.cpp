#include "collectives/protocol.h"

#include <algorithm>
#include <bit>

#include "core/bits.h"
#include "format/checkpoint.h"

namespace sparrow::coll {
namespace {

constexpr uint32_t kOpMagic = 0x504f5053;  // "SPOP"
constexpr uint32_t kAbortMagic = 0x42415053;  // "SPAB"
constexpr uint32_t kMaxListed = 1u << 24;  // buffers or resync ranks in one header

constexpr uint32_t kReattachMagic = 0x41525053;  // "SPRA"
constexpr uint32_t kHoldsMagic = 0x44485053;     // "SPHD"

[[maybe_unused]] const bool kNamerInstalled = (transport::set_key_namer(name_key), true);

void put_ranks(std::vector<uint8_t>& o, const std::vector<int32_t>& v) {
  bits::put_u32(o, uint32_t(v.size()));
  for (int32_t r : v) bits::put_u32(o, uint32_t(r));
}

Status get_ranks(bits::ByteReader& r, std::vector<int32_t>* v, const char* what) {
  uint32_t n;
  SPARROW_RETURN_IF_ERROR(r.u32(&n));
  if (n > kMaxListed) return CorruptData(std::string("operation header: too many ") + what);
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t x;
    SPARROW_RETURN_IF_ERROR(r.u32(&x));
    v->push_back(int32_t(x));
  }
  return Status::Ok();
}

void put_str(std::vector<uint8_t>& o, const std::string& v) {
  bits::put_u16(o, uint16_t(std::min<size_t>(v.size(), 0xffff)));
  o.insert(o.end(), v.begin(), v.begin() + std::min<size_t>(v.size(), 0xffff));
}

Status get_str(bits::ByteReader& r, std::string* v) {
  uint16_t n;
  const uint8_t* p;
  SPARROW_RETURN_IF_ERROR(r.u16(&n));
  SPARROW_RETURN_IF_ERROR(r.bytes(n, &p));
  v->assign(reinterpret_cast<const char*>(p), n);
  return Status::Ok();
}

void put_places(std::vector<uint8_t>& o, const std::vector<Place>& v) {
  bits::put_u32(o, uint32_t(v.size()));
  for (auto& p : v) {
    bits::put_u32(o, uint32_t(p.rank));
    put_str(o, p.address);
    put_str(o, p.host);
    put_str(o, p.region);
  }
}

Status get_places(bits::ByteReader& r, std::vector<Place>* v) {
  uint32_t n;
  SPARROW_RETURN_IF_ERROR(r.u32(&n));
  if (n > kMaxListed) return CorruptData("too many places");
  for (uint32_t i = 0; i < n; ++i) {
    Place p;
    uint32_t rank;
    SPARROW_RETURN_IF_ERROR(r.u32(&rank));
    p.rank = int32_t(rank);
    SPARROW_RETURN_IF_ERROR(get_str(r, &p.address));
    SPARROW_RETURN_IF_ERROR(get_str(r, &p.host));
    SPARROW_RETURN_IF_ERROR(get_str(r, &p.region));
    v->push_back(std::move(p));
  }
  return Status::Ok();
}

}  // namespace

std::vector<uint8_t> OpHeader::encode() const {
  std::vector<uint8_t> o;
  bits::put_u32(o, kOpMagic);
  bits::put_u8(o, kind);
  bits::put_u8(o, flags);
  bits::put_u16(o, 0);
  bits::put_u32(o, uint32_t(root));
  bits::put_u32(o, uint32_t(bufs.size()));
  for (auto& [n, d] : bufs) {
    bits::put_u64(o, n);
    bits::put_u8(o, d);
  }
  put_ranks(o, resync);
  bits::put_u64(o, segment);
  if (flags & kOpElastic) {
    put_ranks(o, members);
    put_places(o, moved);
    bits::put_u32(o, uint32_t(seeds.size()));
    for (auto [r, from] : seeds) {
      bits::put_u32(o, uint32_t(r));
      bits::put_u32(o, uint32_t(from));
    }
  }
  return o;
}

int OpHeader::seeder_of(int rank) const {
  for (auto [r, from] : seeds)
    if (r == rank) return from;
  return -1;
}

std::vector<int> OpHeader::seeded_by(int rank) const {
  std::vector<int> out;
  for (auto [r, from] : seeds)
    if (from == rank) out.push_back(r);
  return out;
}

Result<OpHeader> OpHeader::decode(const std::vector<uint8_t>& m) {
  bits::ByteReader r(m, "operation header");
  OpHeader h;
  uint32_t magic, root, nb;
  uint16_t reserved;
  SPARROW_RETURN_IF_ERROR(r.u32(&magic));
  if (magic != kOpMagic) return CorruptData("bad operation header");
  SPARROW_RETURN_IF_ERROR(r.u8(&h.kind));
  SPARROW_RETURN_IF_ERROR(r.u8(&h.flags));
  SPARROW_RETURN_IF_ERROR(r.u16(&reserved));
  SPARROW_RETURN_IF_ERROR(r.u32(&root));
  h.root = int32_t(root);
  SPARROW_RETURN_IF_ERROR(r.u32(&nb));
  if (nb > kMaxListed) return CorruptData("operation header: too many buffers");
  for (uint32_t i = 0; i < nb; ++i) {
    uint64_t n;
    uint8_t d;
    SPARROW_RETURN_IF_ERROR(r.u64(&n));
    SPARROW_RETURN_IF_ERROR(r.u8(&d));
    h.bufs.push_back({n, d});
  }
  SPARROW_RETURN_IF_ERROR(get_ranks(r, &h.resync, "resync ranks"));
  SPARROW_RETURN_IF_ERROR(r.u64(&h.segment));
  if (h.flags & kOpElastic) {
    SPARROW_RETURN_IF_ERROR(get_ranks(r, &h.members, "members"));
    SPARROW_RETURN_IF_ERROR(get_places(r, &h.moved));
    uint32_t ns;
    SPARROW_RETURN_IF_ERROR(r.u32(&ns));
    if (ns > kMaxListed) return CorruptData("operation header: too many seeds");
    for (uint32_t i = 0; i < ns; ++i) {
      uint32_t rk, from;
      SPARROW_RETURN_IF_ERROR(r.u32(&rk));
      SPARROW_RETURN_IF_ERROR(r.u32(&from));
      if (rk == from) return CorruptData("operation header: a rank seeds itself");
      h.seeds.push_back({int32_t(rk), int32_t(from)});
    }
  }
  return h;
}

std::vector<uint8_t> Ack::encode() const {
  std::vector<uint8_t> o;
  bits::put_u32(o, uint32_t(status.code()));
  bits::put_u8(o, resync ? 1 : 0);
  const std::string m = status.message().substr(0, 1000);
  bits::put_u16(o, uint16_t(m.size()));
  o.insert(o.end(), m.begin(), m.end());
  bits::put_u64(o, holds);
  return o;
}

Result<Ack> Ack::decode(const std::vector<uint8_t>& m, const std::string& from) {
  bits::ByteReader r(m, "acknowledgement");
  uint32_t code;
  uint8_t resync;
  uint16_t n;
  const uint8_t* p;
  Ack a;
  if (!r.u32(&code).ok() || !r.u8(&resync).ok() || !r.u16(&n).ok() || !r.bytes(n, &p).ok() || !r.u64(&a.holds).ok())
    return CorruptData("bad acknowledgement from " + from);
  if (code > uint32_t(Code::kAuthError)) return CorruptData("acknowledgement from " + from + " with unknown status " + std::to_string(code));
  a.resync = resync != 0;
  if (code != 0) a.status = Status(Code(code), std::string(reinterpret_cast<const char*>(p), n));
  return a;
}

std::string arg_desc(const std::vector<BufferArg>& bufs, int root) {
  std::string s = "root " + std::to_string(root) + ", buffers:";
  for (auto& b : bufs) s += " " + std::to_string(b.count) + " x " + format::dtype_name(uint8_t(b.dtype));
  return s;
}

Status check_header(const OpHeader& h, uint8_t kind, const std::vector<BufferArg>& bufs, int root, int me) {
  bool ok = h.kind == kind && h.root == root && h.bufs.size() == bufs.size();
  for (size_t i = 0; ok && i < bufs.size(); ++i) ok = h.bufs[i].first == bufs[i].count && h.bufs[i].second == bufs[i].dtype;
  if (ok) return Status::Ok();
  std::vector<BufferArg> theirs;
  for (auto& [n, d] : h.bufs) theirs.push_back({nullptr, nullptr, n, d, {}});
  return Error(Code::kInvalidUsage, std::string(kind == kSparse ? "sparse_bcast" : "broadcast") +
                                        " arguments differ between ranks: the root called it with " +
                                        arg_desc(theirs, h.root) + "; rank " + std::to_string(me) + " with " +
                                        arg_desc(bufs, root));
}

std::string name_key(const transport::MsgKey& k) {
  const std::string op = "operation " + std::to_string(k.seq);
  switch (k.sub) {
    case 0: return "header of " + op;
    case kAckSub: return "acknowledgement of " + op;
    case kResyncSub: return "resync (snapshot or missed deltas) of " + op;
    case kVerdictSub: return "verdict on " + op;
    case kReattachSub: return "re-attach request of " + op;
    case kHoldingsSub: return "joiner's digests in " + op;
    case kClaimSub: return "claim (waiting for the root it named) in " + op;
    case kNoticeSub: return "notice (ranks disagree on the root) of " + op;
    case kJoinSub: return "join request";
    case kWelcomeSub: return "answer to a join request";
    case kAdoptSub: return "adoption request of " + op;
    default:
      if (k.sub >= kBeatSub && k.sub < kBeatSub + kMaxBeats)
        return "heartbeat " + std::to_string(k.sub - kBeatSub) + " in " + op;
      if (k.sub >= kHoldSub && k.sub < kHoldSub + kMaxHolds)
        return "hold " + std::to_string(k.sub - kHoldSub) + " (a relay re-attached) in " + op;
      return "part " + std::to_string(k.sub) + " of " + op;
  }
}

bool is_footer(const std::vector<uint8_t>& frame) {
  return frame.size() >= 4 && bits::load_u32(frame.data()) == format::kFooterMagic;
}

std::vector<uint8_t> abort_frame(const Status& why) {
  std::vector<uint8_t> o;
  bits::put_u32(o, kAbortMagic);
  auto a = Ack{why}.encode();
  o.insert(o.end(), a.begin(), a.end());
  return o;
}

bool is_abort(const std::vector<uint8_t>& frame) {
  return frame.size() >= 4 && bits::load_u32(frame.data()) == kAbortMagic;
}

Status abort_status(const std::vector<uint8_t>& frame) {
  auto a = Ack::decode(std::vector<uint8_t>(frame.begin() + 4, frame.end()), "an abort frame");
  if (!a.ok()) return a.status();
  if (a->status.ok()) return CorruptData("an abort frame without a failure");
  return a->status;
}

Status OpWire::send(const std::vector<int>& to, uint32_t sub, const Frame& m,
                    std::vector<transport::SendRequestPtr>* reqs) const {
  Status first;
  for (int r : to) {
    auto q = net.send(r, key(sub), transport::Payload{m->data(), m->size(), m}, deadline);
    if (!q.ok()) {
      if (first.ok()) first = q.status();
      continue;  // the others still get it
    }
    if (reqs) reqs->push_back(q.value());
  }
  return first;
}

Result<std::vector<uint8_t>> OpWire::recv(int from, uint32_t sub, transport::Deadline d) const {
  return net.recv(from, key(sub), d);
}

Status verdict_for_others(const Status& agreed) {
  return agreed.code() == Code::kInvalidUsage ? agreed : Status::Ok();
}

Status send_verdict(const OpWire& w, const std::vector<int>& to, const Status& verdict) {
  std::vector<transport::SendRequestPtr> reqs;
  Status sent = w.send(to, kVerdictSub, share(Ack{verdict}.encode()), &reqs);
  Status handed = wait_all(reqs, w.deadline);  // the ranks it did reach get it before we return
  return sent.ok() ? handed : sent;
}

Status recv_verdict(const OpWire& w, int root) {
  SPARROW_ASSIGN_OR_RETURN(auto v, w.recv(root, kVerdictSub));
  SPARROW_ASSIGN_OR_RETURN(Ack a, Ack::decode(v, "the root"));
  return a.status;
}

Status wait_all(std::vector<transport::SendRequestPtr>& reqs, transport::Deadline d) {
  Status first;
  for (auto& r : reqs) {
    Status s = r->wait(d);
    if (!s.ok() && first.ok()) first = std::move(s);
  }
  return first;
}

}  // namespace sparrow::coll

namespace sparrow::coll {

std::vector<uint8_t> reattach_request(uint32_t from_sub) {
  std::vector<uint8_t> o;
  bits::put_u32(o, kReattachMagic);
  bits::put_u32(o, from_sub);
  return o;
}

Result<uint32_t> decode_reattach(const std::vector<uint8_t>& m) {
  bits::ByteReader r(m, "re-attach request");
  uint32_t magic, from;
  SPARROW_RETURN_IF_ERROR(r.u32(&magic));
  if (magic != kReattachMagic) return CorruptData("bad re-attach request");
  SPARROW_RETURN_IF_ERROR(r.u32(&from));
  if (from == 0) return CorruptData("re-attach request from part 0 (the header comes from the root itself)");
  return from;
}

std::vector<uint8_t> holds_message(const std::vector<uint64_t>& digests) {
  std::vector<uint8_t> o;
  bits::put_u32(o, kHoldsMagic);
  bits::put_u32(o, uint32_t(digests.size()));
  for (uint64_t d : digests) bits::put_u64(o, d);
  return o;
}

Result<std::vector<uint64_t>> decode_holds(const std::vector<uint8_t>& m) {
  bits::ByteReader r(m, "holds message");
  uint32_t magic, n;
  SPARROW_RETURN_IF_ERROR(r.u32(&magic));
  if (magic != kHoldsMagic) return CorruptData("bad holds message");
  SPARROW_RETURN_IF_ERROR(r.u32(&n));
  if (size_t(n) * 8 != m.size() - 8) return CorruptData("holds message of " + std::to_string(m.size()) + " bytes lists " + std::to_string(n) + " digests");
  std::vector<uint64_t> d(n);
  for (auto& x : d) SPARROW_RETURN_IF_ERROR(r.u64(&x));
  return d;
}

}  // namespace sparrow::coll

namespace sparrow::coll {

std::vector<uint8_t> encode_place(const Place& p) {
  std::vector<uint8_t> o;
  put_places(o, {p});
  return o;
}

std::vector<uint8_t> encode_places(const std::vector<Place>& v) {
  std::vector<uint8_t> o;
  put_places(o, v);
  return o;
}

Result<std::vector<Place>> decode_places(const std::vector<uint8_t>& m, const std::string& what) {
  bits::ByteReader r(m, what.c_str());
  std::vector<Place> v;
  SPARROW_RETURN_IF_ERROR(get_places(r, &v));
  if (r.remaining()) return CorruptData(what + ": trailing bytes");
  return v;
}

Result<Place> decode_place(const std::vector<uint8_t>& m) {
  bits::ByteReader r(m, "join request");
  std::vector<Place> v;
  SPARROW_RETURN_IF_ERROR(get_places(r, &v));
  if (v.size() != 1) return CorruptData("join request without exactly one place");
  return v[0];
}

std::vector<uint8_t> Welcome::encode() const {
  const std::vector<uint8_t> ack = Ack{status}.encode();
  std::vector<uint8_t> o;
  bits::put_u32(o, uint32_t(ack.size()));
  o.insert(o.end(), ack.begin(), ack.end());
  bits::put_u64(o, first_seq);
  put_places(o, places);
  bits::put_u32(o, uint32_t(rtt_s.size()));
  for (size_t i = 0; i < rtt_s.size(); ++i) {
    bits::put_u64(o, std::bit_cast<uint64_t>(rtt_s[i]));
    bits::put_u64(o, std::bit_cast<uint64_t>(i < bw_Bps.size() ? bw_Bps[i] : -1.0));
  }
  return o;
}

Result<Welcome> Welcome::decode(const std::vector<uint8_t>& m) {
  bits::ByteReader r(m, "welcome");
  uint32_t ack_len, n;
  const uint8_t* ack;
  SPARROW_RETURN_IF_ERROR(r.u32(&ack_len));
  SPARROW_RETURN_IF_ERROR(r.bytes(ack_len, &ack));
  Welcome w;
  SPARROW_ASSIGN_OR_RETURN(Ack a, Ack::decode(std::vector<uint8_t>(ack, ack + ack_len), "rank 0"));
  w.status = a.status;
  SPARROW_RETURN_IF_ERROR(r.u64(&w.first_seq));
  SPARROW_RETURN_IF_ERROR(get_places(r, &w.places));
  SPARROW_RETURN_IF_ERROR(r.u32(&n));
  if (n > kMaxListed) return CorruptData("welcome: too many probe entries");
  for (uint32_t i = 0; i < n; ++i) {
    uint64_t rtt, bw;
    SPARROW_RETURN_IF_ERROR(r.u64(&rtt));
    SPARROW_RETURN_IF_ERROR(r.u64(&bw));
    w.rtt_s.push_back(std::bit_cast<double>(rtt));
    w.bw_Bps.push_back(std::bit_cast<double>(bw));
  }
  return w;
}

}  // namespace sparrow::coll
