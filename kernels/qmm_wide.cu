// qmm's warpgroup ("wide") kernel, 65 tokens and more on Hopper (kernels/qmm_wide.hpp; design and
// measurements: kernels/QMM.md, "The wide kernel"). Each warp decodes its 16 weight rows' chunk in
// registers into the A operand of step t exactly as the staged kernel's fp32 dequantization does
// (a_operand, kernels/qmm_chunk.cuh: the weights rounded once to fp16), and its warpgroup
// multiplies 64 rows by a tile of N tokens per 16 columns with one wgmma.mma_async (A from
// registers, B from shared memory, fp32 accumulators in registers), where the staged kernel needs N
// / 8 mma.sync per warp. WG warpgroups a block share each chunk's x stage, copied with cp.async
// from a layout that a small kernel first writes from qmm_prepare_x's (wide_x_kernel), two stages
// deep.
//
// wgmma needs the sm_90a target: CMake builds this file alone for it where the build targets sm_90
// (kernels/CMakeLists.txt, which defines RZ_QMM_WIDE); elsewhere wide_available() is false.
#include "kernels/launch.cuh"
#include "kernels/qmm_wide.hpp"

#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <utility>

#include "formats/common.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/mma.cuh"
#include "kernels/qmm_chunk.cuh"
#include "kernels/qmm_formats.cuh"
#include "kernels/qmm_stage.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define RZ_WGMMA_DEVICE 1
#endif

#if defined(RZ_QMM_WIDE)
namespace rz::gpu::qmm_detail {

// ---------------------------------------------------------------- wgmma (sm_90a)

__device__ __forceinline__ void wg_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wg_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Shared-memory writes of the generic proxy (cp.async) made visible to wgmma's reads.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// The accumulators pinned in place, so that no read of them moves above a wgmma wait.
template <int R>
__device__ __forceinline__ void wg_pin(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Eight fp32 accumulators d[i .. i + 7] as read-write asm operands (the wgmma wrappers' lists).
#define RZ_WG_ACC8(i)                                                                         \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])

// d += A B, m64 n128 k16: A (64 x 16 fp16) from registers, each warp of the warpgroup its 16
// rows in mma.sync's A layout (kernels/mma.cuh); B (16 x N fp16) from shared memory by `desc`;
// d (64 x N fp32): d[4 j + 2 h + e] = row 16 warp + g + 8 h, column 8 j + 2 c + e.
__device__ __forceinline__ void wgmma_m64n128(float (&d)[64], const uint4& a, uint64_t desc) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
      : RZ_WG_ACC8(0), RZ_WG_ACC8(8), RZ_WG_ACC8(16), RZ_WG_ACC8(24), RZ_WG_ACC8(32),
        RZ_WG_ACC8(40), RZ_WG_ACC8(48), RZ_WG_ACC8(56)
      : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "l"(desc), "r"(1));
}

// d = A B (scale_d 0) or d += A B, m64 n64 k16; operands as wgmma_m64n128's.
__device__ __forceinline__ void wgmma_m64n64(float (&d)[32], const uint4& a, uint64_t desc,
                                             int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
      : RZ_WG_ACC8(0), RZ_WG_ACC8(8), RZ_WG_ACC8(16), RZ_WG_ACC8(24)
      : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "l"(desc), "r"(scale_d));
}
#undef RZ_WG_ACC8

// B of step t of a chunk: the tile's N tokens x 16 k-slots, K-major without swizzle, as
// [kc][token][8 k-slots] (16 bytes a token): the k-slots 8 kc .. 8 kc + 7 of the 8-token groups a
// 128-byte core matrix each, one after another (SBO 128 bytes), the second k half N * 16 bytes
// after the first (LBO).
template <int N>
__device__ __forceinline__ uint64_t wide_desc(uint32_t addr) {
  constexpr uint64_t kLbo = (N * 16) >> 4, kSbo = 128 >> 4;
  return uint64_t((addr & 0x3FFFFu) >> 4) | (kLbo << 16) | (kSbo << 32);
}

