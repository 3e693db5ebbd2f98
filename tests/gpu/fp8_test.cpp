// FP8 rows (kernels/fp8.hpp) and the two kernels that multiply them: quantize_rows_fp8 bit for bit
// against an independent host rounding (the nearest of E4M3's 254 finite values found by search,
// ties to the even code), gemv_fp8 (kernels/gemv.hpp) and Gemm::matmul_fp8 (cuBLASLt, both ways
// of applying the scales) against float64 products of the decoded values. GPU only.
//
// Tolerances, per output, relative to sum_c |w_c x_c| of the decoded operands (products of two
// E4M3 values are exact in fp32, so what is left is accumulation):
//   gemv_fp8: fp32 sums in the kernel's order, 1e-5 (cols 4096: about 2^-24 sqrt(cols) typical);
//   matmul_fp8: the tensor cores' FP8 accumulation (cuBLASLt promotes partial sums to fp32, but
//   the mma's internal sums keep fewer bits: 2.2e-4 measured at cols 512 on the H200), 1e-3;
//   each test prints its worst error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "formats/common.hpp"
#include "gpu/cuda_check.hpp"
#include "gpu/device_buffer.hpp"
#include "gpu/gemm.hpp"
#include "gpu/test_support.hpp"
#include "kernels/fp8.hpp"
#include "kernels/gemv.hpp"
#include "quants/quants.hpp"

