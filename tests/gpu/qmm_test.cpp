// Tests of kernels/qmm.hpp: argument checks and the split rule (run anywhere); every weight type
// against a float64 reference over shapes, token counts and forced K splits; a token's output
// bit-identical whatever the number of tokens beside it; determinism (GPU only). And a
// disabled-by-default bench comparing qmm with gemv and with dequantize + cuBLAS per token count
// (QmmBench.DISABLED_*; run with --gtest_also_run_disabled_tests --gtest_filter='QmmBench.*'),
// the measurement behind the executor's choice (kernels/QMM.md).
//
// Reference: the operands the tensor cores see: W as dequantize_row gives it, rounded to fp16,
// and x rounded to fp16; products and sums in float64. Tolerance per output:
//   |y - ref| <= kRelTol * sum_c |w_c x_c|,   kRelTol = 1e-4
// Products of fp16 values are exact in fp32, so what remains is fp32 accumulation (about
// cols * 2^-24 of the sum at worst) and the kernel's dequantization, an fma or a product in fp32
// before the fp16 rounding, which may move an element by one fp16 ulp (2^-11 of it, so at most
// 2^-11 / cols of the sum per element). A dropped or doubled term (~1 / cols of the sum) fails.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "apps/bench/bench_options.hpp"  // parse_batches
#include "formats/common.hpp"
#include "gpu/cuda_check.hpp"
#include "gpu/device_buffer.hpp"
#include "gpu/gemm.hpp"
#include "gpu/test_support.hpp"
#include "kernels/dequant.hpp"
#include "kernels/gemv.hpp"
#include "kernels/qmm.hpp"
#include "kernels/qmm_wide.hpp"
#include "quants/quants.hpp"
#include "tests/gpu/elem_test_util.hpp"  // mean_call_us
#include "tests/gpu/quant_weights_util.hpp"

namespace rz::gpu {
namespace qmm_detail {  // kernels/qmm.cu, kernels/qmm_direct.cuh
int choose_splits(int64_t rows, int64_t cols, int sms);
using DirectBlocksPerSm = std::array<int, 9>;  // [w]: blocks of w warps an SM holds
int choose_direct_splits(int64_t rows, int64_t cols, int sms, const DirectBlocksPerSm& blocks,
                         bool clusters);
int direct_splits(GgmlType type, int64_t rows, int64_t cols, DirectBlocksPerSm* blocks);
void run(GgmlType type, const void* w, const void* xp, float* y, int64_t rows, int64_t cols,
         int64_t n, int64_t ldy, float* ws, size_t ws_floats, int splits, cudaStream_t stream);
int staged_row_tiles(int64_t rows, int64_t tiles8, int64_t splits, const std::array<int, 3>& slots);
}  // namespace qmm_detail

namespace {

using test_util::HostWeights;
using test_util::make_weights;

constexpr double kRelTol = 1e-4;

const GgmlType kTypes[] = {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0,   GgmlType::Q4_0,
                           GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,   GgmlType::Q5_K,
                           GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS};

std::string name_of(GgmlType t) { return std::string(type_traits(t).name); }

float round_f16(float v) { return fp16_to_fp32(fp32_to_fp16(v)); }

// ---------------------------------------------------------------- no GPU needed

TEST(QmmChooser, SupportedTypesAndColumns) {
  for (GgmlType t : kTypes) {
    EXPECT_TRUE(qmm_supported(t, 256)) << name_of(t);
    EXPECT_TRUE(qmm_supported(t, 8960)) << name_of(t);
    EXPECT_FALSE(qmm_supported(t, 896)) << name_of(t) << ": 896 is no multiple of 256";
    EXPECT_FALSE(qmm_supported(t, 0)) << name_of(t);
  }
  for (GgmlType t :
       {GgmlType::F16, GgmlType::BF16, GgmlType::F32, GgmlType::Q8_1, GgmlType::IQ2_XXS})
    EXPECT_FALSE(qmm_supported(t, 4096)) << name_of(t);
  EXPECT_EQ(qmm_x_elems(1, 256), 8 * 256);
  EXPECT_EQ(qmm_x_elems(8, 512), 8 * 512);
  EXPECT_EQ(qmm_x_elems(9, 256), 16 * 256);
}

// The integer form (kernels/QMM.md): Q6_K at every token count the direct and staged kernels
// take; Q4_K and Q5_K while the staged kernel's token tiles hold at most 16 tokens (n <= 24), then
// fp32 dequantization; no other type, and none in the wide kernel (from 65 tokens on sm_90). On
// sm_90 the wide kernel's integer form takes 33-64 tokens of Q4_K, Q5_K and Q6_K matrices of at
// least 32 MB.
TEST(QmmChooser, IntegerFormByTypeAndTokens) {
  for (int64_t n : {1, 8, 9, 16, 17, 24, 25, 32, 64, 128, 512}) {
    EXPECT_EQ(qmm_integer_form(GgmlType::Q6_K, 64, 256, n), !qmm_runs_wide(n)) << n;
    EXPECT_EQ(qmm_integer_form(GgmlType::Q4_K, 64, 256, n), n <= 24) << n;
    EXPECT_EQ(qmm_integer_form(GgmlType::Q5_K, 64, 256, n), n <= 24) << n;
    for (GgmlType t :
         {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
          GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::F16}) {
      EXPECT_FALSE(qmm_integer_form(t, 64, 256, n)) << name_of(t) << " " << n;
      EXPECT_FALSE(qmm_runs_wide_int(t, 28672, 4096, n)) << name_of(t) << " " << n;
    }
  }
  EXPECT_FALSE(qmm_integer_form(GgmlType::Q6_K, 64, 256, 0));
  // llama3.1-8b's gate+up (66 MB of Q4_K) and Q6_K output; a 4096 x 4096 Q4_K matrix (9.4 MB) not
  const bool wide = qmm_runs_wide(65);
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K}) {
    for (int64_t n : {32, 33, 48, 64, 65}) {
      const bool want = wide && n >= 33 && n <= 64;
      EXPECT_EQ(qmm_runs_wide_int(t, 28672, 4096, n), want) << name_of(t) << " " << n;
      EXPECT_EQ(qmm_integer_form(t, 28672, 4096, n), want) << name_of(t) << " " << n;
      EXPECT_FALSE(qmm_runs_wide_int(t, 4096, 4096, n)) << name_of(t) << " " << n;
    }
  }
  EXPECT_EQ(qmm_runs_wide_int(GgmlType::Q6_K, 128256, 4096, 40), wide);
  EXPECT_FALSE(qmm_runs_wide_int(GgmlType::Q6_K, 128256, 4096, 65));
}

// Lowers the wide integer form's size threshold to 0 for a scope, so that the tests' small matrices
// run it (33-64 tokens on sm_90).
struct WideIntForAll {
  double saved = qmm_detail::wide_int_min_bytes();
  WideIntForAll() { qmm_detail::wide_int_min_bytes() = 0; }
  ~WideIntForAll() { qmm_detail::wide_int_min_bytes() = saved; }
};

