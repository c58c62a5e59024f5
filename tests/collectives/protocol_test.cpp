#include "collectives/protocol.h"

#include <gtest/gtest.h>

namespace sparrow::coll {
namespace {

TEST(Protocol, OpHeaderRoundTripsAndRejectsTruncation) {
  OpHeader h;
  h.kind = kSparse;
  h.flags = kOpFull;
  h.root = 3;
  h.bufs = {{1000003, 9}, {7, 7}};
  h.resync = {1, 5};
  h.segment = 4 << 20;
  auto m = h.encode();
  auto d = OpHeader::decode(m);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->kind, kSparse);
  EXPECT_EQ(d->flags, kOpFull);
  EXPECT_EQ(d->root, 3);
  EXPECT_EQ(d->bufs, h.bufs);
  EXPECT_EQ(d->resync, h.resync);
  EXPECT_EQ(d->segment, h.segment);
  for (size_t n = 0; n < m.size(); ++n) {
    auto t = OpHeader::decode(std::vector<uint8_t>(m.begin(), m.begin() + n));
    EXPECT_EQ(t.status().code(), Code::kCorruptData) << n;
  }
  m[0] ^= 1;
  EXPECT_EQ(OpHeader::decode(m).status().code(), Code::kCorruptData);
}

TEST(Protocol, ElasticHeaderCarriesMembersMovedPlacesAndSeeds) {
  OpHeader h;
  h.kind = kSparse;
  h.flags = kOpElastic;
  h.members = {0, 1, 3};
  h.moved = {{3, "10.0.0.7:4000", "host7", "eu"}};
  h.seeds = {{3, 1}};
  auto m = h.encode();
  auto d = OpHeader::decode(m);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->members, h.members);
  EXPECT_EQ(d->seeder_of(3), 1);
  EXPECT_EQ(d->seeder_of(1), -1);
  EXPECT_EQ(d->seeded_by(1), std::vector<int>{3});
  EXPECT_TRUE(d->seeded_by(3).empty());
  ASSERT_EQ(d->moved.size(), 1u);
  EXPECT_EQ(d->moved[0].rank, 3);
  EXPECT_EQ(d->moved[0].address, "10.0.0.7:4000");
  EXPECT_EQ(d->moved[0].region, "eu");
  for (size_t n = 0; n < m.size(); ++n)
    EXPECT_FALSE(OpHeader::decode(std::vector<uint8_t>(m.begin(), m.begin() + long(n))).ok()) << n;
  h.seeds = {{2, 2}};
  EXPECT_EQ(OpHeader::decode(h.encode()).status().code(), Code::kCorruptData) << "a rank seeding itself";
}

TEST(Protocol, JoinRequestWelcomeAndReattachRoundTrip) {
  auto place = decode_place(encode_place({2, "127.0.0.1:5", "h", "us"}));
  ASSERT_TRUE(place.ok());
  EXPECT_EQ(place->rank, 2);
  EXPECT_EQ(place->host, "h");
  Welcome w;
  w.status = Status(Code::kPeerLost, "slot taken");
  w.first_seq = 41;
  w.places = {{0, "a:1", "h0", "us"}, {1, "b:2", "h1", ""}};
  w.rtt_s = {0, 0.05};
  w.bw_Bps = {-1, 1.25e8};
  auto m = w.encode();
  auto d = Welcome::decode(m);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->status.code(), Code::kPeerLost);
  EXPECT_EQ(d->first_seq, 41u);
  ASSERT_EQ(d->places.size(), 2u);
  EXPECT_EQ(d->places[1].address, "b:2");
  EXPECT_EQ(d->rtt_s, w.rtt_s);
  EXPECT_EQ(d->bw_Bps, w.bw_Bps);
  for (size_t n = 0; n < m.size(); ++n)
    EXPECT_FALSE(Welcome::decode(std::vector<uint8_t>(m.begin(), m.begin() + long(n))).ok()) << n;
  auto r = decode_reattach(reattach_request(7));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value(), 7u);
  EXPECT_FALSE(decode_reattach(reattach_request(0)).ok()) << "part 0 (the header) is never re-sent";
  EXPECT_FALSE(decode_reattach({1, 2, 3}).ok());
  for (const std::vector<uint64_t>& d : {std::vector<uint64_t>{}, std::vector<uint64_t>{1, ~0ull, 42}}) {
    auto h = decode_holds(holds_message(d));
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    EXPECT_EQ(h.value(), d);
  }
  const auto hm = holds_message({7, 8});
  for (size_t n = 0; n < hm.size(); ++n)
    EXPECT_FALSE(decode_holds(std::vector<uint8_t>(hm.begin(), hm.begin() + long(n))).ok()) << n;
  EXPECT_FALSE(decode_holds(reattach_request(3)).ok());
}

