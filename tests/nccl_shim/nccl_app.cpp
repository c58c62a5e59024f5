// An ordinary NCCL program (it knows nothing of sparrow): 4 ranks as threads broadcast bf16 "weights"
// that change ~1% per step, plus an int32 broadcast, an fp32 all-reduce and a grouped broadcast. Run
// against the test double of libnccl, with or without libsparrow_nccl.so in front of it.
//
//   nccl_app --expect-intercept 1|0 [--init rank|config|nonblocking]
// Exits non-zero if a result is wrong or if the broadcasts were (not) served by the shim as expected.
#include <nccl.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

extern "C" long fakeNcclBroadcastCount(int dtype);

#define NCCL_CHECK(x)                                                                \
  do {                                                                               \
    ncclResult_t r_ = (x);                                                           \
    if (r_ != ncclSuccess) {                                                         \
      fprintf(stderr, "%s failed: %d (%s)\n", #x, int(r_), ncclGetErrorString(r_));  \
      errors++;                                                                      \
    }                                                                                \
  } while (0)

int main(int argc, char** argv) {
  int expect = -1;
  const char* init = "rank";  // rank | config | nonblocking: which init call the program uses
  for (int i = 1; i + 1 < argc; ++i) {
    if (!strcmp(argv[i], "--expect-intercept")) expect = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "--init")) init = argv[i + 1];
  }
  if (expect < 0) {
    fprintf(stderr, "usage: nccl_app --expect-intercept 1|0\n");
    return 2;
  }
  const int n = 4, steps = 5;
  const size_t count = 1 << 18;
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
  std::vector<uint16_t> weights(count);
  uint64_t s = 42;
  for (auto& w : weights) w = uint16_t((s = s * 6364136223846793005ull + 1) >> 48);
  std::vector<std::vector<uint16_t>> recv(n, std::vector<uint16_t>(count, 0));
  std::vector<std::vector<uint16_t>> recv2(n, std::vector<uint16_t>(1000, 0));
  std::atomic<int> errors{0};
  std::atomic<int> wrong{0};
  std::vector<ncclComm_t> comms(n);
  // The trainer (rank 0) changes ~1% of its weights between steps; one thread per rank.
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r) {
    ts.emplace_back([&, r] {
      if (!strcmp(init, "rank")) {
        NCCL_CHECK(ncclCommInitRank(&comms[r], n, id, r));
      } else {
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        if (!strcmp(init, "nonblocking")) cfg.blocking = 0;
        NCCL_CHECK(ncclCommInitRankConfig(&comms[r], n, id, r, &cfg));
      }
      for (int step = 0; step < steps; ++step) {
        uint16_t* buf = r == 0 ? weights.data() : recv[r].data();
        NCCL_CHECK(ncclBroadcast(buf, buf, count, ncclBfloat16, 0, comms[r], nullptr));
        if (r != 0 && memcmp(buf, weights.data(), count * 2) != 0) wrong++;
        // Everyone has checked before the trainer changes its weights.
        std::vector<float> one(1, 1.f), sum(1, 0.f);
        NCCL_CHECK(ncclAllReduce(one.data(), sum.data(), 1, ncclFloat32, ncclSum, comms[r], nullptr));
        if (sum[0] != float(n)) wrong++;
        if (r == 0)
          for (size_t i = step * 7; i < count; i += 100) weights[i] ^= uint16_t(1 + step);
        NCCL_CHECK(ncclAllReduce(one.data(), sum.data(), 1, ncclFloat32, ncclSum, comms[r], nullptr));
      }
      // A type that is not intercepted by default, and a group of two broadcasts.
      std::vector<int32_t> ints(333, r == 2 ? 7 : 0);
      NCCL_CHECK(ncclBcast(ints.data(), ints.size(), ncclInt32, 2, comms[r], nullptr));
      for (int32_t v : ints)
        if (v != 7) { wrong++; break; }
      std::vector<uint16_t> small(1000, r == 1 ? 0x3f80 : 0);
      NCCL_CHECK(ncclGroupStart());
      NCCL_CHECK(ncclBroadcast(weights.data(), r == 0 ? weights.data() : recv[r].data(), count, ncclBfloat16, 0, comms[r], nullptr));
      NCCL_CHECK(ncclBroadcast(small.data(), recv2[r].data(), 1000, ncclBfloat16, 1, comms[r], nullptr));
      NCCL_CHECK(ncclGroupEnd());
      if (r != 0 && memcmp(recv[r].data(), weights.data(), count * 2) != 0) wrong++;
      for (uint16_t v : recv2[r])
        if (v != 0x3f80) { wrong++; break; }
      NCCL_CHECK(ncclCommDestroy(comms[r]));
    });
  }
  for (auto& t : ts) t.join();
  const long bf16_in_nccl = fakeNcclBroadcastCount(ncclBfloat16), int32_in_nccl = fakeNcclBroadcastCount(ncclInt32),
             u8_in_nccl = fakeNcclBroadcastCount(ncclUint8);
  printf("errors %d, wrong results %d; broadcasts performed by libnccl: bfloat16 %ld, int32 %ld, uint8 %ld\n",
         errors.load(), wrong.load(), bf16_in_nccl, int32_in_nccl, u8_in_nccl);
  bool ok = errors == 0 && wrong == 0 && int32_in_nccl == n;
  if (expect) {
    ok = ok && bf16_in_nccl == 0 && u8_in_nccl == n;  // the shim's bootstrap used NCCL once per rank
    printf("%s\n", ok ? "bfloat16 broadcasts served by sparrow: yes" : "FAILED: expected sparrow to serve the bfloat16 broadcasts");
  } else {
    ok = ok && bf16_in_nccl == long(n) * (steps + 2) && u8_in_nccl == 0;
    printf("%s\n", ok ? "all broadcasts served by libnccl: yes" : "FAILED: expected every broadcast in libnccl");
  }
  return ok ? 0 : 1;
}
