// Helpers for the elementwise-kernel GPU tests (embedding, rmsnorm, rope, bias, swiglu, residual,
// argmax): a printed random seed, poisoned device outputs, and element-by-element comparison
// against a float64 reference that reports the worst element on failure.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "formats/common.hpp"
#include "gpu/cuda_check.hpp"
#include "gpu/device_buffer.hpp"

namespace rz::gpu::elem_test {

// A fresh seed per test, printed with every failure through the returned trace message.
inline uint64_t fresh_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Device copy of v.
template <typename T>
DeviceBuffer<T> to_device(const std::vector<T>& v) {
  DeviceBuffer<T> d(v.size());
  if (!v.empty()) d.upload(v);
  return d;
}

// n elements with every byte 0xFF (NaN for floats, -1 for ints): an element the kernel forgets
// to write cannot pass.
template <typename T>
DeviceBuffer<T> poisoned(size_t n) {
  DeviceBuffer<T> d(n);
  d.fill_bytes(0xFF);
  return d;
}

// |got - ref| <= rtol |ref| + atol for every element; NaN or inf in got never passes unless ref is
// the same infinity. On failure: how many elements failed, the worst one, and the first one.
inline ::testing::AssertionResult all_close(const std::vector<float>& got,
                                            const std::vector<double>& ref, double rtol,
                                            double atol, const std::string& what) {
  if (got.size() != ref.size())
    return ::testing::AssertionFailure() << what << ": size " << got.size() << " != " << ref.size();
  size_t bad = 0, first = 0, worst = 0;
  double worst_excess = -1, max_abs = 0, max_rel = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], r = ref[i];
    bool ok;
    double err = std::fabs(g - r);
    if (std::isnan(g) || std::isnan(r)) {
      ok = false;
      err = INFINITY;
    } else if (std::isinf(r) || std::isinf(g)) {
      ok = g == r;
      err = ok ? 0 : INFINITY;
    } else {
      ok = err <= rtol * std::fabs(r) + atol;
    }
    if (std::isfinite(err)) {
      max_abs = std::max(max_abs, err);
      if (r != 0) max_rel = std::max(max_rel, err / std::fabs(r));
    }
    if (!ok) {
      if (bad++ == 0) first = i;
      const double excess = std::isfinite(err) ? err / (rtol * std::fabs(r) + atol) : INFINITY;
      if (excess > worst_excess) {
        worst_excess = excess;
        worst = i;
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os.precision(9);
  os << what << ": " << bad << " of " << got.size() << " elements off (rtol " << rtol << ", atol "
     << atol << "); max abs err " << max_abs << ", max rel err " << max_rel << "; worst at ["
     << worst << "] got " << got[worst] << " want " << ref[worst] << "; first at [" << first
     << "] got " << got[first] << " want " << ref[first];
  return ::testing::AssertionFailure() << os.str();
}

// Bit-for-bit equality (for kernels that do exactly the CPU's fp32 operations). NaN never passes.
inline ::testing::AssertionResult all_bits_equal(const std::vector<float>& got,
                                                 const std::vector<float>& ref,
                                                 const std::string& what) {
  if (got.size() != ref.size())
    return ::testing::AssertionFailure() << what << ": size " << got.size() << " != " << ref.size();
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) || std::isnan(ref[i]) || bits_of(got[i]) != bits_of(ref[i])) {
      if (bad++ == 0) first = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os.precision(9);
  os << what << ": " << bad << " of " << got.size() << " elements differ; first at [" << first
     << "] got " << got[first] << " (0x" << std::hex << bits_of(got[first]) << ") want " << std::dec
     << ref[first] << " (0x" << std::hex << bits_of(ref[first]) << ")";
  return ::testing::AssertionFailure() << os.str();
}

// fn must throw an rz::Error (not a CUDA error: those mean the check did not fire and a launch
// was tried) whose message contains `needle`.
inline ::testing::AssertionResult throws_shape_error(const std::function<void()>& fn,
                                                     const std::string& needle) {
  try {
    fn();
  } catch (const CudaError& e) {
    return ::testing::AssertionFailure() << "CUDA error instead of a shape check: " << e.what();
  } catch (const Error& e) {
    if (std::string(e.what()).find(needle) == std::string::npos)
      return ::testing::AssertionFailure() << "message lacks \"" << needle << "\": " << e.what();
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "no exception (wanted one containing \"" << needle << "\")";
}

// µs per call of fn(i) on the default stream, i the call's index from 0: `warmup` calls, then the
// mean of the next `iters`, timed with events (for the DISABLED_ benchmarks).
template <class F>
double mean_call_us(F&& fn, int warmup = 3, int iters = 20) {
  for (int i = 0; i < warmup; ++i) fn(i);
  cudaEvent_t a, b;
  RZ_CUDA_CHECK(cudaEventCreate(&a));
  RZ_CUDA_CHECK(cudaEventCreate(&b));
  RZ_CUDA_CHECK(cudaEventRecord(a, nullptr));
  for (int i = 0; i < iters; ++i) fn(warmup + i);
  RZ_CUDA_CHECK(cudaEventRecord(b, nullptr));
  RZ_CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  RZ_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return 1000.0 * ms / iters;
}

}  // namespace rz::gpu::elem_test
