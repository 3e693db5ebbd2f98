// Fused decode kernels (kernels/add_rmsnorm.cu, qkv_post.cu, swiglu_rows.cu) against the unfused
// kernels they replace, bit for bit, on the GPU (same random inputs through both paths, outputs
// and caches poisoned with 0xFF first, every element compared by its bits), and against float64
// CPU references with stated tolerances (so a shared mistake in both GPU paths still fails):
//   add_rms_norm == residual_add then rms_norm
//   qkv_post     == bias_add x3 (strided) then rope_inplace (strided) then kv_append (strided);
//                   with a cos/sin table and/or separate q, k, v sources == without
//   swiglu_rows  == swiglu on de-interleaved gate / up rows
// The bad-argument test runs without a GPU (the launchers check before touching the device).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "gpu/test_support.hpp"
#include "kernels/add_rmsnorm.hpp"
#include "kernels/bias.hpp"
#include "kernels/kv_append.hpp"
#include "kernels/qkv_post.hpp"
#include "kernels/residual.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/rope.hpp"
#include "kernels/swiglu.hpp"
#include "kernels/swiglu_rows.hpp"
#include "quants/quants.hpp"
#include "tests/gpu/elem_test_util.hpp"

namespace rz::gpu {
namespace {

using namespace elem_test;

std::vector<float> random_floats(size_t n, std::mt19937_64& rng, float scale = 1.0f) {
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

// Every uint16 equal (fp16 caches; 0xFFFF poison must match poison).
::testing::AssertionResult all_u16_equal(const std::vector<uint16_t>& got,
                                         const std::vector<uint16_t>& ref,
                                         const std::string& what) {
  if (got.size() != ref.size())
    return ::testing::AssertionFailure() << what << ": size " << got.size() << " != " << ref.size();
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != ref[i] && bad++ == 0) first = i;
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << bad << " of " << got.size() << " halves differ; first at [" << first
         << "] got 0x" << std::hex << got[first] << " want 0x" << ref[first];
}

// ---------------------------------------------------------------------------------------------
// add_rms_norm

constexpr double kNormRtol = 1e-5;  // fp32 sum of squares, sqrt, division, two products

std::vector<double> rms_norm_ref(const std::vector<float>& x, const std::vector<float>& w, int rows,
                                 int n, float eps) {
  std::vector<double> out(x.size());
  for (int r = 0; r < rows; ++r) {
    const float* xr = x.data() + size_t(r) * n;
    double ss = 0;
    for (int i = 0; i < n; ++i) ss += double(xr[i]) * xr[i];
    const double scale = 1.0 / std::sqrt(ss / n + double(eps));
    for (int i = 0; i < n; ++i) out[size_t(r) * n + i] = double(xr[i]) * scale * double(w[i]);
  }
  return out;
}

TEST(AddRmsNorm, MatchesResidualAddThenRmsNormBitExact) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const float eps = 1e-6f;
  // n crosses every block-size threshold of rms_norm (128 / 256 / 512 / 1024 threads)
  const int ns[] = {1,    31,   128,  256,  257,  576,  1024, 1025,
                    1536, 2048, 3584, 4096, 4097, 8192, 8963};
  for (int n : ns) {
    for (int rows : {1, 3}) {
      for (int mode = 0; mode < 3;
           ++mode) {  // 0: with y, out separate; 1: with y, out == x; 2: y null
        const std::string what = "rows " + std::to_string(rows) + " n " + std::to_string(n) +
                                 (mode == 0   ? " add"
                                  : mode == 1 ? " add, out aliases x"
                                              : " no y");
        const size_t total = size_t(rows) * n;
        const auto x = random_floats(total, rng, 2.0f);
        const auto y = random_floats(total, rng, 1.0f);
        const auto w = random_floats(size_t(n), rng, 1.0f);
        // CPU: the residual sum in fp32 (one IEEE add each, exactly what the GPU does)
        std::vector<float> sum = x;
        if (mode != 2)
          for (size_t i = 0; i < total; ++i) sum[i] = x[i] + y[i];
        const auto ref = rms_norm_ref(sum, w, rows, n, eps);

        auto d_y = to_device(y);
        auto d_w = to_device(w);
        // unfused: residual_add then rms_norm
        auto d_x1 = to_device(x);
        auto d_out1 = poisoned<float>(total);
        if (mode != 2) residual_add(d_x1.get(), d_y.get(), int64_t(total), nullptr);
        rms_norm(d_x1.get(), d_w.get(), d_out1.get(), rows, n, eps, nullptr);
        // fused
        auto d_x2 = to_device(x);
        auto d_out2 = poisoned<float>(total);
        float* out2 = mode == 1 ? d_x2.get() : d_out2.get();
        add_rms_norm(d_x2.get(), mode == 2 ? nullptr : d_y.get(), d_w.get(), out2, rows, n, eps,
                     nullptr);
        const auto out1 = d_out1.download();
        const auto got = mode == 1 ? d_x2.download() : d_out2.download();
        ASSERT_TRUE(all_bits_equal(got, out1, what + ": fused out vs rms_norm"));
        if (mode != 1) {
          ASSERT_TRUE(
              all_bits_equal(d_x2.download(), d_x1.download(), what + ": fused x vs residual_add"));
          ASSERT_TRUE(all_bits_equal(d_x2.download(), sum, what + ": x vs CPU fp32 sum"));
        }
        ASSERT_TRUE(all_close(got, ref, kNormRtol, 1e-30, what + ": vs float64"));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// qkv_post

struct QkvCase {
  const char* name;
  int n_tokens, n_head, n_head_kv, head_dim, n_rot;
  bool bias;
  float attn_factor;
  int block_size, n_blocks;
  int pad;  // extra floats at the end of each fused row (qkv_row_stride = width + pad; 0: dense)
};

// One head's fp32 elements (already biased) rotated in double as rope.cu's contract says; scale
// is |x_a| + |x_b| for rotated elements, 0 for pass-through ones.
void rope_head_ref(const float* x, int head_dim, int n_rot, bool neox, int pos,
                   const std::vector<float>& inv_freq, float attn_factor, double* y,
                   double* scale) {
  const int half = n_rot / 2;
  for (int d = 0; d < head_dim; ++d) y[d] = x[d], scale[d] = 0;
  for (int i = 0; i < half; ++i) {
    const float angle = inv_freq[i] * static_cast<float>(pos);  // one fp32 multiply
    const double c = std::cos(double(angle)) * attn_factor;
    const double s = std::sin(double(angle)) * attn_factor;
    const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
    const double x0 = x[a], x1 = x[b];
    y[a] = x0 * c - x1 * s;
    y[b] = x0 * s + x1 * c;
    scale[a] = scale[b] = std::fabs(x0) + std::fabs(x1);
  }
}

constexpr double kRopeTol = 1e-6;  // rotated fp32 elements: |err| <= kRopeTol * (|x_a| + |x_b|)

void run_qkv_case(const QkvCase& c, bool neox, std::mt19937_64& rng) {
  const std::string what = std::string(c.name) + (neox ? " neox" : " normal") + ", n_rot " +
                           std::to_string(c.n_rot) + ", block_size " +
                           std::to_string(c.block_size) + ", attn_factor " +
                           std::to_string(c.attn_factor);
  SCOPED_TRACE(what);
  const int hd = c.head_dim, q_dim = c.n_head * hd, kv_dim = c.n_head_kv * hd;
  const int width = q_dim + 2 * kv_dim;
  const int64_t stride = c.pad ? width + c.pad : width;
  const int T = c.n_tokens;
  const KvCacheShape cache{c.n_blocks, c.n_head_kv, c.block_size, hd};
  const int64_t cache_len = int64_t(c.n_blocks) * c.block_size;
  ASSERT_GE(cache_len, T) << "test case needs a cache row per token";

  // inputs
  auto qkv = random_floats(size_t(T) * stride, rng, 1.5f);
  for (size_t i = 0; i < qkv.size(); i += 37) qkv[i] = -0.0f;  // no bias must leave these -0
  std::vector<float> bq, bk, bv;
  if (c.bias) {
    bq = random_floats(size_t(q_dim), rng);
    bk = random_floats(size_t(kv_dim), rng);
    bv = random_floats(size_t(kv_dim), rng);
  }
  std::vector<int32_t> pos(T);
  for (int t = 0; t < T; ++t) pos[t] = static_cast<int32_t>(rng() % 131072);
  pos[0] = 0;
  if (T > 1) pos[1] = 131071;
  if (T > 2) pos[2] = 1;
  const auto inv_freq = rope_inv_freq(neox ? 1e6 : 10000.0, c.n_rot);
  // distinct cache rows (a random permutation), some tokens skipped: -1 and one past the end
  std::vector<int64_t> perm(static_cast<size_t>(cache_len));
  for (int64_t i = 0; i < cache_len; ++i) perm[size_t(i)] = i;
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int64_t> rows(perm.begin(), perm.begin() + T);
  if (T > 3) rows[3] = -1;
  if (T > 4) rows[4] = cache_len;
  if (T > 5) rows[T - 1] = -7;

  auto d_qkv = to_device(qkv);
  auto d_bq = to_device(bq), d_bk = to_device(bk), d_bv = to_device(bv);  // empty: null
  auto d_pos = to_device(pos);
  auto d_inv = to_device(inv_freq);
  auto d_rows = to_device(rows);
  const size_t cache_elems = size_t(cache.layer_elems());

  // unfused: bias_add x3, rope_inplace, kv_append on a copy of the fused rows
  auto d_ref = to_device(qkv);
  float* rq = d_ref.get();
  float* rk = rq + q_dim;
  float* rv = rq + q_dim + kv_dim;
  if (c.bias) {
    bias_add(rq, d_bq.get(), T, q_dim, nullptr, stride);
    bias_add(rk, d_bk.get(), T, kv_dim, nullptr, stride);
    bias_add(rv, d_bv.get(), T, kv_dim, nullptr, stride);
  }
  RopeArgs ra;
  ra.n_tokens = T;
  ra.n_head = c.n_head;
  ra.n_head_kv = c.n_head_kv;
  ra.head_dim = hd;
  ra.n_rot = c.n_rot;
  ra.neox = neox;
  ra.attn_factor = c.attn_factor;
  ra.q_row_stride = stride;
  ra.k_row_stride = stride;
  rope_inplace(rq, rk, d_pos.get(), d_inv.get(), ra, nullptr);
  auto d_kc1 = poisoned<uint16_t>(cache_elems);
  auto d_vc1 = poisoned<uint16_t>(cache_elems);
  KvAppendArgs ka;
  ka.n_tokens = T;
  ka.cache = cache;
  ka.k_row_stride = stride;
  ka.v_row_stride = stride;
  kv_append(rk, rv, d_rows.get(), d_kc1.get(), d_vc1.get(), ka, nullptr);
  const auto ref_rows = d_ref.download();
  std::vector<float> q1(size_t(T) * q_dim);
  for (int t = 0; t < T; ++t)
    std::copy_n(ref_rows.begin() + t * stride, q_dim, q1.begin() + size_t(t) * q_dim);

  // fused
  auto d_q2 = poisoned<float>(size_t(T) * q_dim);
  auto d_kc2 = poisoned<uint16_t>(cache_elems);
  auto d_vc2 = poisoned<uint16_t>(cache_elems);
  QkvPostArgs qa;
  qa.n_tokens = T;
  qa.n_head = c.n_head;
  qa.n_rot = c.n_rot;
  qa.neox = neox;
  qa.attn_factor = c.attn_factor;
  qa.cache = cache;
  qa.qkv_row_stride = c.pad ? stride : 0;
  qkv_post(d_qkv.get(), d_bq.get(), d_bk.get(), d_bv.get(), d_pos.get(), d_inv.get(), d_rows.get(),
           d_q2.get(), d_kc2.get(), d_vc2.get(), qa, nullptr);
  const auto q2 = d_q2.download();
  const auto kc2 = d_kc2.download();
  const auto vc2 = d_vc2.download();

  // bit-exact against the unfused kernels
  ASSERT_TRUE(all_bits_equal(q2, q1, "q vs bias_add + rope_inplace"));
  ASSERT_TRUE(all_u16_equal(kc2, d_kc1.download(), "K cache vs kv_append"));
  ASSERT_TRUE(all_u16_equal(vc2, d_vc1.download(), "V cache vs kv_append"));
  ASSERT_TRUE(all_bits_equal(d_qkv.download(), qkv, "fused input rows must be left as they were"));

  // The same kernel with a cos/sin table (covering every position, then only some), with q, k, v
  // from three separate buffers (padded strides, then dense), and both: bit-identical outputs.
  const int kTablePositions = 131072;
  auto d_table = poisoned<float>(size_t(kTablePositions) * c.n_rot);
  rope_cs_table(d_inv.get(), c.n_rot, c.attn_factor, kTablePositions, d_table.get(), nullptr);
  std::vector<float> sq, sk, sv;  // separate sources, padded rows of q_dim + 2, kv_dim + 1, + 5
  for (int t = 0; t < T; ++t) {
    const float* r = qkv.data() + size_t(t) * stride;
    sq.insert(sq.end(), r, r + q_dim), sq.insert(sq.end(), 2, NAN);
    sk.insert(sk.end(), r + q_dim, r + q_dim + kv_dim), sk.push_back(NAN);
    sv.insert(sv.end(), r + q_dim + kv_dim, r + width), sv.insert(sv.end(), 5, NAN);
  }
  std::vector<float> dq, dk, dv;  // the same, dense
  for (int t = 0; t < T; ++t) {
    const float* r = qkv.data() + size_t(t) * stride;
    dq.insert(dq.end(), r, r + q_dim);
    dk.insert(dk.end(), r + q_dim, r + q_dim + kv_dim);
    dv.insert(dv.end(), r + q_dim + kv_dim, r + width);
  }
  auto d_sq = to_device(sq), d_sk = to_device(sk), d_sv = to_device(sv);
  auto d_dq = to_device(dq), d_dk = to_device(dk), d_dv = to_device(dv);
  struct Variant {
    const char* name;
    int table_positions;  // 0: no table
    int sources;          // 0: fused rows, 1: separate padded, 2: separate dense
  };
  const Variant variants[] = {{"table", kTablePositions, 0},
                              {"partial table", 70000, 0},
                              {"separate padded", 0, 1},
                              {"separate dense", 0, 2},
                              {"separate + table", kTablePositions, 1}};
  for (const Variant& v : variants) {
    SCOPED_TRACE(v.name);
    QkvPostArgs va = qa;
    const float* src = d_qkv.get();
    if (v.table_positions) va.cs_table = d_table.get(), va.cs_positions = v.table_positions;
    if (v.sources == 1) {
      src = d_sq.get();
      va.qkv_row_stride = q_dim + 2;
      va.k_src = d_sk.get(), va.k_row_stride = kv_dim + 1;
      va.v_src = d_sv.get(), va.v_row_stride = kv_dim + 5;
    } else if (v.sources == 2) {
      src = d_dq.get();
      va.qkv_row_stride = 0;
      va.k_src = d_dk.get(), va.v_src = d_dv.get();
    }
    auto d_q3 = poisoned<float>(size_t(T) * q_dim);
    auto d_kc3 = poisoned<uint16_t>(cache_elems);
    auto d_vc3 = poisoned<uint16_t>(cache_elems);
    qkv_post(src, d_bq.get(), d_bk.get(), d_bv.get(), d_pos.get(), d_inv.get(), d_rows.get(),
             d_q3.get(), d_kc3.get(), d_vc3.get(), va, nullptr);
    ASSERT_TRUE(all_bits_equal(d_q3.download(), q2, "q vs the fused-row, table-free kernel"));
    ASSERT_TRUE(all_u16_equal(d_kc3.download(), kc2, "K cache vs the fused, table-free kernel"));
    ASSERT_TRUE(all_u16_equal(d_vc3.download(), vc2, "V cache vs the fused, table-free kernel"));
  }

  // against the CPU: biases in fp32 (exact), rotation in double, fp16 by rz::fp32_to_fp16
  std::vector<bool> written(static_cast<size_t>(cache_len), false);
  std::vector<float> xb(static_cast<size_t>(hd));
  std::vector<double> y(static_cast<size_t>(hd)), sc(static_cast<size_t>(hd));
  for (int t = 0; t < T; ++t) {
    const float* row = qkv.data() + size_t(t) * stride;
    const auto biased = [&](int j, const std::vector<float>& b, int bj) {
      return c.bias ? row[j] + b[size_t(bj)] : row[j];
    };
    for (int h = 0; h < c.n_head; ++h) {
      for (int d = 0; d < hd; ++d) xb[size_t(d)] = biased(h * hd + d, bq, h * hd + d);
      rope_head_ref(xb.data(), hd, c.n_rot, neox, pos[t], inv_freq, c.attn_factor, y.data(),
                    sc.data());
      for (int d = 0; d < hd; ++d) {
        const float g = q2[size_t(t) * q_dim + h * hd + d];
        const bool ok = sc[size_t(d)] == 0 ? !std::isnan(g) && bits_of(g) == bits_of(xb[size_t(d)])
                                           : !std::isnan(g) && std::fabs(g - y[size_t(d)]) <=
                                                                   kRopeTol * sc[size_t(d)];
        ASSERT_TRUE(ok) << "q token " << t << " head " << h << " dim " << d << ": got " << g
                        << " want " << y[size_t(d)] << " (pos " << pos[t] << ")";
      }
    }
    const int64_t r = rows[size_t(t)];
    if (r < 0 || r >= cache_len) continue;
    written[size_t(r)] = true;
    const int64_t block = r / c.block_size;
    const int off = static_cast<int>(r % c.block_size);
    for (int h = 0; h < c.n_head_kv; ++h) {
      for (int d = 0; d < hd; ++d) xb[size_t(d)] = biased(q_dim + h * hd + d, bk, h * hd + d);
      rope_head_ref(xb.data(), hd, c.n_rot, neox, pos[t], inv_freq, c.attn_factor, y.data(),
                    sc.data());
      for (int d = 0; d < hd; ++d) {
        const size_t at = size_t(cache.index(block, h, off, d));
        const uint16_t gk = kc2[at];
        const float kf = fp16_to_fp32(gk);
        const bool ok = sc[size_t(d)] == 0
                            ? gk == fp32_to_fp16(xb[size_t(d)])
                            : !std::isnan(kf) && std::fabs(kf - y[size_t(d)]) <=
                                                     1e-3 * std::fabs(y[size_t(d)]) +
                                                         kRopeTol * sc[size_t(d)] + 1e-7;
        ASSERT_TRUE(ok) << "K token " << t << " kv head " << h << " dim " << d << ": got " << kf
                        << " (0x" << std::hex << gk << std::dec << ") want " << y[size_t(d)];
        const float vb = biased(q_dim + kv_dim + h * hd + d, bv, h * hd + d);
        ASSERT_EQ(vc2[at], fp32_to_fp16(vb))
            << "V token " << t << " kv head " << h << " dim " << d << ": want fp16 of " << vb;
      }
    }
  }
  // slots no token was appended to keep their poison
  for (int64_t r = 0; r < cache_len; ++r) {
    if (written[size_t(r)]) continue;
    const int64_t block = r / c.block_size;
    const int off = static_cast<int>(r % c.block_size);
    for (int h = 0; h < c.n_head_kv; ++h)
      for (int d = 0; d < hd; ++d) {
        const size_t at = size_t(cache.index(block, h, off, d));
        ASSERT_TRUE(kc2[at] == 0xFFFF && vc2[at] == 0xFFFF)
            << "cache row " << r << " was written though no token went there";
      }
  }
}

TEST(QkvPost, MatchesBiasRopeKvAppendBitExact) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  // clang-format off
  const QkvCase cases[] = {
      // name              T  heads kv  hd  n_rot bias  attn   bs  blocks pad
      {"qwen2.5-like",     6, 12,   2, 128, 128, true,  1.0f,  16, 4,     0},
      {"qwen2.5-like 1t",  1, 12,   2, 128, 128, true,  1.0f,  16, 2,     0},
      {"llama-like",       7, 32,   8, 128, 128, false, 1.0f,  16, 3,     0},
      {"llama-like pad",   5, 32,   8, 128, 128, false, 1.0f,  1,  9,     5},
      {"tiny",             9, 4,    2, 64,  64,  false, 1.0f,  1,  12,    0},
      {"tiny partial",     9, 4,    2, 64,  32,  true,  0.75f, 16, 2,     3},
      {"tiny yarn",        6, 4,    2, 64,  64,  true,  1.2f,  1,  8,     0},
      {"odd head_dim",     7, 3,    1, 80,  24,  true,  1.0f,  3,  5,     1},
      {"smollm-like",      8, 9,    3, 64,  64,  false, 1.0f,  16, 2,     0},
      {"many tokens",     70, 14,   2, 64,  64,  true,  1.0f,  16, 6,     0},
  };
  // clang-format on
  for (const QkvCase& c : cases)
    for (bool neox : {false, true}) {
      run_qkv_case(c, neox, rng);
      if (::testing::Test::HasFatalFailure()) return;
    }
}

// ---------------------------------------------------------------------------------------------
// swiglu_rows

TEST(SwigluRows, MatchesSwigluOnSplitRowsBitExact) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const double rtol = 1e-5, atol = 1e-30;  // as the swiglu test: expf, add, division, product
  struct Shape {
    int64_t rows, n_ff;
    int offset;
  };  // offset: floats the base pointers are moved by
  const Shape shapes[] = {{1, 1, 0},     {3, 5, 0},     {2, 8960, 0}, {7, 1536, 0},
                          {1, 4097, 0},  {4, 8960, 1},  {3, 12, 2},   {1, 4, 1},
                          {70000, 4, 0}, {66000, 3, 0}, {5, 1024, 0}};
  for (const Shape& s : shapes) {
    const std::string what = "rows " + std::to_string(s.rows) + " n_ff " + std::to_string(s.n_ff) +
                             " offset " + std::to_string(s.offset);
    const size_t n = size_t(s.rows * s.n_ff);
    auto gu = random_floats(2 * n, rng, 3.0f);
    const float specials[] = {0.0f, -0.0f, -100.0f, 100.0f, -88.0f, 88.0f, 30.0f, -30.0f, 1e-20f};
    for (size_t i = 0; i < std::size(specials); ++i) gu[(i * 7919) % gu.size()] = specials[i];
    std::vector<float> g(n), u(n);
    std::vector<double> ref(n);
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t i = 0; i < s.n_ff; ++i) {
        const size_t o = size_t(r * s.n_ff + i);
        g[o] = gu[size_t(r * 2 * s.n_ff + i)];
        u[o] = gu[size_t(r * 2 * s.n_ff + s.n_ff + i)];
        const double x = g[o];
        ref[o] = x / (1.0 + std::exp(-x)) * double(u[o]);
      }
    // unfused
    auto d_g = to_device(g);
    auto d_u = to_device(u);
    auto d_o1 = poisoned<float>(n);
    swiglu(d_g.get(), d_u.get(), d_o1.get(), int64_t(n), nullptr);
    // fused, bases moved by `offset` floats (misaligned for float4 when offset % 4 != 0)
    DeviceBuffer<float> d_gu(2 * n + 4);
    d_gu.fill_bytes(0);
    RZ_CUDA_CHECK(cudaMemcpy(d_gu.get() + s.offset, gu.data(), gu.size() * sizeof(float),
                             cudaMemcpyHostToDevice));
    auto d_o2 = poisoned<float>(n + 4);
    swiglu_rows(d_gu.get() + s.offset, d_o2.get() + s.offset, s.rows, s.n_ff, nullptr);
    auto all2 = d_o2.download();
    const std::vector<float> o2(all2.begin() + s.offset, all2.begin() + s.offset + long(n));
    for (size_t i = 0; i < all2.size(); ++i) {
      if (i < size_t(s.offset) || i >= size_t(s.offset) + n) {
        ASSERT_TRUE(std::isnan(all2[i])) << what << ": wrote outside out at " << i;
      }
    }
    ASSERT_TRUE(all_bits_equal(o2, d_o1.download(), what + ": vs swiglu"));
    ASSERT_TRUE(all_close(o2, ref, rtol, atol, what + ": vs float64"));
  }
}

// ---------------------------------------------------------------------------------------------
// argument checks (no device needed)

TEST(FusedKernels, RejectBadArguments) {
  float* p = reinterpret_cast<float*>(16);
  // add_rms_norm
  EXPECT_TRUE(
      throws_shape_error([&] { add_rms_norm(p, p, p, p, 1, 0, 1e-6f, nullptr); }, "bad shape"));
  EXPECT_TRUE(
      throws_shape_error([&] { add_rms_norm(p, p, p, p, -1, 4, 1e-6f, nullptr); }, "bad shape"));
  EXPECT_TRUE(throws_shape_error([&] { add_rms_norm(p, p, p, p, 1, 4, -1.0f, nullptr); }, "eps"));
  EXPECT_TRUE(throws_shape_error([&] { add_rms_norm(p, p, p, p, 1, 4, NAN, nullptr); }, "eps"));
  EXPECT_TRUE(
      throws_shape_error([&] { add_rms_norm(nullptr, p, p, p, 1, 4, 1e-6f, nullptr); }, "null"));
  EXPECT_TRUE(
      throws_shape_error([&] { add_rms_norm(p, p, nullptr, p, 1, 4, 1e-6f, nullptr); }, "null"));
  EXPECT_TRUE(
      throws_shape_error([&] { add_rms_norm(p, p, p, nullptr, 1, 4, 1e-6f, nullptr); }, "null"));
  EXPECT_NO_THROW(add_rms_norm(p, p, p, p, 0, 4, 1e-6f, nullptr));

  // swiglu_rows
  EXPECT_TRUE(throws_shape_error([&] { swiglu_rows(p, p, -1, 4, nullptr); }, "bad shape"));
  EXPECT_TRUE(throws_shape_error([&] { swiglu_rows(p, p, 2, 0, nullptr); }, "bad shape"));
  EXPECT_TRUE(throws_shape_error([&] { swiglu_rows(nullptr, p, 2, 4, nullptr); }, "null"));
  EXPECT_TRUE(throws_shape_error([&] { swiglu_rows(p, nullptr, 2, 4, nullptr); }, "null"));
  EXPECT_NO_THROW(swiglu_rows(p, p, 0, 4, nullptr));

  // qkv_post
  const int32_t* ip = reinterpret_cast<const int32_t*>(16);
  const int64_t* lp = reinterpret_cast<const int64_t*>(16);
  uint16_t* hp = reinterpret_cast<uint16_t*>(16);
  const auto good = [] {
    QkvPostArgs a;
    a.n_tokens = 2;
    a.n_head = 4;
    a.n_rot = 64;
    a.cache = KvCacheShape{2, 2, 16, 64};
    return a;
  };
  const auto call = [&](const QkvPostArgs& a) {
    qkv_post(p, nullptr, nullptr, nullptr, ip, p, lp, p, hp, hp, a, nullptr);
  };
  {
    auto a = good();
    a.n_tokens = -1;
    EXPECT_TRUE(throws_shape_error([&] { call(a); }, "bad shape"));
  }
  {
    auto a = good();
    a.n_head = 0;
    EXPECT_TRUE(throws_shape_error([&] { call(a); }, "bad shape"));
  }
  {
    auto a = good();
    a.cache.block_size = 0;
    EXPECT_TRUE(throws_shape_error([&] { call(a); }, "bad shape"));
  }
  {
    auto a = good();
    a.cache.n_head_kv = 0;
    EXPECT_TRUE(throws_shape_error([&] { call(a); }, "bad shape"));
  }
  {
    auto a = good();
    a.n_rot = 63;
    EXPECT_TRUE(throws_shape_error([&] { call(a); }, "n_rot"));
    a.n_rot = 66;
    EXPECT_TRUE(throws_shape_error([&] { call(a); }, "n_rot"));
    a.n_rot = 0;
    EXPECT_TRUE(throws_shape_error([&] { call(a); }, "n_rot"));
  }
  {
    auto a = good();
    a.qkv_row_stride = 4 * 64 + 2 * 2 * 64 - 1;
    EXPECT_TRUE(throws_shape_error([&] { call(a); }, "row stride"));
  }
  {
    auto a = good();
    EXPECT_TRUE(throws_shape_error(
        [&] { qkv_post(nullptr, nullptr, nullptr, nullptr, ip, p, lp, p, hp, hp, a, nullptr); },
        "null"));
    EXPECT_TRUE(throws_shape_error(
        [&] { qkv_post(p, nullptr, nullptr, nullptr, ip, p, nullptr, p, hp, hp, a, nullptr); },
        "null"));
    EXPECT_TRUE(throws_shape_error(
        [&] { qkv_post(p, nullptr, nullptr, nullptr, ip, p, lp, p, hp, nullptr, a, nullptr); },
        "null"));
    a.n_tokens = 0;
    EXPECT_NO_THROW(call(a));
  }
  {  // separate k / v sources: both or neither, strides at least a row
    auto a = good();
    a.k_src = p;
    EXPECT_TRUE(throws_shape_error([&] { call(a); }, "set together"));
    a.k_src = nullptr, a.v_src = p;
    EXPECT_TRUE(throws_shape_error([&] { call(a); }, "set together"));
    a.k_src = p;
    a.n_tokens = 0;
    EXPECT_NO_THROW(call(a));
    a.n_tokens = 2, a.qkv_row_stride = 4 * 64 - 1;
    EXPECT_TRUE(throws_shape_error([&] { call(a); }, "row stride"));
    a.qkv_row_stride = 0, a.k_row_stride = 2 * 64 - 1;
    EXPECT_TRUE(throws_shape_error([&] { call(a); }, "k/v row stride"));
    a.k_row_stride = 0, a.v_row_stride = 5;
    EXPECT_TRUE(throws_shape_error([&] { call(a); }, "k/v row stride"));
  }
  {
    auto a = good();
    a.cs_table = p, a.cs_positions = -1;
    EXPECT_TRUE(throws_shape_error([&] { call(a); }, "cs_positions"));
  }
}

}  // namespace
}  // namespace rz::gpu