// The chunk and the token of x-layout unit (tc = token tile * chunks + chunk, tok_in).
struct WideUnit {
  int chunk, tok;
};
template <int N>
__device__ __forceinline__ WideUnit wide_unit(int64_t tc, int tok_in, int cols) {
  const int chunks = cols / kQmmChunk;
  return {static_cast<int>(tc % chunks), static_cast<int>(tc / chunks) * N + tok_in};
}

// xw [token tile][chunk][t][kc][token of the tile][8 halves] from qmm_prepare_x's xp, whose step
// t of a chunk is a token's 32 bytes in (c, e) order (kernels/qmm_layout.cuh): words 2 c and
// 2 c + 1 are thread c's k-slots {2c, 2c+1} and {2c+8, 2c+9}, so k-slots 0-7 are words 0, 2, 4, 6
// and 8-15 words 1, 3, 5, 7. Tokens from n8 (past xp's rows) are zeros. A thread a (tile, chunk,
// t, token), consecutive threads consecutive tokens.
// S: steps a chunk's x holds (17 in the integer form with mins: wide_xsum_kernel writes step 16).
template <int N, int S = 16>
__global__ void wide_x_kernel(const __half* __restrict__ xp, __half* __restrict__ xw, int n8,
                              int cols, int64_t units) {
  grid_dependency_wait();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= units) return;
  const int tok_in = static_cast<int>(i % N);
  const int64_t r = i / N;
  const int t = static_cast<int>(r % 16);
  const int64_t tc = r / 16;  // tile * chunks + chunk
  const auto [chunk, tok] = wide_unit<N>(tc, tok_in, cols);
  uint4 lo = make_uint4(0u, 0u, 0u, 0u), hi = lo;
  if (tok < n8) {
    const auto* s =
        reinterpret_cast<const uint4*>(xp + int64_t(tok) * cols + chunk * kQmmChunk + 16 * t);
    lo = s[0];
    hi = s[1];
  }
  uint4* d = reinterpret_cast<uint4*>(xw) + (tc * S + t) * 2 * N + tok_in;
  d[0] = make_uint4(lo.x, lo.z, hi.x, hi.z);
  d[N] = make_uint4(lo.y, lo.w, hi.y, hi.w);
}

// The integer form's mins step (step 16 of a chunk's 17 in xw): k-slot s < 8 the sum of the
// token's x over sub-block s of the chunk (columns 32 s .. 32 s + 31, fp16 values summed in fp32)
// rounded to fp16, slot 8 + s what that rounding left (so hi + lo holds the sum to ~2^-22). In
// xp, step t's quad c holds columns of sub-block 2 c + (t & 1) (kernels/qmm_layout.cuh). A thread a
// (tile, chunk, token), consecutive threads consecutive tokens.
template <int N>
__global__ void wide_xsum_kernel(const __half* __restrict__ xp, __half* __restrict__ xw, int n8,
                                 int cols, int64_t units) {
  grid_dependency_wait();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= units) return;
  const int tok_in = static_cast<int>(i % N);
  const int64_t tc = i / N;  // tile * chunks + chunk
  const auto [chunk, tok] = wide_unit<N>(tc, tok_in, cols);
  float sum[8] = {};
  if (tok < n8) {
    const auto* s = reinterpret_cast<const uint2*>(xp + int64_t(tok) * cols + chunk * kQmmChunk);
#pragma unroll
    for (int t = 0; t < 16; ++t)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const uint2 q = s[4 * t + c];
        const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&q.x));
        const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&q.y));
        sum[2 * c + (t & 1)] += (a.x + a.y) + (b.x + b.y);
      }
  }
  uint32_t hi[4], lo[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const __half2 h = __floats2half2_rn(sum[2 * j], sum[2 * j + 1]);
    const float2 hf = __half22float2(h);
    hi[j] = *reinterpret_cast<const uint32_t*>(&h);
    lo[j] = pack_half2(sum[2 * j] - hf.x, sum[2 * j + 1] - hf.y);
  }
  uint4* d = reinterpret_cast<uint4*>(xw) + (tc * 17 + 16) * 2 * N + tok_in;
  d[0] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
  d[N] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
}

