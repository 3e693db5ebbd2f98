// Tests of kernels/gemv.hpp: the chooser and shape checks (run anywhere), every weight type
// against a float64 CPU reference over a sweep of shapes and batches 1..16 (GPU only), and a
// disabled-by-default bandwidth bench (GemvBench.DISABLED_*; run with
// --gtest_also_run_disabled_tests --gtest_filter='GemvBench.*').
//
// Reference: W made by quants/quants.hpp's quantize_row from random fp32 (F16/BF16: its
// conversion), dequantized with dequantize_row, dotted with x in float64. Tolerance:
//   |y - ref| <= kRelTol * sqrt(cols) * sum_c |w_c * x_c|,   kRelTol = 2e-6
// (fp32 accumulation in a different order, and fused multiply-adds in the kernels' dequant).
// For cols = 5632 that is 1.5e-4 of the sum; one element of typical size is 1.8e-4 of it, so the
// small-cols cases (tolerance 3e-5 .. 1e-4 of the sum) are the ones that pin single elements.
#include <gtest/gtest.h>

#include <chrono>
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
#include "kernels/gemv.hpp"
#include "kernels/gemv_q8.hpp"
#include "quants/quants.hpp"
#include "tests/gpu/quant_weights_util.hpp"

namespace rz::gpu {
namespace gemv_detail {  // defined in kernels/gemv.cu (declared in kernels/gemv_common.cuh,
                         // CUDA-only)
int gemv_choose_split(GgmlType type, int64_t rows, int64_t cols, int batch, int sm_count);
void gemv_with_split(GgmlType type, const void* w, const float* x, float* y, int64_t rows,
                     int64_t cols, int batch, int split, cudaStream_t stream);
}  // namespace gemv_detail

namespace {

constexpr double kRelTol = 2e-6;

const GgmlType kTypes[] = {GgmlType::Q4_K,   GgmlType::Q6_K,  GgmlType::Q8_0, GgmlType::Q4_0,
                           GgmlType::Q4_1,   GgmlType::F16,   GgmlType::BF16, GgmlType::Q5_0,
                           GgmlType::Q5_1,   GgmlType::Q5_K,  GgmlType::Q2_K, GgmlType::Q3_K,
                           GgmlType::IQ4_NL, GgmlType::IQ4_XS};

std::string name_of(GgmlType t) { return std::string(type_traits(t).name); }

// ---------------------------------------------------------------- chooser (no GPU needed)

TEST(GemvChooser, SupportedTypesAndBatches) {
  for (GgmlType t : kTypes) {
    for (int b = 1; b <= kGemvMaxBatch; ++b)
      EXPECT_NE(gemv_supported(t, b), GemvKernel::none) << name_of(t) << " batch " << b;
    EXPECT_EQ(gemv_supported(t, 0), GemvKernel::none) << name_of(t);
    EXPECT_EQ(gemv_supported(t, kGemvMaxBatch + 1), GemvKernel::none) << name_of(t);
  }
  EXPECT_EQ(gemv_supported(GgmlType::Q4_K, 1), GemvKernel::q4_k);
  EXPECT_EQ(gemv_supported(GgmlType::BF16, 16), GemvKernel::bf16);
  EXPECT_EQ(gemv_supported(GgmlType::IQ4_XS, 3), GemvKernel::iq4_xs);
  for (GgmlType t : {GgmlType::F32, GgmlType::Q8_1, GgmlType::IQ2_XXS, GgmlType::TQ1_0})
    EXPECT_EQ(gemv_supported(t, 1), GemvKernel::none) << name_of(t);
  EXPECT_EQ(gemv_cols_multiple(GgmlType::Q4_K), 256);
  EXPECT_EQ(gemv_cols_multiple(GgmlType::Q6_K), 256);
  EXPECT_EQ(gemv_cols_multiple(GgmlType::Q5_K), 256);
  EXPECT_EQ(gemv_cols_multiple(GgmlType::IQ4_XS), 256);
  EXPECT_EQ(gemv_cols_multiple(GgmlType::Q8_0), 32);
  EXPECT_EQ(gemv_cols_multiple(GgmlType::Q5_1), 32);
  EXPECT_EQ(gemv_cols_multiple(GgmlType::IQ4_NL), 32);
  EXPECT_EQ(gemv_cols_multiple(GgmlType::F16), 8);
  EXPECT_EQ(gemv_cols_multiple(GgmlType::IQ2_XXS), 0);
}

// The checks come before any CUDA call, so these run without a GPU.
TEST(GemvChooser, BadShapesThrowBeforeLaunch) {
  EXPECT_THROW(gemv(GgmlType::Q4_K, nullptr, nullptr, nullptr, 4, 100, 1, nullptr), rz::Error);
  EXPECT_THROW(gemv(GgmlType::F16, nullptr, nullptr, nullptr, 4, 12, 1, nullptr), rz::Error);
  EXPECT_THROW(gemv(GgmlType::Q8_0, nullptr, nullptr, nullptr, 0, 32, 1, nullptr), rz::Error);
  EXPECT_THROW(gemv(GgmlType::Q8_0, nullptr, nullptr, nullptr, 4, 32, 0, nullptr), rz::Error);
  EXPECT_THROW(gemv(GgmlType::Q8_0, nullptr, nullptr, nullptr, 4, 32, 17, nullptr), rz::Error);
  EXPECT_THROW(gemv(GgmlType::IQ2_XXS, nullptr, nullptr, nullptr, 4, 256, 1, nullptr), rz::Error);
  EXPECT_THROW(gemv(GgmlType::Q3_K, nullptr, nullptr, nullptr, 4, 224, 1, nullptr), rz::Error);
  alignas(16) static float buf[64];
  EXPECT_THROW(gemv(GgmlType::Q8_0, nullptr, buf + 1, buf, 4, 32, 1, nullptr), rz::Error);
  try {
    gemv(GgmlType::Q4_K, nullptr, nullptr, nullptr, 4, 100, 1, nullptr);
  } catch (const rz::Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 256"), std::string::npos) << e.what();
  }
}

// The split-row choice (kernels/gemv.cu's rule: double S while rows * S < 32 * SMs, each warp
// keeps >= 1024 columns and >= 32 work items; only cols >= 4096 and batch <= 4).
TEST(GemvChooser, SplitChoice) {
  using gemv_detail::gemv_choose_split;
  const int h200 = 132;
  // qwen2.5-1.5b ffn_down: 1536 rows; the warp budget allows S = 4, the K-quants are capped at 2
  // (measured best), other types keep 4 at batch 1..2 and get 2 at batch 3..4
  EXPECT_EQ(gemv_choose_split(GgmlType::Q4_K, 1536, 8960, 1, h200), 2);
  EXPECT_EQ(gemv_choose_split(GgmlType::Q6_K, 1536, 8960, 4, h200), 2);
  EXPECT_EQ(gemv_choose_split(GgmlType::Q4_0, 1536, 8960, 2, h200), 4);
  EXPECT_EQ(gemv_choose_split(GgmlType::Q8_0, 1536, 8960, 3, h200), 2);
  // qwen2.5-0.5b ffn_down: 896 x 4864 -> S = 4 (S = 8 would leave 608 columns per warp)
  EXPECT_EQ(gemv_choose_split(GgmlType::Q8_0, 896, 4864, 1, h200), 4);
  EXPECT_EQ(gemv_choose_split(GgmlType::F16, 64, 16384, 2, h200), 8);
  // 4096 columns: Q4_0 has 256 work items (S = 4); Q4_K is capped at 2
  EXPECT_EQ(gemv_choose_split(GgmlType::Q4_K, 1, 4096, 1, h200), 2);
  EXPECT_EQ(gemv_choose_split(GgmlType::Q4_0, 1, 4096, 1, h200), 4);
  // llama3.1-8b 4096-row matrices: S = 2 at batch 1 only
  EXPECT_EQ(gemv_choose_split(GgmlType::Q4_K, 4096, 14336, 1, h200), 2);
  EXPECT_EQ(gemv_choose_split(GgmlType::Q4_K, 4096, 14336, 2, h200), 1);
  EXPECT_EQ(gemv_choose_split(GgmlType::Q4_0, 4096, 4096, 4, h200), 1);
  EXPECT_EQ(gemv_choose_split(GgmlType::F16, 4096, 4096, 1, h200), 2);
  // never: many rows, short rows, batch > 4, unknown SM count, unsupported type
  EXPECT_EQ(gemv_choose_split(GgmlType::Q4_K, 8960, 1536, 1, h200), 1);
  EXPECT_EQ(gemv_choose_split(GgmlType::Q4_K, 151936, 8960, 1, h200), 1);
  EXPECT_EQ(gemv_choose_split(GgmlType::Q4_K, 1536, 2048, 1, h200), 1);
  EXPECT_EQ(gemv_choose_split(GgmlType::Q4_K, 1536, 8960, 5, h200), 1);
  EXPECT_EQ(gemv_choose_split(GgmlType::Q4_K, 1536, 8960, 1, 0), 1);
  EXPECT_EQ(gemv_choose_split(GgmlType::IQ2_XXS, 1536, 8960, 1, h200), 1);
  // every 256-element super-block type is capped as the K-quants are
  EXPECT_EQ(gemv_choose_split(GgmlType::Q5_K, 1536, 8960, 1, h200), 2);
  EXPECT_EQ(gemv_choose_split(GgmlType::IQ4_XS, 1536, 8960, 1, h200), 2);
  EXPECT_EQ(gemv_choose_split(GgmlType::Q5_0, 1536, 8960, 1, h200), 4);
  // a bad forced split or a split at batch > 4 throws before any CUDA call
  alignas(16) static float buf[64];
  EXPECT_THROW(gemv_detail::gemv_with_split(GgmlType::F16, buf, buf, buf, 1, 8, 1, 3, nullptr),
               rz::Error);
  EXPECT_THROW(gemv_detail::gemv_with_split(GgmlType::F16, buf, buf, buf, 1, 8, 5, 2, nullptr),
               rz::Error);
}

// ---------------------------------------------------------------- correctness (GPU)

using test_util::HostWeights;
using test_util::make_weights;

// float64 y = W x for the first n_batch rows of x [n_batch, cols]: ref[b * rows + r] = the sum,
// mag[b * rows + r] = the sum of |w x| (what rounding errors scale with).
void reference_gemv(const HostWeights& w, const std::vector<float>& x, int n_batch, int64_t rows,
                    int64_t cols, std::vector<double>& ref, std::vector<double>& mag) {
  ref.assign(size_t(n_batch * rows), 0.0);
  mag.assign(size_t(n_batch * rows), 0.0);
  for (int b = 0; b < n_batch; ++b)
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0, a = 0;
      const float* wr = w.values.data() + r * cols;
      const float* xb = x.data() + b * cols;
      for (int64_t c = 0; c < cols; ++c) {
        const double p = static_cast<double>(wr[c]) * static_cast<double>(xb[c]);
        s += p;
        a += std::fabs(p);
      }
      ref[b * rows + r] = s;
      mag[b * rows + r] = a;
    }
}

struct Worst {
  double ratio = 0;  // err / tol
  std::string where;
};

class GemvTest : public ::testing::TestWithParam<GgmlType> {};

TEST_P(GemvTest, MatchesFloat64Reference) {
  RZ_REQUIRE_GPU();
  const GgmlType t = GetParam();
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t m = gemv_cols_multiple(t);
  const int64_t bs = type_traits(t).block_size == 1 ? m : type_traits(t).block_size;
  std::vector<int64_t> col_list = {bs, 2 * bs, 3 * bs, 4 * bs, 2048, 5632};
  const int64_t row_list[] = {1, 7, 64, 37, 1000};
  Worst worst;
  int failures = 0;
  for (int64_t cols : col_list) {
    ASSERT_EQ(cols % m, 0);
    for (int64_t rows : row_list) {
      const HostWeights w = make_weights(t, rows, cols, rng);
      std::normal_distribution<float> nd(0.0f, 1.0f);
      std::vector<float> x(static_cast<size_t>(kGemvMaxBatch * cols));  // [16, cols]
      for (auto& v : x) v = nd(rng);
      // ref, mag: [16, rows]; batch B uses x rows 0..B-1, so one reference serves every batch
      std::vector<double> ref, mag;
      reference_gemv(w, x, kGemvMaxBatch, rows, cols, ref, mag);
      DeviceBuffer<uint8_t> dw(w.bytes.size());
      DeviceBuffer<float> dx(x.size()), dy(static_cast<size_t>(kGemvMaxBatch * rows));
      dw.upload(w.bytes);
      dx.upload(x);
      for (int batch = 1; batch <= kGemvMaxBatch; ++batch) {
        dy.fill_bytes(0xff);  // NaN everywhere: an output the kernel skips fails
        gemv(t, dw.get(), dx.get(), dy.get(), rows, cols, batch, nullptr);
        RZ_CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> y = dy.download();
        for (int b = 0; b < batch; ++b)
          for (int64_t r = 0; r < rows; ++r) {
            const double got = y[b * rows + r], want = ref[b * rows + r];
            const double tol =
                kRelTol * std::sqrt(static_cast<double>(cols)) * mag[b * rows + r] + 1e-30;
            const double err = std::fabs(got - want);
            const std::string where =
                name_of(t) + " rows " + std::to_string(rows) + " cols " + std::to_string(cols) +
                " batch " + std::to_string(batch) + " y[" + std::to_string(b) + ", " +
                std::to_string(r) + "] = " + std::to_string(got) + ", want " +
                std::to_string(want) + " (sum |w x| " + std::to_string(mag[b * rows + r]) + ")";
            if (!(err <= tol)) {  // NaN fails here
              if (++failures <= 10)
                ADD_FAILURE() << where << ": error " << err << " > tolerance " << tol;
            } else if (err / tol > worst.ratio) {
              worst = {err / tol, where};
            }
          }
      }
    }
  }
  EXPECT_EQ(failures, 0) << "first 10 shown above";
  std::printf("[ %s ] worst passing error / tolerance: %.3g at %s\n", name_of(t).c_str(),
              worst.ratio, worst.where.c_str());
}

INSTANTIATE_TEST_SUITE_P(AllTypes, GemvTest, ::testing::ValuesIn(kTypes),
                         [](const ::testing::TestParamInfo<GgmlType>& i) {
                           return name_of(i.param);
                         });

// The split-row kernel, forced (S = 2, 4, 8) and as gemv() chooses, on few and long rows, rows
// not a multiple of the rows per block, batch 1..4, against the same float64 reference and
// tolerance; and the split and unsplit results agree within that tolerance.
class GemvSplitTest : public ::testing::TestWithParam<GgmlType> {};

TEST_P(GemvSplitTest, MatchesReferenceAndUnsplit) {
  RZ_REQUIRE_GPU();
  const GgmlType t = GetParam();
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  constexpr int kMaxB = 4;
  struct Shape {
    int64_t rows, cols;
  };
  // cols multiples of 256 (every type's block); rows 1, 3, 5, 7, 13 leave partial blocks for
  // S = 2 (4 rows per block) and S = 4 (2 rows per block).
  const Shape shapes[] = {{1536, 8960}, {896, 4864}, {64, 16384}, {1, 4096}, {13, 4096},
                          {7, 8960},    {3, 256},    {5, 1024},   {1, 256}};
  Worst worst;
  int failures = 0;
  auto check = [&](const std::string& where, double got, double want, double tol) {
    const double err = std::fabs(got - want);
    if (!(err <= tol)) {  // NaN fails here
      if (++failures <= 10)
        ADD_FAILURE() << where << ": got " << got << ", want " << want << ", error " << err
                      << " > tolerance " << tol;
    } else if (err / tol > worst.ratio) {
      worst = {err / tol, where};
    }
  };
  for (const Shape& sh : shapes) {
    const int64_t rows = sh.rows, cols = sh.cols;
    ASSERT_EQ(cols % gemv_cols_multiple(t), 0);
    const HostWeights w = make_weights(t, rows, cols, rng);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(kMaxB * cols));  // [4, cols]
    for (auto& v : x) v = nd(rng);
    std::vector<double> ref, tol;  // [4, rows]
    reference_gemv(w, x, kMaxB, rows, cols, ref, tol);
    for (double& t : tol) t = kRelTol * std::sqrt(static_cast<double>(cols)) * t + 1e-30;
    DeviceBuffer<uint8_t> dw(w.bytes.size());
    DeviceBuffer<float> dx(x.size()), dy(static_cast<size_t>(kMaxB * rows));
    dw.upload(w.bytes);
    dx.upload(x);
    for (int batch = 1; batch <= kMaxB; ++batch) {
      auto run = [&](int split) {
        dy.fill_bytes(0xff);  // NaN everywhere: an output the kernel skips fails
        gemv_detail::gemv_with_split(t, dw.get(), dx.get(), dy.get(), rows, cols, batch, split,
                                     nullptr);
        RZ_CUDA_CHECK(cudaDeviceSynchronize());
        return dy.download();
      };
      const std::vector<float> unsplit = run(1);
      for (int split : {2, 4, 8, 0}) {
        const std::vector<float> y = run(split);
        for (int b = 0; b < batch; ++b)
          for (int64_t r = 0; r < rows; ++r) {
            const size_t i = static_cast<size_t>(b * rows + r);
            const std::string where = name_of(t) + " rows " + std::to_string(rows) + " cols " +
                                      std::to_string(cols) + " batch " + std::to_string(batch) +
                                      " split " + std::to_string(split) + " y[" +
                                      std::to_string(b) + ", " + std::to_string(r) + "]";
            check(where + " vs float64", y[i], ref[i], tol[i]);
            check(where + " vs unsplit", y[i], unsplit[i], tol[i]);
          }
      }
      for (int b = 0; b < batch; ++b)
        for (int64_t r = 0; r < rows; ++r) {
          const size_t i = static_cast<size_t>(b * rows + r);
          check(name_of(t) + " rows " + std::to_string(rows) + " cols " + std::to_string(cols) +
                    " batch " + std::to_string(batch) + " unsplit y[" + std::to_string(b) + ", " +
                    std::to_string(r) + "] vs float64",
                unsplit[i], ref[i], tol[i]);
        }
    }
  }
  EXPECT_EQ(failures, 0) << "first 10 shown above";
  std::printf("[ %s split ] worst passing error / tolerance: %.3g at %s\n", name_of(t).c_str(),
              worst.ratio, worst.where.c_str());
}

