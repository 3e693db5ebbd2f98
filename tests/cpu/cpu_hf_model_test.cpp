// The CPU executor on tiny Hugging Face safetensors model directories against transformers
// (tests/golden/make_hf_tiny_models.py → tests/golden/hf_tiny/<name>/): LlamaForCausalLM with an
// untied lm_head, LlamaForCausalLM with tied embeddings, llama3 rope scaling and head_dim 32 !=
// hidden / heads, Qwen2ForCausalLM (Q/K/V biases, tied), MistralForCausalLM stored in BF16.
// Each directory goes through rz::ModelFile::open; 8 prompts are decoded greedily for 32 tokens,
// one slot at a time and all 8 together (one prefill, then batched decode steps). The tokens
// must equal transformers' exactly, the logits of the first and last step within kTol.
// "llama3_tied.gguf" is the llama3_tied model as llama.cpp's converter writes it
// (tests/golden/make_llama3_gguf.py: Q/K rows permuted, the llama3 scaling only in the tensor
// rope_freqs.weight, no scaling metadata), checked against the same transformers golden;
// "qwen3.gguf" and "phi3.gguf" likewise (tests/golden/make_hf_tiny_gguf.py). qwen3 covers the
// per-head q/k norms, phi3 the fused QKV and gate-up tensors and a sliding window (24) shorter
// than the longer prompts with their 32 steps; gemma3 ("gemma3.gguf" too) Gemma 3's block (GeGLU,
// scaled embeddings, four norms of 1 + w, interleaved local and global layers with their own
// rotary bases), gemma3_variant what only its config.json can say (attention scale, final logit
// soft-capping, layer pattern, linear rope scaling on the global layers).
#include <gtest/gtest.h>
#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "cpu/cpu_executor.hpp"
#include "cpu/cpu_ops.hpp"
#include "formats/hf_config.hpp"
#include "formats/model_file.hpp"
#include "formats/safetensors.hpp"
#include "sched/slot_runner.hpp"

namespace rz {
namespace {

const std::string kDir = RZ_SOURCE_DIR "/tests/golden/hf_tiny/";

// Logits of these random models lie within about +-3.3; the golden values are rounded to 6
// decimals. The largest difference measured is under 4e-6 (fp32 sums in another order, see the
// printed line), so 1e-4 still fails on any real error (rope theta 10000 -> 10100 or rms_norm_eps
// 1e-5 -> 1e-4 in a config.json fails it). Exact token matches are safe: every golden step has a
// top-1/top-2 margin of at least 1e-4 (golden.json "min_margin"; the smallest is 4.9e-4).
constexpr float kTol = 1e-4f;

struct Prompt {
  std::vector<int32_t> ids, greedy;
  std::vector<float> logits_first, logits_last;
};

struct HfGolden {
  int steps = 0;
  double min_margin = 0;
  std::vector<Prompt> prompts;
};

std::vector<float> floats(simdjson::dom::element arr) {
  std::vector<float> v;
  for (double x : arr.get_array()) v.push_back(static_cast<float>(x));
  return v;
}

HfGolden load_golden(const std::string& path) {
  HfGolden g;
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(path);
  g.steps = static_cast<int>(int64_t(doc["steps"]));
  g.min_margin = double(doc["min_margin"]);
  for (simdjson::dom::element p : doc["prompts"].get_array()) {
    Prompt pr;
    for (int64_t t : p["ids"].get_array()) pr.ids.push_back(static_cast<int32_t>(t));
    for (int64_t t : p["greedy"].get_array()) pr.greedy.push_back(static_cast<int32_t>(t));
    pr.logits_first = floats(p["logits_first"]);
    pr.logits_last = floats(p["logits_last"]);
    g.prompts.push_back(std::move(pr));
  }
  return g;
}

// Largest |got - want|; INFINITY for a size mismatch or a NaN.
float max_diff(std::span<const float> got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  float worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const float d = std::fabs(got[i] - want[i]);
    if (!(d <= worst)) worst = std::isnan(d) ? INFINITY : d;
  }
  return worst;
}

std::string join(const std::vector<int32_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? " " : "") + std::to_string(v[i]);
  return s;
}

