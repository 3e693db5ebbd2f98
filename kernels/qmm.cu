// qmm (kernels/qmm.hpp): quantized weights × fp16 activations on tensor cores. Design notes and
// measurements: kernels/QMM.md.
//
// One mma.sync m16n8k16 multiplies 16 weight rows by 8 tokens over 16 columns ("k-slots"). Thread
// (g = lane / 4, c = lane % 4) holds, of A, rows g and g + 8 at k-slots {2c, 2c+1, 2c+8, 2c+9}
// and, of B, token g at the same four k-slots. A dot product may visit the columns in any order,
// so k-slot s of step t (0..15) of a 256-column chunk stands for column
//   col(t, c, e) = 64 c + 32 (t & 1) + 4 (t >> 1) + e,    s = {2c, 2c+1, 2c+8, 2c+9}[e]
// for every row and every token alike: thread c owns the contiguous columns [64 c, 64 c + 64)
// of each chunk, which in every supported format are a run of whole bytes (Q4_K: qs[32 c, +32)),
// so its weight loads are wide. qmm_prepare_x writes x in (t, c, e) order, so that the B operand
// of step t is 8 consecutive bytes.
#include "kernels/launch.cuh"
#include "kernels/qmm.hpp"

#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>

#include "formats/common.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/cuda_common.cuh"
#include "kernels/gate_act.cuh"
#include "kernels/mma.cuh"
#include "kernels/qmm_chunk.cuh"
#include "kernels/qmm_direct.cuh"
#include "kernels/qmm_formats.cuh"
#include "kernels/qmm_layout.cuh"
#include "kernels/qmm_stage.cuh"
#include "kernels/qmm_staged.cuh"
#include "kernels/qmm_wide.hpp"