// The split kernel's sum order is fixed: two runs give bit-identical outputs.
TEST(GemvSplit, Deterministic) {
  RZ_REQUIRE_GPU();
  std::mt19937 rng(12345);
  const int64_t rows = 1536, cols = 8960;
  const HostWeights w = make_weights(GgmlType::Q4_K, rows, cols, rng);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(4 * cols));
  for (auto& v : x) v = nd(rng);
  DeviceBuffer<uint8_t> dw(w.bytes.size());
  DeviceBuffer<float> dx(x.size()), dy(static_cast<size_t>(4 * rows));
  dw.upload(w.bytes);
  dx.upload(x);
  for (int split : {2, 4, 8})
    for (int batch = 1; batch <= 4; ++batch) {
      std::vector<float> first;
      for (int rep = 0; rep < 3; ++rep) {
        dy.fill_bytes(0xff);
        gemv_detail::gemv_with_split(GgmlType::Q4_K, dw.get(), dx.get(), dy.get(), rows, cols,
                                     batch, split, nullptr);
        RZ_CUDA_CHECK(cudaDeviceSynchronize());
        std::vector<float> y = dy.download();
        y.resize(static_cast<size_t>(batch * rows));
        for (float v : y) ASSERT_TRUE(std::isfinite(v)) << "split " << split << " batch " << batch;
        if (rep == 0)
          first = y;
        else
          ASSERT_EQ(0, std::memcmp(first.data(), y.data(), y.size() * sizeof(float)))
              << "split " << split << " batch " << batch << " rep " << rep;
      }
    }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, GemvSplitTest, ::testing::ValuesIn(kTypes),
                         [](const ::testing::TestParamInfo<GgmlType>& i) {
                           return name_of(i.param);
                         });