// "NAME.gguf" is NAME's model converted to GGUF; its golden is NAME/golden.json.
std::string golden_dir(const std::string& param) {
  return kDir + (param.ends_with(".gguf") ? param.substr(0, param.size() - 5) : param);
}

class CpuHfModel : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    dir_ = kDir + GetParam();
    const std::string golden = golden_dir(GetParam()) + "/golden.json";
    ASSERT_TRUE(std::filesystem::exists(golden))
        << golden << " is missing (tests/golden/make_hf_tiny_models.py writes it)";
    ASSERT_TRUE(std::filesystem::exists(dir_))
        << dir_ << " is missing (tests/golden/make_llama3_gguf.py writes the .gguf)";
    g_ = load_golden(golden);
    ASSERT_EQ(g_.prompts.size(), 8u);
    ASSERT_GT(g_.steps, 1);
    mf_ = ModelFile::open(dir_);
  }

  // What each directory is meant to cover, so the golden files cannot drift from the intent.
  void check_config() const {
    const ModelConfig& c = mf_->config();
    const std::string name = GetParam();
    const bool gguf = name.ends_with(".gguf");
    EXPECT_EQ(mf_->format(), gguf ? "gguf" : "safetensors");
    // llama.cpp permutes Llama Q/K rows for adjacent pairs; other architectures keep NeoX pairs.
    EXPECT_EQ(c.rope_neox, !gguf || (c.arch != Arch::Llama && c.arch != Arch::Mistral));
    const GgmlType embd = mf_->require("token_embd.weight").type;
    if (name != "llama3_tied.gguf") {
      EXPECT_TRUE(c.rope_freq_factors.empty());
    }
    if (name == "llama") {
      EXPECT_EQ(c.arch, Arch::Llama);
      EXPECT_FALSE(c.tied_embeddings);
      EXPECT_NE(mf_->find_tensor("output.weight"), nullptr);
      EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::None);
      EXPECT_EQ(embd, GgmlType::F32);
    } else if (name == "llama3_tied") {
      EXPECT_EQ(c.arch, Arch::Llama);
      EXPECT_TRUE(c.tied_embeddings);
      EXPECT_EQ(mf_->find_tensor("output.weight"), nullptr);
      EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::Llama3);
      EXPECT_EQ(c.rope_scaling.original_context, 64);
      EXPECT_EQ(c.head_dim, 32);
      EXPECT_NE(c.head_dim * c.n_head, c.n_embd);
      EXPECT_EQ(c.rope_theta, 500000.0f);
    } else if (name == "llama3_tied.gguf") {
      // The scaling is in rope_freqs.weight only, as llama.cpp's converter writes Llama 3.x.
      EXPECT_EQ(c.arch, Arch::Llama);
      EXPECT_TRUE(c.tied_embeddings);
      EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::None);
      EXPECT_NE(mf_->find_tensor("rope_freqs.weight"), nullptr);
      ASSERT_EQ(c.rope_freq_factors.size(), 16u);
      EXPECT_EQ(c.rope_freq_factors.front(), 1.0f);  // short wavelengths kept
      EXPECT_EQ(c.rope_freq_factors.back(), 8.0f);   // long ones divided by the factor
      EXPECT_EQ(c.head_dim, 32);
      EXPECT_EQ(c.rope_theta, 500000.0f);
      EXPECT_EQ(embd, GgmlType::F32);
    } else if (name == "qwen2") {
      EXPECT_EQ(c.arch, Arch::Qwen2);
      EXPECT_TRUE(c.qkv_bias);
      EXPECT_TRUE(c.tied_embeddings);
    } else if (name == "mistral_bf16") {
      EXPECT_EQ(c.arch, Arch::Mistral);
      EXPECT_EQ(embd, GgmlType::BF16);
      EXPECT_EQ(mf_->require("blk.2.attn_q.weight").type, GgmlType::BF16);
    } else if (name == "qwen3" || name == "qwen3.gguf") {
      EXPECT_EQ(c.arch, Arch::Qwen3);
      EXPECT_TRUE(c.qk_norm);
      EXPECT_FALSE(c.qkv_bias);
      EXPECT_TRUE(c.tied_embeddings);
      EXPECT_EQ(c.head_dim, 32);
      EXPECT_NE(c.head_dim * c.n_head, c.n_embd);
      EXPECT_EQ(c.rope_theta, 1e6f);
      EXPECT_EQ(c.sliding_window, 0);
      EXPECT_NE(mf_->find_tensor("blk.1.attn_k_norm.weight"), nullptr);
    } else if (name == "phi3" || name == "phi3.gguf") {
      EXPECT_EQ(c.arch, Arch::Phi3);
      EXPECT_TRUE(c.fused_qkv_gate_up);
      EXPECT_FALSE(c.tied_embeddings);
      EXPECT_EQ(c.sliding_window, 24);  // shorter than the longer prompts: the window matters
      EXPECT_EQ(mf_->require("blk.0.attn_qkv.weight").rows(), 4 * 16 + 2 * 2 * 16);
      EXPECT_EQ(mf_->require("blk.0.ffn_up.weight").rows(), 2 * c.n_ff);
      EXPECT_EQ(mf_->find_tensor("blk.0.ffn_gate.weight"), nullptr);
    } else if (name == "gemma3" || name == "gemma3.gguf") {
      EXPECT_EQ(c.arch, Arch::Gemma3);
      EXPECT_TRUE(c.qk_norm);
      EXPECT_TRUE(c.post_norms);
      EXPECT_TRUE(c.tied_embeddings);
      EXPECT_EQ(c.act, ModelConfig::Act::GeluTanh);
      EXPECT_EQ(c.embd_scale, 8.0f);
      EXPECT_EQ(c.norm_weight_add, gguf ? 0.0f : 1.0f);  // the converter adds the 1
      EXPECT_EQ(c.sliding_window, 16);
      for (int l = 0; l < 7; ++l) EXPECT_EQ(c.layer_window(l), l == 5 ? 0 : 16) << l;
      EXPECT_EQ(c.rope_theta, 1e6f);
      EXPECT_EQ(c.rope_theta_swa, 10000.0f);
      EXPECT_EQ(c.attn_scale, 1.0f / std::sqrt(32.0f));
      EXPECT_EQ(c.final_logit_softcap, 0.0f);
    } else if (name == "gemma3_variant") {
      EXPECT_EQ(c.arch, Arch::Gemma3);
      EXPECT_FALSE(c.tied_embeddings);
      EXPECT_EQ(c.attn_scale, 1.0f / std::sqrt(24.0f));
      EXPECT_EQ(c.final_logit_softcap, 3.0f);
      EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::Linear);
      EXPECT_EQ(c.rope_scaling.factor, 4.0f);
      for (int l = 0; l < 4; ++l) EXPECT_EQ(c.layer_window(l), l == 0 || l == 3 ? 0 : 12) << l;
    } else {
      ADD_FAILURE() << "no expectations for " << name;
    }
  }

  std::string dir_;
  HfGolden g_;
  std::shared_ptr<ModelFile> mf_;
};