// A chunk's 16 steps: the A operand of step t from the two rows' items (the staged kernel's
// fp32 dequantization), one wgmma per step on B at xs + t * N * 32, one group in flight while the
// next step's A is decoded (its registers free once the group before has completed).
template <class T, int N, int... t>
__device__ __forceinline__ void wide_chunk(const typename T::Item& ia, const typename T::Item& ib,
                                           uint32_t xs, float (&acc)[N / 2],
                                           std::integer_sequence<int, t...>) {
  (
      [&] {
        const uint4 a = a_operand<T, t>(ia, ib);
        wg_fence();
        static_assert(N == 128, "the one wgmma shape written out: m64n128k16");
        wgmma_m64n128(acc, a, wide_desc<N>(xs + t * N * 32));
        wg_commit();
        wg_wait<1>();
      }(),
      ...);
}

// ---------------------------------------------------------------- the integer form, 33-64 tokens

// The integer form's kernel (kernels/QMM.md, "The wide kernel's integer form"): the A operand of
// each step is the integer form's (a_int: q * scale, exact in fp16; Q6_K's rounded above 2,048),
// multiplied by wgmma m64n64k16 into the chunk's own sums qs, which are then scaled by the row's
// d and added to acc in fp32. Q4_K / Q5_K's mins take one more step a chunk, straight into acc:
// A = -dmin * m of thread c's two sub-blocks (as an fp16 hi + lo pair, two wgmmas), B = the
// token's x summed over each sub-block (wide_xsum_kernel), instead of the second mma of every step
// that the mma.sync kernels run. One 64-token tile (every token of a call up to 64), two
// warpgroups a block, two stages, two blocks an SM.

// Steps a chunk's x holds in the wide kernels' layouts: 16, and in the integer form the mins step
// for Q4_K / Q5_K.
template <class T, bool kInt>
constexpr int wide_steps() {
  if constexpr (kInt) {
    if constexpr (T::kIntMins) return 17;
  }
  return 16;
}

// Thread c's mins step A registers of one row: sub-blocks 2 c, 2 c + 1's -dmin * m (exact in
// fp32: an fp16 times a 6-bit integer, at most 17 significant bits) as hi + lo, two fp16 pairs
// whose sum holds it exactly but for lo's underflow below fp16's normal range (an error under
// 2^-25); the k-slots 2 c, 2 c + 1, and the same registers again for the slots of the lo sums.
template <class T>
__device__ __forceinline__ uint2 wide_mins(const typename T::IntItem& it) {
  const float m0 = -it.dmin * __low2float(*reinterpret_cast<const __half2*>(&it.m2[0]));
  const float m1 = -it.dmin * __low2float(*reinterpret_cast<const __half2*>(&it.m2[1]));
  const __half2 hi = __floats2half2_rn(m0, m1);
  const float2 hf = __half22float2(hi);
  return make_uint2(*reinterpret_cast<const uint32_t*>(&hi), pack_half2(m0 - hf.x, m1 - hf.y));
}

template <class T, int N, int... t>
__device__ __forceinline__ void wide_int_chunk(const typename T::IntItem& ia,
                                               const typename T::IntItem& ib, uint32_t xs,
                                               float (&qs)[N / 2],
                                               std::integer_sequence<int, t...>) {
  (
      [&] {
        const uint2 ra = T::template a_int<t>(ia), rb = T::template a_int<t>(ib);
        wg_fence();
        static_assert(N == 64, "the integer form's wgmma shape: m64n64k16");
        wgmma_m64n64(qs, make_uint4(ra.x, rb.x, ra.y, rb.y), wide_desc<N>(xs + t * N * 32),
                     t > 0 ? 1 : 0);
        wg_commit();
        wg_wait<1>();
      }(),
      ...);
}