// The wide kernel takes 65 tokens and more where it is built and the device is compute capability
// 9.0, and its x layout is part of qmm's workspace.
TEST(QmmChooser, WideKernelFromSixtyFiveTokens) {
  EXPECT_FALSE(qmm_runs_wide(1));
  EXPECT_FALSE(qmm_runs_wide(64));
  const bool wide = qmm_runs_wide(65);
  EXPECT_EQ(qmm_runs_wide(512), wide);
  if (!wide) return;
  // 128 tokens x 1536 columns of fp16 = 98,304 floats, after 7 splits' sums of 1536 x 100 each
  // 100 tokens take a tile of 128: 128 x 8960 halves after the split sums (7 splits on an H200)
  const size_t s = size_t(qmm_splits(1536, 8960));
  ASSERT_GT(s, 1u);
  EXPECT_EQ(qmm_workspace_floats(1536, 8960, 100), s * 1536 * 100 + 128 * 8960 / 2);
  if (qmm_splits(151936, 1536) == 1) {  // no split: the x layout alone, two tiles of 128
    EXPECT_EQ(qmm_workspace_floats(151936, 1536, 129), size_t(256 * 1536 / 2));
    // 64 tokens: the integer form's x, 17 steps of 64 tokens x 16 halves a chunk
    EXPECT_EQ(qmm_workspace_floats(151936, 1536, 64), size_t(64 * 6 * 17 * 16 / 2));
    EXPECT_EQ(qmm_workspace_floats(151936, 1536, 32), size_t(0));
  }
}

// The wide kernel's grid model (qmm_detail::wide_cost) on an H200's 132 SMs picks, for the shapes
// it was fitted on, what QmmBench.DISABLED_WideGroups measured fastest or within a few percent of
// it (bench/gpu-runs/2026-11-29-h200-wide-groups.log). No GPU needed.
TEST(QmmChooser, WideGridModel) {
  using qmm_detail::wide_groups;
  using qmm_detail::wide_splits;
  const int h200 = 132;
  const struct {
    int64_t rows, cols;
    int splits, groups128, groups256;  // the picks at 128 and 256 tokens
  } picks[] = {
      // qwen2.5-1.5b: QKV, two splits of 3 chunks, one group (18.2 -> 9.6 us at 128 tokens
      // against two groups unsplit)
      {2048, 1536, 2, 1, 1},
      {1536, 1536, 3, 1, 2},  // attn_o: three splits
      // gate+up unsplit: one group for one token tile (280 blocks of one group against 140 of
      // two: 31.7 against 34.5 us), two for two
      {17920, 1536, 1, 1, 2},
      {1536, 8960, 4, 1, 2},  // ffn_down: four splits
      // llama3.1-8b: gate+up unsplit in two groups (the grid before this model), ffn_down
      {28672, 4096, 1, 2, 2},
      {4096, 14336, 4, 2, 2},
  };
  for (const auto& p : picks) {
    SCOPED_TRACE(std::to_string(p.rows) + " x " + std::to_string(p.cols));
    EXPECT_EQ(wide_splits(p.rows, p.cols, h200), p.splits);
    EXPECT_EQ(wide_groups(p.rows, p.cols, 128, p.splits, h200), p.groups128);
    EXPECT_EQ(wide_groups(p.rows, p.cols, 256, p.splits, h200), p.groups256);
  }
  // a split is never empty, and a matrix of one chunk never splits
  for (int64_t cols : {256, 512, 768, 1280, 2560, 4096, 14336})
    for (int64_t rows : {64, 1536, 28672}) {
      const int s = wide_splits(rows, cols, h200);
      const int64_t chunks = cols / kQmmChunk, per = (chunks + s - 1) / s;
      EXPECT_GE(s, 1);
      EXPECT_EQ((chunks + per - 1) / per, s) << rows << " x " << cols;
    }
  EXPECT_EQ(wide_splits(64, 256, h200), 1);
}

TEST(QmmChooser, SplitRule) {
  using qmm_detail::choose_splits;
  const int h200 = 132;
  // 64 rows per block: 1536 rows = 24 blocks; 2 * 132 / 24 -> 11, capped at 35 / 4 = 8 chunks
  // each of at least 4, then made non-empty: ceil(35 / 8) = 5 chunks per split -> 7 splits
  EXPECT_EQ(choose_splits(1536, 8960, h200), 7);
  EXPECT_EQ(choose_splits(1536, 1536, h200), 1);   // 6 chunks: one split of >= 4 only
  EXPECT_EQ(choose_splits(256, 4096, h200), 4);    // 4 blocks want 66 splits; 16 chunks allow 4
  EXPECT_EQ(choose_splits(8960, 1536, h200), 1);   // 140 blocks
  EXPECT_EQ(choose_splits(4096, 14336, h200), 5);  // 64 blocks want 5 (56 chunks)
  EXPECT_EQ(choose_splits(151936, 1536, h200), 1);
  EXPECT_EQ(choose_splits(14336, 4096, h200), 2);  // 224 blocks want 2 (16 chunks)
}

// The staged kernel's 64-token tiles: two row tiles a warp where the waves model it faster (a
// wave of two-tile blocks as 1.6 of one-tile blocks); the picks of the measured calls (H200, two
// blocks an SM either way: 264 slots; tiles8 = tokens / 8).
TEST(QmmChooser, StagedRowTilesRule) {
  const std::array<int, 3> h200 = {0, 264, 264};
  EXPECT_EQ(qmm_detail::staged_row_tiles(128256, 32, 1, h200), 2);  // llama8b output, 256 tokens
  EXPECT_EQ(qmm_detail::staged_row_tiles(151936, 8, 1, h200), 2);   // qwen output, 64 tokens
  EXPECT_EQ(qmm_detail::staged_row_tiles(1536, 32, 1, h200), 1);    // qwen attn_q/o: 96 blocks
  EXPECT_EQ(qmm_detail::staged_row_tiles(8960, 32, 1, h200), 1);    // 560 blocks: 3 waves or 2
  EXPECT_EQ(qmm_detail::staged_row_tiles(8960, 16, 1, h200), 2);    // 280: 2 waves or 1
  EXPECT_EQ(qmm_detail::staged_row_tiles(8960, 8, 1, h200), 1);     // 140: one wave either way
  EXPECT_EQ(qmm_detail::staged_row_tiles(4096, 8, 4, h200), 1);     // llama8b attn_q/o, 64
  EXPECT_EQ(qmm_detail::staged_row_tiles(4096, 16, 4, h200), 2);    // and 128
  EXPECT_EQ(qmm_detail::staged_row_tiles(1024, 32, 4, h200), 1);    // llama8b attn_k/v, 256
  EXPECT_EQ(qmm_detail::staged_row_tiles(128256, 32, 1, {0, 264, 0}), 1);  // two do not fit
}

