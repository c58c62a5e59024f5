// Google Benchmark micro-benchmarks: each codec, extraction per ISA, apply, checksums and digests.
// Throughputs are reported per dense byte (extraction/apply) or per coded byte (codecs).
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "format/codec_choice.h"
#include "format/digest.h"
#include "format/index_codec.h"
#include "format/value_codec.h"
#include "gen/generator.h"
#include "kernels/cpu/delta.h"
#include "kernels/cpu/extract.h"
#include "transport/seal.h"

using namespace sparrow;

namespace {

uint64_t rng(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

constexpr uint32_t kN = 1 << 20;  // one chunk of bf16

// bf16 buffers where ~density of the elements moved by one ulp.
struct Step {
  std::vector<uint16_t> cur, shadow;
  explicit Step(double density) : cur(kN), shadow(kN) {
    uint64_t s = 1;
    for (uint32_t i = 0; i < kN; ++i) {
      shadow[i] = uint16_t(0x3c00 + (rng(s) & 0x3ff));
      cur[i] = shadow[i];
      if (double(rng(s) >> 11) * 0x1.0p-53 < density) cur[i] += (rng(s) & 1) ? 1 : -1;
    }
  }
};

std::vector<uint32_t> positions(double density) {
  std::vector<uint32_t> p;
  uint64_t s = 2;
  for (uint32_t i = 0; i < kN; ++i)
    if (double(rng(s) >> 11) * 0x1.0p-53 < density) p.push_back(i);
  return p;
}

void BM_Extract(benchmark::State& state) {
  auto isa = kernels::cpu::Isa(state.range(0));
  if (!kernels::cpu::isa_supported(isa)) {
    state.SkipWithError("ISA not supported");
    return;
  }
  Step st(0.01);
  std::vector<uint32_t> pos(kN);
  std::vector<uint8_t> o(2 * kN), n(2 * kN);
  auto fn = kernels::cpu::extract_fn(isa);
  for (auto _ : state) {
    // Restore the shadow's changed elements so each iteration extracts the same step.
    size_t k = fn(reinterpret_cast<uint8_t*>(st.cur.data()), reinterpret_cast<uint8_t*>(st.shadow.data()), kN, 2,
                  pos.data(), o.data(), n.data());
    kernels::cpu::scatter(reinterpret_cast<uint8_t*>(st.shadow.data()), pos.data(), k, 2, o.data());
    benchmark::DoNotOptimize(k);
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * 2 * 2 * kN);  // bytes read: current + shadow
  state.SetLabel(kernels::cpu::isa_name(isa));
}
BENCHMARK(BM_Extract)->Arg(0)->Arg(1)->Arg(2);

void BM_IndexEncode(benchmark::State& state) {
  auto c = format::IndexCodec(state.range(0));
  auto p = positions(0.01);
  std::vector<uint8_t> out;
  uint32_t m = format::golomb_parameter(p.data(), p.size());
  for (auto _ : state) {
    out.clear();
    format::encode_index(c, p.data(), p.size(), kN, m, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * p.size());
  state.SetLabel(std::string(format::index_codec_name(c)) + " " + std::to_string(8.0 * out.size() / p.size()) + " bits/change");
}
BENCHMARK(BM_IndexEncode)->Arg(1)->Arg(2)->Arg(3);

void BM_IndexDecode(benchmark::State& state) {
  auto c = format::IndexCodec(state.range(0));
  auto p = positions(0.01);
  std::vector<uint8_t> out;
  format::encode_index(c, p.data(), p.size(), kN, format::golomb_parameter(p.data(), p.size()), out);
  std::vector<uint32_t> got(p.size());
  for (auto _ : state) {
    Status s = format::decode_index(c, out, kN, uint32_t(p.size()), got.data());
    benchmark::DoNotOptimize(s.ok());
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * p.size());
  state.SetBytesProcessed(int64_t(state.iterations()) * out.size());
  state.SetLabel(format::index_codec_name(c));
}
BENCHMARK(BM_IndexDecode)->Arg(1)->Arg(2)->Arg(3);

void value_pair(std::vector<uint8_t>& o, std::vector<uint8_t>& n, size_t k) {
  Step st(1.0);
  o.assign(reinterpret_cast<uint8_t*>(st.shadow.data()), reinterpret_cast<uint8_t*>(st.shadow.data()) + 2 * k);
  n.assign(reinterpret_cast<uint8_t*>(st.cur.data()), reinterpret_cast<uint8_t*>(st.cur.data()) + 2 * k);
}

void BM_ValueEncode(benchmark::State& state) {
  auto c = format::ValueCodec(state.range(0));
  const size_t k = 10000;
  std::vector<uint8_t> o, n, scratch, out;
  value_pair(o, n, k);
  for (auto _ : state) {
    out.clear();
    (void)format::encode_values(c, o.data(), n.data(), k, 2, 1, scratch, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * k);
  state.SetLabel(std::string(format::value_codec_name(c)) + " " + std::to_string(8.0 * out.size() / k) + " bits/value");
}
BENCHMARK(BM_ValueEncode)->Arg(0)->Arg(1)->Arg(2)->Arg(3);

void BM_ValueDecode(benchmark::State& state) {
  auto c = format::ValueCodec(state.range(0));
  const size_t k = 10000;
  std::vector<uint8_t> o, n, scratch, out, got(2 * k);
  value_pair(o, n, k);
  (void)format::encode_values(c, o.data(), n.data(), k, 2, 1, scratch, out);
  for (auto _ : state) {
    Status s = format::decode_values(c, out, o.data(), k, 2, scratch, got.data());
    benchmark::DoNotOptimize(s.ok());
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * k);
  state.SetBytesProcessed(int64_t(state.iterations()) * out.size());
  state.SetLabel(format::value_codec_name(c));
}
BENCHMARK(BM_ValueDecode)->Arg(0)->Arg(1)->Arg(2)->Arg(3);

// The encoder's value-codec choice for one chunk's 10,000 changes: every codec on every value
// (Arg 0) or judged on a sample of that many values first (Arg 1024 is the default).
void BM_ChooseValues(benchmark::State& state) {
  const size_t k = 10000;
  std::vector<uint8_t> o, n, best;
  value_pair(o, n, k);
  format::ValueChoiceOptions opt;
  opt.sample = size_t(state.range(0));
  format::CodecScratch s;
  size_t bytes = 0;
  for (auto _ : state) {
    auto c = format::choose_values(o.data(), n.data(), k, 2, true, opt, s, best);
    benchmark::DoNotOptimize(c.ok());
    bytes = best.size();
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * k);
  state.SetLabel(std::to_string(8.0 * bytes / k) + " bits/value");
}
BENCHMARK(BM_ChooseValues)->Arg(0)->Arg(4096)->Arg(1024);

// Whole checkpoint apply for a 1%-dense step of 16 chunks, one thread; bytes = wire bytes.
void BM_Apply(benchmark::State& state) {
  const uint64_t n = 16ull * kN;
  std::vector<kernels::cpu::TensorSpec> layout = {{"w", 9, n}};
  std::vector<uint16_t> root(n), recv(n);
  uint64_t s = 3;
  for (auto& v : root) v = uint16_t(0x3c00 + (rng(s) & 0x3ff));
  kernels::cpu::DeltaEncoder enc(layout);
  const void* src[] = {root.data()};
  void* dst[] = {recv.data()};
  kernels::cpu::ReceiverState st;
  kernels::cpu::ApplyOptions ao;
  ao.threads = 1;
  (void)kernels::cpu::apply_checkpoint(enc.encode(src).value(), dst, layout, st, ao);
  for (uint64_t i = 0; i < n; ++i)
    if (rng(s) % 100 == 0) root[i] += 1;
  auto ck = enc.encode(src).value();
  kernels::cpu::ReceiverState base = st;
  std::vector<uint16_t> base_buf = recv;
  for (auto _ : state) {
    state.PauseTiming();
    recv = base_buf;
    st = base;
    state.ResumeTiming();
    Status r = kernels::cpu::apply_checkpoint(ck, dst, layout, st, ao);
    benchmark::DoNotOptimize(r.ok());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * ck.size());
}
BENCHMARK(BM_Apply)->Unit(benchmark::kMillisecond);

void BM_Checksum(benchmark::State& state) {
  std::vector<uint8_t> b(1 << 20, 7);
  for (auto _ : state) benchmark::DoNotOptimize(format::checksum(b.data(), b.size()));
  state.SetBytesProcessed(int64_t(state.iterations()) * b.size());
}
BENCHMARK(BM_Checksum);

void BM_FullDigest(benchmark::State& state) {
  std::vector<uint16_t> b(kN, 7);
  for (auto _ : state) benchmark::DoNotOptimize(format::digest_range(0, b.data(), 0, kN, 2));
  state.SetBytesProcessed(int64_t(state.iterations()) * 2 * kN);
}
BENCHMARK(BM_FullDigest);

void BM_FullDigestScalar(benchmark::State& state) {  // the portable path, for comparison
  std::vector<uint16_t> b(kN, 7);
  for (auto _ : state) benchmark::DoNotOptimize(format::digest_range_scalar(0, b.data(), 0, kN, 2));
  state.SetBytesProcessed(int64_t(state.iterations()) * 2 * kN);
}
BENCHMARK(BM_FullDigestScalar);

namespace seal = transport::seal;

// Sealing one record as a sender does per connection: arg 2 = AES-256-GCM (SPARROW_ENCRYPT=on), 1 = GMAC
// tag only (integrity); then its size. One core.
transport::seal::DirectionKeys bench_keys() {
  transport::seal::DirectionKeys k;
  for (size_t i = 0; i < k.key.size(); ++i) k.key[i] = uint8_t(i * 7 + 1);
  return k;
}

void BM_Seal(benchmark::State& state) {
  if (!seal::available()) return state.SkipWithError("built without OpenSSL");
  seal::Cipher c(seal::Mode(state.range(0)), bench_keys());
  std::vector<uint8_t> in(size_t(state.range(1)), 7), out(in.size());
  uint8_t tag[seal::kTagBytes];
  for (auto _ : state) benchmark::DoNotOptimize(c.seal(in.data(), in.size(), out.data(), tag).ok());
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(in.size()));
}
// A payload of 512 KiB, and a frame header (56 bytes: the cost per record).
BENCHMARK(BM_Seal)->Args({2, 512 << 10})->Args({1, 512 << 10})->Args({2, 56});

// Opening it in place as a receiver's progress thread does (the tag check included; every record is
// a fresh one, so the tag fails, which costs the same as one that holds).
void BM_Open(benchmark::State& state) {
  if (!seal::available()) return state.SkipWithError("built without OpenSSL");
  seal::Cipher c(seal::Mode(state.range(0)), bench_keys());
  std::vector<uint8_t> buf(512 << 10, 7);
  uint8_t tag[seal::kTagBytes] = {};
  for (auto _ : state) benchmark::DoNotOptimize(c.open(buf.data(), buf.size(), tag).ok());
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(buf.size()));
}
BENCHMARK(BM_Open)->Arg(2)->Arg(1);

}  // namespace

BENCHMARK_MAIN();
