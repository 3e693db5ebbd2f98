// Tests of kernels/dequant.hpp: argument checks (run anywhere), every type into FP16 and BF16
// against the CPU path bit for bit (GPU only), the fp32 -> 16-bit activation conversion, and a
// disabled-by-default bandwidth bench (DequantBench.DISABLED_*; run with
// --gtest_also_run_disabled_tests --gtest_filter='DequantBench.*').
//
// Reference: quants/quants.hpp's dequantize_row of each row, then fp32_to_fp16 / fp32_to_bf16
// (round to nearest even). Expected bit-exact: the kernel rounds each float32 product / sum
// separately like the CPU code (no FMAs) and converts with the same rounding and NaN rules.
// Two kinds of input per type: blocks made by quantize_row from random floats (realistic), and
// random bytes (every bit pattern of the packed scales and quants; block scales forced finite,
// plain F32/F16/BF16 data left fully random: NaNs, infs, subnormals included).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
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
#include "kernels/dequant.hpp"
#include "quants/quants.hpp"

namespace rz::gpu {
namespace {

const GgmlType kTypes[] = {GgmlType::Q4_K, GgmlType::Q6_K,   GgmlType::Q8_0,  GgmlType::Q4_0,
                           GgmlType::Q4_1, GgmlType::Q5_0,   GgmlType::Q5_1,  GgmlType::Q2_K,
                           GgmlType::Q3_K, GgmlType::Q5_K,   GgmlType::F16,   GgmlType::BF16,
                           GgmlType::F32,  GgmlType::IQ4_NL, GgmlType::IQ4_XS};

std::string name_of(GgmlType t) { return std::string(type_traits(t).name); }
const char* name_of(HalfType h) { return h == HalfType::f16 ? "f16" : "bf16"; }

uint16_t round_bits(HalfType h, float v) {
  return h == HalfType::f16 ? fp32_to_fp16(v) : fp32_to_bf16(v);
}

// ---------------------------------------------------------------- checks (no GPU needed)

TEST(DequantChecks, SupportedTypes) {
  for (GgmlType t : kTypes) EXPECT_TRUE(dequant_supported(t)) << name_of(t);
  for (GgmlType t : {GgmlType::IQ2_XXS, GgmlType::IQ3_S, GgmlType::Q8_1, GgmlType::I8})
    EXPECT_FALSE(dequant_supported(t)) << name_of(t);
  EXPECT_EQ(dequant_cols_multiple(GgmlType::Q4_K), 256);
  EXPECT_EQ(dequant_cols_multiple(GgmlType::Q6_K), 256);
  EXPECT_EQ(dequant_cols_multiple(GgmlType::Q8_0), 32);
  EXPECT_EQ(dequant_cols_multiple(GgmlType::Q4_1), 32);
  EXPECT_EQ(dequant_cols_multiple(GgmlType::F32), 8);
  EXPECT_EQ(dequant_cols_multiple(GgmlType::Q5_K), 256);
  EXPECT_EQ(dequant_cols_multiple(GgmlType::Q2_K), 256);
  EXPECT_EQ(dequant_cols_multiple(GgmlType::Q5_1), 32);
  EXPECT_EQ(dequant_cols_multiple(GgmlType::IQ4_XS), 256);
  EXPECT_EQ(dequant_cols_multiple(GgmlType::IQ4_NL), 32);
  EXPECT_EQ(dequant_cols_multiple(GgmlType::IQ2_XXS), 0);
}

// The checks come before any CUDA call, so these run without a GPU.
TEST(DequantChecks, BadArgumentsThrowBeforeLaunch) {
  alignas(16) static uint8_t buf[64];
  const auto h = HalfType::f16;
  EXPECT_THROW(dequantize_matrix(GgmlType::Q4_K, buf, buf, h, 4, 100, nullptr), rz::Error);
  EXPECT_THROW(dequantize_matrix(GgmlType::F16, buf, buf, h, 4, 12, nullptr), rz::Error);
  EXPECT_THROW(dequantize_matrix(GgmlType::Q8_0, buf, buf, h, -1, 32, nullptr), rz::Error);
  EXPECT_THROW(dequantize_matrix(GgmlType::Q8_0, buf, buf, h, 4, 0, nullptr), rz::Error);
  EXPECT_THROW(dequantize_matrix(GgmlType::IQ2_XXS, buf, buf, h, 4, 256, nullptr), rz::Error);
  EXPECT_THROW(dequantize_matrix(GgmlType::Q8_0, nullptr, buf, h, 4, 32, nullptr), rz::Error);
  EXPECT_THROW(dequantize_matrix(GgmlType::Q8_0, buf + 2, buf, h, 4, 32, nullptr), rz::Error);
  EXPECT_THROW(dequantize_matrix(GgmlType::Q8_0, buf, buf + 8, h, 4, 32, nullptr), rz::Error);
  EXPECT_THROW(
      dequantize_matrix(GgmlType::Q8_0, buf, buf, h, int64_t{1} << 30, int64_t{1} << 20, nullptr),
      rz::Error);
  EXPECT_NO_THROW(dequantize_matrix(GgmlType::Q8_0, nullptr, nullptr, h, 0, 32, nullptr));  // no-op
  EXPECT_THROW(convert_to_half(nullptr, buf, h, 4, nullptr), rz::Error);
  EXPECT_THROW(convert_to_half(reinterpret_cast<const float*>(buf), buf, h, -1, nullptr),
               rz::Error);
  try {
    dequantize_matrix(GgmlType::Q4_K, buf, buf, h, 4, 100, nullptr);
  } catch (const rz::Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 256"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------- bit-exactness (GPU)

// Byte offsets of the fp16 scale fields in one block of t (forced finite in random-byte data).
std::vector<int> scale_offsets(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: return {0, 2};
    case GgmlType::Q6_K: return {208};
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
    case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS:
    case GgmlType::Q5_0: return {0};
    case GgmlType::Q4_1:
    case GgmlType::Q5_1: return {0, 2};
    case GgmlType::Q2_K: return {80, 82};
    case GgmlType::Q3_K: return {108};
    default: return {};
  }
}

// [rows, row_size(t, cols)] bytes of t.
std::vector<uint8_t> make_bytes(GgmlType t, int64_t rows, int64_t cols, bool random_bytes,
                                std::mt19937& rng) {
  const size_t rb = row_size(t, cols);
  std::vector<uint8_t> bytes(rb * rows);
  if (random_bytes) {
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    const size_t block = type_traits(t).type_size;
    for (int off : scale_offsets(t))
      for (size_t b0 = 0; b0 < bytes.size(); b0 += block) {
        uint16_t h = static_cast<uint16_t>(rng());
        if ((h & 0x7c00u) == 0x7c00u) h = static_cast<uint16_t>(h & ~0x4000u);  // inf/NaN -> finite
        std::memcpy(&bytes[b0 + off], &h, 2);
      }
    return bytes;
  }
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> scale(0.01f, 4.0f);
  std::vector<float> src(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float s = scale(rng), off = (r % 3 == 1) ? 0.5f * s : 0.0f;
    for (auto& v : src) v = s * nd(rng) + off;
    if (t == GgmlType::F32) {
      std::memcpy(bytes.data() + rb * r, src.data(), rb);
    } else {
      quantize_row(t, src.data(), bytes.data() + rb * r, cols);
    }
  }
  return bytes;
}

class DequantTest : public ::testing::TestWithParam<GgmlType> {};

TEST_P(DequantTest, BitExactVsCpu) {
  RZ_REQUIRE_GPU();
  const GgmlType t = GetParam();
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t m = dequant_cols_multiple(t);
  std::vector<int64_t> col_list = {m, 3 * m, 1536};
  if (m == 256) col_list.push_back(4096);
  const int64_t row_list[] = {1, 3, 17, 200};
  int64_t checked = 0;
  for (bool random_bytes : {false, true})
    for (int64_t cols : random_bytes || can_quantize(t) ? col_list : std::vector<int64_t>{})
      for (int64_t rows : row_list) {
        const std::vector<uint8_t> bytes = make_bytes(t, rows, cols, random_bytes, rng);
        std::vector<float> values(static_cast<size_t>(rows * cols));  // [rows, cols]
        const size_t rb = row_size(t, cols);
        for (int64_t r = 0; r < rows; ++r)
          dequantize_row(t, bytes.data() + rb * r, values.data() + r * cols, cols);
        DeviceBuffer<uint8_t> dw(bytes.size());
        DeviceBuffer<uint16_t> dout(values.size());
        dw.upload(bytes);
        for (HalfType h : {HalfType::f16, HalfType::bf16}) {
          dout.fill_bytes(0xff);  // NaN everywhere: a skipped output fails
          dequantize_matrix(t, dw.get(), dout.get(), h, rows, cols, nullptr);
          RZ_CUDA_CHECK(cudaDeviceSynchronize());
          const std::vector<uint16_t> got = dout.download();
          int bad = 0;
          for (size_t i = 0; i < values.size(); ++i) {
            const uint16_t want = round_bits(h, values[i]);
            if (got[i] != want && ++bad <= 5) {
              char msg[256];
              std::snprintf(msg, sizeof msg,
                            "%s -> %s %s rows %lld cols %lld: element [%lld, %lld] got 0x%04x want "
                            "0x%04x (fp32 %.9g)",
                            name_of(t).c_str(), name_of(h),
                            random_bytes ? "random bytes" : "quantized",
                            static_cast<long long>(rows), static_cast<long long>(cols),
                            static_cast<long long>(i / cols), static_cast<long long>(i % cols),
                            got[i], want, static_cast<double>(values[i]));
              ADD_FAILURE() << msg;
            }
          }
          EXPECT_EQ(bad, 0) << name_of(t) << " -> " << name_of(h) << " rows " << rows << " cols "
                            << cols << ": mismatching elements (first 5 shown above)";
          checked += static_cast<int64_t>(values.size());
        }
      }
  std::printf("[ %s ] %lld elements bit-exact\n", name_of(t).c_str(),
              static_cast<long long>(checked));
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DequantTest, ::testing::ValuesIn(kTypes),
                         [](const ::testing::TestParamInfo<GgmlType>& i) {
                           return name_of(i.param);
                         });

// Activation conversion: every fp32 bit pattern class (random bits, plus specials), odd lengths,
// a source that is not 16-byte aligned.
TEST(ConvertToHalf, BitExactVsCpu) {
  RZ_REQUIRE_GPU();
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  const uint32_t specials[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                               0x7f800001u, 0xffbfffffu, 0x00000001u, 0x807fffffu, 0x477fefffu,
                               0x477ff000u, 0x477fffffu, 0x7f7fffffu, 0x33000000u, 0x33000001u,
                               0x387fc000u, 0x3f800fffu, 0x3f801000u, 0x3f803000u};
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1001}, int64_t{70001}}) {
    std::vector<float> x(static_cast<size_t>(n) + 1);  // x[0] unused: the source starts 4 bytes in
    for (size_t i = 0; i < x.size(); ++i) {
      uint32_t u = i % 2 ? static_cast<uint32_t>(rng()) : 0;
      if (i % 2 == 0) {
        const float f = nd(rng);
        std::memcpy(&u, &f, 4);
      }
      if (i < std::size(specials)) u = specials[i];
      std::memcpy(&x[i], &u, 4);
    }
    DeviceBuffer<float> dx(x.size());
    DeviceBuffer<uint16_t> dy(static_cast<size_t>(n));
    dx.upload(x);
    for (HalfType h : {HalfType::f16, HalfType::bf16}) {
      dy.fill_bytes(0xff);
      convert_to_half(dx.get() + 1, dy.get(), h, n, nullptr);
      RZ_CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<uint16_t> got = dy.download();
      int bad = 0;
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t want = round_bits(h, x[i + 1]);
        uint32_t u;
        std::memcpy(&u, &x[i + 1], 4);
        if (got[i] != want && ++bad <= 5)
          ADD_FAILURE() << name_of(h) << " n " << n << " [" << i << "] fp32 bits 0x" << std::hex
                        << u << ": got 0x" << got[i] << " want 0x" << want << std::dec;
      }
      EXPECT_EQ(bad, 0) << name_of(h) << " n " << n;
    }
  }
}