// Grid: x = token tiles of N (fastest, so the blocks that share weight rows run together), y = row
// tiles of 64 WG, z = K splits; block: WG warpgroups, warp w rows 16 w of the tile. out: y itself
// (ld its row stride) or the split workspace [split][n][rows]. Two stages: chunk k + 1's x and
// weight rows are copied while chunk k is multiplied. kInt: the integer form (one or two blocks an
// SM), else the fp32 dequantization (one).
template <class T, int N, int WG, bool kInt>
__global__ void __launch_bounds__(WG * 128, kInt ? 2 : 1)
    qmm_wide_kernel(const uint8_t* __restrict__ w, int64_t row_bytes,
                    const uint8_t* __restrict__ xw, float* __restrict__ out, int64_t ld, int rows,
                    int cols, int n, int chunks_per_split) {
#if defined(RZ_WGMMA_DEVICE)
  constexpr int kThreads = WG * 128, kRows = 64 * WG;
  constexpr int kX = wide_steps<T, kInt>() * N * 32;
  constexpr int kW = kRows * w_row_stride<T>() + 16;
  static_assert(kX % 1024 == 0 && kW % 16 == 0);
  extern __shared__ __align__(1024) uint8_t wide_smem[];
  grid_dependency_wait();
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
  const int row_base = blockIdx.y * kRows, row0 = row_base + warp * 16;
  const int chunks = cols / kQmmChunk;
  const int k0 = blockIdx.z * chunks_per_split, k1 = min(chunks, k0 + chunks_per_split);
  const uint8_t* w_end = w + int64_t(rows) * row_bytes;
  const int64_t row_a = min(row0 + g, rows - 1), row_b = min(row0 + g + 8, rows - 1);
  const bool clear = row_base + kRows < rows;  // stage_tile_rows may copy the whole tile
  // a warpgroup whose 64 rows all lie past the matrix skips the products (uniform in it)
  const bool active = row_base + 64 * (warp >> 2) < rows;
  // the fp32 form's x stage is a whole number of 16-byte copies a thread (the integer form's is
  // not with its mins step: it copies in a strided loop)
  constexpr bool kWholeCopies = !kInt;
  static_assert(!kWholeCopies || kX % (16 * kThreads) == 0);
  const uint8_t* xsrc = xw + int64_t(blockIdx.x) * chunks * kX + (kWholeCopies ? 16 * tid : 0);
  uint8_t* const xs0 = wide_smem;
  uint8_t* const ws0 = wide_smem + 2 * kX;
  const auto stage = [&](int k, int s) {
    const uint8_t* src = xsrc + int64_t(k) * kX;
    if constexpr (kWholeCopies) {
      uint8_t* dst = xs0 + s * kX + 16 * tid;
#pragma unroll
      for (int i = 0; i < kX / (16 * kThreads); ++i)
        cp_async16(dst + i * 16 * kThreads, src + i * 16 * kThreads);
    } else {
      uint8_t* dst = xs0 + s * kX;
      for (int i = tid; i < kX / 16; i += kThreads) cp_async16(dst + 16 * i, src + 16 * i);
    }
    stage_block_rows<T, kThreads>(ws0 + s * kW, w, row_bytes, w_end, row_base, rows, k, tid, clear);
  };

  float acc[N / 2];
  [[maybe_unused]] float qs[kInt ? N / 2 : 1];  // the integer form's chunk sums
#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    acc[i] = 0.0f;
    if constexpr (kInt) qs[i] = 0.0f;
  }
  if (k0 < k1) stage(k0, 0);
  cp_async_commit();
  for (int k = k0; k < k1; ++k) {
    const int s = (k - k0) & 1;
    if (k + 1 < k1) stage(k + 1, s ^ 1);
    cp_async_commit();    // an empty group at the end keeps the count uniform
    cp_async_wait<1>();   // chunk k's copies are complete
    fence_proxy_async();  // ... and visible to wgmma
    __syncthreads();
    if (active) {
      const uint8_t* ws = ws0 + s * kW;
      const uint8_t* ra = staged_row<T>(ws, w, row_bytes, warp * 16 + g, row_a, k);
      const uint8_t* rb = staged_row<T>(ws, w, row_bytes, warp * 16 + g + 8, row_b, k);
      if constexpr (kInt) {
        const typename T::IntItem ia = T::int_item(T::load_int_raw(ra, c), c);
        const typename T::IntItem ib = T::int_item(T::load_int_raw(rb, c), c);
        const uint32_t xs = smem_addr(xs0 + s * kX);
        if constexpr (T::kIntMins) {  // acc -= dmin * sum(m * xsum), straight into the sums
          const uint2 ma = wide_mins<T>(ia), mb = wide_mins<T>(ib);
          const uint64_t desc = wide_desc<N>(xs + 16 * N * 32);
          wg_fence();
          wgmma_m64n64(acc, make_uint4(ma.x, mb.x, ma.x, mb.x), desc, 1);
          wgmma_m64n64(acc, make_uint4(ma.y, mb.y, ma.y, mb.y), desc, 1);
          wg_commit();
        }
        wide_int_chunk<T, N>(ia, ib, xs, qs, std::make_integer_sequence<int, 16>{});
        wg_wait<0>();
        wg_pin(qs);
        wg_pin(acc);
#pragma unroll
        for (int j = 0; j < N / 8; ++j)
#pragma unroll
          for (int v = 0; v < 4; ++v)
            acc[4 * j + v] = fmaf(v < 2 ? ia.d : ib.d, qs[4 * j + v], acc[4 * j + v]);
      } else {
        wide_chunk<T, N>(T::load(ra, c), T::load(rb, c), smem_addr(xs0 + s * kX), acc,
                         std::make_integer_sequence<int, 16>{});
        wg_wait<0>();
        wg_pin(acc);
      }
    }
    __syncthreads();  // stage s is refilled by the next iteration's copies
  }
  if (!active) return;
  float* o = out + int64_t(blockIdx.z) * n * ld;
  const int tok0 = blockIdx.x * N;
