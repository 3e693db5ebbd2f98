// qmm_gated (kernels/qmm.hpp): the fused [gate; up] matmul gated in qmm's direct kernel must write
// bit for bit what qmm and then swiglu_rows write, the output and both forms it writes (f16, and
// qmm's with its zero pad rows), for each activation and token count it takes; and decline (false,
// nothing launched) where it does not apply.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "formats/common.hpp"
#include "gpu/cuda_check.hpp"
#include "gpu/device_buffer.hpp"
#include "gpu/test_support.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/qmm.hpp"
#include "kernels/swiglu_rows.hpp"
#include "tests/gpu/quant_weights_util.hpp"

namespace rz::gpu {
namespace qmm_detail {  // kernels/qmm.cu
void run(GgmlType type, const void* w, const void* xp, float* y, int64_t rows, int64_t cols,
         int64_t n, int64_t ldy, float* ws, size_t ws_floats, int splits, cudaStream_t stream);
int gated_splits(GgmlType type, int64_t ff, int64_t cols, int64_t n);
using DirectBlocksPerSm = std::array<int, 9>;  // [w]: blocks of w warps an SM holds
int choose_gated_splits(int64_t ff, int64_t cols, int sms, const DirectBlocksPerSm& blocks);
}  // namespace qmm_detail
namespace {

std::string name_of(GgmlType t) { return std::string(type_traits(t).name); }

struct Outputs {
  std::vector<float> out;
  std::vector<uint16_t> f16, qmm;
};

struct GatedCase {
  GgmlType type;
  int64_t ff, cols;
};

// [gate; up] weights of 2 ff rows and n tokens of x, run both ways.
class Gated {
 public:
  Gated(const GatedCase& c, int64_t n_max, unsigned seed) : c_(c) {
    std::mt19937 rng(seed);
    const test_util::HostWeights w = test_util::make_weights(c.type, 2 * c.ff, c.cols, rng);
    dw_ = DeviceBuffer<uint8_t>(w.bytes.size());
    dw_.upload(w.bytes);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(size_t(n_max * c.cols));
    for (auto& v : x) v = nd(rng);
    dx_ = DeviceBuffer<float>(x.size());
    dx_.upload(x);
  }

  // Sentinel-filled outputs (0xff: NaN / a half NaN), then the call; n tokens.
  Outputs run(int64_t n, GateAct act, bool gated, bool* ran = nullptr) const {
    DeviceBuffer<uint16_t> xp(size_t(qmm_x_elems(n, c_.cols)));
    qmm_prepare_x(dx_.get(), xp.get(), n, c_.cols, nullptr);
    DeviceBuffer<float> out(size_t(n * c_.ff));
    DeviceBuffer<uint16_t> f16(size_t(n * c_.ff)), fq(size_t(qmm_x_elems(n, c_.ff)));
    out.fill_bytes(0xff);
    f16.fill_bytes(0xff);
    fq.fill_bytes(0xff);
    ActForms forms;
    forms.f16 = f16.get();
    forms.qmm = fq.get();
    if (gated) {
      const bool r = qmm_gated(c_.type, dw_.get(), xp.get(), out.get(), c_.ff, c_.cols, n, act,
                               forms, nullptr);
      if (ran) *ran = r;
    } else {
      // qmm at the splits the gated kernel takes (its own where its one-wave rule applies)
      DeviceBuffer<float> gu(size_t(n * 2 * c_.ff));
      const size_t ws_floats = qmm_workspace_floats(2 * c_.ff, c_.cols, n);
      DeviceBuffer<float> ws(std::max<size_t>(ws_floats, 1));
      qmm_detail::run(c_.type, dw_.get(), xp.get(), gu.get(), 2 * c_.ff, c_.cols, n, 2 * c_.ff,
                      ws.get(), ws_floats, qmm_detail::gated_splits(c_.type, c_.ff, c_.cols, n),
                      nullptr);
      swiglu_rows(gu.get(), out.get(), n, c_.ff, nullptr, forms, act);
      RZ_CUDA_CHECK(cudaDeviceSynchronize());
    }
    RZ_CUDA_CHECK(cudaDeviceSynchronize());
    return {out.download(), f16.download(), fq.download()};
  }