namespace rz::gpu {
namespace qmm_detail {

// y[t, r] = sum over s < splits of ws[s][t][r], in order of s.
__global__ void qmm_reduce_kernel(const float* __restrict__ ws, float* __restrict__ y, int64_t ldy,
                                  int rows, int n, int splits) {
  grid_dependency_wait();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(rows) * n) return;
  const int64_t t = i / rows, r = i % rows;
  float s = ws[i];
  for (int z = 1; z < splits; ++z) s += ws[int64_t(z) * rows * n + i];
  y[t * ldy + r] = s;
}

// Thread per (token row, chunk, t, c): the 4 columns chunk_col(t, c, 0..3), rounded to fp16.
__global__ void prepare_x_kernel(const float* __restrict__ x, __half* __restrict__ xp, int n,
                                 int n8, int cols) {
  grid_dependency_wait();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // quad index
  const int quads = cols / 4;
  if (i >= int64_t(n8) * quads) return;
  const int tok = static_cast<int>(i / quads), q = static_cast<int>(i % quads);
  const int chunk = q / 64, t = (q % 64) / 4, c = q % 4;
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
  if (tok < n)
    v = __ldg(reinterpret_cast<const float4*>(x + int64_t(tok) * cols + chunk * kQmmChunk +
                                              chunk_col(t, c, 0)));
  reinterpret_cast<uint2*>(xp)[i] = pack_half4(v);
}

// The direct kernel that runs T: each warp staging its own chunks (kDirectStaged), or loading
// them in place. Its dynamic shared memory for a block of `splits` warps' splits.
template <class T, int NT, bool kX1 = false>
auto direct_kernel() {
  if constexpr (DirectStaged<T>)
    return qmm_direct_staged_kernel<T, NT>;
  else if constexpr (kX1)
    return qmm_direct_x1_kernel<T, direct_group<T>()>;
  else
    return qmm_direct_kernel<T, direct_group<T>(), NT>;
}
template <class T, int NT>
size_t direct_smem(int splits, int warps) {  // warps: the block's (direct_grid)
  if constexpr (DirectStaged<T>)
    return direct_staged_smem<T>(splits, warps, NT);
  else
    return direct_part_smem(splits, NT);
}
// Whether the environment turns an A/B switch off (its variable set to "1").
bool env_off(const char* name) {
  const char* v = std::getenv(name);
  return v && std::string(v) == "1";
}
// The in-place kernel of one token tile: the one-token instantiation where x goes to shared
// memory (xs > 0: one token), unless RZ_QMM_X1_OFF=1 or set_direct_x1(false).
std::atomic<bool>& direct_x1_switch() {
  static std::atomic<bool> on{!env_off("RZ_QMM_X1_OFF")};
  return on;
}
void set_direct_x1(bool on) { direct_x1_switch().store(on, std::memory_order_relaxed); }
template <class T>
auto direct_kernel1(size_t xs) {
  return xs > 0 && direct_x1_switch().load(std::memory_order_relaxed) ? direct_kernel<T, 1, true>()
                                                                      : direct_kernel<T, 1>();
}

// The staged kernel's 64-token tiles of the fp32 form take two row tiles a warp (qmm_kernel's
// RT = 2: each B operand loaded from the stage once for both), unless RZ_QMM_ROWS2_OFF=1 or
// set_staged_rows2(false) (A/B runs, tests: the sums are the same either way).
std::atomic<bool>& staged_rows2_switch() {
  static std::atomic<bool> on{!env_off("RZ_QMM_ROWS2_OFF")};
  return on;
}
void set_staged_rows2(bool on) { staged_rows2_switch().store(on, std::memory_order_relaxed); }

// The staged kernel's row tiles a warp for 64-token tiles (1 or 2), from its waves: a grid of
// row blocks x token tiles x splits blocks takes ceil(blocks / slots) waves, slots[rt] the blocks
// of RT = rt the device holds at once (two an SM on the H200 either way); a wave of two-tile
// blocks costs kRows2Wave of two waves of one-tile blocks. Measured (H200 without the wide kernel,
// QmmBench.DISABLED_Compare, Q4_K, us at 64 / 128 / 256 tokens, one -> two row tiles,
// bench/gpu-runs/2026-11-29-h200-staged-rows2.log): where both fill several waves two tiles save
// 10-14 % (llama8b's output 1,322 -> 1,143 at 256, qwen1.5b's 603 -> 525, llama8b gate+up 302 ->
// 272), but halving the blocks of a grid that fills one wave or a few costs a wave's worth (qwen's
// attn_q/o, 96 blocks at 256 tokens, 12.0 -> 22.9; its ffn_gate/up at 256, 560 blocks in 2.1 waves
// against 280 in 1.06, 46.1 -> 51.3, but at 128 34.8 -> 31.6). With 1.6 the model picks the
// faster of the two in 32 of the 33 measured calls (the other: llama8b's ffn_down at 128 tokens,
// 91.9 against 90.9, a tie); 1.5-1.6 do that, 1.7 misses one more, 1.8 five.
constexpr double kRows2Wave = 1.6;
int staged_row_tiles(int64_t rows, int64_t tiles8, int64_t splits,
                     const std::array<int, 3>& slots) {
  const int64_t token_tiles = (tiles8 + 7) / 8;
  const auto waves = [&](int rt) {
    const int64_t blocks = (rows + int64_t(kRowsPerBlock) * rt - 1) /
                           (int64_t(kRowsPerBlock) * rt) * token_tiles * splits;
    const int64_t per = std::max(1, slots[rt]);
    return double((blocks + per - 1) / per);
  };
  return slots[2] > 0 && kRows2Wave * waves(2) < waves(1) ? 2 : 1;
}
// slots[rt] for T's 64-token tiles of the fp32 form (2 stages), once per type.
template <class T>
const std::array<int, 3>& staged_tile64_slots() {
  static const std::array<int, 3> slots = [] {
    std::array<int, 3> r{};
    if constexpr (!staged_int<T, 8>()) {
      constexpr int smem1 = 2 * stage_bytes<T, 8, 1>(), smem2 = 2 * stage_bytes<T, 8, 2>();
      RZ_CUDA_CHECK(cudaFuncSetAttribute(qmm_kernel<T, 8, 2, 1>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, smem1));
      RZ_CUDA_CHECK(cudaFuncSetAttribute(qmm_kernel<T, 8, 2, 2>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, smem2));
      RZ_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&r[1], qmm_kernel<T, 8, 2, 1>,
                                                                  kWarps * 32, smem1));
      RZ_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&r[2], qmm_kernel<T, 8, 2, 2>,
                                                                  kWarps * 32, smem2));
      r[1] *= device_sm_count();
      r[2] *= device_sm_count();
    }
    return r;
  }();
  return slots;
}

