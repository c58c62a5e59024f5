// Device buffers in the codec and the collectives, on the FakeDevice (no GPU needed): device memory
// the host cannot touch, so any host dereference of a device pointer crashes the test.
#include "kernels/device.h"

#include <gtest/gtest.h>

#include "core/params.h"
#include "harness/device_cases.h"
#include "harness/fake_device.h"

namespace sparrow {
namespace {

test::DeviceMem fake_mem(test::FakeDevice& d) {
  return {[&d](size_t n) { return d.malloc_device(n); },
          [&d](void* dst, const void* src, size_t n) { d.upload(dst, src, n); },
          [&d](void* dst, const void* src, size_t n) { d.download(dst, src, n); }};
}

class DeviceTest : public ::testing::Test {
 protected:
  void SetUp() override { params::clear_overrides(); }
  void TearDown() override { params::clear_overrides(); }
};

TEST_F(DeviceTest, FakeDeviceMemoryIsNotHostAccessible) {
  test::FakeDeviceScope fd;
  auto* p = static_cast<volatile uint8_t*>(fd.dev.malloc_device(64));
  EXPECT_DEATH((void)p[0], "");
}

TEST_F(DeviceTest, EncoderAndApplyOnDeviceBuffersMatchTheHostPath) {
  test::FakeDeviceScope fd;
  test::encoder_and_apply_match_host(fake_mem(fd.dev));
  EXPECT_GT(fd.dev.extract_chunk_calls.load(), 0) << "a delta's changes come off the device per tensor";
  EXPECT_GT(fd.dev.extracts.load(), 0) << "a tensor with many changes (step 3) is extracted chunk by chunk";
  EXPECT_GT(fd.dev.scatters.load(), 0) << "receivers scatter on the device";
  EXPECT_GT(fd.dev.gathers.load(), 0);
  EXPECT_GT(fd.dev.block_sum_calls.load(), 0) << "base verification sums device blocks on the device";
  EXPECT_GE(fd.dev.allocs.load(), 3) << "the shadows are in device memory by default";
  EXPECT_GT(fd.dev.host_allocs.load(), 0) << "pinned host room for the changes";
}

// (the same body runs on a GPU: CudaDevice.ModelsOnDeviceBuffers)
TEST_F(DeviceTest, ModelsWithReceiversInDeviceMemory) {
  test::FakeDeviceScope fd;
  test::models_on_device_buffers(fake_mem(fd.dev));
  EXPECT_GT(fd.dev.scatters.load(), 0) << "the projection writes the changed elements on the device";
  EXPECT_GT(fd.dev.block_sum_calls.load(), 0) << "drift is judged by block sums on the device";
}

TEST_F(DeviceTest, ShadowInPinnedHostMemory) {
  ASSERT_TRUE(params::set_override("GPU_SHADOW", "host").ok());
  test::FakeDeviceScope fd;
  test::encoder_and_apply_match_host(fake_mem(fd.dev));
  EXPECT_GT(fd.dev.host_allocs.load(), 0);
  EXPECT_EQ(fd.dev.allocs.load(), 0);
}

TEST_F(DeviceTest, BufferMovingBetweenHostAndDeviceStartsOver) {
  test::FakeDeviceScope fd;
  std::vector<kernels::cpu::TensorSpec> layout = {{"w", 9, 5000}};
  auto h = test::random_bytes(10000, 1);
  void* d = fd.dev.malloc_device(10000);
  fd.dev.upload(d, h.data(), h.size());
  kernels::cpu::DeltaEncoder enc(layout);
  const void* hp[] = {h.data()};
  const void* dp[] = {d};
  ASSERT_TRUE(enc.encode(hp).ok());
  auto c = enc.encode(dp);
  ASSERT_TRUE(c.ok());
  auto v = format::parse_checkpoint(c.value());
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->header.full()) << "the device buffer has no shadow yet: full snapshot";
  c = enc.encode(dp);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(format::parse_checkpoint(c.value())->header.full());
}

TEST_F(DeviceTest, FailedDeviceWriteIsReportedAndForgetsTheVersion) {
  test::FakeDeviceScope fd;
  std::vector<kernels::cpu::TensorSpec> layout = {{"w", 9, 50000}};
  auto h = test::random_bytes(100000, 2);
  kernels::cpu::DeltaEncoder enc(layout);
  const void* hp[] = {h.data()};
  kernels::cpu::EncodeOptions eo;
  eo.chunk_elems = 4096;
  auto full = enc.encode(hp, eo);
  test::mutate(h, 2, 0.01, 3);
  auto delta = enc.encode(hp, eo);
  ASSERT_TRUE(full.ok() && delta.ok());
  void* t = fd.dev.malloc_device(100000);
  void* targets[] = {t};
  kernels::cpu::ReceiverState st;
  ASSERT_TRUE(kernels::cpu::apply_checkpoint(full.value(), targets, layout, st).ok());
  EXPECT_EQ(st.version, 1u);
  fd.dev.fail_scatter_after = 2;
  auto s = kernels::cpu::apply_checkpoint(delta.value(), targets, layout, st);
  EXPECT_EQ(s.code(), Code::kUnhandledCudaError) << s.to_string();
  EXPECT_NE(s.to_string().find("resynchronised"), std::string::npos) << s.to_string();
  EXPECT_EQ(st.version, 0u) << "a partly written buffer holds no version";
}

TEST_F(DeviceTest, CopyAnyHandlesEveryDirection) {
  test::FakeDeviceScope fd;
  auto a = test::random_bytes(1000, 9);
  void* d1 = fd.dev.malloc_device(1000);
  void* d2 = fd.dev.malloc_device(1000);
  std::vector<uint8_t> b(1000);
  ASSERT_TRUE(kernels::copy_any(d1, a.data(), 1000).ok());
  ASSERT_TRUE(kernels::copy_any(d2, d1, 1000).ok());
  ASSERT_TRUE(kernels::copy_any(b.data(), d2, 1000).ok());
  EXPECT_EQ(a, b);
}

TEST_F(DeviceTest, CollectivesOnDeviceBuffersAreStreamOrdered) {
  ASSERT_TRUE(params::set_override("PROBE_MS", "30").ok());
  test::FakeDeviceScope fd;
  int fake_stream_object = 0;
  auto stream = reinterpret_cast<sparrowStream_t>(&fake_stream_object);
  test::collectives_on_device_buffers(fake_mem(fd.dev), stream);
  EXPECT_GT(fd.dev.syncs.load(), 0) << "the caller's stream was waited for";
  EXPECT_EQ(fd.dev.last_stream, static_cast<void*>(stream));
  EXPECT_GT(fd.dev.extract_chunk_calls.load() + fd.dev.extracts.load(), 0) << "the root extracted on the device";
}

TEST_F(DeviceTest, NoBackendMeansEveryPointerIsHostMemory) {
  kernels::set_device_ops(nullptr);
  EXPECT_EQ(kernels::device_ops(), nullptr);
  EXPECT_FALSE(kernels::device_unavailable_reason().empty());
}

}  // namespace
}  // namespace sparrow