// One slot: each prompt prefilled alone, then decoded one token per step.
TEST_P(CpuHfModel, GreedyOneSlotMatchesTransformers) {
  check_config();
  CpuExecutor ex(mf_, {.slots = 1, .max_context = 128, .threads = 2});
  SlotRunner run(ex);
  ex.set_keep_logits(true);
  float worst = 0;
  for (size_t p = 0; p < g_.prompts.size(); ++p) {
    const Prompt& pr = g_.prompts[p];
    std::vector<PrefillRequest> req(1);
    req[0].tokens = pr.ids;
    std::vector<int32_t> got = {run.prefill(req)[0]};
    worst = std::max(worst, max_diff(ex.last_logits(0), pr.logits_first));
    ASSERT_LE(worst, kTol) << "prompt " << p << " [" << join(pr.ids) << "]: first step";
    while (static_cast<int>(got.size()) < g_.steps) got.push_back(run.decode(0, got.back()));
    ASSERT_EQ(got, pr.greedy) << "prompt " << p << " [" << join(pr.ids) << "]";
    worst = std::max(worst, max_diff(ex.last_logits(0), pr.logits_last));
    ASSERT_LE(worst, kTol) << "prompt " << p << ": last step";
    run.release(0);
  }
  std::printf(
      "%s, one slot: max |logit diff| vs transformers %.2e (tol %.0e), golden min "
      "margin %.2e\n",
      GetParam(), worst, kTol, g_.min_margin);
}

