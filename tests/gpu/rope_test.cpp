// GPU rotary embedding (kernels/rope.cu) against a float64 rotation that forms the angle as the
// CPU executor does (cpu/cpu_ops.cpp: one fp32 multiply inv_freq[i] * float(pos), then cos/sin
// of that float in double): normal and NeoX pairs, partial rotation, GQA head counts, positions
// up to 131071, tables with linear scaling and per-frequency factors, attention factor, Q and K
// inside one fused QKV row (V and padding must stay bit-identical). Outputs are poisoned where
// the kernel writes nothing else: the in-place inputs themselves are checked element by element.
// The cos/sin table (rope_cs_table) is checked against float64 cos/sin, and rope_inplace with it
// must equal rope_inplace without it bit for bit (positions inside and outside the table).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gpu/test_support.hpp"
#include "kernels/rope.hpp"
#include "tests/gpu/elem_test_util.hpp"

namespace rz::gpu {
namespace {

using namespace elem_test;

// Rotated elements: |err| <= kTol * (|x_a| + |x_b|) (fp32 cos/sin rounding plus three rounded
// operations: a few 1e-7 of the pair's magnitude).
constexpr double kTol = 1e-6;

struct Case {
  int n_tokens, n_head, n_head_kv, head_dim, n_rot;
};

// One token row of `heads` heads at `row`, rotated in double. Elements outside the rotation are
// copied. Returns the per-element tolerance scale (|x_a| + |x_b| for rotated ones, 0 otherwise).
void rotate_ref(const float* row, int heads, int head_dim, int n_rot, bool neox, int pos,
                const std::vector<float>& inv_freq, float attn_factor, double* out, double* scale) {
  const int half = n_rot / 2;
  for (int h = 0; h < heads; ++h) {
    const float* x = row + h * head_dim;
    double* y = out + h * head_dim;
    double* sc = scale + h * head_dim;
    for (int d = 0; d < head_dim; ++d) y[d] = x[d], sc[d] = 0;
    for (int i = 0; i < half; ++i) {
      const float angle = inv_freq[i] * static_cast<float>(pos);  // fp32, as rope_table
      const double c = std::cos(double(angle)) * attn_factor;
      const double s = std::sin(double(angle)) * attn_factor;
      const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
      const double x0 = x[a], x1 = x[b];
      y[a] = x0 * c - x1 * s;
      y[b] = x0 * s + x1 * c;
      sc[a] = sc[b] = std::fabs(x0) + std::fabs(x1);
    }
  }
}

::testing::AssertionResult check_rows(const std::vector<float>& got, const std::vector<double>& ref,
                                      const std::vector<double>& scale, const std::string& what) {
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - ref[i]);
    const bool ok = scale[i] == 0 ? bits_of(got[i]) == bits_of(float(ref[i])) && !std::isnan(got[i])
                                  : !std::isnan(got[i]) && err <= kTol * scale[i];
    if (!ok)
      return ::testing::AssertionFailure()
             << what << ": element [" << i << "] got " << got[i] << " want " << ref[i]
             << (scale[i] == 0 ? " (not rotated: must be unchanged)" : "") << ", err " << err
             << ", allowed " << kTol * scale[i];
  }
  return ::testing::AssertionSuccess();
}