#pragma unroll
  for (int j = 0; j < N / 8; ++j)
#pragma unroll
    for (int v = 0; v < 4; ++v) {
      const int r = row0 + g + 8 * (v >> 1), tk = tok0 + 8 * j + 2 * c + (v & 1);
      if (r < rows && tk < n) o[int64_t(tk) * ld + r] = acc[4 * j + v];
    }
#else
  __trap();  // built without sm_90a: wide_available() is false, so never launched
#endif
}

// The tile: 128 tokens, two warpgroups (128 rows) a block, 164-188 KB of shared memory (one block
// an SM), or one warpgroup where the grid model (wide_groups, below) says so. Measured against 64
// tokens with two or four warpgroups (H200, us at 65 / 128 / 256 tokens,
// bench/gpu-runs/2026-11-28-h200-qmm-wide.log): llama8b Q4_K gate+up 80 / 81 / 159 against 102 /
// 103 / 175 and 114 / 114 / 221, Q6_K ffn_down 73 / 76 / 121 against 95 / 97 / 168 and 104 / 106 /
// 171. The integer form: 64 tokens, two warpgroups, 99-107 KB (two blocks).
constexpr int kWideGroups = 2;  // and kWideTokens, kWideIntTokens (kernels/qmm_wide.hpp)

// Shared memory of the N-token, WG-warpgroup tile: two stages of x and of the block's weight rows.
template <class T, int N, int WG, bool kInt>
size_t wide_smem() {
  return size_t(2) * wide_steps<T, kInt>() * N * 32 +
         size_t(2) * (64 * WG * w_row_stride<T>() + 16);
}