TEST(Protocol, AckCarriesStatusResyncAndVersion) {
  Ack a{Status(Code::kTimeout, "no part 4 of operation 9 from rank 0"), true, 41};
  auto d = Ack::decode(a.encode(), "rank 2");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->status.code(), Code::kTimeout);
  EXPECT_EQ(d->status.message(), "no part 4 of operation 9 from rank 0");
  EXPECT_TRUE(d->resync);
  EXPECT_EQ(d->holds, 41u);
  auto ok = Ack::decode(Ack{}.encode(), "rank 2");
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE(ok->status.ok());
  EXPECT_FALSE(ok->resync);
  // Truncated, and an unknown status code: corrupt, naming the sender.
  auto m = a.encode();
  m.pop_back();
  auto t = Ack::decode(m, "rank 2");
  EXPECT_EQ(t.status().code(), Code::kCorruptData);
  EXPECT_NE(t.status().message().find("rank 2"), std::string::npos);
  m = a.encode();
  m[0] = 200;
  EXPECT_EQ(Ack::decode(m, "rank 2").status().code(), Code::kCorruptData);
}

TEST(Protocol, CheckHeaderNamesBothCalls) {
  OpHeader h;
  h.kind = kSparse;
  h.root = 0;
  h.bufs = {{100, 9}};
  std::vector<BufferArg> mine = {{nullptr, nullptr, 100, 9, {}}};
  EXPECT_TRUE(check_header(h, kSparse, mine, 0, 2).ok());
  EXPECT_EQ(check_header(h, kDense, mine, 0, 2).code(), Code::kInvalidUsage);
  mine[0].count = 99;
  Status s = check_header(h, kSparse, mine, 0, 2);
  EXPECT_EQ(s.code(), Code::kInvalidUsage);
  EXPECT_NE(s.message().find("root 0, buffers: 100 x bfloat16"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("rank 2 with root 0, buffers: 99 x bfloat16"), std::string::npos) << s.message();
}

TEST(Protocol, KeysAreNamedInMessages) {
  EXPECT_EQ(name_key({1, 7, 0}), "header of operation 7");
  EXPECT_EQ(name_key({1, 7, kAckSub}), "acknowledgement of operation 7");
  EXPECT_EQ(name_key({1, 7, kVerdictSub}), "verdict on operation 7");
  EXPECT_EQ(name_key({1, 7, 12}), "part 12 of operation 7");
  EXPECT_EQ(name_key({1, 7, kHoldSub + 2}), "hold 2 (a relay re-attached) in operation 7");
  EXPECT_EQ(name_key({1, 7, kBeatSub + 3}), "heartbeat 3 in operation 7");
  // Every kind of message has a name of its own: none reads as a payload part.
  for (uint32_t sub : {kAckSub, kResyncSub, kVerdictSub, kReattachSub, kJoinSub, kWelcomeSub, kHoldingsSub, kAdoptSub,
                       kClaimSub, kNoticeSub, kHoldSub, kBeatSub})
    EXPECT_EQ(name_key({1, 7, sub}).find("part "), std::string::npos) << name_key({1, 7, sub});
}

}  // namespace
}  // namespace sparrow::coll