void run_case(const Case& c, bool neox, bool fused, const std::vector<float>& inv_freq,
              float attn_factor, std::mt19937_64& rng, const std::string& what) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int q_w = c.n_head * c.head_dim, kv_w = c.n_head_kv * c.head_dim;
  // fused: one row [Q | K | V | pad 3] per token; else dense Q [n_tokens, q_w], K [n_tokens, kv_w]
  const int64_t row = fused ? q_w + 2 * kv_w + 3 : 0;
  std::vector<int32_t> pos(c.n_tokens);
  for (int t = 0; t < c.n_tokens; ++t) pos[t] = static_cast<int32_t>(rng() % 131072);
  pos[0] = 0;
  if (c.n_tokens > 1) pos[1] = 131071;
  if (c.n_tokens > 2) pos[2] = 1;
  std::vector<float> buf_q, buf_k;
  if (fused) {
    buf_q.resize(size_t(c.n_tokens) * row);
    for (auto& v : buf_q) v = nd(rng);
  } else {
    buf_q.resize(size_t(c.n_tokens) * q_w);
    buf_k.resize(size_t(c.n_tokens) * kv_w);
    for (auto& v : buf_q) v = nd(rng);
    for (auto& v : buf_k) v = nd(rng);
  }
  // References, element by element over the same buffers.
  std::vector<double> ref_q(buf_q.size()), sc_q(buf_q.size(), 0.0);
  std::vector<double> ref_k(buf_k.size()), sc_k(buf_k.size(), 0.0);
  for (size_t i = 0; i < buf_q.size(); ++i) ref_q[i] = buf_q[i];
  for (size_t i = 0; i < buf_k.size(); ++i) ref_k[i] = buf_k[i];
  for (int t = 0; t < c.n_tokens; ++t) {
    if (fused) {
      const size_t at = size_t(t) * row;
      rotate_ref(&buf_q[at], c.n_head, c.head_dim, c.n_rot, neox, pos[t], inv_freq, attn_factor,
                 &ref_q[at], &sc_q[at]);
      rotate_ref(&buf_q[at + q_w], c.n_head_kv, c.head_dim, c.n_rot, neox, pos[t], inv_freq,
                 attn_factor, &ref_q[at + q_w], &sc_q[at + q_w]);
    } else {
      rotate_ref(&buf_q[size_t(t) * q_w], c.n_head, c.head_dim, c.n_rot, neox, pos[t], inv_freq,
                 attn_factor, &ref_q[size_t(t) * q_w], &sc_q[size_t(t) * q_w]);
      rotate_ref(&buf_k[size_t(t) * kv_w], c.n_head_kv, c.head_dim, c.n_rot, neox, pos[t], inv_freq,
                 attn_factor, &ref_k[size_t(t) * kv_w], &sc_k[size_t(t) * kv_w]);
    }
  }
  auto d_q = to_device(buf_q);
  auto d_k = to_device(buf_k);
  auto d_pos = to_device(pos);
  auto d_freq = to_device(inv_freq);
  RopeArgs a;
  a.n_tokens = c.n_tokens, a.n_head = c.n_head, a.n_head_kv = c.n_head_kv;
  a.head_dim = c.head_dim, a.n_rot = c.n_rot, a.neox = neox, a.attn_factor = attn_factor;
  if (fused) a.q_row_stride = a.k_row_stride = row;
  float* k_ptr = fused ? d_q.get() + q_w : d_k.get();
  rope_inplace(d_q.get(), c.n_head_kv ? k_ptr : nullptr, d_pos.get(), d_freq.get(), a, nullptr);
  ASSERT_TRUE(check_rows(d_q.download(), ref_q, sc_q, what + (fused ? " fused QKV" : " Q")));
  if (!fused && !buf_k.empty()) {
    ASSERT_TRUE(check_rows(d_k.download(), ref_k, sc_k, what + " K"));
  }
}

