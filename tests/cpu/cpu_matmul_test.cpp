// Tests of the CPU matrix products (cpu/cpu_matmul.cpp): every fast kernel and the generic
// path against a float64 reference built from dequantize_row, over random weights (random bit
// patterns for the quantized blocks, with finite scales), odd row counts and 1..17 tokens.
#include "cpu/cpu_matmul.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cpu/thread_pool.hpp"
#include "quants/quant_blocks.hpp"
#include "quants/quants.hpp"

namespace rz {
namespace {

// Offsets of the fp16 scale fields inside one block, per type.
std::vector<int> scale_offsets(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q8_0: return {0};
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: return {0, 2};
    case GgmlType::Q6_K: return {208};
    case GgmlType::Q2_K: return {80, 82};
    case GgmlType::Q3_K: return {108};
    default: return {};
  }
}

struct Matrix {
  std::vector<uint8_t> bytes;
  TensorView view;
};

Matrix random_matrix(GgmlType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  Matrix m;
  const auto& tr = type_traits(t);
  m.view.name = "w";
  m.view.type = t;
  m.view.n_dims = 2;
  m.view.ne = {cols, rows, 1, 1};
  m.view.nbytes = row_size(t, cols) * rows;
  m.bytes.resize(m.view.nbytes);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  if (tr.block_size == 1) {
    for (int64_t i = 0; i < rows * cols; ++i) {
      float f = nd(rng);
      if (t == GgmlType::F32) std::memcpy(&m.bytes[4 * i], &f, 4);
      uint16_t h = t == GgmlType::F16 ? fp32_to_fp16(f) : fp32_to_bf16(f);
      if (t != GgmlType::F32) std::memcpy(&m.bytes[2 * i], &h, 2);
    }
  } else {
    std::uniform_int_distribution<int> byte(0, 255);
    for (auto& b : m.bytes) b = static_cast<uint8_t>(byte(rng));
    const size_t n_blocks = m.bytes.size() / tr.type_size;
    for (size_t b = 0; b < n_blocks; ++b)
      for (int off : scale_offsets(t)) {
        uint16_t h = fp32_to_fp16(nd(rng) * 0.05f);
        std::memcpy(&m.bytes[b * tr.type_size + off], &h, 2);
      }
  }
  m.view.data = m.bytes.data();
  return m;
}

// Checks y against the float64 product of the dequantized rows; tolerance relative to
// sum |w_i x_i| (fp32 accumulation over cols terms).
void check(const Matrix& m, const std::vector<float>& x, const std::vector<float>& y, int n_tok,
           int64_t y_stride, const char* what) {
  const int64_t rows = m.view.rows(), cols = m.view.cols();
  std::vector<float> wr(cols);
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(m.view.type, m.view.row(r), wr.data(), cols);
    for (int t = 0; t < n_tok; ++t) {
      double ref = 0, mag = 0;
      for (int64_t i = 0; i < cols; ++i) {
        ref += double(wr[i]) * x[t * cols + i];
        mag += std::fabs(double(wr[i]) * x[t * cols + i]);
      }
      const float got = y[t * y_stride + r];
      ASSERT_TRUE(std::isfinite(got)) << what << " row " << r << " tok " << t;
      ASSERT_LE(std::fabs(got - ref), 2e-6 * mag + 1e-30)
          << what << " " << type_traits(m.view.type).name << " row " << r << " tok " << t
          << " n_tok " << n_tok << " ref " << ref;
    }
  }
}

const GgmlType kTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,
                           GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q4_K, GgmlType::Q6_K,
                           GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q2_K, GgmlType::Q3_K,
                           GgmlType::Q5_K};

TEST(CpuMatmul, FastAndGenericMatchFloat64Reference) {
  std::mt19937 rng(1234);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (GgmlType t : kTypes) {
    ASSERT_TRUE(matmul_supports(t)) << type_traits(t).name;
    for (int64_t cols : {256, 768}) {
      const int64_t rows = 37;
      Matrix m = random_matrix(t, rows, cols, rng);
      for (int n_tok : {1, 2, 3, 5, 8, 9, 17}) {
        std::vector<float> x(n_tok * cols);
        for (auto& v : x) v = nd(rng);
        const int64_t stride = rows + 3;
        for (bool generic : {false, true}) {
          std::vector<float> y(n_tok * stride, NAN);
          MatmulJob job{&m.view, x.data(), y.data(), stride};
          matmul_rows(job, n_tok, 0, rows, generic);
          check(m, x, y, n_tok, stride, generic ? "generic" : "fast");
          if (HasFatalFailure()) return;
          for (int tk = 0; tk < n_tok; ++tk)  // the gap between rows and stride is untouched
            for (int64_t r = rows; r < stride; ++r) ASSERT_TRUE(std::isnan(y[tk * stride + r]));
        }
      }
    }
  }
}

TEST(CpuMatmul, F32TailColumns) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Matrix m = random_matrix(GgmlType::F32, 5, 100, rng);
  std::vector<float> x(3 * 100);
  for (auto& v : x) v = nd(rng);
  std::vector<float> y(3 * 5, NAN);
  matmul_rows({&m.view, x.data(), y.data(), 5}, 3, 0, 5);
  check(m, x, y, 3, 5, "tail");
}

TEST(CpuMatmul, SeveralJobsInOneParallelDispatch) {
  std::mt19937 rng(99);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  ThreadPool pool(3);
  Matrix a = random_matrix(GgmlType::Q4_1, 200, 512, rng);
  Matrix b = random_matrix(GgmlType::Q6_K, 77, 512, rng);
  Matrix c = random_matrix(GgmlType::Q5_K, 130, 512, rng);
  const int n_tok = 6;
  std::vector<float> x(n_tok * 512);
  for (auto& v : x) v = nd(rng);
  std::vector<float> ya(n_tok * 200, NAN), yb(n_tok * 77, NAN), yc(n_tok * 130, NAN);
  const MatmulJob jobs[3] = {{&a.view, x.data(), ya.data(), 200},
                             {&b.view, x.data(), yb.data(), 77},
                             {&c.view, x.data(), yc.data(), 130}};
  for (int rep = 0; rep < 3; ++rep) matmul(pool, jobs, n_tok);
  check(a, x, ya, n_tok, 200, "job a");
  check(b, x, yb, n_tok, 77, "job b");
  check(c, x, yc, n_tok, 130, "job c");
}

}  // namespace
}  // namespace rz