// All 8 prompts (lengths 1..40) in one prefill, then 8 slots decoding together.
TEST_P(CpuHfModel, GreedyBatchedMatchesTransformers) {
  const int n = static_cast<int>(g_.prompts.size());
  CpuExecutor ex(mf_, {.slots = n, .max_context = 128, .threads = 2});
  SlotRunner run(ex);
  ex.set_keep_logits(true);
  std::vector<PrefillRequest> reqs(n);
  for (int s = 0; s < n; ++s) {
    reqs[s].slot = s;
    reqs[s].tokens = g_.prompts[s].ids;
  }
  std::vector<int32_t> first = run.prefill(reqs);
  ASSERT_EQ(static_cast<int>(first.size()), n);
  std::vector<std::vector<int32_t>> got(n);
  float worst = 0;
  for (int s = 0; s < n; ++s) {
    got[s].push_back(first[s]);
    worst = std::max(worst, max_diff(ex.last_logits(s), g_.prompts[s].logits_first));
    ASSERT_LE(worst, kTol) << "slot " << s << ": first step";
  }
  for (int step = 1; step < g_.steps; ++step) {
    std::vector<DecodeRequest> d;
    for (int s = 0; s < n; ++s) d.push_back({s, got[s].back()});
    std::vector<int32_t> next = run.decode(d);
    for (int s = 0; s < n; ++s) got[s].push_back(next[s]);
  }
  for (int s = 0; s < n; ++s) {
    EXPECT_EQ(got[s], g_.prompts[s].greedy)
        << "slot " << s << " [" << join(g_.prompts[s].ids) << "]";
    worst = std::max(worst, max_diff(ex.last_logits(s), g_.prompts[s].logits_last));
  }
  EXPECT_LE(worst, kTol);
  std::printf("%s, 8 slots batched: max |logit diff| vs transformers %.2e (tol %.0e)\n", GetParam(),
              worst, kTol);
}

INSTANTIATE_TEST_SUITE_P(HfTiny, CpuHfModel,
                         ::testing::Values("llama", "llama3_tied", "llama3_tied.gguf", "qwen2",
                                           "mistral_bf16", "qwen3", "qwen3.gguf", "phi3",
                                           "phi3.gguf", "gemma3", "gemma3.gguf", "gemma3_variant"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '.', '_');
                           return n;
                         });

// The GGUF path's frequencies (base frequencies divided by the converter's rope_freqs.weight)
// against the safetensors path's (transformers' llama3 rule from config.json): the same within
// the fp32 rounding of the stored divisors, and exactly the same where a divisor is 1 or the
// factor. Rotating with either table then gives the same numbers to that rounding.
TEST(CpuHfModelLlama3Gguf, RopeFrequenciesMatchTheSafetensorsConfig) {
  auto st = ModelFile::open(kDir + "llama3_tied");
  auto gg = ModelFile::open(kDir + "llama3_tied.gguf");
  const RopeFreqs a = RopeFreqs::make(st->config()), b = RopeFreqs::make(gg->config());
  ASSERT_EQ(a.inv_freq.size(), b.inv_freq.size());
  ASSERT_EQ(a.attn_factor, b.attn_factor);
  const std::vector<float>& ff = gg->config().rope_freq_factors;
  int blended = 0;
  double worst = 0;
  for (size_t i = 0; i < a.inv_freq.size(); ++i) {
    const double rel = std::fabs(double(b.inv_freq[i]) - a.inv_freq[i]) / a.inv_freq[i];
    worst = std::max(worst, rel);
    if (ff[i] == 1.0f || ff[i] == 8.0f) {
      EXPECT_EQ(b.inv_freq[i], a.inv_freq[i]) << "frequency " << i << " divisor " << ff[i];
    } else {
      ++blended;
      EXPECT_LE(rel, 3e-7) << "frequency " << i << " divisor " << ff[i];
    }
  }
  EXPECT_GE(blended, 1) << "no frequency in the smooth band: the test covers less than meant";
  std::printf(
      "llama3_tied: %d blended frequencies, max relative inv_freq difference GGUF vs "
      "safetensors %.2e\n",
      blended, worst);
}

}  // namespace
}  // namespace rz

