// GPU row argmax (kernels/argmax.cu) against model/sampling.cpp's argmax rules, restated here as
// a plain loop: the first index holding the largest value, NaN never chosen, 0 when nothing is
// above -inf. Vocabularies up to 262144 (sizes around the chunk boundaries of the workspace path),
// planted ties far apart, NaN and infinities, output and workspace poisoned, every row checked,
// through both the one-block-per-row path and the chunked workspace path (also inside a CUDA
// graph capture).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gpu/test_support.hpp"
#include "kernels/argmax.hpp"
#include "tests/gpu/elem_test_util.hpp"

namespace rz::gpu {
namespace {

using namespace elem_test;

// sampling.cpp's argmax: strict '>' from (-inf, index 0).
int32_t argmax_ref(const float* x, int n) {
  int32_t best = 0;
  float best_v = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < n; ++i)
    if (x[i] > best_v) best_v = x[i], best = i;
  return best;
}

void check(const std::vector<float>& logits, int rows, int n, const std::string& what) {
  std::vector<int32_t> ref(rows);
  for (int r = 0; r < rows; ++r) ref[r] = argmax_ref(&logits[size_t(r) * n], n);
  auto d_l = to_device(logits);
  auto d_out = poisoned<int32_t>(size_t(rows));
  const size_t ws_bytes = argmax_workspace_bytes(rows, n);
  auto d_ws = poisoned<uint8_t>(ws_bytes);
  for (bool chunked : {false, true}) {
    d_out.fill_bytes(0xFF);
    if (chunked)
      argmax_rows(d_l.get(), rows, n, d_out.get(), d_ws.get(), ws_bytes, nullptr);
    else
      argmax_rows(d_l.get(), rows, n, d_out.get(), nullptr);
    const auto got = d_out.download();
    for (int r = 0; r < rows; ++r) {
      const float* row = &logits[size_t(r) * n];
      ASSERT_EQ(got[r], ref[r]) << what << (chunked ? " (workspace path)" : " (one block a row)")
                                << ", row " << r << " of " << rows << ": got index " << got[r]
                                << " (value " << (got[r] >= 0 && got[r] < n ? row[got[r]] : NAN)
                                << "), want " << ref[r] << " (value " << row[ref[r]] << ")";
    }
  }
}

TEST(Argmax, RandomRowsWithPlantedTiesNaNAndInfinities) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (int n : {1, 2, 31, 32, 33, 1000, 1023, 1024, 1025, 2047, 2048, 2049, 4096, 6145, 49152,
                151936, 262144}) {
    for (int rows : {1, 4, 9}) {
      std::vector<float> x(size_t(rows) * n);  // [rows, n]
      for (auto& v : x) v = nd(rng);
      for (int r = 0; r < rows; ++r) {
        float* row = &x[size_t(r) * n];
        auto at = [&] { return static_cast<int>(rng() % n); };
        switch (r % 9) {
          case 0: break;  // plain random
          case 1: {       // the max planted 3 times
            const float m = 100.0f;
            for (int k = 0; k < 3; ++k) row[at()] = m;
            break;
          }
          case 2:  // NaNs, one at index 0
            row[0] = nan;
            for (int k = 0; k < 1 + n / 50; ++k) row[at()] = nan;
            break;
          case 3: std::fill(row, row + n, -inf); break;  // all -inf: 0
          case 4: std::fill(row, row + n, nan); break;   // all NaN: 0
          case 5:                                        // NaN and -inf only: 0
            for (int i = 0; i < n; ++i) row[i] = (i % 3 == 1) ? -inf : nan;
            break;
          case 6:  // max at the last index
            row[n - 1] = 1e30f;
            if (n > kArgmaxChunk) row[kArgmaxChunk] = 1e30f;  // and at a chunk's start
            break;
          case 7: row[at()] = inf, row[at()] = inf, row[at()] = nan; break;  // +inf ties
          case 8:                                                            // all equal: 0
            std::fill(row, row + n, 0.5f);
            if (n > 2) row[0] = -0.0f, row[1] = 0.0f, std::fill(row + 2, row + n, 0.0f);
            break;
        }
      }
      check(x, rows, n, "n " + std::to_string(n) + " rows " + std::to_string(rows));
      if (HasFatalFailure()) return;
    }
  }
}