// Once per process (one device model): the kernels' shared-memory limit raised to what the most
// splits and (in place) x in shared memory take, and how many blocks of 1..kDirectMaxWarps
// warps of the one-tile kernel an SM holds (the split rule's input, so that it follows the
// kernel's registers and shared memory; the two-tile kernel takes the same splits, so that a
// token's sums do not depend on the tile count).
template <class T>
const DirectBlocksPerSm& direct_setup() {
  static const DirectBlocksPerSm table = [] {
    const size_t xs = DirectStaged<T> ? 0 : kDirectXsMax;  // direct_x: the in-place kernel only
    RZ_CUDA_CHECK(cudaFuncSetAttribute(
        direct_kernel<T, 1>(), cudaFuncAttributeMaxDynamicSharedMemorySize,
        static_cast<int>(direct_smem<T, 1>(kDirectMaxSplits, kDirectMaxWarps) + xs)));
    RZ_CUDA_CHECK(cudaFuncSetAttribute(
        direct_kernel<T, 2>(), cudaFuncAttributeMaxDynamicSharedMemorySize,
        static_cast<int>(direct_smem<T, 2>(kDirectMaxSplits, kDirectMaxWarps) + xs)));
    if constexpr (!DirectStaged<T>)
      RZ_CUDA_CHECK(cudaFuncSetAttribute(
          direct_kernel<T, 1, true>(), cudaFuncAttributeMaxDynamicSharedMemorySize,
          static_cast<int>(direct_smem<T, 1>(kDirectMaxSplits, kDirectMaxWarps) + xs)));
    DirectBlocksPerSm b{};
    for (int w = 1; w <= kDirectMaxWarps; ++w)
      RZ_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b[w], direct_kernel<T, 1>(),
                                                                  32 * w, direct_smem<T, 1>(w, w)));
    return b;
  }();
  return table;
}

// out, ld: where the staged kernel writes (y itself, or the split workspace); the direct kernel
// adds its splits itself and writes y [n, ldy]. splits 0 (direct calls only): the direct kernel's
// own rule.
template <class T>
void launch(const void* w, int64_t row_bytes, const void* xp, float* out, int64_t ld, float* y,
            int64_t ldy, int rows, int cols, int n, int splits, bool direct, cudaStream_t stream) {
  const int chunks = cols / kQmmChunk;
  if (direct) {  // one or two token tiles: a direct kernel, no block staging
    const DirectBlocksPerSm& blocks = direct_setup<T>();
    const bool clusters = device_supports_clusters();
    if (splits == 0) splits = choose_direct_splits(rows, cols, device_sm_count(), blocks, clusters);
    const int per_split = (chunks + splits - 1) / splits;
    const DirectGrid dg = direct_grid(splits, clusters);
    const size_t xs = !DirectStaged<T> && n <= kDirectXsTokens ? direct_xs_bytes(n, cols) : 0;
    const auto go = [&](auto kernel, size_t smem) {
      launch_kernel_clusters(
          kernel, static_cast<unsigned>((rows + 15) / 16 * dg.cluster), dg.warps * 32, smem + xs,
          stream, static_cast<unsigned>(dg.cluster), static_cast<const uint8_t*>(w), row_bytes,
          static_cast<const __half*>(xp), y, ldy, rows, cols, n, per_split, splits, dg.cluster,
          static_cast<int>(xs), 0, GateAct::silu, ActForms{});
    };
    if (n <= 8)
      go(direct_kernel1<T>(xs), direct_smem<T, 1>(splits, dg.warps));
    else
      go(direct_kernel<T, 2>(), direct_smem<T, 2>(splits, dg.warps));
    RZ_CUDA_CHECK_LAUNCH();
    return;
  }
  const int per_split = (chunks + splits - 1) / splits;
  const int tiles8 = (n + 7) / 8;
  const int nt = staged_nt(n);
  // 64-token tiles of the fp32 form: two row tiles a warp where the rule models it faster
  bool rows2 = false;
  if constexpr (!staged_int<T, 8>())
    rows2 = nt == 8 && staged_rows2_switch().load(std::memory_order_relaxed) &&
            staged_row_tiles(rows, tiles8, (chunks + per_split - 1) / per_split,
                             staged_tile64_slots<T>()) == 2;
  const int block_rows = kRowsPerBlock * (rows2 ? 2 : 1);
  const dim3 grid((tiles8 + nt - 1) / nt, (rows + block_rows - 1) / block_rows,
                  (chunks + per_split - 1) / per_split);
  const auto* wp = static_cast<const uint8_t*>(w);
  const auto* x = static_cast<const __half*>(xp);
  using Kernel =
      void (*)(const uint8_t*, int64_t, const __half*, float*, int64_t, int, int, int, int);
  struct Variant {
    Kernel kernel;
    int smem;
  };
  // [tile index][deep]: NT = 1, 2, 4, 8 tokens x 8; 2 or 4 stages (8: always 2).
  static const Variant variants[4][2] = {{{qmm_kernel<T, 1, 2>, 2 * stage_bytes<T, 1>()},
                                          {qmm_kernel<T, 1, 4>, 4 * stage_bytes<T, 1>()}},
                                         {{qmm_kernel<T, 2, 2>, 2 * stage_bytes<T, 2>()},
                                          {qmm_kernel<T, 2, 4>, 4 * stage_bytes<T, 2>()}},
                                         {{qmm_kernel<T, 4, 2>, 2 * stage_bytes<T, 4>()},
                                          {qmm_kernel<T, 4, 4>, 4 * stage_bytes<T, 4>()}},
                                         {{qmm_kernel<T, 8, 2>, 2 * stage_bytes<T, 8>()},
                                          {qmm_kernel<T, 8, 2>, 2 * stage_bytes<T, 8>()}}};
  // Shared memory above 48 KiB must be allowed per kernel, once (not a stream operation, so
  // also fine while a stream is being captured).
  static const bool configured = [] {
    for (const auto& row : variants)
      for (const Variant& v : row)
        RZ_CUDA_CHECK(
            cudaFuncSetAttribute(v.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, v.smem));
    return true;
  }();
  (void)configured;
  if constexpr (!staged_int<T, 8>()) {
    if (rows2) {  // (staged_tile64_slots allowed its shared memory)
      constexpr int smem = 2 * stage_bytes<T, 8, 2>();
      launch_kernel(qmm_kernel<T, 8, 2, 2>, grid, kWarps * 32, smem, stream, wp, row_bytes, x, out,
                    ld, rows, cols, n, per_split);
      RZ_CUDA_CHECK_LAUNCH();
      return;
    }
  }
  const bool deep = int64_t(grid.x) * grid.y * grid.z < device_sm_count();
  const Variant& v = variants[nt == 1 ? 0 : nt == 2 ? 1 : nt == 4 ? 2 : 3][deep ? 1 : 0];
  launch_kernel(v.kernel, grid, kWarps * 32, v.smem, stream, wp, row_bytes, x, out, ld, rows, cols,
                n, per_split);
  RZ_CUDA_CHECK_LAUNCH();
}