namespace rz::gpu {
namespace {

// E4M3 (the "fn" variant: no infinities, NaN = s.1111.111): the value of a code.
double e4m3_decode(uint8_t q) {
  const int s = q >> 7, e = (q >> 3) & 15, m = q & 7;
  if (e == 15 && m == 7) return NAN;
  const double v = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -v : v;
}

// The reference rounding: the finite code nearest to v, ties to the even code (mantissa LSB 0),
// magnitudes beyond 448 saturating to +-448; NaN -> 0x7f. A search, independent of any bit trick.
uint8_t e4m3_encode(float v) {
  if (std::isnan(v)) return 0x7f;
  const double a = std::fabs(static_cast<double>(v));
  uint8_t best = 0;
  double best_d = INFINITY;
  for (int q = 0; q < 0x7f; ++q) {  // non-negative finite codes, increasing in value
    const double d = std::fabs(e4m3_decode(static_cast<uint8_t>(q)) - a);
    if (d < best_d || (d == best_d && (q & 1) == 0)) {
      best = static_cast<uint8_t>(q);
      best_d = d;
    }
  }
  return static_cast<uint8_t>(best | (v < 0 || (v == 0 && std::signbit(v)) ? 0x80 : 0));
}

struct Quantized {
  std::vector<uint8_t> q;
  std::vector<float> scale;
};

// kernels/fp8.hpp's rule on the host, in the same fp32 operations.
Quantized quantize_ref(const std::vector<float>& x, int64_t rows, int64_t cols) {
  Quantized out{std::vector<uint8_t>(x.size()), std::vector<float>(size_t(rows))};
  for (int64_t r = 0; r < rows; ++r) {
    float amax = 0.0f;
    for (int64_t c = 0; c < cols; ++c)
      if (!std::isnan(x[size_t(r * cols + c)]))
        amax = std::max(amax, std::fabs(x[size_t(r * cols + c)]));
    const bool usable = amax > 0.0f && std::isfinite(amax);
    const float inv = usable ? kFp8E4M3Max / amax : 1.0f;
    out.scale[size_t(r)] = usable ? amax / kFp8E4M3Max : 1.0f;
    for (int64_t c = 0; c < cols; ++c)
      out.q[size_t(r * cols + c)] = e4m3_encode(x[size_t(r * cols + c)] * inv);
  }
  return out;
}

std::vector<float> random_row_values(std::mt19937& rng, int64_t rows, int64_t cols) {
  // Magnitudes spread over many binades, so that codes land in E4M3's subnormals too.
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> e(-14, 3);
  std::vector<float> x(size_t(rows * cols));
  for (auto& v : x) v = std::ldexp(u(rng), e(rng));
  return x;
}

TEST(Fp8, HostReferenceRounding) {
  // The reference's own anchors: exact values stay, halfway cases go to the even code, beyond
  // 448 saturates, the smallest subnormal is 2^-9.
  EXPECT_EQ(e4m3_encode(1.0f), 0x38);
  EXPECT_EQ(e4m3_encode(-1.0f), 0xb8);
  EXPECT_EQ(e4m3_encode(448.0f), 0x7e);
  EXPECT_EQ(e4m3_encode(1e9f), 0x7e);
  EXPECT_EQ(e4m3_encode(1.0625f), 0x38);  // halfway between 1 and 1.125: to the even mantissa
  EXPECT_EQ(e4m3_encode(1.1875f), 0x3a);  // halfway between 1.125 and 1.25: to 1.25
  EXPECT_EQ(e4m3_decode(0x01), std::ldexp(1.0, -9));
  EXPECT_EQ(e4m3_encode(std::ldexp(1.0f, -10)), 0x00);  // half the smallest subnormal: to 0
}

TEST(Fp8, QuantizeRowsMatchesHostRule) {
  RZ_REQUIRE_GPU();
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int64_t rows = 37, cols = 1040;
  std::vector<float> x = random_row_values(rng, rows, cols);
  for (int64_t c = 0; c < cols; ++c) x[size_t(5 * cols + c)] = 0.0f;  // an all-zero row: scale 1
  x[size_t(7 * cols + 3)] = NAN;                                      // NaN: code 0x7f, ignored
  for (const Fp8Source src : {Fp8Source::f32, Fp8Source::f16, Fp8Source::bf16}) {
    SCOPED_TRACE(src == Fp8Source::f32 ? "f32" : src == Fp8Source::f16 ? "f16" : "bf16");
    // The source's values (16-bit sources hold x rounded to their type).
    std::vector<float> vals(x.size());
    std::vector<uint16_t> bits(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      if (src == Fp8Source::f32) {
        vals[i] = x[i];
      } else {
        bits[i] = src == Fp8Source::f16 ? fp32_to_fp16(x[i]) : fp32_to_bf16(x[i]);
        vals[i] = src == Fp8Source::f16 ? fp16_to_fp32(bits[i]) : bf16_to_fp32(bits[i]);
      }
    }
    DeviceBuffer<float> dx32(x.size());
    DeviceBuffer<uint16_t> dx16(x.size());
    if (src == Fp8Source::f32)
      dx32.upload(vals);
    else
      dx16.upload(bits);
    DeviceBuffer<uint8_t> dq(x.size());
    DeviceBuffer<float> ds(static_cast<size_t>(rows));
    dq.fill_bytes(0xAB);
    quantize_rows_fp8(src == Fp8Source::f32 ? static_cast<const void*>(dx32.get()) : dx16.get(),
                      src, dq.get(), ds.get(), rows, cols, nullptr);
    RZ_CUDA_CHECK(cudaDeviceSynchronize());
    const Quantized want = quantize_ref(vals, rows, cols);
    const std::vector<uint8_t> q = dq.download();
    const std::vector<float> s = ds.download();
    int bad = 0;
    for (int64_t r = 0; r < rows; ++r) {
      EXPECT_EQ(s[size_t(r)], want.scale[size_t(r)]) << "row " << r;
      for (int64_t c = 0; c < cols; ++c) {
        const size_t i = size_t(r * cols + c);
        if (q[i] != want.q[i] && ++bad <= 5)
          ADD_FAILURE() << "row " << r << " col " << c << ": x " << vals[i] << " code " << int(q[i])
                        << ", want " << int(want.q[i]);
      }
    }
    EXPECT_EQ(bad, 0);
    EXPECT_EQ(s[5], 1.0f);
    EXPECT_EQ(q[size_t(7 * cols + 3)], 0x7f);
  }
}

// float64 reference of y[t, r] = ws[r] * xs[t] * sum_c dec(w) dec(x), and sum |.| per output.
void product_ref(const std::vector<uint8_t>& w, const std::vector<float>& ws,
                 const std::vector<double>& x, const std::vector<float>& xs, int64_t rows,
                 int64_t cols, int64_t n, std::vector<double>& ref, std::vector<double>& mag) {
  ref.assign(size_t(n * rows), 0.0);
  mag.assign(size_t(n * rows), 0.0);
  std::vector<double> wd(w.size());
  for (size_t i = 0; i < w.size(); ++i) wd[i] = e4m3_decode(w[i]);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0, a = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const double p = wd[size_t(r * cols + c)] * x[size_t(t * cols + c)];
        s += p;
        a += std::fabs(p);
      }
      const double f = double(ws[size_t(r)]) * double(xs[size_t(t)]);
      ref[size_t(t * rows + r)] = s * f;
      mag[size_t(t * rows + r)] = a * std::fabs(f);
    }
}

