#include "collectives/elastic/members.h"

#include <gtest/gtest.h>

namespace sparrow::coll {
namespace {

TEST(Members, AFixedSetListsEveryRank) {
  Members m(4);
  EXPECT_EQ(m.live(), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_TRUE(m.all_live());
  EXPECT_EQ(m.drops(), 0u);
}

TEST(Members, DropIsOnceAndCounted) {
  Members m(4);
  m.drop(2, 7, "test");
  m.drop(2, 8, "again");  // already out: nothing changes
  m.drop(9, 8, "not a rank");
  EXPECT_EQ(m.live(), (std::vector<int>{0, 1, 3}));
  EXPECT_FALSE(m.is_live(2));
  EXPECT_FALSE(m.all_live());
  EXPECT_EQ(m.drops(), 1u);
}

TEST(Members, AReceiverAdoptsTheRootsList) {
  Members m(5);
  m.assign({0, 1, 4});
  EXPECT_EQ(m.live(), (std::vector<int>{0, 1, 4}));
  EXPECT_EQ(m.drops(), 2u);
  m.assign({0, 4});
  EXPECT_EQ(m.drops(), 3u);
}

TEST(Members, AssignReturnsTheDroppedAndAdmitTakesASlotBack) {
  Members m(4);
  EXPECT_EQ(m.assign({0, 1, 3}), (std::vector<int>{2}));
  EXPECT_TRUE(m.assign({0, 1, 3}).empty()) << "already out";
  m.mark_unreachable(2);
  m.admit(2);
  EXPECT_TRUE(m.is_live(2));
  EXPECT_FALSE(m.unreachable(2)) << "a new process in the slot is reachable again";
  EXPECT_TRUE(m.all_live());
}

TEST(Members, UnreachableIsRemembered) {
  Members m(3);
  EXPECT_FALSE(m.unreachable(1));
  m.mark_unreachable(1);
  EXPECT_TRUE(m.unreachable(1));
  EXPECT_FALSE(m.unreachable(-1));
}

}  // namespace
}  // namespace sparrow::coll
