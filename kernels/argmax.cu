// Row argmax kernels (see argmax.hpp). Each thread scans a strided slice keeping (value, index)
// with NaN read as -inf; the pairs are combined by "larger value, then lower index" through warp
// shuffles and a shared-memory stage. That order is total on the mapped values, so the result is
// the lowest index of the row's maximum whatever the reduction order or chunking; with nothing
// above -inf it is the lowest index of all, 0, as the CPU's argmax.
//   argmax_kernel:        one block per row (the workspace-free path).
//   argmax_chunk_kernel:  one block per (row, chunk of kArgmaxChunk logits) -> workspace pairs.
//   argmax_reduce_kernel: one block per row, combines that row's chunk pairs.
#include "kernels/argmax.hpp"
#include "kernels/launch.cuh"

#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "kernels/cuda_common.cuh"

namespace rz::gpu {
namespace {

constexpr int kNoIndex = 0x7fffffff;  // loses every tie to a real index
constexpr int kChunkThreads = 256;
constexpr int kReduceThreads = 128;
static_assert(kArgmaxChunk % kChunkThreads == 0, "chunk must be a multiple of its block");

// Combines (bv, bi) over the block; the result is valid in thread 0. blockDim.x a multiple of
// 32, at most 1024. Every thread of the block must call it.
__device__ __forceinline__ void block_best(float& bv, int& bi) {
  __shared__ float warp_v[32];
  __shared__ int warp_i[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
  warp_argmax(bv, bi);
  if (lane == 0) {
    warp_v[warp] = bv;
    warp_i[warp] = bi;
  }
  __syncthreads();
  if (warp == 0) {
    bv = lane < n_warps ? warp_v[lane] : -INFINITY;
    bi = lane < n_warps ? warp_i[lane] : kNoIndex;
    warp_argmax(bv, bi);
  }
}

// grid (n_rows); blockDim.x a multiple of 32, at most 1024
__global__ void argmax_kernel(const float* __restrict__ logits, int n_vocab,
                              int32_t* __restrict__ out) {
  grid_dependency_sync();
  const float* row = logits + static_cast<size_t>(blockIdx.x) * n_vocab;
  float bv = -INFINITY;
  int bi = kNoIndex;
  for (int i = threadIdx.x; i < n_vocab; i += blockDim.x) {
    float v = row[i];
    if (isnan(v)) v = -INFINITY;
    if (argmax_better(v, i, bv, bi)) {
      bv = v;
      bi = i;
    }
  }
  block_best(bv, bi);
  if (threadIdx.x == 0) out[blockIdx.x] = bi == kNoIndex ? 0 : bi;
}

// grid (n_rows * n_chunks), block kChunkThreads: block b is row b / n_chunks, chunk b % n_chunks,
// logits [chunk * kArgmaxChunk, min(n_vocab, (chunk + 1) * kArgmaxChunk)) of the row. Writes the
// chunk's best pair at ws_v[b], ws_i[b] (every chunk holds at least one logit, so the index is
// always a real one, -inf when all of them are -inf or NaN).
__global__ void __launch_bounds__(kChunkThreads)
    argmax_chunk_kernel(const float* __restrict__ logits, int n_vocab, int n_chunks,
                        float* __restrict__ ws_v, int32_t* __restrict__ ws_i) {
  grid_dependency_sync();
  const int64_t b = blockIdx.x;
  const int64_t r = b / n_chunks;
  const int begin = static_cast<int>(b - r * n_chunks) * kArgmaxChunk;
  const int n = min(kArgmaxChunk, n_vocab - begin);
  const float* chunk = logits + r * n_vocab + begin;
  float bv = -INFINITY;
  int bi = kNoIndex;
#pragma unroll 4
  for (int j = threadIdx.x; j < n; j += kChunkThreads) {
    float v = chunk[j];
    if (isnan(v)) v = -INFINITY;
    if (argmax_better(v, begin + j, bv, bi)) {
      bv = v;
      bi = begin + j;
    }
  }
  block_best(bv, bi);
  if (threadIdx.x == 0) {
    ws_v[b] = bv;
    ws_i[b] = bi;
  }
}

// grid (n_rows), block kReduceThreads: the best of row r's n_chunks pairs.
__global__ void __launch_bounds__(kReduceThreads)
    argmax_reduce_kernel(const float* __restrict__ ws_v, const int32_t* __restrict__ ws_i,
                         int n_chunks, int32_t* __restrict__ out) {
  grid_dependency_sync();
  const int64_t base = int64_t(blockIdx.x) * n_chunks;
  float bv = -INFINITY;
  int bi = kNoIndex;
  for (int j = threadIdx.x; j < n_chunks; j += kReduceThreads) {
    const float v = ws_v[base + j];
    const int i = ws_i[base + j];
    if (argmax_better(v, i, bv, bi)) {
      bv = v;
      bi = i;
    }
  }
  block_best(bv, bi);
  if (threadIdx.x == 0) out[blockIdx.x] = bi == kNoIndex ? 0 : bi;
}

void check_shape(int n_rows, int n_vocab) {
  if (n_vocab <= 0 || n_rows < 0)
    throw Error("argmax_rows: bad shape [" + std::to_string(n_rows) + ", " +
                std::to_string(n_vocab) + "]");
}

int chunks_of(int n_vocab) { return (n_vocab - 1) / kArgmaxChunk + 1; }

}  // namespace

void argmax_rows(const float* logits, int n_rows, int n_vocab, int32_t* out, cudaStream_t stream) {
  check_shape(n_rows, n_vocab);
  if (n_rows == 0) return;
  if (!logits || !out) throw Error("argmax_rows: null pointer");
  const int threads = n_vocab >= 1024 ? 1024 : ((n_vocab + 31) / 32) * 32;
  launch_kernel(argmax_kernel, static_cast<unsigned>(n_rows), threads, 0, stream, logits, n_vocab,
                out);
  RZ_CUDA_CHECK_LAUNCH("argmax_kernel");
}

size_t argmax_workspace_bytes(int n_rows, int n_vocab) {
  check_shape(n_rows, n_vocab);
  const int n_chunks = chunks_of(n_vocab);
  if (n_chunks == 1) return 0;
  return size_t(n_rows) * size_t(n_chunks) * (sizeof(float) + sizeof(int32_t));
}

void argmax_rows(const float* logits, int n_rows, int n_vocab, int32_t* out, void* workspace,
                 size_t workspace_bytes, cudaStream_t stream) {
  const size_t need = argmax_workspace_bytes(n_rows, n_vocab);
  if (workspace_bytes < need)
    throw Error("argmax_rows: workspace of " + std::to_string(workspace_bytes) + " bytes, need " +
                std::to_string(need) + " for [" + std::to_string(n_rows) + ", " +
                std::to_string(n_vocab) + "]");
  if (n_rows == 0) return;
  if (!logits || !out || (need > 0 && !workspace)) throw Error("argmax_rows: null pointer");
  if (reinterpret_cast<uintptr_t>(workspace) % 4 != 0)
    throw Error("argmax_rows: workspace must be 4-byte aligned");
  const int n_chunks = chunks_of(n_vocab);
  if (n_chunks == 1) {  // one block per row is already one chunk per block
    argmax_rows(logits, n_rows, n_vocab, out, stream);
    return;
  }
  const int64_t n_blocks = int64_t(n_rows) * n_chunks;
  if (n_blocks > 0x7fffffff) throw Error("argmax_rows: too many rows for one launch");
  float* ws_v = static_cast<float*>(workspace);
  int32_t* ws_i = reinterpret_cast<int32_t*>(ws_v + n_blocks);
  launch_kernel(argmax_chunk_kernel, static_cast<unsigned>(n_blocks), kChunkThreads, 0, stream,
                logits, n_vocab, n_chunks, ws_v, ws_i);
  RZ_CUDA_CHECK_LAUNCH("argmax_chunk_kernel");
  launch_kernel(argmax_reduce_kernel, static_cast<unsigned>(n_rows), kReduceThreads, 0, stream,
                ws_v, ws_i, n_chunks, out);
  RZ_CUDA_CHECK_LAUNCH("argmax_reduce_kernel");
}

}  // namespace rz::gpu