TEST(Argmax, ManyRowsBatchedDecode) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int rows = 64, n = 49152;
  std::vector<float> x(size_t(rows) * n);
  for (auto& v : x) v = std::round(nd(rng) * 4.0f) / 4.0f;  // coarse values: many exact ties
  check(x, rows, n, "64 x 49152 coarse");
}

// The workspace path recorded into a CUDA graph (no allocation or sync inside), replayed twice
// on new logits: the graph reads the buffers, not values captured at record time.
TEST(Argmax, WorkspacePathInCudaGraph) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  const int rows = 3, n = 151936;
  const size_t ws_bytes = argmax_workspace_bytes(rows, n);
  auto d_l = poisoned<float>(size_t(rows) * n);
  auto d_out = poisoned<int32_t>(size_t(rows));
  auto d_ws = poisoned<uint8_t>(ws_bytes);
  RZ_CUDA_CHECK(cudaDeviceSynchronize());  // the poison fills ran on the legacy stream
  cudaStream_t s;
  RZ_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t graph;
  RZ_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  argmax_rows(d_l.get(), rows, n, d_out.get(), d_ws.get(), ws_bytes, s);
  RZ_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  RZ_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 0; rep < 2; ++rep) {
    std::vector<float> x(size_t(rows) * n);
    for (auto& v : x) v = nd(rng);
    x[size_t(rng() % x.size())] = 50.0f + rep;
    d_l.upload(x, s);
    d_out.fill_bytes(0xFF, s);
    RZ_CUDA_CHECK(cudaGraphLaunch(exec, s));
    const auto got = d_out.download(s);
    for (int r = 0; r < rows; ++r)
      EXPECT_EQ(got[r], argmax_ref(&x[size_t(r) * n], n)) << "replay " << rep << " row " << r;
  }
  RZ_CUDA_CHECK(cudaGraphExecDestroy(exec));
  RZ_CUDA_CHECK(cudaGraphDestroy(graph));
  RZ_CUDA_CHECK(cudaStreamDestroy(s));
}

TEST(Argmax, RejectsBadArguments) {  // checked before any CUDA call: runs without a GPU
  const float* p = reinterpret_cast<const float*>(16);
  int32_t* o = reinterpret_cast<int32_t*>(16);
  EXPECT_TRUE(throws_shape_error([&] { argmax_rows(p, 1, 0, o, nullptr); }, "bad shape"));
  EXPECT_TRUE(throws_shape_error([&] { argmax_rows(p, -1, 5, o, nullptr); }, "bad shape"));
  EXPECT_TRUE(throws_shape_error([&] { argmax_rows(p, 1, 5, nullptr, nullptr); }, "null"));
  EXPECT_NO_THROW(argmax_rows(p, 0, 5, o, nullptr));
  // workspace path: sizes are whole chunks of (float, int32) pairs; 0 when a row is one chunk
  EXPECT_EQ(argmax_workspace_bytes(4, 151936), size_t(4) * ((151936 + 2047) / 2048) * 8);
  EXPECT_EQ(argmax_workspace_bytes(1, kArgmaxChunk), size_t(0));
  EXPECT_EQ(argmax_workspace_bytes(2, kArgmaxChunk + 1), size_t(2) * 2 * 8);
  EXPECT_EQ(argmax_workspace_bytes(0, 151936), size_t(0));
  EXPECT_TRUE(throws_shape_error([&] { argmax_workspace_bytes(1, 0); }, "bad shape"));
  void* w = reinterpret_cast<void*>(64);
  const size_t need = argmax_workspace_bytes(2, 10000);
  EXPECT_TRUE(
      throws_shape_error([&] { argmax_rows(p, 2, 10000, o, w, need - 1, nullptr); }, "workspace"));
  EXPECT_TRUE(
      throws_shape_error([&] { argmax_rows(p, 2, 10000, o, nullptr, need, nullptr); }, "null"));
  EXPECT_TRUE(
      throws_shape_error([&] { argmax_rows(p, 2, 10000, nullptr, w, need, nullptr); }, "null"));
  EXPECT_TRUE(throws_shape_error([&] { argmax_rows(p, 1, 0, o, w, need, nullptr); }, "bad shape"));
  EXPECT_NO_THROW(argmax_rows(p, 0, 10000, o, w, need, nullptr));
}

}  // namespace
}  // namespace rz::gpu