// The direct kernel's splits: among the counts s (1..kDirectMaxWarps, and to kDirectMaxSplits in
// clusters where the device has them; no split empty) that leave a warp at most kDirectMaxRun
// chunks where that is possible, the one with the least modelled time, ceil(tiles x cluster /
// (blocks[warps] x sms)) waves of ceil(chunks / s) + 1 chunk rounds each (a warp's chunks run one
// after another at a latency-bound pace, and its first loads and its end cost about one more),
// plus half a round for a cluster's barrier and remote sums; ties go to fewer splits.
// blocks[w]: the blocks of w warps an SM holds (kernels/QMM.md, "Split rule"). Where the tiles
// are few it fills the machine (a 1536 x 1536 matrix's 96 tiles took 7.7 us with one split: six
// chunks one after another in each warp; qwen2.5-1.5b's 1536 x 8960 ffn_down, 96 tiles of 35
// chunks, takes 12 splits in clusters of two blocks instead of 7 in one: Q6_K 11.8 -> 9.3 us).
// The cap is measured, not modelled: llama8b's output (8,016 tiles of 16 chunks) ran in 134 us
// with one split against 111 with two, though the waves favour one
// (QmmBench.DISABLED_DirectSplits).
constexpr int kDirectMaxRun = 8;

int choose_direct_splits(int64_t rows, int64_t cols, int sms, const DirectBlocksPerSm& blocks,
                         bool clusters) {
  const int64_t tiles = (rows + 15) / 16, chunks = cols / kQmmChunk;
  const int64_t max_run =
      std::max<int64_t>(kDirectMaxRun, (chunks + kDirectMaxWarps - 1) / kDirectMaxWarps);
  const int max_splits = clusters ? kDirectMaxSplits : kDirectMaxWarps;
  int best = 1;
  int64_t best_time = INT64_MAX;
  for (int s = 1; s <= max_splits && s <= chunks; ++s) {
    const int64_t per = (chunks + s - 1) / s;
    if ((chunks + per - 1) / per != s) continue;  // an empty split: s - 1 does the same
    if (per > max_run) continue;
    const DirectGrid dg = direct_grid(s, clusters);
    const int64_t slots = std::max(1, blocks[dg.warps]) * int64_t(std::max(1, sms));
    const int64_t half_rounds =
        2 * ((tiles * dg.cluster + slots - 1) / slots) * (per + 1) + (dg.cluster > 1 ? 1 : 0);
    if (half_rounds < best_time) best = s, best_time = half_rounds;
  }
  return best;
}