// ---------------------------------------------------------------- bandwidth bench (GPU)

struct MatShape {
  const char* model;
  const char* name;
  int64_t rows, cols;
};

// Linear layers of the shapes in PERFORMANCE.md (rows = output features).
const MatShape kBenchShapes[] = {
    {"qwen2.5-1.5b", "attn_q/o", 1536, 1536},    {"qwen2.5-1.5b", "attn_k/v", 256, 1536},
    {"qwen2.5-1.5b", "ffn_gate/up", 8960, 1536}, {"qwen2.5-1.5b", "ffn_down", 1536, 8960},
    {"qwen2.5-1.5b", "output", 151936, 1536},    {"llama3.1-8b", "attn_q/o", 4096, 4096},
    {"llama3.1-8b", "attn_k/v", 1024, 4096},     {"llama3.1-8b", "ffn_gate/up", 14336, 4096},
    {"llama3.1-8b", "ffn_down", 4096, 14336},    {"llama3.1-8b", "output", 128256, 4096},
};

// Enough copies of a W of this type and shape to exceed the L2 (50-60 MB) several times over, so
// that launches rotating through them read the weights from DRAM. Filled with 0x3a (fp16 scales
// 0x3a3a, about 0.78): finite values, timing only.
struct RotatedWeights {
  size_t wbytes, copies, stride;
  DeviceBuffer<uint8_t> buf;
  RotatedWeights(GgmlType t, const MatShape& s)
      : wbytes(row_size(t, s.cols) * s.rows),
        copies(std::max<size_t>(1, (size_t{512} << 20) / wbytes + 1)),
        stride((wbytes + 255) / 256 * 256),
        buf(stride * copies) {
    buf.fill_bytes(0x3a);
  }
  const uint8_t* at(size_t i) const { return buf.get() + stride * (i % copies); }
  // Seconds per call of call(i) (which should read at(i)): one warm-up pass over the copies, then
  // max(20, 2 copies) timed calls between two events on the default stream.
  template <class F>
  double seconds_per_call(F&& call) const {
    for (size_t i = 0; i < copies; ++i) call(i);
    const int reps = static_cast<int>(std::max<size_t>(20, copies * 2));
    cudaEvent_t e0, e1;
    RZ_CUDA_CHECK(cudaEventCreate(&e0));
    RZ_CUDA_CHECK(cudaEventCreate(&e1));
    RZ_CUDA_CHECK(cudaEventRecord(e0));
    for (int i = 0; i < reps; ++i) call(static_cast<size_t>(i));
    RZ_CUDA_CHECK(cudaEventRecord(e1));
    RZ_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    RZ_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return ms * 1e-3 / reps;
  }
};