// Up to 8 tokens: 16-row tiles, the split with the fewest modelled chunk rounds (waves of
// blocks x (ceil(chunks / splits) + 1), half a round more for a cluster), at most 8 splits in one
// block and 64 in a cluster of blocks, at most 8 chunks a warp where 8 splits allow it.
TEST(QmmChooser, DirectSplitRule) {
  const auto choose_direct_splits = [](int64_t rows, int64_t cols, int sms,
                                       const qmm_detail::DirectBlocksPerSm& b) {
    return qmm_detail::choose_direct_splits(rows, cols, sms, b, true);
  };
  const int h200 = 132;
  // 128 registers a thread (and 99: registers are allotted per scheduler's quarter of the SM):
  // 16 one-warp blocks an SM, 8 of two warps, ... (2,112 warps)
  const qmm_detail::DirectBlocksPerSm r128 = {0, 16, 8, 5, 4, 3, 2, 2, 2};
  EXPECT_EQ(choose_direct_splits(1536, 1536, h200, r128), 6);  // 96 tiles: one wave, 6 chunks
  EXPECT_EQ(choose_direct_splits(8960, 1536, h200, r128), 3);  // 560 tiles: 1 wave of 2 chunks
  // 96 tiles of 35 chunks: 7 splits of 5 chunks in one block, 12 rounds; 12 of 3 in clusters of
  // two blocks of 6 warps (192 blocks, one wave), 9; 35 of 1 in clusters of 5 blocks of 7 warps,
  // two waves of 2, also 9 (a tie: fewer splits)
  EXPECT_EQ(choose_direct_splits(1536, 8960, h200, r128), 12);
  EXPECT_EQ(qmm_detail::choose_direct_splits(1536, 8960, h200, r128, false), 7);  // no clusters
  EXPECT_EQ(choose_direct_splits(4096, 4096, h200, r128), 8);    // 256 tiles: 1 wave of 2
  EXPECT_EQ(choose_direct_splits(14336, 4096, h200, r128), 2);   // 896 tiles: 1 wave of 8
  EXPECT_EQ(choose_direct_splits(4096, 14336, h200, r128), 8);   // 7 chunks each (clusters: waves)
  EXPECT_EQ(choose_direct_splits(151936, 1536, h200, r128), 1);  // 5 waves of 6 + 1 < 9 of 3 + 1
  EXPECT_EQ(choose_direct_splits(128256, 4096, h200, r128), 2);  // 16 chunks a warp: over the cap
  EXPECT_EQ(choose_direct_splits(4096, 32768, h200, r128), 8);   // 16 a warp even with 8 splits
  EXPECT_EQ(choose_direct_splits(1, 256, h200, r128), 1);        // one chunk
  // more blocks an SM: 19 one-warp blocks make 8,016 tiles 4 waves (of 2,508) with one split
  const qmm_detail::DirectBlocksPerSm r19 = {0, 19, 9, 6, 4, 3, 3, 2, 2};
  EXPECT_EQ(choose_direct_splits(151936, 1536, h200, r19), 1);  // 4 waves of 6 + 1 < 8 of 3 + 1
  EXPECT_EQ(choose_direct_splits(14336, 4096, h200, r19), 2);
  // a device or kernel the occupancy query gave nothing for still gets a valid split
  const qmm_detail::DirectBlocksPerSm none = {};
  EXPECT_EQ(choose_direct_splits(4096, 4096, 0, none), 8);
}

// On this device: every direct kernel fits 1..8 warps a block (the staged one's shared memory
// above 48 KiB too, else its occupancy is 0 and an 8-split launch would fail), holds fewer
// blocks as they grow, and the split the rule takes from that table is what qmm launches.
TEST(QmmChooser, DirectOccupancyOnThisDevice) {
  RZ_REQUIRE_GPU();
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::Q4_0,
                     GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q2_K, GgmlType::Q3_K,
                     GgmlType::IQ4_NL, GgmlType::IQ4_XS}) {
    qmm_detail::DirectBlocksPerSm b{};
    const int s = qmm_detail::direct_splits(t, 128256, 4096, &b);
    for (int w = 1; w <= 8; ++w) {
      EXPECT_GE(b[w], 1) << name_of(t) << ", " << w << " warps";
      if (w > 1) {
        EXPECT_LE(b[w], b[w - 1]) << name_of(t) << ", " << w << " warps";
      }
    }
    const bool cl = device_supports_clusters();
    EXPECT_EQ(s, qmm_detail::choose_direct_splits(128256, 4096, device_sm_count(), b, cl))
        << name_of(t);
    EXPECT_EQ(qmm_detail::direct_splits(t, 4096, 4096, nullptr),
              qmm_detail::choose_direct_splits(4096, 4096, device_sm_count(), b, cl))
        << name_of(t);
    EXPECT_EQ(qmm_detail::direct_splits(t, 1536, 8960, nullptr),
              qmm_detail::choose_direct_splits(1536, 8960, device_sm_count(), b, cl))
        << name_of(t);
  }
}