TEST(Rope, MatchesFloat64RotationNormalAndNeox) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const Case cases[] = {
      {1, 1, 1, 2, 2},       {5, 9, 3, 64, 64},   {7, 32, 8, 128, 128}, {3, 8, 2, 128, 64},
      {4, 2, 1, 80, 80},     {2, 3, 1, 96, 32},   {6, 4, 0, 64, 64},    {2, 2, 2, 512, 512},
      {3, 1, 1, 1024, 1024}, {33, 14, 2, 64, 64}, {300, 9, 3, 64, 64},
  };
  for (const Case& c : cases) {
    for (double theta : {10000.0, 100000.0, 500000.0, 1e6}) {
      for (bool neox : {false, true}) {
        for (bool fused : {false, true}) {
          const auto inv_freq = rope_inv_freq(theta, c.n_rot);
          const std::string what = "tokens " + std::to_string(c.n_tokens) + " heads " +
                                   std::to_string(c.n_head) + "/" + std::to_string(c.n_head_kv) +
                                   " head_dim " + std::to_string(c.head_dim) + " n_rot " +
                                   std::to_string(c.n_rot) + " theta " + std::to_string(theta) +
                                   (neox ? " neox" : " normal");
          run_case(c, neox, fused, inv_freq, 1.0f, rng, what);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(Rope, ScaledTablesAndAttentionFactor) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const Case c{9, 8, 2, 128, 128};
  std::vector<float> factors(c.n_rot / 2);
  std::uniform_real_distribution<float> ud(1.0f, 8.0f);
  for (auto& f : factors) f = ud(rng);
  for (bool neox : {false, true}) {
    run_case(c, neox, false, rope_inv_freq(500000.0, c.n_rot, 4.0), 1.0f, rng, "linear x4");
    run_case(c, neox, false, rope_inv_freq(500000.0, c.n_rot, 1.0, factors.data()), 1.0f, rng,
             "per-frequency factors");
    run_case(c, neox, true, rope_inv_freq(10000.0, c.n_rot), 1.2079442f, rng, "attn factor");
  }
}

// rope_cs_table against cos/sin in double of the fp32 angle (each entry within the fp32
// rounding of cos, then of the attn_factor product), and rope_inplace with the table == without,
// bit for bit, on every element: full and partial rotation, normal and NeoX, dense and fused
// rows, attn_factor 1 and not, a table covering every position and one covering only some.
TEST(Rope, CosSinTableBitIdenticalToComputedPath) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int kPositions = 131072;
  const Case cases[] = {{1, 12, 2, 128, 128}, {9, 12, 2, 128, 128}, {5, 9, 3, 64, 64},
                        {7, 8, 2, 128, 64},   {4, 3, 1, 80, 24},    {6, 4, 0, 64, 64},
                        {300, 9, 3, 64, 64},  {3, 2, 2, 512, 512}};
  for (const Case& c : cases) {
    for (float attn : {1.0f, 1.2079442f, 0.75f}) {
      const double theta = attn == 1.0f ? 1e6 : 10000.0, linear = attn == 0.75f ? 4.0 : 1.0;
      const auto inv_freq = rope_inv_freq(theta, c.n_rot, linear);
      auto d_freq = to_device(inv_freq);
      auto d_table = poisoned<float>(size_t(kPositions) * c.n_rot);
      rope_cs_table(d_freq.get(), c.n_rot, attn, kPositions, d_table.get(), nullptr);
      const auto table = d_table.download();
      // the table against float64 (every entry for attn 1 and heads up to 128 wide, a sample of
      // positions otherwise, always the last ones; poison left elsewhere fails the bit
      // comparison below at the positions it uses)
      const int half = c.n_rot / 2;
      const int step = c.n_rot > 128 ? 7 : attn == 1.0f ? 1 : 13;  // bounds the CPU time
      for (int p = 0; p < kPositions; p += p < kPositions - step ? step : 1)
        for (int i = 0; i < half; ++i) {
          const float angle = inv_freq[i] * static_cast<float>(p);
          const double want_c = std::cos(double(angle)) * attn;
          const double want_s = std::sin(double(angle)) * attn;
          const float got_c = table[size_t(p) * c.n_rot + 2 * i];
          const float got_s = table[size_t(p) * c.n_rot + 2 * i + 1];
          const double tol = 1.5e-7 * attn;
          ASSERT_TRUE(!std::isnan(got_c) && !std::isnan(got_s) &&
                      std::fabs(got_c - want_c) <= tol && std::fabs(got_s - want_s) <= tol)
              << "table n_rot " << c.n_rot << " attn " << attn << " pos " << p << " pair " << i
              << ": got (" << got_c << ", " << got_s << ") want (" << want_c << ", " << want_s
              << ")";
        }
      for (bool neox : {false, true})
        for (bool fused : {false, true})
          for (int table_positions : {kPositions, 70000}) {
            const std::string what =
                "heads " + std::to_string(c.n_head) + "/" + std::to_string(c.n_head_kv) +
                " head_dim " + std::to_string(c.head_dim) + " n_rot " + std::to_string(c.n_rot) +
                " tokens " + std::to_string(c.n_tokens) + " attn " + std::to_string(attn) +
                (neox ? " neox" : " normal") + (fused ? " fused" : " dense") + " table positions " +
                std::to_string(table_positions);
            const int q_w = c.n_head * c.head_dim, kv_w = c.n_head_kv * c.head_dim;
            const int64_t row = fused ? q_w + 2 * kv_w + 3 : 0;
            std::vector<int32_t> pos(c.n_tokens);
            for (int t = 0; t < c.n_tokens; ++t) pos[t] = static_cast<int32_t>(rng() % kPositions);
            pos[0] = c.n_tokens > 1 ? 131071 : int32_t(rng() % kPositions);
            if (c.n_tokens > 1) pos[1] = 0;
            if (c.n_tokens > 2) pos[2] = 69999;
            if (c.n_tokens > 3) pos[3] = 70000;
            std::vector<float> q(size_t(c.n_tokens) * (fused ? row : q_w));
            std::vector<float> k(fused ? 0 : size_t(c.n_tokens) * kv_w);
            for (auto& v : q) v = nd(rng);
            for (auto& v : k) v = nd(rng);
            auto d_pos = to_device(pos);
            RopeArgs a;
            a.n_tokens = c.n_tokens, a.n_head = c.n_head, a.n_head_kv = c.n_head_kv;
            a.head_dim = c.head_dim, a.n_rot = c.n_rot, a.neox = neox, a.attn_factor = attn;
            if (fused) a.q_row_stride = a.k_row_stride = row;
            std::vector<float> got[2][2];  // [with table][q, k]
            for (int with : {0, 1}) {
              auto d_q = to_device(q);
              auto d_k = to_device(k);
              float* k_ptr = fused ? d_q.get() + q_w : d_k.get();
              RopeArgs b = a;
              if (with) b.cs_table = d_table.get(), b.cs_positions = table_positions;
              rope_inplace(d_q.get(), c.n_head_kv ? k_ptr : nullptr, d_pos.get(), d_freq.get(), b,
                           nullptr);
              got[with][0] = d_q.download();
              if (!k.empty()) got[with][1] = d_k.download();
            }
            ASSERT_TRUE(all_bits_equal(got[1][0], got[0][0], what + ": Q (with table vs without)"));
            ASSERT_TRUE(all_bits_equal(got[1][1], got[0][1], what + ": K (with table vs without)"));
            // and the rows did change where rotated (a table path that did nothing cannot pass)
            bool changed = false;
            for (size_t j = 0; j < q.size() && !changed; ++j)
              changed = bits_of(got[1][0][j]) != bits_of(q[j]);
            ASSERT_TRUE(changed || (c.n_tokens == 1 && pos[0] == 0)) << what << ": nothing rotated";
          }
    }
  }
}

// rope_inv_freq against theta^(-2i/n_rot) / linear / factor_i in long double, to within one fp32
// rounding. Pure host code: runs without a GPU.
TEST(Rope, InverseFrequencyTable) {
  const int n_rot = 128;
  std::vector<float> factors(n_rot / 2);
  for (int i = 0; i < n_rot / 2; ++i) factors[i] = 1.0f + 0.25f * static_cast<float>(i % 5);
  for (double theta : {10000.0, 100000.0, 500000.0}) {
    for (double linear : {1.0, 2.0, 8.0}) {
      for (bool with_factors : {false, true}) {
        const auto f = rope_inv_freq(theta, n_rot, linear, with_factors ? factors.data() : nullptr);
        ASSERT_EQ(f.size(), size_t(n_rot / 2));
        for (int i = 0; i < n_rot / 2; ++i) {
          long double want = std::pow(static_cast<long double>(theta), -2.0L * i / n_rot) / linear;
          if (with_factors) want /= factors[i];
          EXPECT_NEAR(f[i], static_cast<double>(want), static_cast<double>(want) * 1.2e-7)
              << "theta " << theta << " linear " << linear << " i " << i;
        }
      }
    }
  }
  EXPECT_EQ(rope_inv_freq(10000.0, 2)[0], 1.0f);
  EXPECT_TRUE(throws_shape_error([] { rope_inv_freq(10000.0, 7); }, "n_rot 7"));
  EXPECT_TRUE(throws_shape_error([] { rope_inv_freq(0.0, 8); }, "theta"));
  EXPECT_TRUE(throws_shape_error([] { rope_inv_freq(10000.0, 8, 0.0); }, "linear"));
  const float bad[4] = {1, 1, 0, 1};
  EXPECT_TRUE(throws_shape_error([&] { rope_inv_freq(10000.0, 8, 1.0, bad); }, "factor 2"));
}

TEST(Rope, RejectsBadArguments) {  // checked before any CUDA call: runs without a GPU
  float* p = reinterpret_cast<float*>(16);
  const int32_t* pos = reinterpret_cast<const int32_t*>(16);
  RopeArgs a;
  a.n_tokens = 2, a.n_head = 4, a.n_head_kv = 2, a.head_dim = 64, a.n_rot = 64;
  auto call = [&](RopeArgs b) { return [=] { rope_inplace(p, p, pos, p, b, nullptr); }; };
  RopeArgs b = a;
  b.n_rot = 63;
  EXPECT_TRUE(throws_shape_error(call(b), "n_rot must be even"));
  b = a, b.n_rot = 128;
  EXPECT_TRUE(throws_shape_error(call(b), "<= head_dim"));
  b = a, b.head_dim = 0;
  EXPECT_TRUE(throws_shape_error(call(b), "bad shape"));
  b = a, b.q_row_stride = 100;
  EXPECT_TRUE(throws_shape_error(call(b), "row stride"));
  b = a, b.k_row_stride = 64;
  EXPECT_TRUE(throws_shape_error(call(b), "row stride"));
  EXPECT_TRUE(throws_shape_error([&] { rope_inplace(p, nullptr, pos, p, a, nullptr); }, "null"));
  b = a, b.cs_table = p, b.cs_positions = -1;
  EXPECT_TRUE(throws_shape_error(call(b), "cs_positions"));
  b = a, b.n_tokens = 0;
  EXPECT_NO_THROW(call(b)());  // no tokens: no launch
  EXPECT_TRUE(throws_shape_error([&] { rope_cs_table(p, 7, 1.0f, 10, p, nullptr); }, "bad shape"));
  EXPECT_TRUE(throws_shape_error([&] { rope_cs_table(p, 0, 1.0f, 10, p, nullptr); }, "bad shape"));
  EXPECT_TRUE(throws_shape_error([&] { rope_cs_table(p, 8, 1.0f, -1, p, nullptr); }, "bad shape"));
  EXPECT_TRUE(throws_shape_error([&] { rope_cs_table(nullptr, 8, 1.0f, 10, p, nullptr); }, "null"));
  EXPECT_TRUE(throws_shape_error([&] { rope_cs_table(p, 8, 1.0f, 10, nullptr, nullptr); }, "null"));
  EXPECT_NO_THROW(rope_cs_table(p, 8, 1.0f, 0, p, nullptr));
}

}  // namespace
}  // namespace rz::gpu
