// libFuzzer target for the checkpoint decoder: any input must either apply cleanly or be rejected
// with the targets untouched; never crash, hang or read out of bounds (ASan/UBSan).
//
// The receiver holds version 1 of a small two-tensor layout; inputs are mutated from a seed corpus
// of real checkpoints (`checkpoint_fuzz --write-seeds DIR` writes them; scripts/fuzz.sh runs it all).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "seeds.h"
#include "kernels/cpu/delta.h"

using namespace sparrow::kernels::cpu;

namespace {

const std::vector<TensorSpec>& layout() {
  static const std::vector<TensorSpec> l = {{"a", 9, 3000}, {"b", 7, 700}};
  return l;
}

struct World {
  std::vector<std::vector<uint8_t>> root, recv;
  ReceiverState state;
  std::vector<std::vector<uint8_t>> seeds;
  World() {
    uint64_t s = 1;
    for (auto& t : layout()) {
      std::vector<uint8_t> b(t.bytes());
      for (auto& x : b) x = uint8_t((s = s * 6364136223846793005ULL + 1442695040888963407ULL) >> 56);
      root.push_back(b);
      recv.emplace_back(t.bytes(), 0);
    }
    DeltaEncoder enc(layout());
    EncodeOptions o;
    o.chunk_elems = 1024;
    o.threads = 1;
    auto src = ptrs_root();
    seeds.push_back(enc.encode(src, o).value());
    auto d = ptrs_recv();
    ApplyOptions ao;
    ao.threads = 1;
    if (!apply_checkpoint(seeds[0], d, layout(), state, ao).ok()) abort();
    // Version 2 seeds: sparse (golomb/leb128/bitmap) and dense chunks, every value codec.
    for (double density : {0.01, 0.3, 0.9}) {
      for (size_t t = 0; t < root.size(); ++t)
        for (size_t i = 0; i < root[t].size(); i += 2)
          if (((s = s * 6364136223846793005ULL + 1442695040888963407ULL) >> 33) % 1000 < density * 1000) root[t][i] ^= 1;
      seeds.push_back(enc.encode(src, o).value());
    }
  }
  std::vector<const void*> ptrs_root() const {
    std::vector<const void*> v;
    for (auto& b : root) v.push_back(b.data());
    return v;
  }
  std::vector<void*> ptrs_recv() {
    std::vector<void*> v;
    for (auto& b : recv) v.push_back(b.data());
    return v;
  }
};

World& world() {
  static World w;
  return w;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  sparrow::fuzz::write_seeds_if_asked(*argc, *argv, [] { return world().seeds; });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  World& w = world();
  auto before = w.recv;
  ReceiverState st = w.state;
  auto d = w.ptrs_recv();
  ApplyOptions ao;
  ao.threads = 1;
  sparrow::Status s = apply_checkpoint({data, size}, d, layout(), st, ao);
  if (!s.ok()) {
    if (w.recv != before || st.version != w.state.version) {
      fprintf(stderr, "rejected input modified the target: %s\n", s.message().c_str());
      abort();
    }
  } else {
    w.recv = before;  // keep the receiver at version 1 for the next input
  }
  return 0;
}
