// GPU RMSNorm (kernels/rmsnorm.cu) against a float64 reference of y = x / sqrt(mean(x^2) + eps) * w
// (cpu/cpu_ops.cpp's rms_norm formula): widths around the block sizes and warp multiples up to
// 16384, row scales from 1e-3 to 1e3, a zero row, in place and out of place, outputs poisoned.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gpu/test_support.hpp"
#include "kernels/rmsnorm.hpp"
#include "tests/gpu/elem_test_util.hpp"

namespace rz::gpu {
namespace {

using namespace elem_test;

// fp32 accumulation of up to 16384 squares and three rounded products: a few 1e-7 relative.
constexpr double kRtol = 1e-5;

std::vector<double> reference(const std::vector<float>& x, const std::vector<float>& w, int rows,
                              int n, float eps) {
  std::vector<double> y(x.size());
  for (int r = 0; r < rows; ++r) {
    const float* xr = &x[size_t(r) * n];
    double ss = 0;
    for (int i = 0; i < n; ++i) ss += double(xr[i]) * xr[i];
    const double inv = 1.0 / std::sqrt(ss / n + double(eps));
    for (int i = 0; i < n; ++i) y[size_t(r) * n + i] = double(xr[i]) * inv * double(w[i]);
  }
  return y;
}

TEST(RmsNorm, MatchesFloat64ReferenceAcrossShapes) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int n : {1,    2,    31,   32,   33,   127,  255,  256,  257,  576,   1000,
                1023, 1024, 1025, 2048, 4095, 4096, 4097, 5120, 8192, 16383, 16384}) {
    for (int rows : {1, 3, 17}) {
      for (float eps : {1e-5f, 1e-6f}) {
        std::vector<float> x(size_t(rows) * n), w(n);  // x: [rows, n], w: [n]
        for (int r = 0; r < rows; ++r) {
          const float scale = std::pow(10.0f, static_cast<float>(r % 7) - 3.0f);
          for (int i = 0; i < n; ++i) x[size_t(r) * n + i] = nd(rng) * scale;
        }
        if (rows == 17) std::fill(x.begin() + 5 * n, x.begin() + 6 * n, 0.0f);  // a zero row
        for (auto& v : w) v = 1.0f + 0.5f * nd(rng);
        const auto ref = reference(x, w, rows, n, eps);
        const std::string what = "rows " + std::to_string(rows) + " n " + std::to_string(n) +
                                 " eps " + std::to_string(eps);
        auto d_x = to_device(x);
        auto d_w = to_device(w);
        auto d_y = poisoned<float>(x.size());
        rms_norm(d_x.get(), d_w.get(), d_y.get(), rows, n, eps, nullptr);
        ASSERT_TRUE(all_close(d_y.download(), ref, kRtol, 1e-30, what + " out of place"));
        ASSERT_TRUE(all_bits_equal(d_x.download(), x, what + " input untouched"));
        rms_norm(d_x.get(), d_w.get(), d_x.get(), rows, n, eps, nullptr);  // in place
        ASSERT_TRUE(all_close(d_x.download(), ref, kRtol, 1e-30, what + " in place"));
      }
    }
  }
}

TEST(RmsNorm, ManyRows) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int rows = 2048, n = 576;
  std::vector<float> x(size_t(rows) * n), w(n);
  for (auto& v : x) v = nd(rng);
  for (auto& v : w) v = nd(rng);
  auto d_x = to_device(x);
  auto d_w = to_device(w);
  auto d_y = poisoned<float>(x.size());
  rms_norm(d_x.get(), d_w.get(), d_y.get(), rows, n, 1e-5f, nullptr);
  ASSERT_TRUE(
      all_close(d_y.download(), reference(x, w, rows, n, 1e-5f), kRtol, 1e-30, "2048 x 576"));
}

// rms_norm_heads: each head of strided token rows (qwen3's q and k heads inside a fused
// [q | k | v] row) normalized in place with one [head_dim] weight; the rest of the row untouched.
TEST(RmsNormHeads, StridedHeadsInPlace) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  struct Shape {
    int tokens, heads, head_dim, offset, stride;  // heads start at `offset` in each row
  };
  for (const Shape& sh : {Shape{1, 1, 64, 0, 64}, Shape{7, 16, 128, 0, 16 * 128 + 2 * 4 * 128},
                          Shape{9, 4, 128, 16 * 128, 16 * 128 + 2 * 4 * 128},
                          Shape{33, 8, 256, 5, 8 * 256 + 11}, Shape{3, 2, 32, 0, 64}}) {
    const std::string what = std::to_string(sh.tokens) + " tokens x " + std::to_string(sh.heads) +
                             " heads of " + std::to_string(sh.head_dim) + ", stride " +
                             std::to_string(sh.stride);
    std::vector<float> x(size_t(sh.tokens) * sh.stride + sh.offset), w(sh.head_dim);
    for (auto& v : x) v = nd(rng) * 3.0f;
    for (auto& v : w) v = 1.0f + 0.3f * nd(rng);
    std::vector<double> want(x.begin(), x.end());
    for (int t = 0; t < sh.tokens; ++t)
      for (int h = 0; h < sh.heads; ++h) {
        const size_t at = size_t(t) * sh.stride + sh.offset + size_t(h) * sh.head_dim;
        std::vector<float> head(x.begin() + at, x.begin() + at + sh.head_dim);
        const auto r = reference(head, w, 1, sh.head_dim, 1e-6f);
        std::copy(r.begin(), r.end(), want.begin() + at);
      }
    auto d_x = to_device(x);
    auto d_w = to_device(w);
    rms_norm_heads(d_x.get() + sh.offset, d_w.get(), sh.tokens, sh.heads, sh.head_dim, sh.stride,
                   1e-6f, nullptr);
    ASSERT_TRUE(all_close(d_x.download(), want, kRtol, 1e-30, what));
  }
  float* p = reinterpret_cast<float*>(16);
  EXPECT_TRUE(throws_shape_error([&] { rms_norm_heads(p, p, 1, 4, 64, 255, 1e-6f, nullptr); },
                                 "bad shape"));
  EXPECT_TRUE(
      throws_shape_error([&] { rms_norm_heads(p, p, 1, 0, 64, 64, 1e-6f, nullptr); }, "bad shape"));
  EXPECT_NO_THROW(rms_norm_heads(p, p, 0, 4, 64, 256, 1e-6f, nullptr));
}

TEST(RmsNorm, RejectsBadArguments) {  // checked before any CUDA call: runs without a GPU
  float* p = reinterpret_cast<float*>(16);
  EXPECT_TRUE(throws_shape_error([&] { rms_norm(p, p, p, 1, 0, 1e-5f, nullptr); }, "bad shape"));
  EXPECT_TRUE(throws_shape_error([&] { rms_norm(p, p, p, -1, 8, 1e-5f, nullptr); }, "bad shape"));
  EXPECT_TRUE(throws_shape_error([&] { rms_norm(p, p, p, 1, 8, NAN, nullptr); }, "eps"));
  EXPECT_TRUE(throws_shape_error([&] { rms_norm(p, nullptr, p, 1, 8, 1e-5f, nullptr); }, "null"));
  EXPECT_NO_THROW(rms_norm(p, p, p, 0, 8, 1e-5f, nullptr));  // no rows: no launch
}

}  // namespace
}  // namespace rz::gpu