// Device-to-device copy bandwidth (bytes read + written per second): the practical ceiling.
double copy_bandwidth() {
  const size_t n = size_t{1} << 30;
  DeviceBuffer<uint8_t> a(n), b(n);
  a.fill_bytes(1);
  cudaEvent_t e0, e1;
  RZ_CUDA_CHECK(cudaEventCreate(&e0));
  RZ_CUDA_CHECK(cudaEventCreate(&e1));
  RZ_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), n, cudaMemcpyDeviceToDevice));
  RZ_CUDA_CHECK(cudaEventRecord(e0));
  const int reps = 10;
  for (int i = 0; i < reps; ++i)
    RZ_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), n, cudaMemcpyDeviceToDevice));
  RZ_CUDA_CHECK(cudaEventRecord(e1));
  RZ_CUDA_CHECK(cudaEventSynchronize(e1));
  float ms = 0;
  RZ_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return 2.0 * n * reps / (ms * 1e-3);
}

TEST(GemvBench, DISABLED_Bandwidth) {
  RZ_REQUIRE_GPU();
  const double ceiling = copy_bandwidth();
  std::printf("device copy bandwidth (read + write): %.0f GB/s\n", ceiling / 1e9);
  std::printf("%-13s %-12s %-5s %7s %6s %3s %9s %8s %6s\n", "model", "matrix", "type", "rows",
              "cols", "B", "us", "GB/s", "%copy");
  const int batches[] = {1, 2, 4, 8, 16};
  for (const MatShape& s : kBenchShapes)
    for (GgmlType t : kTypes) {
      const RotatedWeights rw(t, s);
      const size_t wbytes = rw.wbytes;
      DeviceBuffer<float> dx(static_cast<size_t>(kGemvMaxBatch * s.cols)),
          dy(static_cast<size_t>(kGemvMaxBatch * s.rows));
      dx.fill_bytes(0);
      for (int batch : batches) {
        const double sec = rw.seconds_per_call([&](size_t i) {
          gemv(t, rw.at(i), dx.get(), dy.get(), s.rows, s.cols, batch, nullptr);
        });
        const double bytes = static_cast<double>(wbytes) + 4.0 * batch * (s.cols + s.rows);
        std::printf("%-13s %-12s %-5s %7lld %6lld %3d %9.2f %8.0f %5.0f%%\n", s.model, s.name,
                    name_of(t).c_str(), static_cast<long long>(s.rows),
                    static_cast<long long>(s.cols), batch, sec * 1e6, bytes / sec / 1e9,
                    100.0 * bytes / sec / ceiling);
      }
    }
}

