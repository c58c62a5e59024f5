// The step file container: round trip, and every corruption or truncation is a clear error.
#include "format/container.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>

#include "harness/util.h"

namespace sparrow::format {
namespace {

TEST(StepFile, RoundTripsPayloadAndMetadata) {
  auto payload = test::random_bytes(5000, 3);
  auto bytes = encode_step_file(payload, "{\"k\": 1}");
  auto f = decode_step_file(bytes);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->payload, payload);
  EXPECT_EQ(f->metadata, "{\"k\": 1}");
  EXPECT_EQ(bytes.size(), kStepFilePrefix + 8 + payload.size());
}

TEST(StepFile, CorruptTruncatedOrForeignInputIsAnError) {
  auto bytes = encode_step_file(test::random_bytes(777, 4), "{}");
  for (size_t cut : {size_t(0), size_t(7), kStepFilePrefix, bytes.size() - 1}) {
    auto f = decode_step_file(std::span<const uint8_t>(bytes).first(cut));
    EXPECT_EQ(f.status().code(), Code::kCorruptData) << "cut at " << cut;
  }
  for (size_t at : {kStepFilePrefix + 1, kStepFilePrefix + 2 + 100}) {  // in the metadata, in the payload
    auto flip = bytes;
    flip[at] ^= 1;
    EXPECT_NE(decode_step_file(flip).status().message().find("checksum"), std::string::npos) << at;
  }
  auto magic = bytes;
  magic[0] = 'X';
  EXPECT_NE(decode_step_file(magic).status().message().find("magic"), std::string::npos);
  auto ver = bytes;
  ver[8] = 9;
  EXPECT_EQ(decode_step_file(ver).status().code(), Code::kVersionMismatch);
  auto longer = bytes;
  longer.push_back(0);
  EXPECT_EQ(decode_step_file(longer).status().code(), Code::kCorruptData);
}

TEST(StepFile, AtomicWriteLeavesNoPartialFile) {
  char dir[] = "/tmp/sparrow-container-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string p = std::string(dir) + "/a.spd";
  auto data = test::random_bytes(10000, 5);
  ASSERT_TRUE(write_file_atomic(p, data).ok());
  auto back = read_file(p);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back.value(), data);
  // An unwritable destination fails cleanly and leaves the old file.
  EXPECT_FALSE(write_file_atomic(std::string(dir) + "/no/such/dir/b.spd", data).ok());
  EXPECT_EQ(read_file(std::string(dir) + "/nonexistent").status().code(), Code::kSystemError);
  unlink(p.c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace sparrow::format
