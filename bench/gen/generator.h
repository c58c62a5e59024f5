// Realistic RL weight updates without downloading a model.
//
// UpdateGenerator holds fp32 master weights for a Qwen3-shaped tensor list, and Adam moments in fp32;
// each step draws a noisy gradient, applies an Adam step with a small learning rate (RL post-training
// uses ~1e-6), and rounds the masters to bf16 (round to nearest even). Which bf16 elements change, and
// by how much (almost always one ulp), therefore comes from rounding, as in real training. The Adam
// moments start at their stationary distribution, so step 1 already looks like step 1000.
// Deterministic for a given seed, whatever the thread count.
//
// mutate_exact(): the plain generator for edge cases: exactly round(density * n) elements, chosen
// uniformly, get new bit patterns different from the old.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "gen/model.h"
#include "kernels/cpu/delta.h"

namespace sparrow::gen {

struct GenOptions {
  std::string model = "qwen3-8b";  // name in models_dir() or a path to a config.json
  int64_t layers = 0;              // keep this many decoder layers (<= 0: all)
  int64_t vocab = 0;               // embedding rows (<= 0: the model's vocabulary)
  double lr = 1e-6;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  uint64_t seed = 1;
  int threads = 0;                 // 0: SPARROW_THREADS / all cores
};

class UpdateGenerator {
 public:
  static Result<std::unique_ptr<UpdateGenerator>> create(const GenOptions& opt);
  const std::vector<kernels::cpu::TensorSpec>& tensors() const { return tensors_; }
  const ModelConfig& config() const { return config_; }
  // The bf16 weights, one buffer per tensor (valid for the generator's lifetime).
  std::vector<const void*> buffers() const;
  std::vector<void*> mutable_buffers();
  uint64_t elements() const { return total_elements(tensors_); }
  uint64_t bytes() const { return elements() * 2; }
  // One optimizer step; returns the number of bf16 elements whose bits changed.
  uint64_t step();
  uint64_t steps_done() const { return step_; }

 private:
  UpdateGenerator() = default;
  GenOptions opt_;
  ModelConfig config_;
  std::vector<kernels::cpu::TensorSpec> tensors_;
  std::vector<std::vector<float>> master_, m_, v_;
  std::vector<std::vector<uint16_t>> bf16_;
  std::vector<float> row_scale_;  // per tensor: gradient scale of the tensor kind
  uint64_t step_ = 0;
};

// One rank's view of a model in a weight-sync job: the trainer (`with_generator`) holds the
// generator and its weights; the others only need the tensor layout (no optimizer state).
struct ModelRole {
  std::unique_ptr<UpdateGenerator> gen;  // null unless with_generator
  std::vector<kernels::cpu::TensorSpec> tensors;
};
Result<ModelRole> open_model(const GenOptions& opt, bool with_generator);

uint16_t float_to_bf16(float f);  // round to nearest even; NaN stays NaN
float bf16_to_float(uint16_t b);

// Fills buf (n elements of an sparrowDataType_t) as a model's weights look to a codec, for benchmarks
// without a model: bfloat16, float32 and float64 get N(0, 0.02) values (bf16 rounded to nearest even),
// other types random bits. Deterministic for a seed. A trained model's first full version barely
// compresses; a synthetic pattern that compresses 100x makes the first step tiny, which real jobs do
// not see (and which, for one, leaves BBR's bandwidth estimate of every stream cold).
void fill_like_weights(void* buf, uint64_t n, uint8_t dtype, uint64_t seed, int threads = 0);

// Changes exactly llround(density * n) elements of buf, uniformly chosen, to different bit patterns.
// Returns the number changed.
uint64_t mutate_exact(void* buf, uint64_t n, uint32_t elem_size, double density, uint64_t seed);

}  // namespace sparrow::gen
