// The CPU executor on a tiny synthetic Qwen2-architecture GGUF against Hugging Face transformers
// (tests/golden/make_cpu_tiny_golden.py): Q/K/V biases, NeoX rotary pairs, an untied output
// matrix, a Q6_K embedding and matrices in F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q4_K, Q5_K and
// Q6_K. The logits after every position of a fixed sequence must match, for a slot prefilled and
// decoded alone and for two slots of different lengths stepping together, with KV blocks of 4
// tokens (so the prompts and decodes cross block boundaries).
#include <gtest/gtest.h>
#include <simdjson.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "cpu/cpu_executor.hpp"
#include "formats/model_file.hpp"
#include "sched/slot_runner.hpp"

namespace rz {
namespace {

const std::string kModel = RZ_SOURCE_DIR "/tests/golden/cpu_tiny_qwen2.gguf";
const std::string kGolden = RZ_SOURCE_DIR "/tests/golden/cpu_tiny_golden.json";

// The logits of this random model lie within about +-3.5; the measured largest difference is
// about 1e-6 (fp32 sums in another order), so 1e-4 still fails on any real error.
constexpr float kTol = 1e-4f;

struct TinyGolden {
  std::vector<int32_t> tokens;
  int prefill = 0;
  std::vector<std::vector<float>> logits;  // row r: after position prefill - 1 + r
};

TinyGolden load_golden() {
  TinyGolden g;
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(kGolden);
  for (int64_t t : doc["tokens"].get_array()) g.tokens.push_back(int32_t(t));
  g.prefill = int(int64_t(doc["prefill"]));
  for (simdjson::dom::element row : doc["logits"].get_array()) {
    g.logits.emplace_back();
    for (double v : row.get_array()) g.logits.back().push_back(float(v));
  }
  return g;
}

float max_diff(std::span<const float> got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  float worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const float d = std::fabs(got[i] - want[i]);
    if (!(d <= worst)) worst = std::isnan(d) ? INFINITY : d;
  }
  return worst;
}

TEST(CpuTinyModel, QuantTypesBiasesNeoxMatchTransformers) {
  ASSERT_TRUE(std::filesystem::exists(kModel)) << kModel;
  const TinyGolden g = load_golden();
  auto mf = ModelFile::open(kModel);
  ASSERT_EQ(mf->config().arch, Arch::Qwen2);
  ASSERT_TRUE(mf->config().qkv_bias);
  ASSERT_TRUE(mf->config().rope_neox);
  ASSERT_FALSE(mf->config().tied_embeddings);

  CpuExecutor ex(mf, {.slots = 2, .max_context = 64, .threads = 2, .kv_block_size = 4});
  SlotRunner run(ex);
  ex.set_keep_logits(true);
  const int P = g.prefill;
  const int n = static_cast<int>(g.tokens.size());
  // Slot 0 starts with the first P tokens, slot 1 with the first P + 4: the same rows of golden
  // logits, four steps apart.
  std::vector<PrefillRequest> reqs(2);
  reqs[0].slot = 0;
  reqs[0].tokens.assign(g.tokens.begin(), g.tokens.begin() + P);
  reqs[1].slot = 1;
  reqs[1].tokens.assign(g.tokens.begin(), g.tokens.begin() + P + 4);
  run.prefill(reqs);
  float worst = max_diff(ex.last_logits(0), g.logits[0]);
  ASSERT_LE(worst, kTol) << "slot 0 after prefill";
  float d1 = max_diff(ex.last_logits(1), g.logits[4]);
  ASSERT_LE(d1, kTol) << "slot 1 after prefill";
  worst = std::max(worst, d1);
  int pos0 = P, pos1 = P + 4;
  while (pos0 < n) {
    std::vector<DecodeRequest> step = {{0, g.tokens[pos0]}};
    if (pos1 < n) step.push_back({1, g.tokens[pos1]});
    run.decode(step);
    const float a = max_diff(ex.last_logits(0), g.logits[pos0 - P + 1]);
    ASSERT_LE(a, kTol) << "slot 0 after position " << pos0;
    worst = std::max(worst, a);
    if (pos1 < n) {
      const float b = max_diff(ex.last_logits(1), g.logits[pos1 - P + 1]);
      ASSERT_LE(b, kTol) << "slot 1 after position " << pos1;
      worst = std::max(worst, b);
      ++pos1;
    }
    ++pos0;
  }
  std::printf("tiny qwen2: max |logit diff| vs transformers %.2e (tol %.0e)\n", worst, kTol);
}

}  // namespace
}  // namespace rz