TEST(QmmChooser, BadArgumentsThrowBeforeLaunch) {
  alignas(16) static uint8_t buf[4096];
  auto call = [&](GgmlType t, const void* w, const void* xp, float* y, int64_t rows, int64_t cols,
                  int64_t n,
                  int64_t ldy) { qmm(t, w, xp, y, rows, cols, n, ldy, nullptr, 0, nullptr); };
  float* y = reinterpret_cast<float*>(buf);
  EXPECT_THROW(call(GgmlType::F16, buf, buf, y, 4, 256, 1, 4), rz::Error);
  EXPECT_THROW(call(GgmlType::Q4_K, buf, buf, y, 4, 300, 1, 4), rz::Error);
  EXPECT_THROW(call(GgmlType::Q4_K, buf, buf, y, 0, 256, 1, 4), rz::Error);
  EXPECT_THROW(call(GgmlType::Q4_K, buf, buf, y, 4, 256, -1, 4), rz::Error);
  EXPECT_THROW(call(GgmlType::Q4_K, buf, buf, y, 4, 256, 1, 3), rz::Error);  // ldy < rows
  EXPECT_THROW(call(GgmlType::Q4_K, buf + 4, buf, y, 4, 256, 1, 4), rz::Error);
  EXPECT_THROW(call(GgmlType::Q4_K, nullptr, buf, y, 4, 256, 1, 4), rz::Error);
  // a split without its workspace (17 tokens: the staged kernel's)
  EXPECT_THROW(qmm_detail::run(GgmlType::Q4_K, buf, buf, y, 4, 1024, 17, 4, nullptr, 0, 2, nullptr),
               rz::Error);
  EXPECT_THROW(qmm_prepare_x(y, buf, 1, 100, nullptr), rz::Error);
  EXPECT_THROW(qmm_prepare_x(nullptr, buf, 1, 256, nullptr), rz::Error);
  try {
    call(GgmlType::IQ2_XXS, buf, buf, y, 4, 256, 1, 4);
    ADD_FAILURE() << "IQ2_XXS accepted";
  } catch (const rz::Error& e) {
    EXPECT_NE(std::string(e.what()).find("IQ2_XXS"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------- correctness (GPU)

struct Case {
  const HostWeights& w;
  const std::vector<float>& x16;  // [n, cols], fp16-representable values
  int64_t rows, cols, n;
};

// The weights the integer form multiplies: Q4_K's and Q5_K's exact values; Q6_K's d * fp16((q -
// 32) scale), whose integer (q - 32) scale is rounded to fp16 (even integers above 2,048). The
// exact value d (q - 32) scale is a float (at most 24 significant bits), so value / d is that
// integer.
std::vector<float> int_form_values(GgmlType t, const HostWeights& w, int64_t rows, int64_t cols) {
  std::vector<float> v = w.values;
  if (t != GgmlType::Q6_K) return v;
  constexpr int64_t kBlockBytes = 210, kDOffset = 208;  // ql[128] qh[64] scales[16] d
  const int64_t blocks = cols / 256;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < blocks; ++b) {
      uint16_t bits = 0;
      std::memcpy(&bits, w.bytes.data() + (r * blocks + b) * kBlockBytes + kDOffset, 2);
      const float d = fp16_to_fp32(bits);
      if (d == 0.0f) continue;
      for (int64_t e = 0; e < 256; ++e) {
        float& x = v[size_t(r * cols + b * 256 + e)];
        x = d * round_f16(static_cast<float>(std::nearbyint(double(x) / double(d))));
      }
    }
  return v;
}

// float64 reference over the fp16-rounded weights (or the exact ones): ref, mag [n, rows].
void reference(const Case& k, std::vector<double>& ref, std::vector<double>& mag,
               bool fp16_weights = true) {
  ref.assign(size_t(k.n * k.rows), 0.0);
  mag.assign(size_t(k.n * k.rows), 0.0);
  std::vector<float> w16(size_t(k.cols));
  for (int64_t r = 0; r < k.rows; ++r) {
    for (int64_t c = 0; c < k.cols; ++c) {
      const float v = k.w.values[r * k.cols + c];
      w16[c] = fp16_weights ? round_f16(v) : v;
    }
    for (int64_t t = 0; t < k.n; ++t) {
      double s = 0, a = 0;
      const float* xt = k.x16.data() + t * k.cols;
      for (int64_t c = 0; c < k.cols; ++c) {
        const double p = double(w16[c]) * double(xt[c]);
        s += p;
        a += std::fabs(p);
      }
      ref[t * k.rows + r] = s;
      mag[t * k.rows + r] = a;
    }
  }
}

// Runs qmm (prepare + matmul) with a forced split (0 = qmm's own choice) into y [n, ldy].
std::vector<float> run_qmm(GgmlType t, const DeviceBuffer<uint8_t>& dw,
                           const DeviceBuffer<float>& dx, int64_t rows, int64_t cols, int64_t n,
                           int64_t ldy, int split) {
  DeviceBuffer<uint16_t> xp(size_t(qmm_x_elems(n, cols)));
  DeviceBuffer<float> y(size_t(n * ldy));
  // every split's sums, and the wide kernel's x after them
  const size_t ws_floats =
      size_t(cols / kQmmChunk) * size_t(rows * n) + 4 +
      (n >= qmm_detail::kWideIntMinTokens ? qmm_detail::wide_x_floats(n, cols) : 0);
  DeviceBuffer<float> ws(std::max<size_t>(ws_floats, 1));
  y.fill_bytes(0xff);  // NaN: an output never written fails
  qmm_prepare_x(dx.get(), xp.get(), n, cols, nullptr);
  if (split == 0)
    qmm(t, dw.get(), xp.get(), y.get(), rows, cols, n, ldy, ws.get(), ws_floats, nullptr);
  else
    qmm_detail::run(t, dw.get(), xp.get(), y.get(), rows, cols, n, ldy, ws.get(), ws_floats, split,
                    nullptr);
  RZ_CUDA_CHECK(cudaDeviceSynchronize());
  return y.download();
}

class QmmTest : public ::testing::TestWithParam<GgmlType> {};

TEST_P(QmmTest, MatchesFloat64Reference) {
  RZ_REQUIRE_GPU();
  const GgmlType t = GetParam();
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  struct Shape {
    int64_t rows, cols;
  };
  // rows: partial warps (1, 13), partial blocks (100), several blocks; cols 1..10 chunks
  const Shape shapes[] = {{1, 256}, {13, 768}, {100, 1024}, {64, 2560}, {300, 512}};
  // 65 and more: the wide kernel on sm_90 (tiles of 128 tokens: 130 and 200 a partial second);
  // then, with its size threshold lowered (WideIntForAll), 33-64 in the wide kernel's integer form
  struct Count {
    int64_t n;
    bool wide_int;
  };
  std::vector<Count> token_counts;
  for (int64_t n : {1, 5, 8, 9, 13, 16, 17, 40, 64, 65, 130, 200})
    token_counts.push_back({n, false});
  if (qmm_runs_wide(65) && qmm_detail::wide_int_format(t))
    for (int64_t n : {33, 40, 64}) token_counts.push_back({n, true});
  double worst = 0;
  std::string worst_at;
  int failures = 0;
  for (const Shape& sh : shapes) {
    const HostWeights w = make_weights(t, sh.rows, sh.cols, rng);
    const int64_t n_max = 200;
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(size_t(n_max * sh.cols));
    for (auto& v : x) v = round_f16(nd(rng));
    std::vector<double> ref16, mag16, ref_int, mag_int;
    reference({w, x, sh.rows, sh.cols, n_max}, ref16, mag16);
    const HostWeights wi{w.bytes, int_form_values(t, w, sh.rows, sh.cols)};
    reference({wi, x, sh.rows, sh.cols, n_max}, ref_int, mag_int, false);
    DeviceBuffer<uint8_t> dw(w.bytes.size());
    DeviceBuffer<float> dx(x.size());
    dw.upload(w.bytes);
    dx.upload(x);
    for (const auto [n, wide_int] : token_counts) {
      std::optional<WideIntForAll> lowered;
      if (wide_int) lowered.emplace();
      EXPECT_EQ(qmm_runs_wide_int(t, sh.rows, sh.cols, n), wide_int) << n;
      for (int split : {1, 2, 3, 10, 0}) {  // 10: more splits than the direct kernel's warps
        const int64_t ldy = sh.rows + (split == 2 ? 5 : 0);  // a slice of a wider output too
        const std::vector<float> y = run_qmm(t, dw, dx, sh.rows, sh.cols, n, ldy, split);
        // the integer form multiplies its own weights (int_form_values)
        const bool int_form = qmm_integer_form(t, sh.rows, sh.cols, n);
        const std::vector<double>& ref = int_form ? ref_int : ref16;
        const std::vector<double>& mag = int_form ? mag_int : mag16;
        for (int64_t tk = 0; tk < n; ++tk)
          for (int64_t r = 0; r < sh.rows; ++r) {
            const double got = y[tk * ldy + r], want = ref[tk * sh.rows + r];
            const double tol = kRelTol * mag[tk * sh.rows + r] + 1e-30;
            const double err = std::fabs(got - want);
            if (!(err <= tol)) {  // NaN fails here
              if (++failures <= 10)
                ADD_FAILURE() << name_of(t) << " [" << sh.rows << ", " << sh.cols << "] n " << n
                              << (wide_int ? " (wide integer form)" : "") << " split " << split
                              << " y[" << tk << ", " << r << "] = " << got << ", want " << want
                              << " (error " << err << " > " << tol << ")";
            } else if (err / tol > worst) {
              worst = err / tol;
              worst_at = "[" + std::to_string(sh.rows) + ", " + std::to_string(sh.cols) + "] n " +
                         std::to_string(n) + (wide_int ? " (wide integer form)" : "") + " split " +
                         std::to_string(split);
            }
          }
      }
    }
  }
  EXPECT_EQ(failures, 0) << "first 10 shown above";
  std::printf("[ %s ] worst passing error / tolerance: %.3g at %s\n", name_of(t).c_str(), worst,
              worst_at.c_str());
}

void expect_token_independent(GgmlType t, int64_t rows, int64_t cols, int split) {
  std::mt19937 rng(777);
  const HostWeights w = make_weights(t, rows, cols, rng);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t n_max = 200;
  std::vector<float> x(size_t(n_max * cols));
  for (auto& v : x) v = nd(rng);
  DeviceBuffer<uint8_t> dw(w.bytes.size());
  dw.upload(w.bytes);
  DeviceBuffer<float> dx(x.size());
  dx.upload(x);
  const std::vector<float> all = run_qmm(t, dw, dx, rows, cols, n_max, rows, split);
  const std::vector<float> again = run_qmm(t, dw, dx, rows, cols, n_max, rows, split);
  EXPECT_EQ(std::memcmp(all.data(), again.data(), all.size() * sizeof(float)), 0)
      << "two runs differ";
  // From 65 tokens the wide kernel (sm_90): its tokens match n_max's whatever the tile count; the
  // staged kernel's largest call (64 tokens) is then the staged calls' reference.
  const bool wide = qmm_runs_wide(n_max);
  if (wide) {
    for (int64_t n : {65, 128, 130}) {
      const std::vector<float> part = run_qmm(t, dw, dx, rows, cols, n, rows, split);
      EXPECT_EQ(std::memcmp(part.data(), all.data(), size_t(n * rows) * sizeof(float)), 0)
          << name_of(t) << ": " << n << " tokens in the wide kernel differ from the same tokens of "
          << n_max;
    }
  }
  // The wide kernel's integer form (33-64 tokens of large matrices; here of every size): its tokens
  // match 64's whatever the count.
  if (wide && qmm_detail::wide_int_format(t)) {
    const WideIntForAll lowered;
    const std::vector<float> t64 = run_qmm(t, dw, dx, rows, cols, 64, rows, split);
    for (int64_t n : {33, 40}) {
      const std::vector<float> part = run_qmm(t, dw, dx, rows, cols, n, rows, split);
      EXPECT_EQ(std::memcmp(part.data(), t64.data(), size_t(n * rows) * sizeof(float)), 0)
          << name_of(t) << ": " << n << " tokens in the wide integer form differ from 64's";
    }
  }
  const int64_t n_staged = wide ? 64 : n_max;
  const std::vector<float> staged =
      wide ? run_qmm(t, dw, dx, rows, cols, n_staged, rows, split) : all;
  // With the kernels' own split rules the direct kernel's tokens (1-8, and 9-16 where it takes
  // them) match 8 and 16 tokens' bit for bit, one token tile or two; staged calls match n_max's.
  // With forced splits the direct kernel's match the staged kernel's too (both run the same
  // arithmetic: the integer form, or the fp32 dequantization).
  const std::vector<float> eight = run_qmm(t, dw, dx, rows, cols, 8, rows, split);
  const std::vector<float> sixteen = run_qmm(t, dw, dx, rows, cols, 16, rows, split);
  // Q4_K and Q5_K run their integer form to 24 tokens (qmm_integer_form), n_max's in fp32:
  // staged calls in the integer form match 24 tokens' instead (the staged kernel's 16-token
  // tiles, as for 9-16).
  const std::vector<float> t24 = run_qmm(t, dw, dx, rows, cols, 24, rows, split);
  const bool direct16 = split <= 64 && qmm_runs_direct(t, rows, cols, 16);
  if (direct16) {
    EXPECT_EQ(std::memcmp(eight.data(), sixteen.data(), 8 * rows * sizeof(float)), 0)
        << name_of(t) << ": 8 tokens in one tile differ from the same tokens in two";
  }
  for (int64_t n : {1, 2, 8, 9, 16, 37}) {
    const std::vector<float> part = run_qmm(t, dw, dx, rows, cols, n, rows, split);
    const bool direct = split <= 64 && qmm_runs_direct(t, rows, cols, n);
    const bool own = direct && split == 0;
    const bool same_form =
        qmm_integer_form(t, rows, cols, n) == qmm_integer_form(t, rows, cols, n_staged);
    const std::vector<float>& ref = own ? (n <= 8 ? eight : sixteen) : same_form ? staged : t24;
    for (int64_t tk = 0; tk < n; ++tk)
      EXPECT_EQ(std::memcmp(part.data() + tk * rows, ref.data() + tk * rows, rows * sizeof(float)),
                0)
          << name_of(t) << " token " << tk << " of " << n << " differs from the same token of "
          << (&ref == &staged  ? n_staged
              : &ref == &eight ? 8
              : &ref == &t24   ? 24
                               : 16);
  }
}

// A token's row of y is bit-identical whether it is alone, the 37th of 37 or among 200 (the
// split depends on the shape only; the mma of one token column does not see the others), and two
// runs agree bit for bit. Up to 16 tokens run the direct kernel (one token tile to 8, two to 16),
// which has its own split rule and adds equal splits in the same order as the staged one: with
// its own rule its tokens match 16 tokens' bit for bit (one tile or two), and with forced splits
// they match the staged kernel's too (the integer forms of Q4_K, Q5_K and Q6_K included: both
// kernels run them through int_chunk). Forced splits past the direct kernel's 8 warps run in
// clusters of blocks (direct_grid): 9 (2 blocks of 5 warps, one idle), 12 (2 of 6), 35 (5 of 7,
// one chunk each), 64 on 40 rows (8 of 8 for each of 3 tiles, the last partial); and 80 on 20,480
// columns (80 chunks; past kDirectMaxSplits, where every call is staged).
TEST_P(QmmTest, TokenResultIndependentOfBatch) {
  RZ_REQUIRE_GPU();
  const GgmlType t = GetParam();
  for (const auto& [rows, cols, split] : {std::tuple<int64_t, int64_t, int>{1536, 8960, 0},
                                          {1536, 8960, 9},
                                          {1536, 8960, 12},
                                          {1536, 8960, 35},
                                          {40, 16384, 64},
                                          {40, 20480, 80}}) {
    SCOPED_TRACE("[" + std::to_string(rows) + ", " + std::to_string(cols) + "] split " +
                 std::to_string(split));
    expect_token_independent(t, rows, cols, split);
  }
}

// One token runs the in-place direct kernel's one-token instantiation (qmm_direct_x1_kernel, x in
// shared memory) unless switched off; both must write the same bits, alone (here, at the rule's
// split and at forced splits in one block and in clusters) and against the same token among 8
// (TokenResultIndependentOfBatch, which runs it too).
TEST_P(QmmTest, OneTokenInstantiationMatchesThePlainKernel) {
  RZ_REQUIRE_GPU();
  const GgmlType t = GetParam();
  struct On {
    ~On() { qmm_detail::set_direct_x1(true); }
  } restore;
  for (const auto& [rows, cols, split] : {std::tuple<int64_t, int64_t, int>{1536, 8960, 0},
                                          {1536, 8960, 12},
                                          {4096, 4096, 0},
                                          {40, 1536, 3}}) {
    SCOPED_TRACE("[" + std::to_string(rows) + ", " + std::to_string(cols) + "] split " +
                 std::to_string(split));
    std::mt19937 rng(91);
    const HostWeights w = make_weights(t, rows, cols, rng);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(cols));
    for (auto& v : x) v = nd(rng);
    DeviceBuffer<uint8_t> dw(w.bytes.size());
    dw.upload(w.bytes);
    DeviceBuffer<float> dx(x.size());
    dx.upload(x);
    qmm_detail::set_direct_x1(true);
    const std::vector<float> x1 = run_qmm(t, dw, dx, rows, cols, 1, rows, split);
    qmm_detail::set_direct_x1(false);
    const std::vector<float> plain = run_qmm(t, dw, dx, rows, cols, 1, rows, split);
    EXPECT_EQ(std::memcmp(x1.data(), plain.data(), size_t(rows) * sizeof(float)), 0) << name_of(t);
  }
}

// The staged kernel's 64-token tiles with two row tiles a warp (the fp32 form; the B operands
// loaded once for both) and with one: the same bits, with and without K splits, at row counts
// that end inside a block's first and second row tile. 64 tokens run it on every device (the wide
// kernels take 65+ on sm_90 and the larger matrices' 33-64); without the wide kernel (before
// sm_90, or RZ_QMM_WIDE_OFF=1) also 130 and 256.
TEST_P(QmmTest, StagedRowTilesGiveTheSameBits) {
  RZ_REQUIRE_GPU();
  const GgmlType t = GetParam();
  struct On {
    ~On() { qmm_detail::set_staged_rows2(true); }
  } restore;
  std::vector<int64_t> counts = {64};
  if (!qmm_runs_wide(130)) counts.insert(counts.end(), {130, 256});
  for (const auto& [rows, cols, split] : {std::tuple<int64_t, int64_t, int>{100, 512, 0},
                                          {1000, 1536, 0},
                                          {1000, 1536, 3},
                                          {4096, 4096, 0}}) {
    std::mt19937 rng(97);
    const HostWeights w = make_weights(t, rows, cols, rng);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(256 * cols));
    for (auto& v : x) v = nd(rng);
    DeviceBuffer<uint8_t> dw(w.bytes.size());
    dw.upload(w.bytes);
    DeviceBuffer<float> dx(x.size());
    dx.upload(x);
    for (int64_t n : counts) {
      SCOPED_TRACE("[" + std::to_string(rows) + ", " + std::to_string(cols) + "] split " +
                   std::to_string(split) + ", " + std::to_string(n) + " tokens");
      qmm_detail::set_staged_rows2(true);
      const std::vector<float> two = run_qmm(t, dw, dx, rows, cols, n, rows, split);
      qmm_detail::set_staged_rows2(false);
      const std::vector<float> one = run_qmm(t, dw, dx, rows, cols, n, rows, split);
      EXPECT_EQ(std::memcmp(two.data(), one.data(), size_t(n * rows) * sizeof(float)), 0)
          << name_of(t);
    }
  }
}

// The wide kernel's blocks of one warpgroup and of two compute each row's sums alike (the same
// chunks in the same order, only the rows of a block differ): the same bits, at a row count that
// ends inside a block of two (and of one), with and without K splits, two token tiles.
TEST_P(QmmTest, WideGroupsGiveTheSameBits) {
  RZ_REQUIRE_GPU();
  if (!qmm_runs_wide(130)) GTEST_SKIP() << "no wide kernel on this device or build";
  const GgmlType t = GetParam();
  const int saved = qmm_detail::wide_groups_override();
  struct Restore {
    int v;
    ~Restore() { qmm_detail::wide_groups_override() = v; }
  } restore{saved};
  const int64_t rows = 200, cols = 1536, n = 130;
  std::mt19937 rng(93);
  const HostWeights w = make_weights(t, rows, cols, rng);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n * cols));
  for (auto& v : x) v = nd(rng);
  DeviceBuffer<uint8_t> dw(w.bytes.size());
  dw.upload(w.bytes);
  DeviceBuffer<float> dx(x.size());
  dx.upload(x);
  for (int split : {1, 3}) {
    qmm_detail::wide_groups_override() = 1;
    const std::vector<float> one = run_qmm(t, dw, dx, rows, cols, n, rows, split);
    qmm_detail::wide_groups_override() = 2;
    const std::vector<float> two = run_qmm(t, dw, dx, rows, cols, n, rows, split);
    EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0)
        << name_of(t) << " split " << split;
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, QmmTest, ::testing::ValuesIn(kTypes),
                         [](const ::testing::TestParamInfo<GgmlType>& i) {
                           return name_of(i.param);
                         });

