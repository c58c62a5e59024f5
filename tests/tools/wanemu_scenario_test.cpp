#include "tools/wanemu/scenario.h"

#include <gtest/gtest.h>

namespace sparrow::wanemu {
namespace {

TEST(WanemuScenario, ParsesHostsLinksAndReplication) {
  auto s = parse_scenario(R"(
seed = 7          # comment
mtu = 9000
[[host]]
name = "tr"
region = "us"
up_mbit = 500
down_mbit = 1000
[[host]]
name = "w"
region = "eu"
count = 3
queue_ms = 20
[[link]]
a = "us"
b = "eu"
delay_ms = 40
jitter_ms = 2
loss = 0.001
ge_p = 0.01
ge_r = 0.5
ge_loss = 0.3
)");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->seed, 7u);
  EXPECT_EQ(s->mtu, 9000);
  ASSERT_EQ(s->hosts.size(), 4u);
  EXPECT_EQ(s->hosts[2].name, "w-1");
  EXPECT_EQ(s->hosts[3].queue_ms, 20);
  EXPECT_EQ(s->hosts[0].up_mbit, 500);
  EXPECT_EQ(s->regions(), (std::vector<std::string>{"us", "eu"}));
  const Link* l = s->link("eu", "us");
  ASSERT_NE(l, nullptr);
  EXPECT_EQ(l->delay_ms, 40);
  EXPECT_EQ(l->ge_loss, 0.3);
  EXPECT_EQ(s->link("eu", "eu"), nullptr);
}

TEST(WanemuScenario, ShippedScenariosParse) {
  for (const char* f : {"paper.toml", "four_regions.toml", "heterogeneous.toml"}) {
    auto s = load_scenario(std::string(SPARROW_SOURCE_DIR) + "/bench/scenarios/" + f);
    ASSERT_TRUE(s.ok()) << f << ": " << s.status().to_string();
    EXPECT_EQ(s->hosts.size(), 8u) << f;
  }
  auto uc = load_scenario(std::string(SPARROW_SOURCE_DIR) + "/bench/scenarios/us_canada.toml");
  ASSERT_TRUE(uc.ok()) << uc.status().to_string();
  EXPECT_EQ(uc->hosts.size(), 2u);
  const Link* l = uc->link("us", "canada");
  ASSERT_NE(l, nullptr);
  EXPECT_EQ(l->delay_ms, 15);
}

TEST(WanemuScenario, ClearErrors) {
  auto bad = [](const char* text, const char* needle) {
    auto s = parse_scenario(text);
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_NE(s.status().message().find(needle), std::string::npos) << s.status().message();
  };
  bad("", "no [[host]]");
  bad("[[host]]\nspeed = 3\n", "unknown host key 'speed'");
  bad("[[host]]\nup_mbit = fast\n", "up_mbit = fast");
  bad("[[host]]\nregion = \"a\"\n[[link]]\na = \"a\"\nb = \"z\"\n", "region 'z'");
  bad("[[host]]\n[[link]]\nloss = 2\na = \"default\"\n", "loss = 2");
  bad("[hosts]\n", "unknown table");
  EXPECT_EQ(load_scenario("/no/such/file.toml").status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace sparrow::wanemu
