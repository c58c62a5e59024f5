// Model shapes for realistic updates: Qwen3-style decoder tensor lists from Hugging Face config
// fields (data/models/*.json, copied from the shared model notes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/cpu/delta.h"

namespace sparrow::gen {

struct ModelConfig {
  std::string name;
  int64_t hidden = 0, intermediate = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0;
  bool tie_embeddings = false;
};

// Directory holding <name>.json: SPARROW_MODELS_DIR, else the source tree's data/models.
std::string models_dir();
// `name_or_path`: a model name ("qwen3-8b") looked up in models_dir(), or a path to a .json file.
Result<ModelConfig> load_model_config(const std::string& name_or_path);
// Parses the flat JSON object of a config.json (numbers, strings, booleans).
Result<ModelConfig> parse_model_config(const std::string& json);

// Tensor list in Hugging Face order. `layers` <= 0 keeps all; `vocab` <= 0 keeps the model's.
std::vector<kernels::cpu::TensorSpec> model_tensors(const ModelConfig& c, int64_t layers = 0, int64_t vocab = 0);
uint64_t total_elements(const std::vector<kernels::cpu::TensorSpec>& ts);

}  // namespace sparrow::gen