// Random finite codes (never the NaN codes) and positive row scales.
void random_fp8_matrix(std::mt19937& rng, int64_t rows, int64_t cols, std::vector<uint8_t>& q,
                       std::vector<float>& scale) {
  std::uniform_int_distribution<int> code(0, 253);
  q.resize(size_t(rows * cols));
  for (auto& b : q) {
    const int c = code(rng);
    b = static_cast<uint8_t>(c < 127 ? c : c + 1);  // skip 0x7f; 0xff is past 254 codes
  }
  std::uniform_real_distribution<float> s(0.001f, 0.01f);
  scale.resize(size_t(rows));
  for (auto& v : scale) v = s(rng);
}

double worst_ratio(const std::vector<float>& y, const std::vector<double>& ref,
                   const std::vector<double>& mag, double rel_tol, const std::string& what) {
  double worst = 0;
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double err = std::fabs(double(y[i]) - ref[i]), tol = rel_tol * mag[i] + 1e-30;
    if (!(err <= tol)) {
      if (++bad <= 5)
        ADD_FAILURE() << what << ": output " << i << " = " << y[i] << ", want " << ref[i]
                      << " (error " << err << " > " << tol << ")";
    } else {
      worst = std::max(worst, err / (mag[i] + 1e-30));
    }
  }
  return worst;
}

TEST(Fp8, GemvMatchesFloat64) {
  RZ_REQUIRE_GPU();
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  double worst = 0;
  // (rows, cols): short rows (half-warps), long rows, and few long rows (the split-row kernel).
  const int64_t shapes[][2] = {{300, 512}, {1536, 1536}, {96, 8192}, {33, 4096}};
  for (const auto& sh : shapes)
    for (int n : {1, 2, 3, 4, 5, 8}) {
      const int64_t rows = sh[0], cols = sh[1];
      std::vector<uint8_t> w;
      std::vector<float> ws;
      random_fp8_matrix(rng, rows, cols, w, ws);
      std::vector<float> x(size_t(n * cols));
      for (auto& v : x) v = u(rng);
      const std::vector<double> xd(x.begin(), x.end());
      std::vector<double> ref, mag;
      product_ref(w, ws, xd, std::vector<float>(size_t(n), 1.0f), rows, cols, n, ref, mag);
      DeviceBuffer<uint8_t> dw(w.size());
      dw.upload(w);
      DeviceBuffer<float> dws(ws.size()), dx(x.size()), dy(static_cast<size_t>(n * rows));
      dws.upload(ws);
      dx.upload(x);
      dy.fill_bytes(0xFF);
      gemv_fp8(dw.get(), dws.get(), dx.get(), dy.get(), rows, cols, n, nullptr);
      const std::vector<float> y = dy.download();
      worst = std::max(worst, worst_ratio(y, ref, mag, 1e-5,
                                          "gemv_fp8 [" + std::to_string(rows) + ", " +
                                              std::to_string(cols) + "] n " + std::to_string(n)));
    }
  std::printf("[ gemv_fp8 ] worst error / sum |w x|: %.3g (tolerance 1e-5)\n", worst);
  // Bad arguments: cols not a multiple of 16, null scales.
  DeviceBuffer<uint8_t> b(4096);
  DeviceBuffer<float> f(4096);
  EXPECT_THROW(gemv_fp8(b.get(), f.get(), f.get(), f.get(), 2, 40, 1, nullptr), Error);
  EXPECT_THROW(gemv_fp8(b.get(), nullptr, f.get(), f.get(), 2, 64, 1, nullptr), Error);
}