template <class T, int N, int WG, bool kInt>
void launch_tile(const void* w, int64_t row_bytes, const void* xp, void* xw, float* out, int64_t ld,
                 int rows, int cols, int n, int splits, cudaStream_t stream) {
  constexpr int kSteps = wide_steps<T, kInt>();
  const size_t smem = wide_smem<T, N, WG, kInt>();
  static const bool configured = [smem] {
    RZ_CUDA_CHECK(cudaFuncSetAttribute(qmm_wide_kernel<T, N, WG, kInt>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)));
    return true;
  }();
  (void)configured;
  const int chunks = cols / kQmmChunk, tiles = (n + N - 1) / N, n8 = (n + 7) / 8 * 8;
  const int64_t units = int64_t(tiles) * chunks * 16 * N;
  launch_kernel(wide_x_kernel<N, kSteps>, static_cast<unsigned>((units + 255) / 256), 256, 0,
                stream, static_cast<const __half*>(xp), static_cast<__half*>(xw), n8, cols, units);
  RZ_CUDA_CHECK_LAUNCH();
  if constexpr (kSteps == 17) {  // the mins step
    const int64_t sums = int64_t(tiles) * chunks * N;
    launch_kernel(wide_xsum_kernel<N>, static_cast<unsigned>((sums + 255) / 256), 256, 0, stream,
                  static_cast<const __half*>(xp), static_cast<__half*>(xw), n8, cols, sums);
    RZ_CUDA_CHECK_LAUNCH();
  }
  const int per_split = (chunks + splits - 1) / splits;
  const dim3 grid(static_cast<unsigned>(tiles),
                  static_cast<unsigned>((rows + 64 * WG - 1) / (64 * WG)),
                  static_cast<unsigned>((chunks + per_split - 1) / per_split));
  launch_kernel(qmm_wide_kernel<T, N, WG, kInt>, grid, WG * 128, smem, stream,
                static_cast<const uint8_t*>(w), row_bytes, static_cast<const uint8_t*>(xw), out, ld,
                rows, cols, n, per_split);
  RZ_CUDA_CHECK_LAUNCH();
}

}  // namespace rz::gpu::qmm_detail
#endif  // RZ_QMM_WIDE