// ---------------------------------------------------------------- bandwidth bench (GPU)

TEST(DequantBench, DISABLED_Throughput) {
  RZ_REQUIRE_GPU();
  struct Shape {
    const char* name;
    int64_t rows, cols;
  };
  const Shape shapes[] = {{"qwen2.5-1.5b ffn_gate", 8960, 1536},
                          {"llama3.1-8b ffn_gate", 14336, 4096}};
  std::mt19937 rng(1234);
  cudaEvent_t e0, e1;
  RZ_CUDA_CHECK(cudaEventCreate(&e0));
  RZ_CUDA_CHECK(cudaEventCreate(&e1));
  for (const Shape& s : shapes)
    for (GgmlType t : kTypes) {
      const std::vector<uint8_t> bytes = make_bytes(t, s.rows, s.cols, true, rng);
      DeviceBuffer<uint8_t> dw(bytes.size());
      DeviceBuffer<uint16_t> dout(static_cast<size_t>(s.rows * s.cols));
      dw.upload(bytes);
      std::vector<float> ms;
      for (int it = 0; it < 23; ++it) {
        RZ_CUDA_CHECK(cudaEventRecord(e0, nullptr));
        dequantize_matrix(t, dw.get(), dout.get(), HalfType::f16, s.rows, s.cols, nullptr);
        RZ_CUDA_CHECK(cudaEventRecord(e1, nullptr));
        RZ_CUDA_CHECK(cudaEventSynchronize(e1));
        float v = 0;
        RZ_CUDA_CHECK(cudaEventElapsedTime(&v, e0, e1));
        if (it >= 3) ms.push_back(v);  // 3 warm-up runs
      }
      std::sort(ms.begin(), ms.end());
      const double med = ms[ms.size() / 2];
      const double gbytes = static_cast<double>(bytes.size() + dout.bytes()) / 1e9;
      std::printf("dequant %-22s %-5s -> f16 [%lld, %lld]: %8.1f us  %7.1f GB/s (read + written)\n",
                  s.name, name_of(t).c_str(), static_cast<long long>(s.rows),
                  static_cast<long long>(s.cols), med * 1e3, gbytes / (med * 1e-3));
    }
  RZ_CUDA_CHECK(cudaEventDestroy(e0));
  RZ_CUDA_CHECK(cudaEventDestroy(e1));
}

}  // namespace
}  // namespace rz::gpu