// gemv (fp32 x) against gemv_q8 (x quantized to int8 per 32, kernels/gemv_q8.hpp) on the
// bench shapes: microseconds per call and GB/s of the weights; "q8+quant" includes the
// activation quantizer, which the executor runs once per input (shared by Q/K/V, gate/up).
TEST(GemvBench, DISABLED_Int8) {
  RZ_REQUIRE_GPU();
  std::printf("%-13s %-12s %-5s %7s %6s %2s %9s %9s %9s %8s %8s\n", "model", "matrix", "type",
              "rows", "cols", "B", "fp32 us", "q8 us", "q8+q us", "fp32GB/s", "q8 GB/s");
  const GgmlType types[] = {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::Q4_0};
  for (const MatShape& s : kBenchShapes)
    for (GgmlType t : types) {
      const RotatedWeights rw(t, s);
      const size_t wbytes = rw.wbytes;
      DeviceBuffer<float> dx(static_cast<size_t>(4 * s.cols)), dy(static_cast<size_t>(4 * s.rows));
      dx.fill_bytes(0);
      DeviceBuffer<uint8_t> dq(q8_activation_bytes(4, s.cols));
      for (int batch : {1, 2, 4}) {
        const double f32 = rw.seconds_per_call([&](size_t i) {
          gemv(t, rw.at(i), dx.get(), dy.get(), s.rows, s.cols, batch, nullptr);
        });
        quantize_x_q8(dx.get(), dq.get(), batch, s.cols, nullptr);
        const double q8 = rw.seconds_per_call([&](size_t i) {
          gemv_q8(t, rw.at(i), dq.get(), dy.get(), s.rows, s.cols, batch, nullptr);
        });
        const double q8q = rw.seconds_per_call([&](size_t i) {
          quantize_x_q8(dx.get(), dq.get(), batch, s.cols, nullptr);
          gemv_q8(t, rw.at(i), dq.get(), dy.get(), s.rows, s.cols, batch, nullptr);
        });
        std::printf("%-13s %-12s %-5s %7lld %6lld %2d %9.2f %9.2f %9.2f %8.0f %8.0f\n", s.model,
                    s.name, name_of(t).c_str(), static_cast<long long>(s.rows),
                    static_cast<long long>(s.cols), batch, f32 * 1e6, q8 * 1e6, q8q * 1e6,
                    wbytes / f32 / 1e9, wbytes / q8 / 1e9);
      }
    }
}