// How the gated kernel runs the fused [gate; up] matrix of 2 ff rows for n tokens (an in-place
// format): first, up to 8 tokens, where one block of both halves' warps at the fewest splits puts
// every tile pair in one wave (choose_gated_splits), that; else with the splits qmm's direct kernel
// takes for the fused matrix in one block (at most kGatedMaxWarps warps), or (one token tile, on a
// device with clusters) as a pair of blocks, the gate tile's and the up tile's, in a cluster;
// splits 0 where it does not run. Measured on the H200 (rz bench, alternating in one build): one
// block for llama3.1-8b's gate/up (2 splits, 4 warps): tg128 +3.8 %, B = 4 +2.4 % against the
// unfused path (bench/gpu-runs/2026-11-28-h200-qmm-gated.log; as a pair -1 to -2 %); qwen2.5-1.5b's
// at qmm's 3 splits in one block of 6 warps was slower than unfused (-2 % at B = 1, -4 to -6 % at B
// = 4 and 16), as a pair tg128 +2.5-3.2 %, B = 4 +2.3 %
// (bench/gpu-runs/2026-11-28-h200-qmm-gated-pairs.log), and at one split in one block of two warps
// (one wave) tg128 +3 % over the pair, B = 1 +3 %, B = 4 +2 %, but at 9-16 tokens (two token tiles,
// against qmm's 3 splits unfused) -2 to -5 %, so up to 8 tokens
// (bench/gpu-runs/2026-11-29-h200-gated-wave.log; two splits as a pair were level with three at B =
// 1, and llama's one split 2.5 % slower than its two, 2026-11-29-h200-gated-splits.log).
constexpr int kGatedMaxWarps = 4;
// The gated kernel's own splits: the fewest s (a block of 2 s <= kGatedMaxWarps warps, no split
// empty, at most kDirectMaxRun chunks a warp) whose ff / 16 blocks fit one wave (blocks[2 s] a SM);
// 0 where none does. qmm's rule models the fused matrix's 2 ff / 16 tiles as if each were a block,
// which put qwen2.5-1.5b's [gate; up] at 3 splits, 1,120 blocks of 3 warps in clusters of two: 1.7
// waves of 2 chunks a warp, slower in the step than one wave of 6 (above).
int choose_gated_splits(int64_t ff, int64_t cols, int sms, const DirectBlocksPerSm& blocks) {
  const int64_t tiles = ff / 16, chunks = cols / kQmmChunk;
  for (int s = 1; 2 * s <= kGatedMaxWarps && s <= chunks; ++s) {
    const int64_t per = (chunks + s - 1) / s;
    if ((chunks + per - 1) / per != s || per > kDirectMaxRun) continue;
    if (tiles <= int64_t(blocks[2 * s]) * sms) return s;
  }
  return 0;
}
// A/B switch: RZ_QMM_GATED_WAVE_OFF=1 leaves the gated kernel at qmm's splits.
bool gated_one_wave() {
  static const bool on = !env_off("RZ_QMM_GATED_WAVE_OFF");
  return on;
}
struct GatedGrid {
  int splits = 0;  // 0: not gated
  bool pair = false;
};
template <class T>
GatedGrid gated_grid(int64_t ff, int64_t cols, int64_t n) {
  if constexpr (DirectStaged<T>) {
    return {};
  } else {
    const bool clusters = device_supports_clusters();
    const DirectBlocksPerSm& blocks = direct_setup<T>();
    if (gated_one_wave() && n <= 8)
      if (const int s = choose_gated_splits(ff, cols, device_sm_count(), blocks); s > 0)
        return {s, false};
    const int splits = choose_direct_splits(2 * ff, cols, device_sm_count(), blocks, clusters);
    const DirectGrid dg = direct_grid(splits, clusters);
    if (dg.cluster != 1) return {};
    if (2 * dg.warps <= kGatedMaxWarps) return {splits, false};
    if (clusters && n <= 8) return {splits, true};
    return {};
  }
}

// The splits the gated kernel takes for this matrix and n tokens (0: it does not run); for the
// tests, which compare it with qmm at the same splits.
int gated_splits(GgmlType type, int64_t ff, int64_t cols, int64_t n) {
  int s = 0;
  with_format(type, [&]<class T>() { s = gated_grid<T>(ff, cols, n).splits; });
  return s;
}