namespace rz {
namespace {

// Gemma 3's image-text checkpoints (Gemma3ForConditionalGeneration: model_type "gemma3" with a
// text_config, the language model under model.language_model.*, a vision tower beside it): rz
// runs the language model. The tiny gemma3 rewritten in that layout (plus a vision tensor) must
// load with the same config and give bit for bit the same logits and transformers' tokens.
TEST(CpuHfModelGemma3, ImageTextCheckpointRunsItsLanguageModel) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("rz_gemma3_it_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto src = SafetensorsFile::open(kDir + "gemma3/model.safetensors");
  std::vector<SafetensorsEntry> entries;
  for (const TensorView& t : src->tensors()) {
    SafetensorsEntry e;
    ASSERT_TRUE(t.name.starts_with("model.")) << t.name;
    e.name = "model.language_model." + t.name.substr(6);
    e.dtype = "F32";
    for (int i = t.n_dims - 1; i >= 0; --i) e.shape.push_back(t.ne[size_t(i)]);
    e.data.assign(t.data, t.data + t.nbytes);
    entries.push_back(std::move(e));
  }
  entries.push_back({"model.vision_tower.vision_model.post_layernorm.weight",
                     "F32",
                     {4},
                     std::vector<uint8_t>(16, 0)});
  entries.push_back({"model.multi_modal_projector.mm_input_projection_weight",
                     "F32",
                     {2, 2},
                     std::vector<uint8_t>(16, 0)});
  write_safetensors((dir / "model.safetensors").string(), entries);
  const std::string text = read_text_file(kDir + "gemma3/config.json");
  {
    std::FILE* f = std::fopen((dir / "config.json").string().c_str(), "wb");
    ASSERT_NE(f, nullptr);
    const std::string cfg = R"({"architectures": ["Gemma3ForConditionalGeneration"],
      "model_type": "gemma3", "vision_config": {"model_type": "siglip_vision_model"},
      "text_config": )" + text +
                            "}";
    std::fwrite(cfg.data(), 1, cfg.size(), f);
    std::fclose(f);
  }
  auto it = ModelFile::open(dir.string());
  auto plain = ModelFile::open(kDir + "gemma3");
  const ModelConfig &a = it->config(), &b = plain->config();
  EXPECT_EQ(a.arch, Arch::Gemma3);
  EXPECT_EQ(a.n_layer, b.n_layer);
  EXPECT_EQ(a.sliding_layers, b.sliding_layers);
  EXPECT_EQ(a.attn_scale, b.attn_scale);
  EXPECT_EQ(a.rope_theta_swa, b.rope_theta_swa);
  EXPECT_EQ(it->find_tensor("blk.6.post_ffw_norm.weight") != nullptr, true);
  const HfGolden g = load_golden(kDir + "gemma3/golden.json");
  CpuExecutor ea(it, {.slots = 1, .max_context = 128, .threads = 2});
  CpuExecutor eb(plain, {.slots = 1, .max_context = 128, .threads = 2});
  SlotRunner ra(ea), rb(eb);
  ea.set_keep_logits(true);
  eb.set_keep_logits(true);
  for (const auto& p : g.prompts) {
    std::vector<PrefillRequest> req(1);
    req[0].tokens = p.ids;
    std::vector<int32_t> got = {ra.prefill(req)[0]};
    rb.prefill(req);
    ASSERT_TRUE(
        std::equal(ea.last_logits(0).begin(), ea.last_logits(0).end(), eb.last_logits(0).begin()));
    while (static_cast<int>(got.size()) < g.steps) {
      got.push_back(ra.decode(0, got.back()));
      rb.decode(0, got[got.size() - 2]);
    }
    EXPECT_EQ(got, p.greedy);
    ra.release(0);
    rb.release(0);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace rz