// Split-row sweep on the few-row shapes: S = 1 (ordinary kernel), 2, 4, 8 and the automatic
// choice, B = 1..4, to tune kernels/gemv.cu's gemv_choose_split on the GPU at hand.
TEST(GemvBench, DISABLED_SplitSweep) {
  RZ_REQUIRE_GPU();
  int dev = 0, sms = 0;
  RZ_CUDA_CHECK(cudaGetDevice(&dev));
  RZ_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  std::printf("%d SMs\n%-12s %-5s %7s %6s %3s %5s %9s %8s\n", sms, "matrix", "type", "rows", "cols",
              "B", "split", "us", "GB/s");
  const MatShape shapes[] = {{"qwen2.5-1.5b", "ffn_down", 1536, 8960},
                             {"qwen2.5-0.5b", "ffn_down", 896, 4864},
                             {"llama3.1-8b", "ffn_down", 4096, 14336},
                             {"llama3.1-8b", "attn_q/o", 4096, 4096}};
  for (const MatShape& s : shapes)
    for (GgmlType t : kTypes) {
      const RotatedWeights rw(t, s);
      const size_t wbytes = rw.wbytes;
      DeviceBuffer<float> dx(static_cast<size_t>(4 * s.cols)), dy(static_cast<size_t>(4 * s.rows));
      dx.fill_bytes(0);
      for (int batch = 1; batch <= 4; ++batch)
        for (int split : {1, 2, 4, 8, 0}) {
          const double sec = rw.seconds_per_call([&](size_t i) {
            gemv_detail::gemv_with_split(t, rw.at(i), dx.get(), dy.get(), s.rows, s.cols, batch,
                                         split, nullptr);
          });
          const double bytes = static_cast<double>(wbytes) + 4.0 * batch * (s.cols + s.rows);
          const int chosen =
              split ? split : gemv_detail::gemv_choose_split(t, s.rows, s.cols, batch, sms);
          std::printf("%-12s %-5s %7lld %6lld %3d %5s %9.2f %8.0f\n", s.name, name_of(t).c_str(),
                      static_cast<long long>(s.rows), static_cast<long long>(s.cols), batch,
                      (split ? std::to_string(split) : "auto" + std::to_string(chosen)).c_str(),
                      sec * 1e6, bytes / sec / 1e9);
        }
    }
}

}  // namespace
}  // namespace rz::gpu