 private:
  GatedCase c_;
  DeviceBuffer<uint8_t> dw_;
  DeviceBuffer<float> dx_;
};

template <class V>
bool same_bits(const V& a, const V& b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(typename V::value_type)) == 0;
}

TEST(QmmGated, MatchesQmmThenSwigluRowsBitForBit) {
  RZ_REQUIRE_GPU();
  // qwen2.5-1.5b's gate/up (8960 x 1536: on an H200 one split, one block of two warps, one wave,
  // up to 8 tokens),
  // llama3.1-8b's (14336 x 4096: qmm's 2 splits, one block), and a small one (2 chunks: at most 2
  // splits on any device) in each in-place format
  const GatedCase cases[] = {{GgmlType::Q4_K, 8960, 1536}, {GgmlType::Q4_K, 14336, 4096},
                             {GgmlType::Q4_K, 256, 512},   {GgmlType::Q5_K, 256, 512},
                             {GgmlType::Q8_0, 256, 512},   {GgmlType::Q4_0, 256, 512},
                             {GgmlType::IQ4_XS, 256, 512}};
  int ran_any = 0;
  for (const GatedCase& c : cases) {
    const Gated g(c, 16, 11);
    for (int64_t n : {1, 3, 8, 9, 16}) {
      for (GateAct act : {GateAct::silu, GateAct::gelu_tanh}) {
        SCOPED_TRACE(name_of(c.type) + " ff " + std::to_string(c.ff) + " cols " +
                     std::to_string(c.cols) + " n " + std::to_string(n) +
                     (act == GateAct::silu ? " silu" : " gelu_tanh"));
        bool ran = false;
        const Outputs got = g.run(n, act, true, &ran);
        EXPECT_EQ(ran, qmm_gated_runs(c.type, c.ff, c.cols, n));
        if (!ran) continue;
        ++ran_any;
        const Outputs want = g.run(n, act, false);
        EXPECT_TRUE(same_bits(got.out, want.out)) << "output";
        EXPECT_TRUE(same_bits(got.f16, want.f16)) << "f16 form";
        EXPECT_TRUE(same_bits(got.qmm, want.qmm)) << "qmm form (pad rows included)";
      }
    }
  }
  // llama3.1-8b's gate/up runs gated up to 8 tokens; the small matrices at every count
  EXPECT_TRUE(qmm_gated_runs(GgmlType::Q4_K, 14336, 4096, 1));
  EXPECT_TRUE(qmm_gated_runs(GgmlType::Q4_K, 256, 512, 16));
  EXPECT_GE(ran_any, 2 * (3 + 5 * 5));
  // qwen2.5-1.5b's at one split in one wave up to 8 tokens, on a device of the H200's size (not at
  // 9-16: qmm's 3 splits there, unfused)
  if (device_sm_count() >= 132) {
    EXPECT_EQ(qmm_detail::gated_splits(GgmlType::Q4_K, 8960, 1536, 1), 1);
    EXPECT_EQ(qmm_detail::gated_splits(GgmlType::Q4_K, 8960, 1536, 8), 1);
    EXPECT_EQ(ran_any, 2 * (3 + 5 * 5 + 3));
  }
}

// The gated kernel's own splits (choose_gated_splits): the fewest, in one block of both halves'
// warps, that fit every tile pair in one wave with at most 8 chunks a warp; 0 (qmm's splits then)
// where none does.
TEST(QmmChooser, GatedOneWaveRule) {
  const int h200 = 132;
  const qmm_detail::DirectBlocksPerSm r128 = {0, 16, 8, 5, 4, 3, 2, 2, 2};  // 128 registers
  // qwen2.5-1.5b: 560 blocks of two warps (one split of 6 chunks) in 8 x 132 slots
  EXPECT_EQ(qmm_detail::choose_gated_splits(8960, 1536, h200, r128), 1);
  // llama3.1-8b: one split is 16 chunks a warp (over the cap); two, 896 blocks of four warps in
  // 4 x 132: two waves, so none (qmm's 2 splits in one block)
  EXPECT_EQ(qmm_detail::choose_gated_splits(14336, 4096, h200, r128), 0);
  // 4 chunks: one split fits (1,024 tiles in 1,056 slots); on 66 SMs two splits do not either
  EXPECT_EQ(qmm_detail::choose_gated_splits(16384, 1024, h200, r128), 1);
  EXPECT_EQ(qmm_detail::choose_gated_splits(16384, 1024, 66, r128), 0);
  // 12 chunks: one split is over the cap; two of 6 in blocks of four warps, 256 tiles in 528
  EXPECT_EQ(qmm_detail::choose_gated_splits(4096, 3072, h200, r128), 2);
  EXPECT_EQ(qmm_detail::choose_gated_splits(256, 512, h200, r128), 1);
  const qmm_detail::DirectBlocksPerSm none = {};  // no occupancy: nothing fits
  EXPECT_EQ(qmm_detail::choose_gated_splits(256, 512, h200, none), 0);
}

TEST(QmmGated, DeclinesWhereItDoesNotApply) {
  RZ_REQUIRE_GPU();
  EXPECT_TRUE(qmm_gated_runs(GgmlType::Q4_K, 14336, 4096, 1));
  EXPECT_FALSE(qmm_gated_runs(GgmlType::Q4_K, 8960, 1536, 9));   // one wave or a pair: slower
  EXPECT_FALSE(qmm_gated_runs(GgmlType::Q6_K, 14336, 4096, 1));  // stages its chunks
  EXPECT_FALSE(qmm_gated_runs(GgmlType::Q4_K, 14336, 4096, 9));  // 9-16: the staged kernel's
  EXPECT_FALSE(qmm_gated_runs(GgmlType::Q4_K, 256, 512, 17));    // the staged kernel's
  EXPECT_FALSE(qmm_gated_runs(GgmlType::Q4_K, 14344, 4096, 1));  // a tile across gate and up
  EXPECT_FALSE(qmm_gated_runs(GgmlType::F16, 14336, 4096, 1));
  EXPECT_FALSE(qmm_gated_runs(GgmlType::Q4_K, 14336, 4096, 0));
  // a q8 form it cannot write: false, and nothing written
  const Gated g({GgmlType::Q4_K, 256, 512}, 1, 3);
  DeviceBuffer<uint16_t> xp(size_t(qmm_x_elems(1, 512)));
  DeviceBuffer<float> out(256);
  DeviceBuffer<uint8_t> q8(4096);
  out.fill_bytes(0xff);
  ActForms forms;
  forms.q8 = q8.get();
  EXPECT_FALSE(qmm_gated(GgmlType::Q4_K, xp.get(), xp.get(), out.get(), 256, 512, 1, GateAct::silu,
                         forms, nullptr));
  RZ_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> o = out.download();
  std::vector<float> nan(256);
  std::memset(nan.data(), 0xff, nan.size() * sizeof(float));
  EXPECT_TRUE(same_bits(o, nan));
  // a null pointer where it would run
  EXPECT_THROW(qmm_gated(GgmlType::Q4_K, nullptr, xp.get(), out.get(), 256, 512, 1, GateAct::silu,
                         ActForms{}, nullptr),
               rz::Error);
}

}  // namespace
}  // namespace rz::gpu