// ---------------------------------------------------------------- bench (disabled)

constexpr int64_t kQmmMaxBenchWide = 256;  // the most tokens the wide kernel's benches run

// Weights for the benches: `copies` copies of a [rows, cols] matrix of type t (one random
// quantized 64-row block repeated), >= 512 MiB in all so that rotating over them keeps L2 from
// holding the one a call reads. bytes: one copy's.
struct RotatedWeights {
  size_t bytes = 0;
  int copies = 1;
  DeviceBuffer<uint8_t> dw;
  const uint8_t* copy(int i) const { return dw.get() + bytes * i; }
};
RotatedWeights rotated_weights(GgmlType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  RotatedWeights r;
  r.bytes = row_size(t, cols) * size_t(rows);
  r.copies = static_cast<int>(std::max<size_t>(1, (size_t(512) << 20) / r.bytes));
  r.dw = DeviceBuffer<uint8_t>(r.bytes * r.copies);
  const HostWeights w = make_weights(t, std::min<int64_t>(rows, 64), cols, rng);
  std::vector<uint8_t> host(r.bytes);
  for (size_t o = 0; o < r.bytes; o += w.bytes.size())
    std::memcpy(host.data() + o, w.bytes.data(), std::min(w.bytes.size(), r.bytes - o));
  for (int i = 0; i < r.copies; ++i)
    RZ_CUDA_CHECK(
        cudaMemcpy(r.dw.get() + r.bytes * i, host.data(), r.bytes, cudaMemcpyHostToDevice));
  return r;
}