// qmm_gated's launch: the in-place direct kernel on the fused [gate; up] matrix with gated_grid's
// splits, each block a gate tile and its up tile (twice the warps), or each cluster of
// two blocks (gated_grid).
template <class T>
void launch_gated(const void* w, int64_t row_bytes, const void* xp, float* out, int ff, int cols,
                  int n, GateAct act, const ActForms& forms, cudaStream_t stream) {
  if constexpr (!DirectStaged<T>) {
    const GatedGrid gg = gated_grid<T>(ff, cols, n);
    const int splits = gg.splits;
    if (splits == 0) throw Error("qmm_gated: the gated kernel cannot run this matrix");
    const DirectGrid dg = direct_grid(splits);
    const int chunks = cols / kQmmChunk, per_split = (chunks + splits - 1) / splits;
    const size_t xs = n <= kDirectXsTokens ? direct_xs_bytes(n, cols) : 0;
    const unsigned cluster = gg.pair ? 2u : 1u;
    const auto go = [&](auto kernel, int nt) {
      launch_kernel_clusters(
          kernel, static_cast<unsigned>(ff / 16) * cluster, (gg.pair ? 1 : 2) * dg.warps * 32,
          direct_part_smem(2 * splits, nt) + xs, stream, cluster, static_cast<const uint8_t*>(w),
          row_bytes, static_cast<const __half*>(xp), out, int64_t(ff), 2 * ff, cols, n, per_split,
          splits, static_cast<int>(cluster), static_cast<int>(xs), ff, act, forms);
    };
    if (n <= 8)
      go(direct_kernel1<T>(xs), 1);
    else
      go(direct_kernel<T, 2>(), 2);
    RZ_CUDA_CHECK_LAUNCH();
  }
}

// Splits so that row tiles × splits fill about two blocks per SM, each split keeping at least
// 4 chunks (1,024 columns) of the K loop.
int choose_splits(int64_t rows, int64_t cols, int sms) {
  const int64_t row_tiles = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  const int64_t chunks = cols / kQmmChunk;
  const int64_t want = 2 * int64_t(sms);
  if (row_tiles >= want) return 1;
  int64_t s = (want + row_tiles - 1) / row_tiles;
  s = std::min<int64_t>(s, chunks / 4);
  if (s <= 1) return 1;
  // Every split non-empty: with per = ceil(chunks / s), the last split starts before chunks.
  const int64_t per = (chunks + s - 1) / s;
  return static_cast<int>((chunks + per - 1) / per);
}

// The staged and wide kernels' workspace: the split sums [splits][n][rows] (when splits > 1),
// then for the wide kernel its x layout, from a 16-byte boundary (wide_x_offset floats in).
size_t split_sums_floats(int splits, int64_t rows, int64_t n) {
  return splits > 1 ? size_t(splits) * size_t(rows) * size_t(n) : 0;
}
size_t wide_x_offset(int splits, int64_t rows, int64_t n) {
  return (split_sums_floats(splits, rows, n) + 3) / 4 * 4;
}
size_t workspace_floats(int splits, int64_t rows, int64_t cols, int64_t n, bool wide) {
  return wide ? wide_x_offset(splits, rows, n) + wide_x_floats(n, cols)
              : split_sums_floats(splits, rows, n);
}

// Whether qmm runs the direct kernel for n tokens of this matrix with `splits` (0: the rules').
bool direct_call(GgmlType type, int64_t rows, int64_t cols, int64_t n, int splits) {
  bool staged = false;
  with_format(type, [&]<class T>() { staged = DirectStaged<T>; });
  return runs_direct(n, splits, staged, rows * int64_t(row_size(type, cols)));
}

// The splits qmm's direct kernel takes for this shape on this device (1..16 tokens), and the
// occupancy table the rule read; for the tests and the bench.
int direct_splits(GgmlType type, int64_t rows, int64_t cols, DirectBlocksPerSm* blocks) {
  int s = 0;
  with_format(type, [&]<class T>() {
    const DirectBlocksPerSm& b = direct_setup<T>();
    if (blocks) *blocks = b;
    s = choose_direct_splits(rows, cols, device_sm_count(), b, device_supports_clusters());
  });
  return s;
}

// qmm with a forced number of K splits (0: the kernel's own rule); the tests force every split.
void run(GgmlType type, const void* w, const void* xp, float* y, int64_t rows, int64_t cols,
         int64_t n, int64_t ldy, float* ws, size_t ws_floats, int splits, cudaStream_t stream);

}  // namespace qmm_detail

namespace {

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

std::string what_of(GgmlType type, int64_t rows, int64_t cols, int64_t n) {
  const auto& tr = type_traits(type);
  return "qmm " + (tr.name.empty() ? std::string("type") : std::string(tr.name)) + " [" +
         std::to_string(rows) + ", " + std::to_string(cols) + "] x " + std::to_string(n) +
         " tokens";
}

}  // namespace

