// Tests of kernels/gemv_q8.hpp: argument checks (run anywhere); on a GPU the activation
// quantizer bit for bit against the same rule on the host, and every weight type, batch and
// lanes-per-row choice against a float64 reference over the quantized activations, plus the
// bound that ties the result to the unquantized x. Bench: GemvBench.DISABLED_Int8 in
// gemv_test.cpp.
//
// Reference: W from make_weights (quantize_row / dequantize_row), x quantized on the host by the
// rule of quantize_x_q8 (d = max|x| / 127 in fp32, q = nearest-even of x / d, s = d * sum q),
// y_ref = sum_c w_c * (q_c * d_g) in float64. Tolerance as gemv's: kRelTol * sqrt(cols) *
// sum_c |w_c * q_c d_g| (fp32 scale products and sums in another order). Against fp32 x the
// rounding of x adds at most sum_c |w_c| * d_g / 2, which is checked too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "formats/common.hpp"
#include "gpu/cuda_check.hpp"
#include "gpu/device_buffer.hpp"
#include "gpu/test_support.hpp"
#include "kernels/gemv_q8.hpp"
#include "tests/gpu/quant_weights_util.hpp"

namespace rz::gpu {
namespace gemv_q8_detail {  // kernels/gemv_q8.cu
void gemv_q8_with_lanes(GgmlType type, const void* w, const void* xq, float* y, int64_t rows,
                        int64_t cols, int batch, int lanes, cudaStream_t stream);
}  // namespace gemv_q8_detail

namespace {

using test_util::HostWeights;
using test_util::make_weights;

constexpr double kRelTol = 2e-6;
const GgmlType kTypes[] = {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::Q4_0,
                           GgmlType::Q4_1};

std::string name_of(GgmlType t) { return std::string(type_traits(t).name); }

// The host side of quantize_x_q8's rule, in its byte layout.
struct HostQ8 {
  std::vector<int8_t> q;    // [n, cols]
  std::vector<float> d, s;  // [n, cols / 32]
  std::vector<uint8_t> bytes() const {
    std::vector<uint8_t> out(q.size() + d.size() * 8);
    std::memcpy(out.data(), q.data(), q.size());
    for (size_t g = 0; g < d.size(); ++g) {
      std::memcpy(out.data() + q.size() + 8 * g, &d[g], 4);
      std::memcpy(out.data() + q.size() + 8 * g + 4, &s[g], 4);
    }
    return out;
  }
};

HostQ8 quantize_host(const std::vector<float>& x) {
  HostQ8 h;
  h.q.resize(x.size());
  for (size_t g = 0; g < x.size() / kQ8Group; ++g) {
    float amax = 0.0f;
    for (int i = 0; i < kQ8Group; ++i) amax = std::fmax(amax, std::fabs(x[g * kQ8Group + i]));
    const float d = amax / 127.0f;
    int sum = 0;
    for (int i = 0; i < kQ8Group; ++i) {
      const int q = d > 0.0f ? static_cast<int>(std::nearbyint(x[g * kQ8Group + i] / d)) : 0;
      h.q[g * kQ8Group + i] = static_cast<int8_t>(q);
      sum += q;
    }
    h.d.push_back(d);
    h.s.push_back(d * static_cast<float>(sum));
  }
  return h;
}

// Activations of mixed magnitude: groups scaled from 1e-3 to 30, one group of zeros, and an
// outlier in some groups (as real hidden states have).
std::vector<float> make_x(int64_t n, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> lg(-3.0f, 1.5f);
  std::vector<float> x(static_cast<size_t>(n * cols));
  for (size_t g = 0; g < x.size() / kQ8Group; ++g) {
    const float scale = g == 1 ? 0.0f : std::pow(10.0f, lg(rng));
    for (int i = 0; i < kQ8Group; ++i) x[g * kQ8Group + i] = scale * nd(rng);
    if (g % 7 == 3) x[g * kQ8Group + g % kQ8Group] *= 20.0f;
  }
  return x;
}

TEST(GemvQ8Chooser, SupportedTypesAndBatches) {
  for (GgmlType t : kTypes) {
    for (int b = 1; b <= kGemvQ8MaxBatch; ++b) EXPECT_TRUE(gemv_q8_supported(t, b)) << name_of(t);
    EXPECT_FALSE(gemv_q8_supported(t, 0));
    EXPECT_FALSE(gemv_q8_supported(t, kGemvQ8MaxBatch + 1));
  }
  for (GgmlType t : {GgmlType::F16, GgmlType::BF16, GgmlType::F32, GgmlType::Q5_K})
    EXPECT_FALSE(gemv_q8_supported(t, 1)) << name_of(t);
  EXPECT_EQ(q8_activation_bytes(2, 256), size_t(2 * 256 + 2 * 8 * 8));
}

// The checks come before any CUDA call, so these run without a GPU.
TEST(GemvQ8Chooser, BadArgumentsThrowBeforeLaunch) {
  alignas(16) static uint8_t buf[1024];
  float* y = reinterpret_cast<float*>(buf);
  EXPECT_THROW(gemv_q8(GgmlType::F16, buf, buf, y, 4, 256, 1, nullptr), rz::Error);
  EXPECT_THROW(gemv_q8(GgmlType::Q4_K, buf, buf, y, 4, 100, 1, nullptr), rz::Error);
  EXPECT_THROW(gemv_q8(GgmlType::Q4_K, buf, buf, y, 4, 256, 0, nullptr), rz::Error);
  EXPECT_THROW(gemv_q8(GgmlType::Q4_K, buf, buf, y, 4, 256, kGemvQ8MaxBatch + 1, nullptr),
               rz::Error);
  EXPECT_THROW(gemv_q8(GgmlType::Q8_0, buf, buf, y, 0, 32, 1, nullptr), rz::Error);
  EXPECT_THROW(gemv_q8(GgmlType::Q8_0, buf + 2, buf, y, 4, 32, 1, nullptr), rz::Error);
  EXPECT_THROW(gemv_q8(GgmlType::Q8_0, buf, buf + 8, y, 4, 32, 1, nullptr), rz::Error);
  EXPECT_THROW(
      gemv_q8_detail::gemv_q8_with_lanes(GgmlType::Q8_0, buf, buf, y, 4, 32, 1, 8, nullptr),
      rz::Error);
  EXPECT_THROW(quantize_x_q8(y, buf, 1, 48, nullptr), rz::Error);
  EXPECT_THROW(quantize_x_q8(y, buf, 0, 32, nullptr), rz::Error);
  EXPECT_THROW(quantize_x_q8(y + 1, buf, 1, 32, nullptr), rz::Error);
  try {
    gemv_q8(GgmlType::Q4_K, buf, buf, y, 4, 100, 1, nullptr);
  } catch (const rz::Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 256"), std::string::npos) << e.what();
  }
}

TEST(GemvQ8, QuantizerMatchesTheHostRuleBitForBit) {
  RZ_REQUIRE_GPU();
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (int64_t n : {1, 3}) {
    for (int64_t cols : {32, 96, 1536, 4096}) {
      const std::vector<float> x = make_x(n, cols, rng);
      const std::vector<uint8_t> want = quantize_host(x).bytes();
      ASSERT_EQ(want.size(), q8_activation_bytes(n, cols));
      DeviceBuffer<float> dx(x.size());
      DeviceBuffer<uint8_t> dq(want.size());
      dx.upload(x);
      dq.fill_bytes(0x5a);
      quantize_x_q8(dx.get(), dq.get(), n, cols, nullptr);
      RZ_CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<uint8_t> got = dq.download();
      size_t first = got.size();
      for (size_t i = 0; i < got.size() && first == got.size(); ++i)
        if (got[i] != want[i]) first = i;
      EXPECT_EQ(first, got.size()) << "n " << n << " cols " << cols << ": first differing byte "
                                   << first << " of " << got.size();
    }
  }
}

class GemvQ8Test : public ::testing::TestWithParam<GgmlType> {};

TEST_P(GemvQ8Test, MatchesFloat64ReferenceAtEveryBatchAndLaneCount) {
  RZ_REQUIRE_GPU();
  const GgmlType t = GetParam();
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t bs = type_traits(t).block_size;
  const int64_t col_list[] = {bs, 3 * bs, 1536, 4096, 8960 / bs * bs};
  const int64_t row_list[] = {1, 7, 37, 300};
  constexpr int kB = kGemvQ8MaxBatch;
  int failures = 0;
  double worst = 0, worst_bound = 0;
  for (int64_t cols : col_list) {
    for (int64_t rows : row_list) {
      const HostWeights w = make_weights(t, rows, cols, rng);
      const std::vector<float> x = make_x(kB, cols, rng);
      const HostQ8 hq = quantize_host(x);
      DeviceBuffer<uint8_t> dw(w.bytes.size());
      DeviceBuffer<float> dx(x.size()), dy(static_cast<size_t>(kB * rows));
      dw.upload(w.bytes);
      dx.upload(x);
      // one quantization per batch size (the layout depends on it), from the device quantizer
      std::vector<DeviceBuffer<uint8_t>> dq;
      for (int b = 1; b <= kB; ++b) {
        dq.emplace_back(q8_activation_bytes(b, cols));
        quantize_x_q8(dx.get(), dq.back().get(), b, cols, nullptr);
      }
      std::vector<float> first_batch1;  // y of batch 1, lanes 0: later runs must equal it
      for (int batch = 1; batch <= kB; ++batch) {
        for (int lanes : {0, 16, 32}) {
          dy.fill_bytes(0xff);  // NaN: an output the kernel skips fails
          gemv_q8_detail::gemv_q8_with_lanes(t, dw.get(), dq[batch - 1].get(), dy.get(), rows, cols,
                                             batch, lanes, nullptr);
          RZ_CUDA_CHECK(cudaDeviceSynchronize());
          const std::vector<float> y = dy.download();
          for (int b = 0; b < batch; ++b)
            for (int64_t r = 0; r < rows; ++r) {
              double ref = 0, mag = 0, exact = 0, bound = 0;
              for (int64_t c = 0; c < cols; ++c) {
                const double wv = w.values[size_t(r * cols + c)];
                const size_t xi = size_t(b * cols + c), g = xi / kQ8Group;
                const double xq = double(hq.q[xi]) * double(hq.d[g]);
                ref += wv * xq;
                mag += std::fabs(wv * xq);
                exact += wv * double(x[xi]);
                bound += std::fabs(wv) * double(hq.d[g]) * 0.5000001;
              }
              const double got = y[size_t(b * rows + r)];
              const double tol = kRelTol * std::sqrt(double(cols)) * mag + 1e-30;
              const double err = std::fabs(got - ref);
              const bool ok_ref = err <= tol;  // NaN fails
              const bool ok_exact = std::fabs(got - exact) <= bound + tol;
              if (!ok_ref || !ok_exact) {
                if (++failures <= 10)
                  ADD_FAILURE() << name_of(t) << " rows " << rows << " cols " << cols << " batch "
                                << batch << " lanes " << lanes << " y[" << b << ", " << r
                                << "] = " << got << ", want " << ref << " (tol " << tol
                                << "), fp32-x value " << exact << " (bound " << bound << ")";
              } else {
                worst = std::max(worst, err / tol);
                worst_bound = std::max(worst_bound, std::fabs(got - exact) / (bound + tol));
              }
            }
          // Batch and lane count do not change a row's sum: bit-identical to batch 1.
          if (batch == 1 && lanes == 0) {
            first_batch1.assign(y.begin(), y.begin() + rows);
          } else if (lanes == 0) {
            for (int64_t r = 0; r < rows; ++r)
              if (y[size_t(r)] != first_batch1[size_t(r)] && ++failures <= 10)
                ADD_FAILURE() << name_of(t) << " rows " << rows << " cols " << cols << " batch "
                              << batch << ": row " << r << " differs from batch 1: " << y[size_t(r)]
                              << " vs " << first_batch1[size_t(r)];
          }
        }
      }
    }
  }
  EXPECT_EQ(failures, 0) << "first 10 shown above";
  std::printf("[ %s ] worst error / tolerance %.3g; worst |y - y(fp32 x)| / bound %.3g\n",
              name_of(t).c_str(), worst, worst_bound);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, GemvQ8Test, ::testing::ValuesIn(kTypes),
                         [](const ::testing::TestParamInfo<GgmlType>& i) {
                           return name_of(i.param);
                         });

}  // namespace
}  // namespace rz::gpu
