#include "gen/model.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

namespace sparrow::gen {

std::string models_dir() {
  if (const char* d = getenv("SPARROW_MODELS_DIR"); d && *d) return d;
  // An installed tool (bin/) finds the shapes installed beside it (share/sparrow/models).
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    std::string dir(exe, size_t(n));
    dir = dir.substr(0, dir.rfind('/'));
    std::string installed = dir + "/../share/sparrow/models";
    if (access((installed + "/qwen3-8b.json").c_str(), R_OK) == 0) return installed;
  }
  return SPARROW_MODELS_DIR;
}

Result<ModelConfig> parse_model_config(const std::string& json) {
  std::map<std::string, std::string> kv;
  size_t i = json.find('{');
  if (i == std::string::npos) return InvalidArgument("model config: not a JSON object");
  ++i;
  auto skip = [&] { while (i < json.size() && isspace(static_cast<unsigned char>(json[i]))) ++i; };
  while (true) {
    skip();
    if (i >= json.size()) return InvalidArgument("model config: unterminated object");
    if (json[i] == '}') break;
    if (json[i] == ',') { ++i; continue; }
    if (json[i] != '"') return InvalidArgument("model config: expected a key at offset " + std::to_string(i));
    size_t e = json.find('"', i + 1);
    if (e == std::string::npos) return InvalidArgument("model config: unterminated key");
    std::string key = json.substr(i + 1, e - i - 1);
    i = e + 1;
    skip();
    if (i >= json.size() || json[i] != ':') return InvalidArgument("model config: expected ':' after \"" + key + "\"");
    ++i;
    skip();
    std::string val;
    if (i < json.size() && json[i] == '"') {
      size_t ve = json.find('"', i + 1);
      if (ve == std::string::npos) return InvalidArgument("model config: unterminated string");
      val = json.substr(i + 1, ve - i - 1);
      i = ve + 1;
    } else {
      size_t ve = json.find_first_of(",}", i);
      if (ve == std::string::npos) return InvalidArgument("model config: unterminated value");
      val = json.substr(i, ve - i);
      while (!val.empty() && isspace(static_cast<unsigned char>(val.back()))) val.pop_back();
      i = ve;
    }
    kv[key] = val;
  }
  ModelConfig c;
  auto num = [&](const char* k, int64_t* out, bool required) -> Status {
    auto it = kv.find(k);
    if (it == kv.end()) return required ? InvalidArgument(std::string("model config: missing \"") + k + "\"") : Status::Ok();
    char* end = nullptr;
    long long v = strtoll(it->second.c_str(), &end, 10);
    if (end == it->second.c_str() || *end || v <= 0)
      return InvalidArgument(std::string("model config: \"") + k + "\" must be a positive integer");
    *out = v;
    return Status::Ok();
  };
  c.name = kv.count("name") ? kv["name"] : "model";
  SPARROW_RETURN_IF_ERROR(num("hidden_size", &c.hidden, true));
  SPARROW_RETURN_IF_ERROR(num("intermediate_size", &c.intermediate, true));
  SPARROW_RETURN_IF_ERROR(num("num_hidden_layers", &c.layers, true));
  SPARROW_RETURN_IF_ERROR(num("num_attention_heads", &c.heads, true));
  c.kv_heads = c.heads;
  SPARROW_RETURN_IF_ERROR(num("num_key_value_heads", &c.kv_heads, false));
  c.head_dim = c.hidden / c.heads;
  SPARROW_RETURN_IF_ERROR(num("head_dim", &c.head_dim, false));
  SPARROW_RETURN_IF_ERROR(num("vocab_size", &c.vocab, true));
  c.tie_embeddings = kv.count("tie_word_embeddings") && kv["tie_word_embeddings"] == "true";
  return c;
}

Result<ModelConfig> load_model_config(const std::string& name_or_path) {
  std::string path = name_or_path;
  if (path.find('/') == std::string::npos && path.find(".json") == std::string::npos)
    path = models_dir() + "/" + name_or_path + ".json";
  std::ifstream in(path);
  if (!in) return InvalidArgument("cannot open model config '" + path + "' (known models live in " + models_dir() + ")");
  std::stringstream ss;
  ss << in.rdbuf();
  auto r = parse_model_config(ss.str());
  if (!r.ok()) return std::move(r).take_status().context(path);
  return r;
}

std::vector<kernels::cpu::TensorSpec> model_tensors(const ModelConfig& c, int64_t layers, int64_t vocab) {
  using kernels::cpu::TensorSpec;
  const int64_t L = layers > 0 ? std::min(layers, c.layers) : c.layers;
  const int64_t V = vocab > 0 ? vocab : c.vocab;
  const int64_t H = c.hidden, q = c.heads * c.head_dim, kv = c.kv_heads * c.head_dim, I = c.intermediate;
  std::vector<TensorSpec> ts;
  auto add = [&](std::string n, int64_t rows, int64_t cols) { ts.push_back({std::move(n), 9, uint64_t(rows * cols)}); };
  add("model.embed_tokens.weight", V, H);
  for (int64_t l = 0; l < L; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", 1, H);
    add(p + "self_attn.q_proj.weight", q, H);
    add(p + "self_attn.k_proj.weight", kv, H);
    add(p + "self_attn.v_proj.weight", kv, H);
    add(p + "self_attn.o_proj.weight", H, q);
    add(p + "self_attn.q_norm.weight", 1, c.head_dim);
    add(p + "self_attn.k_norm.weight", 1, c.head_dim);
    add(p + "post_attention_layernorm.weight", 1, H);
    add(p + "mlp.gate_proj.weight", I, H);
    add(p + "mlp.up_proj.weight", I, H);
    add(p + "mlp.down_proj.weight", H, I);
  }
  add("model.norm.weight", 1, H);
  if (!c.tie_embeddings) add("lm_head.weight", V, H);
  return ts;
}

uint64_t total_elements(const std::vector<kernels::cpu::TensorSpec>& ts) {
  uint64_t n = 0;
  for (auto& t : ts) n += t.count;
  return n;
}

}  // namespace sparrow::gen
