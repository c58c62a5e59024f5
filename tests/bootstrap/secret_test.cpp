// SPARROW_SECRET_FILE: the files it accepts and refuses, and unique ids that carry no secret.
#include "bootstrap/secret.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "bootstrap/bootstrap.h"
#include "core/params.h"
#include "sparrow/sparrow.h"
#include "transport/auth.h"

namespace sparrow::bootstrap {
namespace {

class SecretFile : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sparrow-secret-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    params::clear_overrides();
    for (const auto& f : files_) unlink(f.c_str());
    rmdir(dir_.c_str());
  }
  std::string write(const std::string& name, const std::string& text, mode_t mode) {
    std::string path = dir_ + "/" + name;
    FILE* f = fopen(path.c_str(), "w");
    fputs(text.c_str(), f);
    fclose(f);
    chmod(path.c_str(), mode);
    files_.push_back(path);
    return path;
  }
  std::string dir_;
  std::vector<std::string> files_;
};

TEST_F(SecretFile, AcceptsAPrivateFileAndRefusesEveryOtherWithItsReason) {
  const std::string text = "c2VjcmV0LXNoYXJlZC1ieS1ldmVyeS1yYW5r";
  auto ok = read_secret_file(write("ok", text + "\n", 0600));
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->size(), 16u);
  // The trailing newline is not part of the secret: a file written by echo and one by printf agree.
  EXPECT_EQ(read_secret_file(write("printf", text, 0400)).value(), ok.value());
  EXPECT_NE(read_secret_file(write("other", text + "x", 0600)).value(), ok.value());
  struct Bad {
    std::string path, why;
  } bad[] = {
      {write("world", text, 0644), "chmod 600"},
      {write("group", text, 0620), "group or others"},
      {write("short", "too-short", 0600), "at least 16"},
      {dir_ + "/missing", "cannot open"},
      {dir_, "not a regular file"},
  };
  std::string link = dir_ + "/link";
  ASSERT_EQ(symlink((dir_ + "/ok").c_str(), link.c_str()), 0);
  files_.push_back(link);
  bad[3].path = dir_ + "/missing";
  for (const auto& b : bad) {
    auto r = read_secret_file(b.path);
    ASSERT_FALSE(r.ok()) << b.path;
    EXPECT_EQ(r.status().code(), Code::kInvalidUsage);
    EXPECT_NE(r.status().message().find(b.why), std::string::npos) << r.status().message();
  }
  EXPECT_FALSE(read_secret_file(link).ok()) << "a symbolic link is not followed";
}

TEST_F(SecretFile, AnIdMadeWithItCarriesNoSecretAndNeedsTheSameFile) {
  const std::string mine = write("mine", "0123456789abcdef0123456789abcdef", 0600);
  ASSERT_TRUE(params::set_override("SECRET_FILE", mine).ok());
  auto secret = secret_from_file();
  ASSERT_TRUE(secret.ok() && secret->has_value());
  IdData d{0x77, **secret, "127.0.0.1:5555", true};
  uint8_t id[kIdBytes];
  encode_id(d, id);
  EXPECT_EQ(std::search(id, id + kIdBytes, d.secret.begin(), d.secret.end()), id + kIdBytes)
      << "the secret is not in the id";
  auto back = decode_id(id);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->secret, d.secret);
  // A rank with another file, or none, is told so at once.
  ASSERT_TRUE(params::set_override("SECRET_FILE", write("theirs", "fedcba9876543210fedcba9876543210", 0600)).ok());
  auto other = decode_id(id);
  EXPECT_EQ(other.status().code(), Code::kInvalidUsage);
  EXPECT_NE(other.status().message().find("another secret"), std::string::npos) << other.status().message();
  ASSERT_TRUE(params::set_override("SECRET_FILE", "").ok());
  EXPECT_NE(decode_id(id).status().message().find("carries no secret"), std::string::npos);
}