bool qmm_supported(GgmlType type, int64_t cols) {
  switch (type) {
    case GgmlType::Q4_K:
    case GgmlType::Q6_K:
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q5_K:
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS: return cols > 0 && cols % kQmmChunk == 0;
    default: return false;
  }
}

int64_t qmm_x_elems(int64_t n, int64_t cols) { return (n + 7) / 8 * 8 * cols; }

void qmm_prepare_x(const float* x, void* xp, int64_t n, int64_t cols, cudaStream_t stream) {
  if (n < 0 || cols <= 0 || cols % kQmmChunk != 0 || cols > (int64_t{1} << 30) ||
      n > (int64_t{1} << 24))
    throw Error("qmm_prepare_x: n " + std::to_string(n) + ", cols " + std::to_string(cols) +
                ": cols must be a positive multiple of 256");
  if (n == 0) return;
  if (!x || !xp || !aligned16(x) || !aligned16(xp))
    throw Error("qmm_prepare_x: null or misaligned pointer");
  const int64_t quads = (n + 7) / 8 * 8 * (cols / 4);
  const int threads = 256;
  launch_kernel(qmm_detail::prepare_x_kernel,
                static_cast<unsigned>((quads + threads - 1) / threads), threads, 0, stream, x,
                static_cast<__half*>(xp), static_cast<int>(n), static_cast<int>((n + 7) / 8 * 8),
                static_cast<int>(cols));
  RZ_CUDA_CHECK_LAUNCH();
}

bool qmm_runs_direct(GgmlType type, int64_t rows, int64_t cols, int64_t n) {
  return qmm_supported(type, cols) && n >= 1 && qmm_detail::direct_call(type, rows, cols, n, 0);
}

bool qmm_runs_wide(int64_t n) {
  return n >= qmm_detail::kWideMinTokens && qmm_detail::wide_available();
}

bool qmm_runs_wide_int(GgmlType type, int64_t rows, int64_t cols, int64_t n) {
  return n >= qmm_detail::kWideIntMinTokens && n <= qmm_detail::kWideIntTokens &&
         qmm_detail::wide_int_format(type) && qmm_supported(type, cols) && rows >= 1 &&
         double(rows) * double(row_size(type, cols)) >= qmm_detail::wide_int_min_bytes() &&
         qmm_detail::wide_available();
}

bool qmm_integer_form(GgmlType type, int64_t rows, int64_t cols, int64_t n) {
  if (!qmm_supported(type, kQmmChunk) || n < 1 || qmm_runs_wide(n)) return false;
  if (qmm_runs_wide_int(type, rows, cols, n)) return true;
  bool r = false;
  qmm_detail::with_format(type, [&]<class T>() {
    if constexpr (qmm_detail::IntForm<T>)
      r = qmm_detail::int_form_in_tiles(T::kIntMins, qmm_detail::staged_nt(n));
  });
  return r;
}

int qmm_splits(int64_t rows, int64_t cols) {
  return qmm_detail::choose_splits(rows, cols, device_sm_count());
}

size_t qmm_workspace_floats(int64_t rows, int64_t cols, int64_t n) {
  if (n <= 8) return 0;  // the direct kernel (splits added in-block); 9-16 may run staged
  int s = qmm_splits(rows, cols);
  // from 33 tokens room for the wide kernels' x (the integer form's takes some matrices' 33-64),
  // from 65 for the fp32 form's splits
  const bool wide = n >= qmm_detail::kWideIntMinTokens && qmm_detail::wide_available();
  if (wide && n >= qmm_detail::kWideMinTokens)
    s = std::max(s, qmm_detail::wide_splits(rows, cols, device_sm_count()));
  return qmm_detail::workspace_floats(s, rows, cols, n, wide);
}

void qmm(GgmlType type, const void* w, const void* xp, float* y, int64_t rows, int64_t cols,
         int64_t n, int64_t ldy, float* ws, size_t ws_floats, cudaStream_t stream) {
  qmm_detail::run(type, w, xp, y, rows, cols, n, ldy, ws, ws_floats, 0, stream);
}

