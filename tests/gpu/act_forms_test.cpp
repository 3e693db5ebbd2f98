// The matmul input forms (kernels/act_forms.hpp) that rms_norm, add_rms_norm and swiglu_rows write
// beside their fp32 output, against the stand-alone preparation kernels run on that output
// (convert_to_half, qmm_prepare_x, quantize_x_q8), byte for byte: every form buffer poisoned
// with 0xFF first (qmm's zero pad rows included), and the fp32 output itself bit for bit the
// producer's without forms. Every combination of forms, row counts around qmm's 8-row padding,
// column counts of the models (896, 1536, 4096, 4864, 8960) and short ones. The bad-argument test
// runs without a GPU.
#include <gtest/gtest.h>

#include <bit>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu/test_support.hpp"
#include "kernels/act_forms.hpp"
#include "kernels/add_rmsnorm.hpp"
#include "kernels/dequant.hpp"
#include "kernels/gemv_q8.hpp"
#include "kernels/qmm.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/swiglu_rows.hpp"
#include "tests/gpu/elem_test_util.hpp"

namespace rz::gpu {
namespace {

using namespace elem_test;

enum class Producer { rms_norm, add_rms_norm, swiglu_rows };

const char* name_of(Producer p) {
  return p == Producer::rms_norm       ? "rms_norm"
         : p == Producer::add_rms_norm ? "add_rms_norm"
                                       : "swiglu_rows";
}

std::vector<float> random_floats(size_t n, std::mt19937_64& rng, float scale) {
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

::testing::AssertionResult same_bytes(const std::vector<uint8_t>& got,
                                      const std::vector<uint8_t>& want, const std::string& what) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure()
           << what << ": size " << got.size() << " != " << want.size();
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i] && bad++ == 0) first = i;
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << bad << " of " << got.size() << " bytes differ, first at " << first
         << " (got " << int(got[first]) << ", want " << int(want[first]) << ")";
}

// One producer call without forms (the reference fp32 output), one with `forms_mask` (bit 0 f16,
// 1 qmm, 2 q8); the forms must equal the preparation kernels run on the reference output.
void run_case(Producer p, int rows, int cols, int forms_mask, std::mt19937_64& rng) {
  const std::string what = std::string(name_of(p)) + " rows " + std::to_string(rows) + " cols " +
                           std::to_string(cols) + " forms " + std::to_string(forms_mask);
  SCOPED_TRACE(what);
  const size_t n = size_t(rows) * cols;
  const float eps = 1e-6f;
  // Inputs: x and y for the norms (w a row of weights), gate|up rows for swiglu_rows. A few
  // all-zero groups of 32 (q8's d = 0 case) in x.
  auto x = random_floats(p == Producer::swiglu_rows ? 2 * n : n, rng, 2.0f);
  if (cols >= 64)
    for (int r = 0; r < rows; r += 2)
      for (int i = 32; i < 64; ++i) x[size_t(r) * cols + i] = 0.0f;
  const auto y = random_floats(n, rng, 1.0f);
  const auto w = random_floats(size_t(cols), rng, 1.0f);
  auto d_y = to_device(y);
  auto d_w = to_device(w);
  auto produce = [&](const ActForms& forms) {
    auto d_x = to_device(x);
    auto d_out = poisoned<float>(n);
    if (p == Producer::rms_norm)
      rms_norm(d_x.get(), d_w.get(), d_out.get(), rows, cols, eps, nullptr, forms);
    else if (p == Producer::add_rms_norm)
      add_rms_norm(d_x.get(), d_y.get(), d_w.get(), d_out.get(), rows, cols, eps, nullptr, forms);
    else
      swiglu_rows(d_x.get(), d_out.get(), rows, cols, nullptr, forms);
    return std::make_pair(d_out.download(), d_x.download());
  };
  const auto [ref_out, ref_x] = produce({});

  const bool f16 = forms_mask & 1, qmm = forms_mask & 2, q8 = forms_mask & 4;
  const size_t f16_bytes = 2 * n, qmm_bytes = 2 * size_t(qmm_x_elems(rows, cols)),
               q8_bytes = q8_activation_bytes(rows, cols);
  auto d_f16 = poisoned<uint8_t>(f16_bytes), d_qmm = poisoned<uint8_t>(qmm_bytes),
       d_q8 = poisoned<uint8_t>(q8_bytes);
  ActForms forms;
  if (f16) forms.f16 = d_f16.get();
  if (qmm) forms.qmm = d_qmm.get();
  if (q8) forms.q8 = d_q8.get();
  const auto [out, x_after] = produce(forms);
  ASSERT_TRUE(all_bits_equal(out, ref_out, "fp32 output with forms vs without"));
  ASSERT_TRUE(all_bits_equal(x_after, ref_x, "x (the residual sum) with forms vs without"));

  // The forms alone (f32 false, as the executor asks when no reader wants the fp32 matrix): the
  // same form bytes, x (the residual sum) still written, out left as it was (poisoned).
  auto d_f16b = poisoned<uint8_t>(f16_bytes), d_qmmb = poisoned<uint8_t>(qmm_bytes),
       d_q8b = poisoned<uint8_t>(q8_bytes);
  ActForms only{.f16 = f16 ? d_f16b.get() : nullptr,
                .qmm = qmm ? d_qmmb.get() : nullptr,
                .q8 = q8 ? d_q8b.get() : nullptr,
                .f32 = false};
  const auto [out_none, x_none] = produce(only);
  size_t written = 0;
  for (float v : out_none) written += std::bit_cast<uint32_t>(v) != 0xFFFFFFFFu;
  ASSERT_EQ(written, 0u) << "fp32 elements written with f32 false";
  ASSERT_TRUE(all_bits_equal(x_none, ref_x, "x (the residual sum) with the forms alone"));
  if (f16) {
    ASSERT_TRUE(same_bytes(d_f16b.download(), d_f16.download(), "f16, forms alone"));
  }
  if (qmm) {
    ASSERT_TRUE(same_bytes(d_qmmb.download(), d_qmm.download(), "qmm, forms alone"));
  }
  if (q8) {
    ASSERT_TRUE(same_bytes(d_q8b.download(), d_q8.download(), "q8, forms alone"));
  }

  auto d_ref = to_device(ref_out);
  if (f16) {
    auto want = poisoned<uint8_t>(f16_bytes);
    convert_to_half(d_ref.get(), want.get(), HalfType::f16, int64_t(n), nullptr);
    ASSERT_TRUE(same_bytes(d_f16.download(), want.download(), "f16 vs convert_to_half"));
  }
  if (qmm) {
    auto want = poisoned<uint8_t>(qmm_bytes);
    qmm_prepare_x(d_ref.get(), want.get(), rows, cols, nullptr);
    ASSERT_TRUE(same_bytes(d_qmm.download(), want.download(), "qmm vs qmm_prepare_x"));
  }
  if (q8) {
    auto want = poisoned<uint8_t>(q8_bytes);
    quantize_x_q8(d_ref.get(), want.get(), rows, cols, nullptr);
    ASSERT_TRUE(same_bytes(d_q8.download(), want.download(), "q8 vs quantize_x_q8"));
  }
}

