#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

#include <cstring>
#include <string>

#include "core/params.h"
#include "sparrow/sparrow.h"
#include "harness/comm_harness.h"

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

// A destroyed or aborted handle is refused with sparrowInvalidUsage, never dereferenced.
TEST(Api, DestroyedOrAbortedHandlesAreRefused) {
  sparrowUniqueId id;
  ASSERT_EQ(sparrowGetUniqueId(&id), sparrowSuccess);
  sparrowComm_t a = nullptr, b = nullptr;
  ASSERT_EQ(sparrowCommInitRank(&a, 1, id, 0), sparrowSuccess) << sparrowGetLastError(nullptr);
  ASSERT_EQ(sparrowGetUniqueId(&id), sparrowSuccess);
  ASSERT_EQ(sparrowCommInitRank(&b, 1, id, 0), sparrowSuccess) << sparrowGetLastError(nullptr);
  int n = 0;
  ASSERT_EQ(sparrowCommCount(a, &n), sparrowSuccess);
  EXPECT_EQ(n, 1);
  ASSERT_EQ(sparrowCommDestroy(a), sparrowSuccess);
  EXPECT_EQ(sparrowCommDestroy(a), sparrowInvalidUsage) << "a second destroy";
  EXPECT_NE(std::string(sparrowGetLastError(nullptr)).find("destroyed or aborted"), std::string::npos);
  EXPECT_EQ(sparrowCommCount(a, &n), sparrowInvalidUsage);
  uint16_t buf[4] = {1, 2, 3, 4};
  EXPECT_EQ(sparrowSparseBcast(buf, buf, 4, sparrowBfloat16, 0, a, nullptr), sparrowInvalidUsage);
  EXPECT_NE(std::string(sparrowGetLastError(a)).find("destroyed or aborted"), std::string::npos);
  ASSERT_EQ(sparrowCommAbort(b), sparrowSuccess);
  EXPECT_EQ(sparrowBroadcast(buf, buf, 4, sparrowBfloat16, 0, b, nullptr), sparrowInvalidUsage) << "a call after abort";
  sparrowStats st = SPARROW_STATS_INITIALIZER;
  EXPECT_EQ(sparrowCommGetStats(b, &st), sparrowInvalidUsage);
  EXPECT_EQ(sparrowCommAbort(b), sparrowInvalidUsage);
  EXPECT_EQ(sparrowCommDestroy(b), sparrowInvalidUsage);
  int bogus = 0;
  EXPECT_EQ(sparrowCommUserRank(reinterpret_cast<sparrowComm_t>(&bogus), &n), sparrowInvalidUsage) << "not a handle";
}

// One parser for settings: what the library accepts (size suffixes, booleans) comes back canonical,
// and what it rejects is an error naming the variable, for every caller (the Python module too).
TEST(Api, SettingsComeBackAsTheLibraryParsesThem) {
  char v[64];
  size_t need = 0;
  setenv("SPARROW_TIMEOUT_S", "1K", 1);
  sparrow::params::clear_overrides();
  ASSERT_EQ(sparrowGetSetting("TIMEOUT_S", v, sizeof v, &need), sparrowSuccess) << sparrowGetLastError(nullptr);
  EXPECT_STREQ(v, "1024");
  EXPECT_EQ(need, 5u);
  EXPECT_EQ(sparrowGetSetting("TIMEOUT_S", nullptr, 0, &need), sparrowSuccess);
  EXPECT_EQ(sparrowGetSetting("TIMEOUT_S", v, 3, &need), sparrowInvalidArgument);
  setenv("SPARROW_TIMEOUT_S", "soon", 1);
  sparrow::params::clear_overrides();
  EXPECT_EQ(sparrowGetSetting("TIMEOUT_S", v, sizeof v, &need), sparrowInvalidArgument);
  EXPECT_NE(std::string(sparrowGetLastError(nullptr)).find("SPARROW_TIMEOUT_S"), std::string::npos)
      << sparrowGetLastError(nullptr);
  unsetenv("SPARROW_TIMEOUT_S");
  sparrow::params::clear_overrides();
  EXPECT_EQ(sparrowGetSetting("NO_SUCH_SETTING", v, sizeof v, &need), sparrowInvalidArgument);
  EXPECT_EQ(sparrowGetSetting(nullptr, v, sizeof v, &need), sparrowInvalidArgument);
}

// Allocation failure inside a collective is sparrowSystemError with a message, never an abort of the
// user's process: a 1-rank communicator's root needs a shadow copy of its 256 MB buffer, and the
// address space is limited (RLIMIT_AS, as `ulimit -v`) to what the process had plus 96 MB.
TEST(Api, OutOfMemoryIsSystemErrorNotAnAbort) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(120);
    sparrowUniqueId id;
    sparrowComm_t comm = nullptr;
    if (sparrowGetUniqueId(&id) != sparrowSuccess || sparrowCommInitRank(&comm, 1, id, 0) != sparrowSuccess) _exit(2);
    const size_t n = size_t(128) << 20;  // bf16 elements: 256 MB
    std::vector<uint16_t> w(n, 0x3c00);
    unsigned long pages = 0;
    FILE* f = fopen("/proc/self/statm", "r");
    if (!f || fscanf(f, "%lu", &pages) != 1) _exit(3);
    fclose(f);
    rlimit lim{};
    lim.rlim_cur = lim.rlim_max = rlim_t(pages) * sysconf(_SC_PAGESIZE) + (rlim_t(96) << 20);
    if (setrlimit(RLIMIT_AS, &lim) != 0) _exit(4);
    sparrowResult_t rc = sparrowSparseBcast(w.data(), nullptr, n, sparrowBfloat16, 0, comm, nullptr);
    const std::string msg = sparrowGetLastError(comm);
    if (rc != sparrowSystemError) _exit(10 + int(rc));
    if (msg.find("out of memory") == std::string::npos) _exit(5);
    _exit(0);
  }
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st)) << "killed by signal " << WTERMSIG(st) << " (an abort: the exception escaped)";
  EXPECT_EQ(WEXITSTATUS(st), 0) << "10 + the result code when it was not sparrowSystemError";
}

namespace sparrow::test {
namespace {

// sparrowStats is versioned: a struct not made from SPARROW_STATS_INITIALIZER is refused, not written.
TEST(Api, StatsStructCarriesItsSizeAndVersion) {
  Comms comms(1);
  sparrowStats st = SPARROW_STATS_INITIALIZER;
  EXPECT_EQ(st.size, sizeof(sparrowStats));
  EXPECT_EQ(st.version, unsigned(SPARROW_STATS_VERSION));
  EXPECT_EQ(sparrowCommGetStats(comms.c[0], &st), sparrowSuccess);
  sparrowStats junk;
  memset(&junk, 0, sizeof junk);
  junk.ops = 12345;
  EXPECT_EQ(sparrowCommGetStats(comms.c[0], &junk), sparrowInvalidArgument);
  EXPECT_NE(std::string(sparrowGetLastError(nullptr)).find("SPARROW_STATS_INITIALIZER"), std::string::npos);
  EXPECT_EQ(junk.ops, 12345u) << "nothing written";
  junk.size = sizeof(sparrowStats) - 8;  // an older, smaller struct than the library knows
  junk.version = 1;
  EXPECT_EQ(sparrowCommGetStats(comms.c[0], &junk), sparrowInvalidArgument);
}

}  // namespace
}  // namespace sparrow::test