bool qmm_gated_runs(GgmlType type, int64_t ff, int64_t cols, int64_t n) {
  if (n < 1 || n > kQmmDirectMaxTokens || ff < 16 || ff % 16 != 0 || ff > (int64_t{1} << 29) ||
      cols > (int64_t{1} << 30) || !qmm_supported(type, cols) ||
      !qmm_runs_direct(type, 2 * ff, cols, n))
    return false;
  int splits = 0;
  qmm_detail::with_format(
      type, [&]<class T>() { splits = qmm_detail::gated_grid<T>(ff, cols, n).splits; });
  return splits > 0;
}

bool qmm_gated(GgmlType type, const void* w, const void* xp, float* out, int64_t ff, int64_t cols,
               int64_t n, GateAct act, const ActForms& forms, cudaStream_t stream) {
  if (forms.q8 || !qmm_gated_runs(type, ff, cols, n)) return false;
  if (!w || !xp || !out || !aligned16(w) || !aligned16(xp))
    throw Error(what_of(type, 2 * ff, cols, n) + " gated: null or misaligned pointer");
  check_act_forms(forms, ff, "qmm_gated");
  if (!forms.f32) throw Error("qmm_gated: writes its fp32 output always (forms.f32 false)");
  const int64_t row_bytes = static_cast<int64_t>(row_size(type, cols));
  qmm_detail::with_format(type, [&]<class T>() {
    qmm_detail::launch_gated<T>(w, row_bytes, xp, out, static_cast<int>(ff), static_cast<int>(cols),
                                static_cast<int>(n), act, forms, stream);
  });
  return true;
}

void qmm_detail::run(GgmlType type, const void* w, const void* xp, float* y, int64_t rows,
                     int64_t cols, int64_t n, int64_t ldy, float* ws, size_t ws_floats, int splits,
                     cudaStream_t stream) {
  // The message's prefix, built only when a check fails (this runs for every matmul of a step).
  const auto what = [&] { return what_of(type, rows, cols, n); };
  if (!qmm_supported(type, cols))
    throw Error(what() + ": type without a qmm kernel, or cols not a multiple of 256");
  if (rows < 1 || n < 0 || rows > (int64_t{1} << 30) || cols > (int64_t{1} << 30) ||
      n > (int64_t{1} << 24) || ldy < rows)
    throw Error(what() + ": bad shape (ldy " + std::to_string(ldy) + ")");
  if (n == 0) return;
  if (!w || !xp || !y || !aligned16(w) || !aligned16(xp))
    throw Error(what() + ": null or misaligned pointer");
  const int chunks = static_cast<int>(cols / kQmmChunk);
  // After the checks: the rules ask the device. For the direct kernel, splits 0 lets it choose
  // (its rule depends on the kernel the type runs); it adds its splits in-block.
  if (splits != 0) {
    splits = std::clamp(splits, 1, chunks);
    const int per = (chunks + splits - 1) / splits;
    splits = (chunks + per - 1) / per;  // no empty split
  }
  const bool direct = qmm_detail::direct_call(type, rows, cols, n, splits);
  const bool wide_int = !direct && qmm_runs_wide_int(type, rows, cols, n);
  const bool wide = !direct && !wide_int && qmm_runs_wide(n);
  if (splits == 0 && !direct)
    splits = wide ? qmm_detail::wide_splits(rows, cols, device_sm_count()) : qmm_splits(rows, cols);
  const size_t need =
      direct ? 0 : qmm_detail::workspace_floats(splits, rows, cols, n, wide || wide_int);
  if (need > 0 && (!ws || ws_floats < need))
    throw Error(what() + ": workspace of " + std::to_string(ws_floats) + " floats, " +
                std::to_string(need) + " needed");
  const int64_t row_bytes = static_cast<int64_t>(row_size(type, cols));
  float* out = splits > 1 ? ws : y;
  const int64_t ld = splits > 1 ? rows : ldy;
  const int r = static_cast<int>(rows), k = static_cast<int>(cols), m = static_cast<int>(n);
  if (wide || wide_int) {
    float* xw = ws + qmm_detail::wide_x_offset(splits, rows, n);
    if (!aligned16(xw)) throw Error(what() + ": misaligned workspace");
    qmm_detail::launch_wide(type, w, row_bytes, xp, xw, out, ld, r, k, m, splits, wide_int, stream);
  } else {
    with_format(type, [&]<class T>() {
      launch<T>(w, row_bytes, xp, out, ld, y, ldy, r, k, m, splits, direct, stream);
    });
  }
  if (splits > 1 && !direct) {
    const int64_t total = rows * n;
    launch_kernel(qmm_reduce_kernel, static_cast<unsigned>((total + 255) / 256), 256, 0, stream, ws,
                  y, ldy, r, m, splits);
    RZ_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace rz::gpu