// µs per call of fn(copy index) on the default stream: 3 calls to warm up, then the mean of 20,
// the copy rotating.
template <class F>
double bench_us(F&& fn, int copies) {
  return elem_test::mean_call_us([&](int i) { fn(i % copies); });
}

// The path qmm replaces past its rule, for the benches: x converted to fp16, then the matrix
// dequantized into slices of <= 64 Mi elements starting on 256-byte boundaries (as the executor
// does), each multiplied by cuBLAS: run(w, x, y, n, true). With dequantize false, cuBLAS on an fp16
// copy made beforehand (the executor's default where the copies fit): the slices of one copy, as
// many as the matrix has rows.
struct DequantCublas {
  GgmlType type;
  int64_t rows, cols, slice_rows;
  Gemm& gemm;
  DeviceBuffer<uint16_t> w16, x16;
  DequantCublas(GgmlType t, int64_t r, int64_t c, int64_t n_max, Gemm& g)
      : type(t),
        rows(r),
        cols(c),
        slice_rows(slice(t, r, c)),
        gemm(g),
        w16(size_t(slice_rows * c)),
        x16(size_t(n_max * c)) {}
  static int64_t slice(GgmlType t, int64_t r, int64_t c) {
    const int64_t align = 256 / std::gcd<int64_t>(int64_t(row_size(t, c)), 256);
    return std::min<int64_t>(r, (int64_t{64} << 20) / c / align * align);
  }
  void run(const uint8_t* w, const float* x, float* y, int64_t n, bool dequantize) {
    convert_to_half(x, x16.get(), HalfType::f16, n * cols, nullptr);
    for (int64_t r0 = 0; r0 < rows; r0 += slice_rows) {
      const int64_t nr = std::min(slice_rows, rows - r0);
      if (dequantize)
        dequantize_matrix(type, w + row_size(type, cols) * r0, w16.get(), HalfType::f16, nr, cols,
                          nullptr);
      gemm.matmul_x16(HalfType::f16, w16.get(), x16.get(), y + r0, nr, cols, n, rows);
    }
  }
};

