// Test bodies for device buffers, shared by the CPU suite (FakeDevice) and the GPU suite (CUDA): the
// host path is the oracle, a device buffer must give the same checkpoint bytes and the same results.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
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

// A model whose receivers hold their tensors in device memory (an inference engine's weights on its
// GPU): rank 1 a shard of w [64, 32] (its rows [16, 48) at row 2 of a [36, 32] tensor whose first
// and last 2 rows are padding) and columns [8, 40) of o [32, 64]; rank 2 both whole (named in
// another order). Every step is bit-exact against the projection written out here, padding never
// written; a write into rank 1's shard is refused with nothing written and repaired at the next step.
inline void models_on_device_buffers(const DeviceMem& m) {
  const int n = 3;
  Comms cs(n);
  const size_t es = 2, wr = 64, wc = 32, orows = 32, oc = 64;
  std::vector<uint8_t> w = random_bytes(wr * wc * es, 71), o = random_bytes(orows * oc * es, 72);
  const std::vector<uint8_t> pad = {0xad, 0xde};
  auto padded = [&](size_t bytes) {
    std::vector<uint8_t> v(bytes);
    for (size_t i = 0; i < bytes; ++i) v[i] = pad[i % 2];
    return v;
  };
  auto on_device = [&](const std::vector<uint8_t>& h) {
    void* d = m.alloc(h.size());
    m.upload(d, h.data(), h.size());
    return d;
  };
  void* shard = on_device(padded(36 * wc * es));
  void* cols = on_device(padded(orows * 32 * es));
  void* whole_w = on_device(std::vector<uint8_t>(w.size(), 0));
  void* whole_o = on_device(std::vector<uint8_t>(o.size(), 0));
  const size_t wshape[] = {wr, wc}, oshape[] = {orows, oc}, sshape[] = {36, wc}, cshape[] = {orows, 32};
  const sparrowPiece_t wp = {"w", 0, 16, 48, 2}, op = {"o", 1, 8, 40, 0};
  const std::vector<std::vector<sparrowTensor_t>> ts = {
      {{"w", w.data(), sparrowBfloat16, 2, wshape, nullptr, 0}, {"o", o.data(), sparrowBfloat16, 2, oshape, nullptr, 0}},
      {{"w_shard", shard, sparrowBfloat16, 2, sshape, &wp, 1}, {"o_cols", cols, sparrowBfloat16, 2, cshape, &op, 1}},
      {{"o", whole_o, sparrowBfloat16, 2, oshape, nullptr, 0}, {"w", whole_w, sparrowBfloat16, 2, wshape, nullptr, 0}}};
  std::vector<sparrowModel_t> models(n);
  for (int r = 0; r < n; ++r)
    ASSERT_EQ(sparrowModelCreate(&models[size_t(r)], cs.c[r], ts[size_t(r)].data(), 2, 0), sparrowSuccess);
  auto down = [&](const void* d, size_t bytes) {
    std::vector<uint8_t> h(bytes);
    m.download(h.data(), d, bytes);
    return h;
  };
  auto expect_exact = [&](const std::string& when) {
    std::vector<uint8_t> want = padded(36 * wc * es);
    std::memcpy(want.data() + 2 * wc * es, w.data() + 16 * wc * es, 32 * wc * es);
    ASSERT_EQ(down(shard, want.size()), want) << when << ": rank 1's shard of w (padding untouched)";
    std::vector<uint8_t> want_cols(orows * 32 * es);
    for (size_t r = 0; r < orows; ++r) std::memcpy(want_cols.data() + r * 32 * es, o.data() + (r * oc + 8) * es, 32 * es);
    ASSERT_EQ(down(cols, want_cols.size()), want_cols) << when << ": rank 1's columns of o";
    ASSERT_EQ(down(whole_w, w.size()), w) << when << ": rank 2's w";
    ASSERT_EQ(down(whole_o, o.size()), o) << when << ": rank 2's o";
  };
  auto step = [&] { return cs.run([&](int r) { return sparrowModelSync(models[size_t(r)]); }); };
  for (int s = 0; s < 4; ++s) {
    if (s) {
      mutate(w, es, 0.02, 800 + s);
      mutate(o, es, 0.02, 900 + s);
    }
    auto rc = step();
    for (int r = 0; r < n; ++r) ASSERT_EQ(rc[size_t(r)], sparrowSuccess) << "step " << s << " rank " << r << ": " << sparrowGetLastError(cs.c[r]);
    expect_exact("step " + std::to_string(s));
  }
  // The engine writes into its shard (row 5, inside w's rows): the next step refuses rank 1 and
  // writes nothing there; the one after repairs it.
  uint8_t* at = static_cast<uint8_t*>(shard) + (5 * wc + 3) * es;
  std::vector<uint8_t> cell = down(at, es);
  cell[0] ^= 0x40;
  m.upload(at, cell.data(), es);
  const std::vector<uint8_t> scribbled = down(shard, 36 * wc * es);
  mutate(w, es, 0.02, 990);
  auto rc = step();
  EXPECT_EQ(rc[0], sparrowSuccess);
  EXPECT_EQ(rc[1], sparrowVersionMismatch) << sparrowGetLastError(cs.c[1]);
  EXPECT_EQ(rc[2], sparrowSuccess);
  EXPECT_EQ(down(shard, scribbled.size()), scribbled) << "a refused step writes nothing";
  mutate(w, es, 0.02, 991);
  rc = step();
  for (int r = 0; r < n; ++r) ASSERT_EQ(rc[size_t(r)], sparrowSuccess) << "rank " << r << ": " << sparrowGetLastError(cs.c[r]);
  expect_exact("after the repair");
  for (auto x : models) EXPECT_EQ(sparrowModelDestroy(x), sparrowSuccess);
}

}  // namespace sparrow::test