TEST(ActForms, EqualThePreparationKernels) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (Producer p : {Producer::rms_norm, Producer::add_rms_norm, Producer::swiglu_rows}) {
    // cols a multiple of 256: every form; else f16 and q8 (multiples of 32) or f16 alone.
    for (int cols : {256, 1536, 4096, 4864, 8960})
      for (int rows : {1, 3, 8, 9, 70})
        for (int mask = 1; mask < 8; ++mask) {
          run_case(p, rows, cols, mask, rng);
          if (::testing::Test::HasFatalFailure()) return;
        }
    for (int cols : {32, 96, 896, 1056})
      for (int rows : {1, 5})
        for (int mask : {1, 4, 5}) {
          run_case(p, rows, cols, mask, rng);
          if (::testing::Test::HasFatalFailure()) return;
        }
    for (int rows : {1, 2}) {
      run_case(p, rows, 12, 1, rng);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(ActForms, RejectBadArguments) {  // checked before any CUDA call: runs without a GPU
  float* p = reinterpret_cast<float*>(256);
  void* f = reinterpret_cast<void*>(512);
  const ActForms f16{.f16 = f}, qmm{.qmm = f}, q8{.q8 = f};
  const ActForms misaligned{.f16 = reinterpret_cast<void*>(520)};
  EXPECT_TRUE(throws_shape_error([&] { rms_norm(p, p, p, 2, 10, 1e-6f, nullptr, f16); },
                                 "not a multiple of 4"));
  EXPECT_TRUE(throws_shape_error([&] { rms_norm(p, p, p, 2, 896, 1e-6f, nullptr, qmm); },
                                 "qmm needs a multiple of 256"));
  EXPECT_TRUE(throws_shape_error([&] { add_rms_norm(p, p, p, p, 2, 100, 1e-6f, nullptr, q8); },
                                 "q8 needs a multiple of 32"));
  EXPECT_TRUE(throws_shape_error(
      [&] { add_rms_norm(p, p, p, p, 2, 256, 1e-6f, nullptr, misaligned); }, "16-byte aligned"));
  EXPECT_TRUE(throws_shape_error([&] { rms_norm(p + 1, p, p, 2, 256, 1e-6f, nullptr, f16); },
                                 "16-byte aligned"));
  EXPECT_TRUE(
      throws_shape_error([&] { swiglu_rows(p + 2, p, 2, 256, nullptr, f16); }, "16-byte aligned"));
  EXPECT_TRUE(throws_shape_error([&] { swiglu_rows(p, p, 2, 896, nullptr, qmm); },
                                 "qmm needs a multiple of 256"));
  // Without the fp32 output: a form is needed, and the norms cannot work in place.
  const ActForms nothing{.f32 = false}, f16_only{.f16 = f, .f32 = false};
  EXPECT_TRUE(throws_shape_error([&] { rms_norm(p, p, p + 64, 2, 256, 1e-6f, nullptr, nothing); },
                                 "nothing would be written"));
  EXPECT_TRUE(throws_shape_error([&] { swiglu_rows(p, p + 64, 2, 256, nullptr, nothing); },
                                 "nothing would be written"));
  EXPECT_TRUE(
      throws_shape_error([&] { rms_norm(p, p, p, 2, 256, 1e-6f, nullptr, f16_only); }, "in place"));
}

}  // namespace
}  // namespace rz::gpu