// The direct kernel at n = 1 with each split count (past 8 in clusters of blocks; the chosen one
// marked), per shape: the data its split rule is tuned against. RZ_QMM_BENCH_ONLY filters as in
// DISABLED_Compare.
TEST(QmmBench, DISABLED_DirectSplits) {
  RZ_REQUIRE_GPU();
  const struct {
    const char* name;
    int64_t rows, cols;
  } shapes[] = {{"qwen1.5b attn_q/o", 1536, 1536},
                {"qwen1.5b ffn_gate/up", 8960, 1536},
                {"qwen1.5b ffn_down", 1536, 8960},
                {"qwen1.5b output", 151936, 1536},
                {"llama8b attn_q/o", 4096, 4096},
                {"llama8b ffn_gate/up", 14336, 4096},
                {"llama8b ffn_down", 4096, 14336},
                {"llama8b output", 128256, 4096},
                // the fused matrices a step runs (GpuLayerWeights): gate+up, QKV, [Q; K], V
                {"qwen1.5b gate+up", 17920, 1536},
                {"qwen1.5b qkv", 2048, 1536},
                {"qwen1.5b qk", 1792, 1536},
                {"qwen1.5b attn_v", 256, 1536},
                {"llama8b gate+up", 28672, 4096},
                {"llama8b qkv", 6144, 4096},
                {"llama8b qk", 5120, 4096},
                {"llama8b attn_v", 1024, 4096}};
  const char* only = std::getenv("RZ_QMM_BENCH_ONLY");
  std::mt19937 rng(2);
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q6_K}) {
    for (const auto& sh : shapes) {
      if (only && (name_of(t) + " " + sh.name).find(only) == std::string::npos) continue;
      const RotatedWeights rw = rotated_weights(t, sh.rows, sh.cols, rng);
      DeviceBuffer<uint16_t> xp(size_t(qmm_x_elems(1, sh.cols)));
      xp.fill_bytes(0);
      DeviceBuffer<float> y(size_t(sh.rows));
      qmm_detail::DirectBlocksPerSm b{};
      const int chosen = qmm_detail::direct_splits(t, sh.rows, sh.cols, &b);
      std::printf("%s %s [%lld, %lld]: blocks an SM of 1..8 warps", name_of(t).c_str(), sh.name,
                  (long long)sh.rows, (long long)sh.cols);
      for (int k = 1; k <= 8; ++k) std::printf(" %d", b[k]);
      std::printf("\n ");
      const int chunks = static_cast<int>(sh.cols / kQmmChunk);
      for (int sp = 1; sp <= 64 && sp <= chunks; ++sp) {
        const int per = (chunks + sp - 1) / sp;
        if ((chunks + per - 1) / per != sp) continue;  // qmm would run sp - 1
        const double us = bench_us(
            [&](int i) {
              qmm_detail::run(t, rw.copy(i), xp.get(), y.get(), sh.rows, sh.cols, 1, sh.rows,
                              nullptr, 0, sp, nullptr);
            },
            rw.copies);
        std::printf(" s%d%s %.1f us", sp, sp == chosen ? "*" : "", us);
      }
      std::printf("\n");
    }
  }
}

// The wide kernel's fp32 form (65-256 tokens, sm_90) per shape and token count, µs per call
// without prepare: one or two warpgroups a block (wide_groups_override) at each K split count
// (the rule's marked), against dequantize + cuBLAS: the data wide_groups and the path rule
// (gpu/matmul_path.cpp) are read from. RZ_QMM_BENCH_ONLY and RZ_QMM_BENCH_N as in DISABLED_Compare.
TEST(QmmBench, DISABLED_WideGroups) {
  RZ_REQUIRE_GPU();
  if (!qmm_runs_wide(kQmmMaxBenchWide)) GTEST_SKIP() << "no wide kernel on this device or build";
  const struct {
    const char* name;
    int64_t rows, cols;
  } shapes[] = {{"qwen1.5b qkv", 2048, 1536},      {"qwen1.5b attn_q/o", 1536, 1536},
                {"qwen1.5b gate+up", 17920, 1536}, {"qwen1.5b ffn_gate/up", 8960, 1536},
                {"qwen1.5b ffn_down", 1536, 8960}, {"llama8b qkv", 6144, 4096},
                {"llama8b attn_q/o", 4096, 4096},  {"llama8b ffn_down", 4096, 14336},
                {"llama8b gate+up", 28672, 4096}};
  std::vector<int64_t> token_counts = {65, 96, 128, 160, 192, 256};
  if (const char* ns = std::getenv("RZ_QMM_BENCH_N")) {
    token_counts.clear();
    for (int n : bench::parse_batches(ns))
      if (n >= qmm_detail::kWideMinTokens && n <= kQmmMaxBenchWide) token_counts.push_back(n);
  }
  const char* only = std::getenv("RZ_QMM_BENCH_ONLY");
  std::mt19937 rng(3);
  Gemm gemm(nullptr);
  const int saved = qmm_detail::wide_groups_override();
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q6_K}) {
    for (const auto& sh : shapes) {
      if (only && (name_of(t) + " " + sh.name).find(only) == std::string::npos) continue;
      const RotatedWeights rw = rotated_weights(t, sh.rows, sh.cols, rng);
      const int64_t n_max = kQmmMaxBenchWide, chunks = sh.cols / kQmmChunk;
      DeviceBuffer<float> dx(size_t(n_max * sh.cols)), dy(size_t(n_max * sh.rows));
      dx.fill_bytes(0);
      DeviceBuffer<uint16_t> xp(size_t(qmm_x_elems(n_max, sh.cols)));
      qmm_prepare_x(dx.get(), xp.get(), n_max, sh.cols, nullptr);
      const size_t ws_floats =
          size_t(chunks) * size_t(sh.rows * n_max) + 4 + qmm_detail::wide_x_floats(n_max, sh.cols);
      DeviceBuffer<float> ws(ws_floats);
      DequantCublas ref(t, sh.rows, sh.cols, n_max, gemm);
      const int rule_splits = qmm_detail::wide_splits(sh.rows, sh.cols, device_sm_count());
      std::printf("%s %s [%lld, %lld] %.1f MB, rule: splits %d\n", name_of(t).c_str(), sh.name,
                  (long long)sh.rows, (long long)sh.cols, rw.bytes / 1e6, rule_splits);
      for (int64_t n : token_counts) {
        qmm_detail::wide_groups_override() = 0;
        const int rule_groups =
            qmm_detail::wide_groups(sh.rows, sh.cols, n, rule_splits, device_sm_count());
        std::printf("  n %4lld (rule: %d group%s)", (long long)n, rule_groups,
                    rule_groups > 1 ? "s" : "");
        for (int g : {1, 2}) {
          qmm_detail::wide_groups_override() = g;
          std::printf("  wg%d", g);
          for (int sp : {1, 2, 3, 4, 6, 8}) {
            if (sp != rule_splits && sp > chunks / 2) continue;
            const int per = static_cast<int>((chunks + sp - 1) / sp);
            if ((chunks + per - 1) / per != sp) continue;
            const double us = bench_us(
                [&](int i) {
                  qmm_detail::run(t, rw.copy(i), xp.get(), dy.get(), sh.rows, sh.cols, n, sh.rows,
                                  ws.get(), ws_floats, sp, nullptr);
                },
                rw.copies);
            std::printf(" s%d%s %.1f", sp, sp == rule_splits ? "*" : "", us);
          }
        }
        qmm_detail::wide_groups_override() = saved;
        const double c =
            bench_us([&](int i) { ref.run(rw.copy(i), dx.get(), dy.get(), n, true); }, rw.copies);
        std::printf("  dequant+cublas %.1f us\n", c);
      }
      std::fflush(stdout);
    }
  }
  qmm_detail::wide_groups_override() = saved;
}