namespace rz::gpu::qmm_detail {

bool wide_available() {
#if defined(RZ_QMM_WIDE)
  static const bool yes = [] {
    int dev = 0, major = 0, minor = 0;
    // no device (the rule's tests run without one): no wide kernel, and no error left behind
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    const char* off = std::getenv("RZ_QMM_WIDE_OFF");  // "1": the staged kernel (A/B runs)
    return major == 9 && minor == 0 && !(off && std::string_view(off) == "1");
  }();
  return yes;
#else
  return false;
#endif
}

size_t wide_x_floats(int64_t n, int64_t cols) {
  if (n >= kWideMinTokens)  // the fp32 form's tiles of kWideTokens, 16 steps a chunk
    return size_t((n + kWideTokens - 1) / kWideTokens * kWideTokens) * size_t(cols) / 2;
  // the integer form's tile of kWideIntTokens, 17 steps a chunk (the mins step)
  return size_t(kWideIntTokens) * size_t(cols / kQmmChunk) * 17 * 16 / 2;
}

bool wide_int_format(GgmlType type) {
  return type == GgmlType::Q4_K || type == GgmlType::Q5_K || type == GgmlType::Q6_K;
}

double& wide_int_min_bytes() {
  static double bytes = kWideIntMinBytes;
  return bytes;
}

int& wide_groups_override() {
  static int groups = [] {
    const char* v = std::getenv("RZ_QMM_WIDE_WG");  // "1" or "2": forced (A/B runs)
    return v && (std::string_view(v) == "1" || std::string_view(v) == "2") ? *v - '0' : 0;
  }();
  return groups;
}

double wide_cost(int64_t rows, int64_t cols, int64_t n, int groups, int splits, int sms) {
  // Fitted to QmmBench.DISABLED_WideGroups (H200, bench/gpu-runs/2026-11-29-h200-wide-groups.log):
  // a block's time is its chunks plus half a chunk of fill and drain, 1.6x for two groups (an SM
  // holds one block of either: two groups do twice the rows in 1.6x the time); the blocks run in
  // whole waves; the split sums cost 8e-7 chunk times per float written.
  constexpr double kFill = 0.5, kTwoGroups = 1.6, kSumFloat = 8e-7;
  const int64_t chunks = cols / kQmmChunk, per = (chunks + splits - 1) / splits;
  const int64_t tiles = (n + kWideTokens - 1) / kWideTokens;
  const int64_t blocks = tiles * ((rows + 64 * groups - 1) / (64 * groups)) * splits;
  const int64_t waves = (blocks + sms - 1) / std::max(1, sms);
  return double(waves) * (double(per) + kFill) * (groups == 2 ? kTwoGroups : 1.0) +
         (splits > 1 ? kSumFloat * double(splits) * double(rows) * double(n) : 0.0);
}

int wide_groups(int64_t rows, int64_t cols, int64_t n, int splits, int sms) {
  if (wide_groups_override() != 0) return wide_groups_override();
  return wide_cost(rows, cols, n, 1, splits, sms) <= wide_cost(rows, cols, n, 2, splits, sms)
             ? 1
             : kWideGroups;
}

int wide_splits(int64_t rows, int64_t cols, int sms) {
  const int64_t chunks = cols / kQmmChunk;
  int best = 1;
  double best_cost = 0;
  for (int s : {1, 2, 3, 4, 6, 8}) {  // the counts the model was fitted on
    if (s > chunks) break;
    const int64_t per = (chunks + s - 1) / s;
    if ((chunks + per - 1) / per != s) continue;  // a split would be empty
    double cost = 0;
    for (int64_t n : {int64_t{kWideTokens}, int64_t{2 * kWideTokens}})
      cost += std::min(wide_cost(rows, cols, n, 1, s, sms), wide_cost(rows, cols, n, 2, s, sms));
    if (s == 1 || cost < best_cost) best = s, best_cost = cost;
  }
  return best;
}

void launch_wide(GgmlType type, const void* w, int64_t row_bytes, const void* xp, void* xw,
                 float* out, int64_t ld, int rows, int cols, int n, int splits, bool int_form,
                 cudaStream_t stream) {
#if defined(RZ_QMM_WIDE)
  if (int_form && n > kWideIntTokens)
    throw Error("qmm: the wide kernel's integer form takes at most 64 tokens");
  const int groups = int_form ? kWideGroups : wide_groups(rows, cols, n, splits, device_sm_count());
  with_format(type, [&]<class T>() {
    if (!int_form && groups == 1)
      launch_tile<T, kWideTokens, 1, false>(w, row_bytes, xp, xw, out, ld, rows, cols, n, splits,
                                            stream);
    else if (!int_form)
      launch_tile<T, kWideTokens, kWideGroups, false>(w, row_bytes, xp, xw, out, ld, rows, cols, n,
                                                      splits, stream);
    else if constexpr (IntForm<T>)
      launch_tile<T, kWideIntTokens, kWideGroups, true>(w, row_bytes, xp, xw, out, ld, rows, cols,
                                                        n, splits, stream);
    else
      throw Error("qmm: no integer form for this type");
  });
#else
  (void)type, (void)w, (void)row_bytes, (void)xp, (void)xw, (void)out, (void)ld, (void)rows,
      (void)cols, (void)n, (void)splits, (void)int_form, (void)stream;
  throw Error("qmm: the wide kernel is not in this build (it needs the sm_90a target)");
#endif
}

}  // namespace rz::gpu::qmm_detail