class Fp8Gemm : public ::testing::TestWithParam<Gemm::Fp8Scaling> {};

TEST_P(Fp8Gemm, MatchesFloat64) {
  RZ_REQUIRE_GPU();
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  cudaStream_t stream;
  RZ_CUDA_CHECK(cudaStreamCreate(&stream));
  double worst = 0;
  Gemm::Fp8Scaling used = Gemm::Fp8Scaling::automatic;
  {
    Gemm gemm(stream);
    gemm.set_fp8_scaling(GetParam());
    const int64_t shapes[][2] = {{1536, 1536}, {2048, 512}, {256, 4096}};
    for (const auto& sh : shapes)
      for (int64_t n : {9, 16, 64, 300}) {
        const int64_t rows = sh[0], cols = sh[1];
        std::vector<uint8_t> w;
        std::vector<float> ws;
        random_fp8_matrix(rng, rows, cols, w, ws);
        // Activations quantized on the device, as the executor does it.
        std::vector<float> x = random_row_values(rng, n, cols);
        DeviceBuffer<float> dx(x.size()), dxs(static_cast<size_t>(n)), dws(ws.size());
        DeviceBuffer<uint8_t> dxq(x.size()), dw(w.size());
        dx.upload(x);
        dw.upload(w);
        dws.upload(ws);
        quantize_rows_fp8(dx.get(), Fp8Source::f32, dxq.get(), dxs.get(), n, cols, stream);
        const int64_t ldy = rows + (n == 16 ? 8 : 0);  // one case writes into a wider Y
        DeviceBuffer<float> dy(static_cast<size_t>(n * ldy));
        dy.fill_bytes(0xFF, stream);
        gemm.matmul_fp8(dw.get(), dws.get(), dxq.get(), dxs.get(), dy.get(), rows, cols, n,
                        ldy == rows ? 0 : ldy);
        used = gemm.last_fp8_scaling();
        RZ_CUDA_CHECK(cudaStreamSynchronize(stream));
        const std::vector<uint8_t> xq = dxq.download();
        const std::vector<float> xs = dxs.download(), yall = dy.download();
        std::vector<double> xd(xq.size());
        for (size_t i = 0; i < xq.size(); ++i) xd[i] = e4m3_decode(xq[i]);
        std::vector<double> ref, mag;
        product_ref(w, ws, xd, xs, rows, cols, n, ref, mag);
        std::vector<float> y(size_t(n * rows));
        for (int64_t t = 0; t < n; ++t)
          std::copy_n(yall.begin() + t * ldy, rows, y.begin() + t * rows);
        worst = std::max(worst, worst_ratio(y, ref, mag, 1e-3,
                                            "matmul_fp8 [" + std::to_string(rows) + ", " +
                                                std::to_string(cols) + "] n " + std::to_string(n)));
      }
    EXPECT_THROW(gemm.matmul_fp8(nullptr, nullptr, nullptr, nullptr, nullptr, 16, 40, 9), Error);
    EXPECT_THROW(gemm.matmul_fp8(nullptr, nullptr, nullptr, nullptr, nullptr, 250, 64, 9), Error);
  }
  RZ_CUDA_CHECK(cudaStreamDestroy(stream));
  std::printf("[ matmul_fp8 %s ] worst error / sum |w x|: %.3g (tolerance 1e-3)\n",
              used == Gemm::Fp8Scaling::outer_vector ? "outer-vector scales" : "scales after",
              worst);
  if (GetParam() != Gemm::Fp8Scaling::automatic) {
    EXPECT_EQ(used, GetParam());
  }
}

INSTANTIATE_TEST_SUITE_P(Scaling, Fp8Gemm,
                         ::testing::Values(Gemm::Fp8Scaling::automatic, Gemm::Fp8Scaling::after),
                         [](const auto& info) {
                           return info.param == Gemm::Fp8Scaling::automatic ? "automatic" : "after";
                         });

}  // namespace
}  // namespace rz::gpu
