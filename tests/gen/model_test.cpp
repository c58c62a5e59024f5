#include "gen/model.h"

#include <gtest/gtest.h>

namespace sparrow::gen {
namespace {

TEST(Model, ParameterCountsMatchTheModelNotes) {
  // shared/models/README.md: 0.6B ~ 0.60e9 (tied), 4B ~ 4.02e9 (tied), 8B ~ 8.19e9, 14B ~ 14.77e9.
  const std::pair<const char*, double> cases[] = {
      {"qwen3-0.6b", 0.60e9}, {"qwen3-4b", 4.02e9}, {"qwen3-8b", 8.19e9}, {"qwen3-14b", 14.77e9}};
  for (auto [name, expect] : cases) {
    auto c = load_model_config(name);
    ASSERT_TRUE(c.ok()) << c.status().message();
    double n = double(total_elements(model_tensors(c.value())));
    EXPECT_NEAR(n / expect, 1.0, 0.01) << name << ": " << n;
  }
}

TEST(Model, ScaleDownKeepsShapes) {
  auto c = load_model_config("qwen3-8b").value();
  auto ts = model_tensors(c, 2, 1000);
  EXPECT_EQ(ts.front().name, "model.embed_tokens.weight");
  EXPECT_EQ(ts.front().count, 1000u * 4096u);
  EXPECT_EQ(ts.back().name, "lm_head.weight");
  EXPECT_EQ(ts.size(), 2u + 2u * 11u + 1u);
  for (auto& t : ts) EXPECT_EQ(t.dtype, 9);
  EXPECT_EQ(ts[2].name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(ts[2].count, 4096u * 4096u);
  EXPECT_EQ(ts[3].count, 1024u * 4096u);  // 8 kv heads x 128
}

TEST(Model, BadConfigsAreClearErrors) {
  EXPECT_EQ(load_model_config("no-such-model").status().code(), Code::kInvalidArgument);
  EXPECT_NE(parse_model_config("{\"hidden_size\": 8}").status().message().find("missing"), std::string::npos);
  EXPECT_NE(parse_model_config("{\"hidden_size\": -8, \"intermediate_size\": 1, \"num_hidden_layers\": 1, "
                               "\"num_attention_heads\": 1, \"vocab_size\": 1}")
                .status()
                .message()
                .find("positive"),
            std::string::npos);
  EXPECT_FALSE(parse_model_config("not json").ok());
}

}  // namespace
}  // namespace sparrow::gen
