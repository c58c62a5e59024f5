// The CUDA kernels against the CPU oracle, bit for bit, and the collectives on real device memory.
// Label `gpu`: every test skips cleanly on a machine without a usable GPU.
#include "kernels/cuda/kernels.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/params.h"
#include "format/block_sum.h"
#include "format/index_codec.h"
#include "harness/device_cases.h"
#include "harness/util.h"
#include "kernels/cpu/extract.h"
#include "kernels/device.h"

namespace sparrow {
namespace {

bool have_gpu() {
  int n = 0;
  bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  cudaGetLastError();
  return ok;
}

#define SKIP_WITHOUT_GPU() \
  if (!have_gpu()) GTEST_SKIP() << "no usable CUDA device"

#define CUDA_OK(x) ASSERT_EQ(int(x), 0) << #x << ": " << cudaGetErrorString(cudaError_t(x))

struct Dev {
  void* p = nullptr;
  explicit Dev(size_t n) { cudaMalloc(&p, n ? n : 1); }
  ~Dev() { cudaFree(p); }
  template <typename T = void>
  T* get() const { return static_cast<T*>(p); }
};

// Elements of `es` bytes with ~density changed between a and b (special values included).
void make_pair(std::vector<uint8_t>& a, std::vector<uint8_t>& b, uint32_t n, uint32_t es, double density, uint64_t seed) {
  a = test::random_bytes(size_t(n) * es, seed);
  b = a;
  test::mutate(b, es, density, seed + 1);
}

TEST(CudaKernels, ExtractMatchesTheCpuOracle) {
  SKIP_WITHOUT_GPU();
  cudaStream_t st;
  CUDA_OK(cudaStreamCreate(&st));
  for (uint32_t es : {1u, 2u, 4u, 8u}) {
    for (uint32_t n : {1u, 1000u, (1u << 20) + 3}) {
      for (double density : {0.0, 1e-4, 0.01, 0.5, 1.0}) {
        std::vector<uint8_t> shadow, cur;
        make_pair(shadow, cur, n, es, density, n + es);
        if (density == 1.0)
          for (auto& x : cur) x = uint8_t(~x);
        // Oracle.
        std::vector<uint8_t> cshadow = shadow, cold(size_t(n) * es), cnew(size_t(n) * es);
        std::vector<uint32_t> cpos(n);
        size_t ck = kernels::cpu::extract_scalar(cur.data(), cshadow.data(), n, es, cpos.data(), cold.data(), cnew.data());
        // Device.
        Dev dcur(cur.size()), dsh(shadow.size()), dpos(size_t(n) * 4), dold(cur.size()), dnew(cur.size()), dcnt(4);
        CUDA_OK(cudaMemcpy(dcur.p, cur.data(), cur.size(), cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(dsh.p, shadow.data(), shadow.size(), cudaMemcpyHostToDevice));
        size_t sb = 0;
        CUDA_OK(kernels::cuda::extract_scratch_bytes(n, es, &sb));
        Dev scratch(sb);
        CUDA_OK(kernels::cuda::extract(dcur.p, dsh.p, n, es, dpos.get<uint32_t>(), dold.p, dnew.p, dcnt.get<uint32_t>(),
                                       scratch.p, sb, st));
        CUDA_OK(cudaStreamSynchronize(st));
        uint32_t k = 0;
        CUDA_OK(cudaMemcpy(&k, dcnt.p, 4, cudaMemcpyDeviceToHost));
        ASSERT_EQ(k, ck) << "es " << es << " n " << n << " density " << density;
        std::vector<uint32_t> gpos(k);
        std::vector<uint8_t> gold(size_t(k) * es), gnew(size_t(k) * es), gsh(shadow.size());
        CUDA_OK(cudaMemcpy(gpos.data(), dpos.p, size_t(k) * 4, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(gold.data(), dold.p, gold.size(), cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(gnew.data(), dnew.p, gnew.size(), cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(gsh.data(), dsh.p, gsh.size(), cudaMemcpyDeviceToHost));
        cpos.resize(k);
        cold.resize(gold.size());
        cnew.resize(gnew.size());
        EXPECT_EQ(gpos, cpos);
        EXPECT_EQ(gold, cold);
        EXPECT_EQ(gnew, cnew);
        EXPECT_EQ(gsh, cshadow) << "shadow refreshed";
        EXPECT_EQ(gsh, cur);

        // The index codec on the device == the CPU encoder.
        size_t lb = 0;
        CUDA_OK(kernels::cuda::leb128_scratch_bytes(n, &lb));
        Dev lscratch(lb), lout(size_t(n) * 5 + 1), lbytes(4);
        CUDA_OK(kernels::cuda::encode_leb128(dpos.get<uint32_t>(), dcnt.get<uint32_t>(), n, lout.get<uint8_t>(),
                                             lbytes.get<uint32_t>(), lscratch.p, lb, st));
        CUDA_OK(cudaStreamSynchronize(st));
        uint32_t len = 0;
        CUDA_OK(cudaMemcpy(&len, lbytes.p, 4, cudaMemcpyDeviceToHost));
        std::vector<uint8_t> want, got(len);
        format::encode_index(format::IndexCodec::kLeb128, cpos.data(), k, n, 1, want);
        CUDA_OK(cudaMemcpy(got.data(), lout.p, len, cudaMemcpyDeviceToHost));
        EXPECT_EQ(got, want) << "leb128, es " << es << " n " << n << " density " << density;

        // Apply: scatter the new values onto the old buffer, gather them back.
        Dev target(shadow.size()), back(size_t(k) * es + 1);
        CUDA_OK(cudaMemcpy(target.p, shadow.data(), shadow.size(), cudaMemcpyHostToDevice));
        CUDA_OK(kernels::cuda::gather(target.p, dpos.get<uint32_t>(), k, es, back.p, st));
        CUDA_OK(kernels::cuda::scatter(target.p, dpos.get<uint32_t>(), k, es, dnew.p, st));
        CUDA_OK(cudaStreamSynchronize(st));
        std::vector<uint8_t> applied(cur.size()), gathered(size_t(k) * es);
        CUDA_OK(cudaMemcpy(applied.data(), target.p, applied.size(), cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(gathered.data(), back.p, gathered.size(), cudaMemcpyDeviceToHost));
        EXPECT_EQ(applied, cur);
        EXPECT_EQ(gathered, cold);
      }
    }
  }
  cudaStreamDestroy(st);
}

// Whole-buffer extraction (count, then collect) == the CPU oracle chunk by chunk: offsets, positions
// within chunks, values and the refreshed shadow; aligned (vector loads) and misaligned buffers, chunk
// sizes that are and are not whole tiles, a short last chunk.
TEST(CudaKernels, ChangesOfAWholeBufferMatchTheCpuOracle) {
  SKIP_WITHOUT_GPU();
  const uint32_t n = (1u << 20) + 37;
  for (uint32_t es : {1u, 2u, 4u, 8u}) {
    for (uint32_t ce : {4096u, 1000u, 1u << 20, 3u * 4096u + 5u}) {
      for (uint32_t skew : {0u, 1u}) {  // elements: 1 misaligns the vectors
        for (double density : {0.0, 0.01, 0.5}) {
          std::vector<uint8_t> shadow, cur;
          make_pair(shadow, cur, n, es, density, n + es + ce + skew);
          const uint64_t nchunks = (n + ce - 1) / ce;
          std::vector<uint64_t> want_off(nchunks + 1, 0);
          std::vector<uint32_t> want_pos(n);
          std::vector<uint8_t> cshadow = shadow, want_old(size_t(n) * es), want_new(size_t(n) * es);
          for (uint64_t c = 0; c < nchunks; ++c) {
            const uint64_t b = c * ce, at = want_off[c];
            const uint32_t m = uint32_t(std::min<uint64_t>(ce, n - b));
            want_off[c + 1] = at + kernels::cpu::extract_scalar(cur.data() + b * es, cshadow.data() + b * es, m, es,
                                                                 want_pos.data() + at, want_old.data() + at * es,
                                                                 want_new.data() + at * es);
          }
          const uint64_t k = want_off[nchunks];
          Dev dcur((size_t(n) + 1) * es), dsh((size_t(n) + 1) * es), doffs((nchunks + 1) * 8);
          uint8_t* c0 = dcur.get<uint8_t>() + skew * es;
          uint8_t* s0 = dsh.get<uint8_t>() + skew * es;
          CUDA_OK(cudaMemcpy(c0, cur.data(), cur.size(), cudaMemcpyHostToDevice));
          CUDA_OK(cudaMemcpy(s0, shadow.data(), shadow.size(), cudaMemcpyHostToDevice));
          size_t sb = 0;
          CUDA_OK(kernels::cuda::changes_scratch_bytes(n, ce, &sb));
          Dev scratch(sb);
          CUDA_OK(kernels::cuda::count_changes(c0, s0, n, es, ce, doffs.get<uint64_t>(), scratch.p, sb, nullptr));
          std::vector<uint64_t> off(nchunks + 1);
          CUDA_OK(cudaMemcpy(off.data(), doffs.p, off.size() * 8, cudaMemcpyDeviceToHost));
          const std::string what = "es " + std::to_string(es) + " chunk " + std::to_string(ce) + " skew " +
                                   std::to_string(skew) + " density " + std::to_string(density);
          ASSERT_EQ(off, want_off) << what;
          Dev dpos(k * 4 + 4), dold(k * es + 1), dnew(k * es + 1);
          CUDA_OK(kernels::cuda::collect_changes(c0, s0, n, es, ce, dpos.get<uint32_t>(), dold.p, dnew.p, scratch.p, sb, nullptr));
          std::vector<uint32_t> pos(k);
          std::vector<uint8_t> old(k * es), nw(k * es), sh(shadow.size());
          CUDA_OK(cudaMemcpy(pos.data(), dpos.p, k * 4, cudaMemcpyDeviceToHost));
          CUDA_OK(cudaMemcpy(old.data(), dold.p, k * es, cudaMemcpyDeviceToHost));
          CUDA_OK(cudaMemcpy(nw.data(), dnew.p, k * es, cudaMemcpyDeviceToHost));
          CUDA_OK(cudaMemcpy(sh.data(), s0, sh.size(), cudaMemcpyDeviceToHost));
          want_pos.resize(k);
          want_old.resize(k * es);
          want_new.resize(k * es);
          EXPECT_EQ(pos, want_pos) << what;
          EXPECT_EQ(old, want_old) << what;
          EXPECT_EQ(nw, want_new) << what;
          EXPECT_EQ(sh, cur) << what << ": the shadow is refreshed";
        }
      }
    }
  }
}

TEST(CudaKernels, ScratchTooSmallIsAnErrorNotACorruption) {
  SKIP_WITHOUT_GPU();
  Dev a(4096), b(4096), pos(4096), o(4096), nw(4096), cnt(4), scratch(1);
  EXPECT_NE(kernels::cuda::extract(a.p, b.p, 1024, 4, pos.get<uint32_t>(), o.p, nw.p, cnt.get<uint32_t>(), scratch.p, 0,
                                   nullptr),
            0);
  EXPECT_NE(kernels::cuda::extract(a.p, b.p, 1024, 3, pos.get<uint32_t>(), o.p, nw.p, cnt.get<uint32_t>(), scratch.p,
                                   1 << 20, nullptr),
            0)
      << "element size 3";
}

// The device's block sums equal the host's for every block, at any alignment of the buffer, for
// blocks that are not a whole number of windows or vectors, and for an odd last byte.
TEST(CudaKernels, BlockSumsMatchTheHost) {
  SKIP_WITHOUT_GPU();
  const auto host = test::random_bytes((1u << 20) + 4099, 21);
  Dev d(host.size());
  CUDA_OK(cudaMemcpy(d.p, host.data(), host.size(), cudaMemcpyHostToDevice));
  Dev sums(2 * 8 * 4096);
  for (size_t offset : {0, 1, 2, 16}) {
    for (uint64_t block : {uint64_t(1) << 21, uint64_t(1) << 16, uint64_t(8192), uint64_t(1000), uint64_t(777), uint64_t(3)}) {
      for (uint64_t bytes : {uint64_t(host.size() - 16), uint64_t(70001), uint64_t(1024), uint64_t(5)}) {
        const uint64_t nb = (bytes + block - 1) / block;
        if (nb > 4096) continue;
        CUDA_OK(kernels::cuda::block_sums(d.get<uint8_t>() + offset, bytes, block, sums.get<uint32_t>(), nullptr));
        std::vector<uint32_t> lanes(2 * nb);
        CUDA_OK(cudaMemcpy(lanes.data(), sums.p, lanes.size() * 4, cudaMemcpyDeviceToHost));
        for (uint64_t b = 0; b < nb; ++b) {
          const uint64_t want = format::block_sum(host.data() + offset + b * block, std::min(block, bytes - b * block));
          ASSERT_EQ((uint64_t(lanes[2 * b]) << 32) | lanes[2 * b + 1], want)
              << "offset " << offset << " block " << block << " bytes " << bytes << ": block " << b;
        }
      }
    }
  }
  EXPECT_NE(kernels::cuda::block_sums(d.p, 100, 0, sums.get<uint32_t>(), nullptr), 0) << "zero block size";
}

test::DeviceMem cuda_mem(std::vector<void*>& owned) {
  return {[&owned](size_t n) {
            void* p = nullptr;
            cudaMalloc(&p, n ? n : 1);
            owned.push_back(p);
            return p;
          },
          [](void* d, const void* s, size_t n) { cudaMemcpy(d, s, n, cudaMemcpyHostToDevice); },
          [](void* d, const void* s, size_t n) { cudaMemcpy(d, s, n, cudaMemcpyDeviceToHost); }};
}

class CudaDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no usable CUDA device";
    params::clear_overrides();
    ASSERT_TRUE(params::set_override("PROBE_MS", "30").ok());
    ASSERT_NE(kernels::device_ops(), nullptr) << kernels::device_unavailable_reason();
  }
  void TearDown() override {
    for (void* p : owned) cudaFree(p);
    params::clear_overrides();
  }
  std::vector<void*> owned;
};

TEST_F(CudaDevice, EncoderAndApplyMatchTheHostPath) { test::encoder_and_apply_match_host(cuda_mem(owned)); }

TEST_F(CudaDevice, ShadowInPinnedHostMemory) {
  ASSERT_TRUE(params::set_override("GPU_SHADOW", "host").ok());
  test::encoder_and_apply_match_host(cuda_mem(owned));
}

TEST_F(CudaDevice, CollectivesOnDeviceBuffersWithAStream) {
  cudaStream_t st;
  ASSERT_EQ(cudaStreamCreate(&st), cudaSuccess);
  test::collectives_on_device_buffers(cuda_mem(owned), reinterpret_cast<sparrowStream_t>(st));
  cudaStreamDestroy(st);
}

// A model's receivers with fused and sharded tensors in device memory (the FakeDevice runs the same
// body on every CI machine: DeviceTest.ModelsWithReceiversInDeviceMemory).
TEST_F(CudaDevice, ModelsOnDeviceBuffers) { test::models_on_device_buffers(cuda_mem(owned)); }

// The GPU a communicator picks its NIC near (topology/nic.h): the calling thread's current device.
TEST_F(CudaDevice, PciBusIdIsTheCurrentDevices) {
  int n = 0, dev = 0;
  ASSERT_EQ(cudaGetDeviceCount(&n), cudaSuccess);
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  for (int d : {n - 1, dev}) {
    ASSERT_EQ(cudaSetDevice(d), cudaSuccess);
    char id[32] = {0};
    ASSERT_EQ(cudaDeviceGetPCIBusId(id, int(sizeof id), d), cudaSuccess);
    EXPECT_EQ(kernels::current_gpu_pci(), std::string(id)) << "device " << d;
  }
  EXPECT_NE(kernels::current_gpu_pci(), "");
}

}  // namespace
}  // namespace sparrow
