// Test bodies for device buffers, shared by the CPU suite (FakeDevice) and the GPU suite (CUDA): the
// host path is the oracle, a device buffer must give the same checkpoint bytes and the same results.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <vector>

#include "format/checkpoint.h"
#include "harness/comm_harness.h"
#include "harness/util.h"
#include "kernels/cpu/delta.h"
#include "sparrow/sparrow.h"

namespace sparrow::test {

struct DeviceMem {
  std::function<void*(size_t)> alloc;                        // device memory (freed by the caller's fixture)
  std::function<void(void*, const void*, size_t)> upload;    // host -> device
  std::function<void(void*, const void*, size_t)> download;  // device -> host
};

// Changes ~density of the elements of `v` (element size es), with special values mixed in.
inline void mutate(std::vector<uint8_t>& v, uint32_t es, double density, uint64_t seed) {
  const uint32_t n = uint32_t(v.size() / es);
  for (uint32_t i : random_positions(n, density, seed)) {
    uint64_t r = rng_next(seed);
    if (es == 2 && (r & 7) == 0) r = 0x8000;  // -0.0 in bf16/fp16
    if (es == 4 && (r & 7) == 0) r = 0x7fc00001;  // a NaN payload
    memcpy(&v[size_t(i) * es], &r, es);
  }
}

// Encoder on device buffers == encoder on host buffers, byte for byte, over steps, datatypes, sizes
// and chunk boundaries; apply onto device targets == apply onto host targets.
inline void encoder_and_apply_match_host(const DeviceMem& m) {
  for (uint8_t dt : {uint8_t(9), uint8_t(7), uint8_t(0), uint8_t(8)}) {
    const uint32_t es = format::dtype_size(dt);
    std::vector<kernels::cpu::TensorSpec> layout = {{"a", dt, 70001}, {"b", dt, 1}, {"c", dt, 4096}};
    std::vector<std::vector<uint8_t>> host;
    std::vector<void*> dev, dtarget;
    std::vector<std::vector<uint8_t>> htarget;
    for (size_t t = 0; t < layout.size(); ++t) {
      host.push_back(random_bytes(layout[t].bytes(), 11 * dt + t));
      dev.push_back(m.alloc(layout[t].bytes()));
      dtarget.push_back(m.alloc(layout[t].bytes()));
      htarget.emplace_back(layout[t].bytes(), 0);
    }
    kernels::cpu::DeltaEncoder he(layout), de(layout);
    kernels::cpu::ReceiverState hs, ds;
    kernels::cpu::EncodeOptions eo;
    eo.chunk_elems = 4096;  // several chunks, a partial last one
    for (int step = 0; step < 4; ++step) {
      if (step > 0)
        for (auto& h : host) mutate(h, es, step == 3 ? 0.5 : 0.01, step * 100 + dt);
      std::vector<const void*> hp, dp;
      for (size_t t = 0; t < layout.size(); ++t) {
        m.upload(dev[t], host[t].data(), host[t].size());
        hp.push_back(host[t].data());
        dp.push_back(dev[t]);
      }
      auto hc = he.encode(hp, eo);
      auto dc = de.encode(dp, eo);
      ASSERT_TRUE(hc.ok()) << hc.status().to_string();
      ASSERT_TRUE(dc.ok()) << dc.status().to_string();
      ASSERT_EQ(hc.value(), dc.value()) << "dtype " << int(dt) << " step " << step;
      std::vector<void*> ht;
      for (auto& h : htarget) ht.push_back(h.data());
      ASSERT_TRUE(kernels::cpu::apply_checkpoint(hc.value(), ht, layout, hs).ok());
      auto st = kernels::cpu::apply_checkpoint(dc.value(), dtarget, layout, ds);
      ASSERT_TRUE(st.ok()) << st.to_string();
      for (size_t t = 0; t < layout.size(); ++t) {
        std::vector<uint8_t> back(layout[t].bytes());
        m.download(back.data(), dtarget[t], back.size());
        ASSERT_EQ(back, host[t]) << "dtype " << int(dt) << " step " << step << " tensor " << t;
      }
      // The resync path: a snapshot of device buffers, without disturbing the encoder's state.
      if (step == 2) {
        auto hsnap = he.snapshot(hp, eo);
        auto dsnap = de.snapshot(dp, eo);
        ASSERT_TRUE(dsnap.ok()) << dsnap.status().to_string();
        ASSERT_EQ(hsnap.value(), dsnap.value());
      }
    }
  }
}

// sparse_bcast and broadcast through the C API with device buffers on some ranks and host buffers on
// others, several steps, checked bit for bit.
inline void collectives_on_device_buffers(const DeviceMem& m, sparrowStream_t stream) {
  const int n = 3;
  Comms cs(n);
  const size_t count = 300007;
  const uint32_t es = 2;
  std::vector<uint8_t> cur = random_bytes(count * es, 5);
  void* root_buf = m.alloc(count * es);
  std::vector<void*> recv(n, nullptr);
  std::vector<std::vector<uint8_t>> host_recv(n, std::vector<uint8_t>(count * es, 0));
  recv[1] = m.alloc(count * es);          // device
  recv[2] = host_recv[2].data();          // host
  for (int step = 0; step < 4; ++step) {
    if (step) mutate(cur, es, 0.01, 1000 + step);
    m.upload(root_buf, cur.data(), cur.size());
    auto rc = cs.run([&](int r) {
      return sparrowSparseBcast(root_buf, r == 0 ? root_buf : recv[r], count, sparrowBfloat16, 0, cs.c[r], stream);
    });
    for (int r = 0; r < n; ++r) ASSERT_EQ(rc[r], sparrowSuccess) << "step " << step << " rank " << r << ": " << sparrowGetLastError(cs.c[r]);
    std::vector<uint8_t> got(count * es);
    m.download(got.data(), recv[1], got.size());
    ASSERT_EQ(got, cur) << "device receiver, step " << step;
    ASSERT_EQ(host_recv[2], cur) << "host receiver, step " << step;
    sparrowStats st = SPARROW_STATS_INITIALIZER;
    ASSERT_EQ(sparrowCommGetStats(cs.c[0], &st), sparrowSuccess);
    EXPECT_EQ(st.full, step == 0 ? 1 : 0);
    if (step) {
      EXPECT_LT(st.wireBytes * 20, st.denseBytes) << "step " << step << ": only the changes travel";
    }
  }
  // The device receiver's buffer is written to between two steps (an element the step does not
  // change): refused untouched, then repaired at the next call.
  std::vector<uint8_t> cell(es);
  uint8_t* at = static_cast<uint8_t*>(recv[1]) + 12345 * es;
  m.download(cell.data(), at, es);
  cell[0] ^= 0x20;
  m.upload(at, cell.data(), es);
  std::vector<uint8_t> scribbled(count * es);
  m.download(scribbled.data(), recv[1], scribbled.size());
  for (int step = 0; step < 2; ++step) {
    mutate(cur, es, 0.01, 2000 + step);
    cur[12345 * es] = scribbled[12345 * es] ^ 0x20;  // unchanged by this step
    cur[12345 * es + 1] = scribbled[12345 * es + 1];
    m.upload(root_buf, cur.data(), cur.size());
    auto rc = cs.run([&](int r) {
      return sparrowSparseBcast(root_buf, r == 0 ? root_buf : recv[r], count, sparrowBfloat16, 0, cs.c[r], stream);
    });
    std::vector<uint8_t> got(count * es);
    m.download(got.data(), recv[1], got.size());
    ASSERT_EQ(rc[0], sparrowSuccess);
    ASSERT_EQ(rc[2], sparrowSuccess);
    ASSERT_EQ(host_recv[2], cur);
    if (step == 0) {
      ASSERT_EQ(rc[1], sparrowVersionMismatch) << sparrowGetLastError(cs.c[1]);
      ASSERT_EQ(got, scribbled) << "refused untouched";
    } else {
      ASSERT_EQ(rc[1], sparrowSuccess) << sparrowGetLastError(cs.c[1]);
      ASSERT_EQ(got, cur) << "repaired at the next call";
    }
  }
  // Dense broadcast, out of place, device to device, root 2 (a host sender).
  void* dst0 = m.alloc(count * es);
  void* dst1 = m.alloc(count * es);
  std::vector<uint8_t> src = random_bytes(count * es, 77);
  auto rc = cs.run([&](int r) {
    void* d = r == 0 ? dst0 : r == 1 ? dst1 : host_recv[2].data();
    return sparrowBroadcast(src.data(), d, count, sparrowBfloat16, 2, cs.c[r], stream);
  });
  for (int r = 0; r < n; ++r) ASSERT_EQ(rc[r], sparrowSuccess) << sparrowGetLastError(cs.c[r]);
  std::vector<uint8_t> got(count * es);
  m.download(got.data(), dst0, got.size());
  EXPECT_EQ(got, src);
  m.download(got.data(), dst1, got.size());
  EXPECT_EQ(got, src);
}

}  // namespace sparrow::test
