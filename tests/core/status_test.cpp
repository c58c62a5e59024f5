#include "core/status.h"

#include <gtest/gtest.h>

namespace sparrow {
namespace {

Result<int> half(int x) {
  if (x % 2) return InvalidArgument("odd: " + std::to_string(x));
  return x / 2;
}

Status quarter(int x, int* out) {
  SPARROW_ASSIGN_OR_RETURN(int h, half(x));
  SPARROW_ASSIGN_OR_RETURN(*out, half(h));
  return Status::Ok();
}

TEST(Status, OkAndError) {
  EXPECT_TRUE(Status::Ok().ok());
  Status s = CorruptData("bad chunk");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kCorruptData);
  EXPECT_EQ(s.to_string(), "corrupt data: bad chunk");
}

TEST(Status, ContextAddsBreadcrumbsOutermostFirst) {
  Status s = CorruptData("checksum mismatch");
  s.context("chunk 3").context("applying version 7");
  EXPECT_EQ(s.message(), "applying version 7: chunk 3: checksum mismatch");
  Status ok;
  ok.context("ignored");
  EXPECT_EQ(ok.message(), "");
}

TEST(Result, PropagatesThroughMacros) {
  int out = 0;
  EXPECT_TRUE(quarter(8, &out).ok());
  EXPECT_EQ(out, 2);
  Status s = quarter(6, &out);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "odd: 3");
}

TEST(Result, OkStatusIsNotAValue) {
  Result<int> r{Status::Ok()};
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInternalError);
}

TEST(Status, SystemErrorNamesErrno) {
  Status s = SystemError("connect to 10.0.0.1:80", ECONNREFUSED);
  EXPECT_EQ(s.code(), Code::kSystemError);
  EXPECT_NE(s.message().find("Connection refused"), std::string::npos);
}

}  // namespace
}  // namespace sparrow
