#include "core/params.h"

#include <gtest/gtest.h>

#include "core/log.h"
#include <stdlib.h>

#include <cstdio>
#include <fstream>

namespace sparrow::params {
namespace {

IntParam kTestInt("TEST_INT", 42, "test integer", 0, 1000);
BoolParam kTestBool("TEST_BOOL", false, "test bool");
StringParam kTestChoice("TEST_CHOICE", "a", "test choice", {"a", "b"});

class ParamsTest : public ::testing::Test {
 protected:
  void SetUp() override { clear_overrides(); }
  void TearDown() override {
    unsetenv("SPARROW_TEST_INT");
    unsetenv("SPARROW_TEST_BOOL");
    unsetenv("SPARROW_TEST_CHOICE");
    clear_overrides();
  }
};

TEST_F(ParamsTest, DefaultsWhenUnset) {
  EXPECT_EQ(kTestInt.get(), 42);
  EXPECT_FALSE(kTestBool.get());
  EXPECT_EQ(kTestInt.info().source, Source::kDefault);
}

TEST_F(ParamsTest, EnvironmentWithSuffixes) {
  setenv("SPARROW_TEST_INT", "1K", 1);
  setenv("SPARROW_TEST_BOOL", "yes", 1);
  clear_overrides();  // forces re-resolution
  EXPECT_EQ(kTestInt.get(), 42);  // 1024 is out of [0, 1000]: the default stays
  EXPECT_NE(kTestInt.info().error.find("out of range"), std::string::npos);
  setenv("SPARROW_TEST_INT", "0x1f", 1);
  clear_overrides();
  EXPECT_EQ(kTestInt.get(), 31);
  EXPECT_EQ(kTestInt.info().source, Source::kEnv);
  EXPECT_TRUE(kTestBool.get());
  EXPECT_EQ(kTestBool.info().source, Source::kEnv);
}

TEST_F(ParamsTest, InvalidValueReportedByValidateAll) {
  setenv("SPARROW_TEST_CHOICE", "zzz", 1);
  clear_overrides();
  EXPECT_EQ(kTestChoice.get(), "a");
  Status s = validate_all();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("SPARROW_TEST_CHOICE='zzz'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("must be one of a b (any case)"), std::string::npos) << s.message();
}

TEST_F(ParamsTest, EnumeratedValuesIgnoreCase) {
  setenv("SPARROW_TEST_CHOICE", "B", 1);
  clear_overrides();
  EXPECT_EQ(kTestChoice.get(), "b") << "the canonical spelling";
  EXPECT_TRUE(validate_all().ok());
}

TEST(LogPath, HostAndPidAreExpanded) {
  EXPECT_EQ(log::expand_log_path("log.%h.%p", "node7", 1234), "log.node7.1234");
  EXPECT_EQ(log::expand_log_path("plain%", "h", 1), "plain%");
  EXPECT_EQ(log::expand_log_path("%x%%h", "h", 1), "%x%h");
}

TEST(LogSubsys, NcclStyleSelection) {
  using namespace log;
  const unsigned all = kInit | kNet | kColl | kTree | kCodec;
  EXPECT_EQ(parse_subsystems("ALL"), all) << "steps only when asked for";
  EXPECT_EQ(parse_subsystems("all,step"), all | kStep);
  EXPECT_EQ(parse_subsystems("STEP"), unsigned(kStep));
  EXPECT_EQ(parse_subsystems("init,net"), unsigned(kInit | kNet));
  EXPECT_EQ(parse_subsystems("^net,step"), unsigned(kInit | kColl | kTree | kCodec));
  EXPECT_EQ(parse_subsystems(""), 0u);
  EXPECT_EQ(subsystem_of("/x/src/transport/tcp/tcp_backend.cpp"), unsigned(kNet));
  EXPECT_EQ(subsystem_of("/x/src/collectives/bcast.cpp"), unsigned(kColl));
  EXPECT_EQ(subsystem_of("/x/topology/tree.cpp"), unsigned(kTree));
  EXPECT_EQ(subsystem_of("/x/src/kernels/cpu/apply.cpp"), unsigned(kCodec));
  EXPECT_EQ(subsystem_of("/x/src/api/api.cpp"), unsigned(kInit));
}

TEST_F(ParamsTest, OverrideBeatsEnvironmentAndIsChecked) {
  setenv("SPARROW_TEST_INT", "7", 1);
  ASSERT_TRUE(set_override("TEST_INT", "9").ok());
  EXPECT_EQ(kTestInt.get(), 9);
  EXPECT_EQ(kTestInt.info().source, Source::kOverride);
  EXPECT_EQ(set_override("TEST_INT", "nine").code(), Code::kInvalidArgument);
  EXPECT_EQ(set_override("NO_SUCH_PARAM", "1").code(), Code::kInvalidArgument);
  clear_overrides();
  EXPECT_EQ(kTestInt.get(), 7);
}

TEST_F(ParamsTest, AllListsRegisteredParametersSorted) {
  auto v = all();
  ASSERT_GE(v.size(), 3u);
  for (size_t i = 1; i < v.size(); ++i) EXPECT_LT(v[i - 1].name, v[i].name);
  bool found = false;
  for (auto& i : v) found |= i.name == "TEST_INT" && i.doc == "test integer";
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace sparrow::params
