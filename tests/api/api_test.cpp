#include <gtest/gtest.h>

#include <cstring>

#include "sparrow/sparrow.h"

TEST(Api, VersionAndErrorStrings) {
  int v = 0;
  EXPECT_EQ(sparrowGetVersion(&v), sparrowSuccess);
  EXPECT_EQ(v, SPARROW_VERSION_CODE);
  EXPECT_EQ(sparrowGetVersion(nullptr), sparrowInvalidArgument);
  EXPECT_STREQ(sparrowGetErrorString(sparrowSuccess), "success");
  EXPECT_STREQ(sparrowGetErrorString(sparrowCorruptData), "corrupt data");
  EXPECT_STREQ(sparrowGetErrorString(static_cast<sparrowResult_t>(99)), "unknown result code");
}

TEST(Api, NumberingMatchesNccl) {
  // ncclResult_t 0-8 and ncclDataType_t values, as in nccl.h.
  EXPECT_EQ(sparrowInvalidUsage, 5);
  EXPECT_EQ(sparrowTimeout, 8);
  EXPECT_EQ(sparrowFloat16, 6);
  EXPECT_EQ(sparrowBfloat16, 9);
  EXPECT_EQ(sizeof(sparrowUniqueId), 128u);
}
