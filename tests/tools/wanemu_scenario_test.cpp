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

// [prices] is for cost projections: read and checked, and a table may follow it.
TEST(WanemuScenario, PricesAreReadAndTheRestStillParses) {
  auto s = parse_scenario("[[host]]\nregion = \"a\"\n[prices]\ngpu_hour_on_demand = 2.85\ngpu_hour_reserved = 6.5\n"
                          "egress_per_gb = 0.09\ngpus_per_host = 8\n[[host]]\nregion = \"b\"\n");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->hosts.size(), 2u);
  EXPECT_EQ(s->prices.gpu_hour_on_demand, 2.85);
  EXPECT_EQ(s->prices.gpu_hour_reserved, 6.5);
  EXPECT_EQ(s->prices.egress_per_gb, 0.09);
  EXPECT_EQ(s->prices.gpus_per_host, 8);
  auto none = load_scenario(std::string(SPARROW_SOURCE_DIR) + "/bench/scenarios/us_canada.toml");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->prices.gpu_hour_on_demand, 0);
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
  bad("[[host]]\n[prices]\ngpu_hour = 3\n", "unknown prices key 'gpu_hour'");
  bad("[[host]]\n[prices]\negress_per_gb = -1\n", "egress_per_gb = -1");
  EXPECT_EQ(load_scenario("/no/such/file.toml").status().code(), Code::kInvalidArgument);
}

TEST(WanemuScenario, FaultWordsAndTheirErrors) {
  auto f = parse_fault({"stall", "eu", "us", "--for", "2.5"});
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->kind, Fault::Kind::kStall);
  EXPECT_EQ(f->target, "eu");
  EXPECT_EQ(f->peer, "us");
  EXPECT_EQ(f->for_s, 2.5);
  EXPECT_EQ(describe(*f), "stall eu <-> us for 2.5 s");
  auto k = parse_fault({"kill", "host:eu-0", "--leaves"});
  ASSERT_TRUE(k.ok());
  EXPECT_TRUE(k->leaves);
  EXPECT_EQ(describe(parse_fault({"partition", "ap"}).value()), "partition ap from the rest until the end");
  auto bad = [](std::vector<std::string> w, const char* needle) {
    auto r = parse_fault(w);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  bad({}, "nothing given");
  bad({"explode", "eu"}, "unknown kind 'explode'");
  bad({"stall", "eu"}, "stall needs --for");
  bad({"stall", "eu", "--for", "0"}, "--for needs seconds");
  bad({"stop", "eu", "--for", "soon"}, "--for needs seconds");
  bad({"stop", "eu", "--for"}, "--for needs seconds");
  bad({"kill", "eu", "--for", "3"}, "kill takes no --for");
  bad({"kill"}, "needs a TARGET");
  bad({"kill", "a", "b"}, "too many targets");
  bad({"partition", "a", "--leaves"}, "--leaves is for kill and stop");
  bad({"stop", "a", "--slowly"}, "unknown option '--slowly'");
}

TEST(WanemuScenario, ScheduledFaultsAndTargets) {
  auto s = parse_scenario(R"(
[[host]]
name = "us"
region = "us"
count = 2
[[host]]
name = "eu"
region = "eu"
count = 2
[[fault]]
at_s = 3
kind = "stop"
target = "host:eu-1"
for_s = 1
leaves = true
[[fault]]
at_s = 1.5
kind = "partition"
target = "eu"
peer = "us"
)");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  ASSERT_EQ(s->faults.size(), 2u);
  EXPECT_EQ(s->faults[0].kind, Fault::Kind::kPartition);  // by at_s
  EXPECT_EQ(s->faults[0].at_s, 1.5);
  EXPECT_EQ(s->faults[1].for_s, 1);
  EXPECT_TRUE(s->faults[1].leaves);
  EXPECT_EQ(s->resolve("eu").value(), (std::vector<int>{2, 3}));
  EXPECT_EQ(s->resolve("host:eu-1").value(), (std::vector<int>{3}));
  EXPECT_EQ(s->resolve("us-0").value(), (std::vector<int>{0}));
  EXPECT_EQ(s->resolve("1").value(), (std::vector<int>{1}));
  EXPECT_FALSE(s->resolve("4").ok());
  EXPECT_FALSE(s->resolve("region:us-0").ok());
  auto bad = [](const std::string& fault, const char* needle) {
    auto r = parse_scenario("[[host]]\nname = \"h\"\nregion = \"r\"\n[[fault]]\n" + fault);
    ASSERT_FALSE(r.ok()) << fault;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  bad("kind = \"kill\"\ntarget = \"h\"\n", "needs at_s");
  bad("at_s = 1\nkind = \"kill\"\ntarget = \"mars\"\n", "'mars' names no region");
  bad("at_s = 1\nkind = \"stall\"\ntarget = \"h\"\n", "stall needs --for");
  bad("at_s = 1\nkind = \"kill\"\ntarget = \"h\"\nleaves = maybe\n", "leaves = maybe");
  bad("at_s = 1\nkind = \"kill\"\ntarget = \"h\"\nwhen = 3\n", "unknown fault key 'when'");
}

}  // namespace
}  // namespace sparrow::wanemu
