// GPU bias add, SwiGLU and residual add (kernels/bias.cu, swiglu.cu, residual.cu): bias and
// residual adds are single fp32 additions and must equal the CPU's bit for bit; SwiGLU is checked
// against float64 within 1e-5 relative. Shapes include rows beyond the 65535 grid.y limit and
// lengths beyond one grid-stride pass; outputs poisoned; strided rows keep their padding.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gpu/test_support.hpp"
#include "kernels/bias.hpp"
#include "kernels/residual.hpp"
#include "kernels/swiglu.hpp"
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

TEST(BiasAdd, BroadcastsOverRowsExactly) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  struct Shape {
    int64_t rows, n, stride;
  };
  const Shape shapes[] = {{1, 1, 0},     {3, 5, 0},     {17, 960, 0},  {5, 4097, 0},
                          {70000, 5, 0}, {7, 960, 967}, {66000, 3, 8}, {2, 1, 1}};
  for (const Shape& s : shapes) {
    const int64_t stride = s.stride ? s.stride : s.n;
    auto x = random_floats(size_t(s.rows) * stride, rng);  // [rows, stride], columns >= n padding
    const auto bias = random_floats(size_t(s.n), rng, 3.0f);
    std::vector<float> ref = x;
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t j = 0; j < s.n; ++j)
        ref[size_t(r * stride + j)] = x[size_t(r * stride + j)] + bias[j];
    auto d_x = to_device(x);
    auto d_b = to_device(bias);
    bias_add(d_x.get(), d_b.get(), s.rows, s.n, nullptr, s.stride);
    ASSERT_TRUE(all_bits_equal(d_x.download(), ref,
                               "rows " + std::to_string(s.rows) + " n " + std::to_string(s.n) +
                                   " stride " + std::to_string(stride)));
  }
}

TEST(BiasAdd, RejectsBadArguments) {  // checked before any CUDA call: runs without a GPU
  float* p = reinterpret_cast<float*>(16);
  EXPECT_TRUE(throws_shape_error([&] { bias_add(p, p, 1, 0, nullptr); }, "bad shape"));
  EXPECT_TRUE(throws_shape_error([&] { bias_add(p, p, -1, 4, nullptr); }, "bad shape"));
  EXPECT_TRUE(throws_shape_error([&] { bias_add(p, p, 2, 4, nullptr, 3); }, "row stride 3"));
  EXPECT_TRUE(throws_shape_error([&] { bias_add(p, nullptr, 2, 4, nullptr); }, "null"));
  EXPECT_NO_THROW(bias_add(p, p, 0, 4, nullptr));
}

std::vector<double> swiglu_ref(const std::vector<float>& g, const std::vector<float>& u) {
  std::vector<double> r(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    const double x = g[i];
    r[i] = x / (1.0 + std::exp(-x)) * double(u[i]);
  }
  return r;
}

TEST(Swiglu, MatchesFloat64Reference) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  // expf (2 ulp), one add, one division, one product: well under 1e-5 relative. Gates near -100
  // give results below 1e-40 that fp32 flushes to (signed) zero: atol 1e-30 covers them.
  const double rtol = 1e-5, atol = 1e-30;
  for (int64_t n :
       {int64_t(1), int64_t(7), int64_t(1000), int64_t(1536) * 7, int64_t(2) * 1048576 + 3}) {
    auto gate = random_floats(size_t(n), rng, 4.0f);
    const auto up = random_floats(size_t(n), rng, 2.0f);
    const float specials[] = {0.0f, -0.0f, -100.0f, 100.0f, -88.0f, 88.0f, 30.0f, -30.0f, 1e-20f};
    for (size_t i = 0; i < std::size(specials) && i < gate.size(); ++i)
      gate[(i * 7919) % gate.size()] = specials[i];
    const auto ref = swiglu_ref(gate, up);
    const std::string what = "n " + std::to_string(n);
    auto d_g = to_device(gate);
    auto d_u = to_device(up);
    auto d_o = poisoned<float>(size_t(n));
    swiglu(d_g.get(), d_u.get(), d_o.get(), n, nullptr);
    ASSERT_TRUE(all_close(d_o.download(), ref, rtol, atol, what + " out of place"));
    swiglu(d_g.get(), d_u.get(), d_g.get(), n, nullptr);  // out aliases gate, as the CPU does it
    ASSERT_TRUE(all_close(d_g.download(), ref, rtol, atol, what + " in place"));
    ASSERT_TRUE(all_bits_equal(d_u.download(), up, what + " up untouched"));
  }
}

TEST(Swiglu, RejectsBadArguments) {
  float* p = reinterpret_cast<float*>(16);
  EXPECT_TRUE(throws_shape_error([&] { swiglu(p, p, p, -1, nullptr); }, "negative"));
  EXPECT_TRUE(throws_shape_error([&] { swiglu(p, nullptr, p, 4, nullptr); }, "null"));
  EXPECT_NO_THROW(swiglu(p, p, p, 0, nullptr));
}

TEST(ResidualAdd, AddsExactly) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int64_t n : {int64_t(1), int64_t(5), int64_t(576) * 3, int64_t(4096) * 33 + 1,
                    int64_t(2) * 1048576 + 5}) {
    const auto x = random_floats(size_t(n), rng);
    const auto y = random_floats(size_t(n), rng, 10.0f);
    std::vector<float> ref(static_cast<size_t>(n)), ref2(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) ref[i] = x[i] + y[i], ref2[i] = ref[i] + ref[i];
    const std::string what = "n " + std::to_string(n);
    auto d_x = to_device(x);
    auto d_y = to_device(y);
    residual_add(d_x.get(), d_y.get(), n, nullptr);
    ASSERT_TRUE(all_bits_equal(d_x.download(), ref, what));
    ASSERT_TRUE(all_bits_equal(d_y.download(), y, what + " y untouched"));
    residual_add(d_x.get(), d_x.get(), n, nullptr);  // y == x
    ASSERT_TRUE(all_bits_equal(d_x.download(), ref2, what + " x += x"));
  }
}

TEST(ResidualAdd, RejectsBadArguments) {
  float* p = reinterpret_cast<float*>(16);
  EXPECT_TRUE(throws_shape_error([&] { residual_add(p, p, -3, nullptr); }, "negative"));
  EXPECT_TRUE(throws_shape_error([&] { residual_add(nullptr, p, 3, nullptr); }, "null"));
  EXPECT_NO_THROW(residual_add(p, p, 0, nullptr));
}

}  // namespace
}  // namespace rz::gpu
