// Tests of the CPU forward-pass building blocks (cpu/cpu_ops.cpp): rotary embedding tables
// and rotation against Hugging Face transformers (tests/golden/make_cpu_rope_golden.py), and
// RMSNorm, attention (contiguous and paged) and SwiGLU against float64 references on random
// inputs.
#include "cpu/cpu_ops.hpp"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "formats/common.hpp"

namespace rz {
namespace {

const std::string kRopeGolden = RZ_SOURCE_DIR "/tests/golden/cpu_rope_golden.json";

std::vector<float> floats(simdjson::dom::element arr) {
  std::vector<float> v;
  for (double d : arr.get_array()) v.push_back(float(d));
  return v;
}

ModelConfig rope_config(simdjson::dom::element c) {
  ModelConfig cfg;
  cfg.head_dim = cfg.n_rot = int(int64_t(c["head_dim"]));
  cfg.rope_theta = float(double(c["theta"]));
  cfg.n_ctx_train = int(int64_t(c["n_ctx_train"]));
  simdjson::dom::element p = c["params"];
  std::string_view type = p["rope_type"];
  auto num = [&](const char* key, double def) {
    double v;
    return p[key].get_double().get(v) ? def : v;
  };
  RopeScaling& s = cfg.rope_scaling;
  if (type == "linear") s.type = RopeScaling::Type::Linear;
  if (type == "llama3") s.type = RopeScaling::Type::Llama3;
  if (type == "yarn") s.type = RopeScaling::Type::Yarn;
  s.factor = float(num("factor", 1.0));
  s.low_freq_factor = float(num("low_freq_factor", 1.0));
  s.high_freq_factor = float(num("high_freq_factor", 4.0));
  int64_t orig;
  if (!p["original_max_position_embeddings"].get_int64().get(orig)) s.original_context = int(orig);
  return cfg;
}

TEST(CpuOps, RopeMatchesTransformers) {
  ASSERT_TRUE(std::filesystem::exists(kRopeGolden)) << kRopeGolden;
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(kRopeGolden);
  int n_cases = 0;
  for (simdjson::dom::element c : doc["cases"].get_array()) {
    ++n_cases;
    const std::string name{std::string_view(c["name"])};
    const ModelConfig cfg = rope_config(c);
    const RopeFreqs f = RopeFreqs::make(cfg);
    const auto inv = floats(c["inv_freq"]);
    ASSERT_EQ(f.inv_freq.size(), inv.size()) << name;
    for (size_t i = 0; i < inv.size(); ++i)
      // A few fp32 ulps: transformers forms the llama3 blend in fp32, we in float64.
      ASSERT_NEAR(f.inv_freq[i], inv[i], 1e-6 * inv[i]) << name << " inv_freq " << i;
    ASSERT_NEAR(f.attn_factor, double(c["attn_factor"]), 1e-6) << name;
    const auto x = floats(c["x"]);
    const int D = cfg.head_dim;
    std::vector<float> cs(D);
    size_t k = 0;
    for (int64_t pos : c["positions"].get_array()) {
      rope_table(f, int(pos), cs.data());
      const auto cos = floats(c["cos"].at(k)), sin = floats(c["sin"].at(k));
      const auto want = floats(c["x_rotated_neox"].at(k));
      // The angle is an fp32 product: the inv_freq difference allowed above moves it by up to
      // 1e-6 * inv_freq * pos (inv_freq <= 1).
      const double tol = 2e-6 + 1e-6 * pos;
      for (int i = 0; i < D / 2; ++i) {
        ASSERT_NEAR(cs[2 * i], cos[i], tol) << name << " pos " << pos << " i " << i;
        ASSERT_NEAR(cs[2 * i + 1], sin[i], tol) << name << " pos " << pos << " i " << i;
      }
      std::vector<float> y = x;
      rope_apply(y.data(), cs.data(), D, /*neox=*/true);
      for (int i = 0; i < D; ++i)
        ASSERT_NEAR(y[i], want[i], 4 * tol * (std::fabs(x[i]) + std::fabs(x[(i + D / 2) % D])))
            << name << " pos " << pos << " dim " << i;
      // Adjacent pairs on the interleaved layout (as llama.cpp stores Llama Q/K) give the same
      // numbers, interleaved.
      std::vector<float> xi(D);
      for (int i = 0; i < D / 2; ++i) xi[2 * i] = x[i], xi[2 * i + 1] = x[i + D / 2];
      rope_apply(xi.data(), cs.data(), D, /*neox=*/false);
      for (int i = 0; i < D / 2; ++i) {
        ASSERT_EQ(xi[2 * i], y[i]) << name;
        ASSERT_EQ(xi[2 * i + 1], y[i + D / 2]) << name;
      }
      ++k;
    }
  }
  EXPECT_EQ(n_cases, 5);
}

// Llama 3.x as llama.cpp converts it: no scaling in the config, the llama3 rule baked into
// per-frequency divisors (convert_hf_to_gguf.py, LlamaModel.generate_extra_tensors: fp32
// frequencies, divisor 1 / ((1 - smooth) / factor + smooth) in the band between). RopeFreqs
// must turn them into transformers' llama3 frequencies.
std::vector<float> converter_llama3_divisors(int dim, float base, float factor, float low,
                                             float high, float old_ctx) {
  std::vector<float> out;
  for (int i = 0; i < dim; i += 2) {
    const float freq = 1.0f / std::pow(base, float(i) / float(dim));
    const float wavelen = float(2 * M_PI) / freq;
    if (wavelen < old_ctx / high)
      out.push_back(1.0f);
    else if (wavelen > old_ctx / low)
      out.push_back(factor);
    else {
      const float smooth = (old_ctx / wavelen - low) / (high - low);
      out.push_back(1.0f / ((1.0f - smooth) / factor + smooth));
    }
  }
  return out;
}

TEST(CpuOps, RopeFreqFactorsGiveTransformersLlama3) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(kRopeGolden);
  bool found = false;
  for (simdjson::dom::element c : doc["cases"].get_array()) {
    if (std::string_view(c["name"]) != "llama3") continue;
    found = true;
    const ModelConfig scaled = rope_config(c);
    ASSERT_EQ(scaled.rope_scaling.type, RopeScaling::Type::Llama3);
    ModelConfig cfg = scaled;
    cfg.rope_scaling = RopeScaling{};
    const RopeScaling& s = scaled.rope_scaling;
    cfg.rope_freq_factors =
        converter_llama3_divisors(cfg.n_rot, cfg.rope_theta, s.factor, s.low_freq_factor,
                                  s.high_freq_factor, float(s.original_context));
    const RopeFreqs f = RopeFreqs::make(cfg);
    const auto inv = floats(c["inv_freq"]);
    ASSERT_EQ(f.inv_freq.size(), inv.size());
    int scaled_freqs = 0;
    for (size_t i = 0; i < inv.size(); ++i) {
      ASSERT_NEAR(f.inv_freq[i], inv[i], 1e-6 * inv[i]) << "inv_freq " << i;
      scaled_freqs += cfg.rope_freq_factors[i] != 1.0f;
    }
    EXPECT_GT(scaled_freqs, 8);
    EXPECT_EQ(f.attn_factor, 1.0f);
  }
  EXPECT_TRUE(found);
}

TEST(CpuOps, RopeFreqFactorsDivideAfterScaling) {
  ModelConfig c;
  c.head_dim = c.n_rot = 8;
  c.rope_theta = 10000;
  c.n_ctx_train = 4096;
  c.rope_scaling.type = RopeScaling::Type::Linear;
  c.rope_scaling.factor = 4;
  c.rope_freq_factors = {1.0f, 2.0f, 3.0f, 0.5f};
  const RopeFreqs f = RopeFreqs::make(c);
  ASSERT_EQ(f.inv_freq.size(), 4u);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(f.inv_freq[i],
              float(std::pow(10000.0, -2.0 * i / 8) / 4 / double(c.rope_freq_factors[i])))
        << i;
  c.rope_freq_factors.pop_back();
  EXPECT_THROW(RopeFreqs::make(c), Error);
}

TEST(CpuOps, RmsNormAttentionSwigluMatchFloat64) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  // RMSNorm
  for (int n : {1, 7, 576, 4096}) {
    std::vector<float> x(n), w(n), y(n, NAN);
    for (auto& v : x) v = 3 * nd(rng);
    for (auto& v : w) v = nd(rng);
    rms_norm(x.data(), w.data(), y.data(), n, 1e-5f);
    double ss = 0;
    for (float v : x) ss += double(v) * v;
    const double inv = 1 / std::sqrt(ss / n + 1e-5);
    for (int i = 0; i < n; ++i)
      ASSERT_NEAR(y[i], x[i] * inv * w[i], 1e-5 * std::fabs(x[i] * inv * w[i]) + 1e-7);
  }
  // Attention of one head over a strided contiguous cache (one block), then over the same rows
  // scattered into blocks of 16 in shuffled order: the float64 result, and the same bits.
  for (int n_pos : {1, 2, 33, 300}) {
    const int hd = 64, stride = 3 * hd, bs = 16, n_blk = (n_pos + bs - 1) / bs;
    std::vector<float> q(hd), k(n_pos * stride), v(n_pos * stride), out(hd, NAN), scores(n_pos);
    for (auto& a : q) a = nd(rng);
    for (auto& a : k) a = nd(rng);
    for (auto& a : v) a = nd(rng);
    const float scale = 0.125f;
    const int32_t one_block = 0;
    attend_head(q.data(), k.data() + hd, v.data() + hd, &one_block, n_pos, stride, n_pos, hd, scale,
                scores.data(), out.data());
    std::vector<double> s(n_pos);
    double mx = -1e300, sum = 0;
    for (int p = 0; p < n_pos; ++p) {
      double d = 0;
      for (int i = 0; i < hd; ++i) d += double(q[i]) * k[p * stride + hd + i];
      s[p] = d * scale;
      mx = std::max(mx, s[p]);
    }
    for (auto& a : s) sum += (a = std::exp(a - mx));
    for (int i = 0; i < hd; ++i) {
      double r = 0;
      for (int p = 0; p < n_pos; ++p) r += s[p] / sum * v[p * stride + hd + i];
      ASSERT_NEAR(out[i], r, 1e-5) << "n_pos " << n_pos << " dim " << i;
    }
    // Paged: position p in block blocks[p / bs] of a cache with n_blk + 3 blocks (NaN elsewhere,
    // so a wrong row shows).
    std::vector<int32_t> blocks(n_blk);
    for (int b = 0; b < n_blk; ++b) blocks[b] = n_blk + 2 - b;  // n_blk + 2 down to 3
    std::vector<float> kp(size_t(n_blk + 3) * bs * stride, NAN), vp(kp.size(), NAN);
    for (int p = 0; p < n_pos; ++p) {
      const size_t row = size_t(blocks[p / bs]) * bs + p % bs;
      std::copy_n(&k[p * stride], stride, &kp[row * stride]);
      std::copy_n(&v[p * stride], stride, &vp[row * stride]);
    }
    std::vector<float> paged(hd, NAN);
    attend_head(q.data(), kp.data() + hd, vp.data() + hd, blocks.data(), bs, stride, n_pos, hd,
                scale, scores.data(), paged.data());
    for (int i = 0; i < hd; ++i)
      ASSERT_EQ(std::memcmp(&paged[i], &out[i], sizeof(float)), 0)
          << "n_pos " << n_pos << " dim " << i << ": " << paged[i] << " vs " << out[i];
  }
  // SwiGLU
  std::vector<float> g(1000), u(1000);
  for (auto& a : g) a = 4 * nd(rng);
  for (auto& a : u) a = nd(rng);
  std::vector<float> r = g;
  swiglu(r.data(), u.data(), 1000);
  for (int i = 0; i < 1000; ++i) {
    const double want = g[i] / (1 + std::exp(-double(g[i]))) * u[i];
    ASSERT_NEAR(r[i], want, 1e-6 * std::fabs(want) + 1e-7);
  }
}

}  // namespace
}  // namespace rz