TEST_F(SecretFile, RanksSharingTheFileFormACommunicatorThroughTheCApi) {
  ASSERT_TRUE(params::set_override("SECRET_FILE", write("s", "a-secret-every-rank-of-this-job-holds", 0600)).ok());
  sparrowUniqueId uid;
  ASSERT_EQ(sparrowGetUniqueId(&uid), sparrowSuccess) << sparrowGetLastError(nullptr);
  sparrowComm_t comms[2] = {};
  sparrowResult_t rc[2];
  std::thread t([&] { rc[1] = sparrowCommInitRank(&comms[1], 2, uid, 1); });
  rc[0] = sparrowCommInitRank(&comms[0], 2, uid, 0);
  t.join();
  EXPECT_EQ(rc[0], sparrowSuccess);
  EXPECT_EQ(rc[1], sparrowSuccess);
  for (auto c : comms)
    if (c) sparrowCommDestroy(c);
  // A bad file fails at sparrowGetUniqueId, with the reason.
  ASSERT_TRUE(params::set_override("SECRET_FILE", write("open", "a-secret-every-rank-of-this-job-holds", 0604)).ok());
  EXPECT_EQ(sparrowGetUniqueId(&uid), sparrowInvalidUsage);
  EXPECT_NE(std::string(sparrowGetLastError(nullptr)).find("chmod 600"), std::string::npos);
}

// Keys for other purposes (the Python rendezvous): HMAC-SHA256 by label of the file's contents, with
// the same checks, through the C API; the communicator secret is the "sparrow secret file v1" key.
TEST_F(SecretFile, KeysByLabelGetTheSameChecksThroughTheCApi) {
  const std::string text = "a-secret-every-rank-of-this-job-holds";
  const std::string path = write("k", text + "\n", 0600);
  unsigned char key[32], again[32], other[32];
  ASSERT_EQ(sparrowSecretFileKey(path.c_str(), "sparrow rendezvous v1", key), sparrowSuccess) << sparrowGetLastError(nullptr);
  const std::string label = "sparrow rendezvous v1";
  const auto want = transport::auth::hmac_sha256(std::vector<uint8_t>(label.begin(), label.end()),
                                                 std::vector<uint8_t>(text.begin(), text.end()));
  EXPECT_EQ(0, memcmp(key, want.data(), 32)) << "HMAC-SHA256(label, contents without the newline)";
  ASSERT_EQ(sparrowSecretFileKey(path.c_str(), "another purpose", other), sparrowSuccess);
  EXPECT_NE(0, memcmp(key, other, 32));
  auto secret = read_secret_file(path);
  ASSERT_TRUE(secret.ok());
  auto as_key = secret_file_key(path, "sparrow secret file v1");
  ASSERT_TRUE(as_key.ok());
  EXPECT_TRUE(std::equal(secret->begin(), secret->end(), as_key->begin()));
  // No path: SPARROW_SECRET_FILE, else refused.
  EXPECT_EQ(sparrowSecretFileKey(nullptr, "sparrow rendezvous v1", again), sparrowInvalidUsage);
  EXPECT_NE(std::string(sparrowGetLastError(nullptr)).find("SPARROW_SECRET_FILE is not set"), std::string::npos);
  ASSERT_TRUE(params::set_override("SECRET_FILE", path).ok());
  ASSERT_EQ(sparrowSecretFileKey("", "sparrow rendezvous v1", again), sparrowSuccess);
  EXPECT_EQ(0, memcmp(key, again, 32));
  // The file's checks, and the arguments'.
  EXPECT_EQ(sparrowSecretFileKey(write("loose", text, 0644).c_str(), "x", again), sparrowInvalidUsage);
  EXPECT_NE(std::string(sparrowGetLastError(nullptr)).find("chmod 600"), std::string::npos);
  EXPECT_EQ(sparrowSecretFileKey(path.c_str(), "", again), sparrowInvalidArgument);
  EXPECT_EQ(sparrowSecretFileKey(path.c_str(), std::string(257, 'l').c_str(), again), sparrowInvalidArgument);
  EXPECT_EQ(sparrowSecretFileKey(path.c_str(), nullptr, again), sparrowInvalidArgument);
  EXPECT_EQ(sparrowSecretFileKey(path.c_str(), "x", nullptr), sparrowInvalidArgument);
}

}  // namespace
}  // namespace sparrow::bootstrap