// Per shape and token count: µs per call of qmm (prepare included, and without it: in a step the
// producer of x writes the prepared form), gemv (n <= 16) and the
// dequantize + cuBLAS path the executor used before (x conversion included), with weights
// rotated over >= 512 MiB of copies so that L2 never holds them; GB/s of the weight bytes.
TEST(QmmBench, DISABLED_Compare) {
  RZ_REQUIRE_GPU();
  struct Shape {
    const char* name;
    int64_t rows, cols;
  };
  const Shape shapes[] = {{"qwen1.5b attn_q/o", 1536, 1536},    {"qwen1.5b attn_k/v", 256, 1536},
                          {"qwen1.5b ffn_gate/up", 8960, 1536}, {"qwen1.5b ffn_down", 1536, 8960},
                          {"qwen1.5b output", 151936, 1536},    {"llama8b attn_q/o", 4096, 4096},
                          {"llama8b ffn_gate/up", 14336, 4096}, {"llama8b ffn_down", 4096, 14336},
                          {"llama8b attn_k/v", 1024, 4096},     {"llama8b output", 128256, 4096},
                          {"llama8b gate+up", 28672, 4096}};  // the fused matrix a step runs
  const int64_t n_max = 512;
  // RZ_QMM_BENCH_N="16,32" runs only those token counts (rz bench's --batches syntax; those
  // above n_max are left out)
  std::vector<int64_t> token_counts = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
  if (const char* ns = std::getenv("RZ_QMM_BENCH_N")) {
    token_counts.clear();
    for (int n : bench::parse_batches(ns))
      if (n <= n_max) token_counts.push_back(n);
  }
  cudaStream_t stream = nullptr;
  Gemm gemm(stream);
  std::mt19937 rng(1);
  // RZ_QMM_BENCH_ONLY="Q4_K llama8b ffn_gate/up" (a substring of "TYPE SHAPE") runs only those
  // (e.g. under a profiler)
  const char* only = std::getenv("RZ_QMM_BENCH_ONLY");
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::Q4_0,
                     GgmlType::Q3_K, GgmlType::Q2_K, GgmlType::IQ4_XS}) {
    for (const Shape& sh : shapes) {
      if (only && (name_of(t) + " " + sh.name).find(only) == std::string::npos) continue;
      const RotatedWeights rw = rotated_weights(t, sh.rows, sh.cols, rng);
      const size_t bytes = rw.bytes;
      DeviceBuffer<float> dx(size_t(n_max * sh.cols)), dy(size_t(n_max * sh.rows));
      dx.fill_bytes(0);
      DeviceBuffer<uint16_t> xp(size_t(qmm_x_elems(n_max, sh.cols)));
      const size_t ws_floats = qmm_workspace_floats(sh.rows, sh.cols, n_max);
      DeviceBuffer<float> ws(std::max<size_t>(ws_floats, 1));
      DequantCublas ref(t, sh.rows, sh.cols, n_max, gemm);
      auto time_us = [&](auto&& fn) { return bench_us(fn, rw.copies); };
      std::printf("%s %s [%lld, %lld] %.1f MB, splits %d\n", name_of(t).c_str(), sh.name,
                  (long long)sh.rows, (long long)sh.cols, bytes / 1e6,
                  qmm_splits(sh.rows, sh.cols));
      for (int64_t n : token_counts) {
        const double q = time_us([&](int i) {
          qmm_prepare_x(dx.get(), xp.get(), n, sh.cols, stream);
          qmm(t, rw.copy(i), xp.get(), dy.get(), sh.rows, sh.cols, n, sh.rows, ws.get(), ws_floats,
              stream);
        });
        qmm_prepare_x(dx.get(), xp.get(), n, sh.cols, stream);
        const double q_only = time_us([&](int i) {  // x prepared by its producer, as in a step
          qmm(t, rw.copy(i), xp.get(), dy.get(), sh.rows, sh.cols, n, sh.rows, ws.get(), ws_floats,
              stream);
        });
        double g = 0;
        if (n <= kGemvMaxBatch)
          g = time_us([&](int i) {
            gemv(t, rw.copy(i), dx.get(), dy.get(), sh.rows, sh.cols, int(n), stream);
          });
        const double c = time_us([&](int i) { ref.run(rw.copy(i), dx.get(), dy.get(), n, true); });
        const double f = time_us([&](int i) { ref.run(rw.copy(i), dx.get(), dy.get(), n, false); });
        std::printf(
            "  n %4lld  qmm %8.1f us (%6.0f GB/s, %5.0f TFLOP/s)  without prepare %8.1f (%6.0f "
            "GB/s)  gemv %8.1f (%6.0f GB/s)  dequant+cublas %8.1f  cublas on fp16 %8.1f\n",
            (long long)n, q, bytes / q / 1e3, 2.0 * sh.rows * sh.cols * n / q / 1e6, q_only,
            bytes / q_only / 1e3, g, g > 0 ? bytes / g / 1e3 : 0.0, c, f);
      }
      std::fflush(stdout);
    }
  }
}

}  // namespace
}  // namespace rz::gpu
