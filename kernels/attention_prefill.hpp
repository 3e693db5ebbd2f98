// Causal prefill attention over the paged KV cache (layout in kernels/kv_cache_shape.hpp), for
// several prompts (or prompt chunks) packed into one step: sequence i has query tokens
// [cu_seqlens[i], cu_seqlens[i+1]) of q, its K/V (earlier chunks and this one, appended by
// kv_append) in block table row i, and seq_context_lens[i] cached tokens including this chunk.
// Query j of sequence i is at position ctx_i - n_i + j and attends to positions 0..that one
// (causal), or to the last `window` of them (a sliding window), with GQA as in
// attention_decode.hpp.
//
// Tiled flash-attention kernels: one thread block per (tile of query tokens of one sequence, kv
// head), so the query heads of a GQA group and the tile's tokens share every K/V tile read into
// shared memory; online softmax, fp32 accumulation. For head_dim a multiple of 16 up to 128 the
// products run on tensor cores with Q and the softmax weights rounded to fp16
// (kernels/attention_prefill_mma.cu); other head dims, or tensor_cores = false, take the fp32
// CUDA-core kernel (kernels/attention_prefill.cu).
//
// Key splits (tensor-core kernel only, flash-decoding style): when the grid above has few blocks
// for the GPU (few KV heads, a short chunk) and the context is long, each tile's keys are cut into
// up to S ranges of whole 64-key tiles (at least 4 per range when S is chosen automatically),
// one thread block per (tile, kv head, range); each writes its rows' running max m, sum l and
// unnormalized output to the workspace, and a combine kernel merges the ranges of a row:
// out = sum_j 2^(m_j - M) o_j / sum_j 2^(m_j - M) l_j, M = max m_j. S is chosen on the host from
// the shapes (n_tokens, n_seqs, heads, max_context) and the SM count alone (never from device
// data), so a captured graph stays valid; S = 1 is the unsplit kernel, bit for bit.
// attention_prefill_key_splits says which S a call uses.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/kv_cache_shape.hpp"

namespace rz::gpu {

struct AttentionPrefillArgs {
  int n_seqs = 0;
  int n_tokens = 0;     // cu_seqlens[n_seqs]; at most 65535 per call
  int n_head = 0;       // query heads; a multiple of cache.n_head_kv
  KvCacheShape cache;   // one layer's K (and V) cache shape; head_dim even, <= 256
  int max_context = 0;  // an upper bound on every seq_context_lens[i]
  int table_stride =
      0;               // int32s between block table rows; max_context <= table_stride * block_size
  float scale = 0.0f;  // 0 means 1 / sqrt(head_dim)
  bool tensor_cores = true;  // false: the fp32 CUDA-core kernel for every head_dim (comparison)
  int key_splits = 0;        // tensor-core kernel: 0 chooses the key splits, k in [1, 64] forces k
  int window = 0;  // sliding window: a query at position q attends to (q - window, q]; 0: [0, q]
  // false: rows that no valid sequence covers are left as they are (not set to NaN), so that the
  // sequences may cover a part of q / out whose other rows another kernel writes.
  bool fill_uncovered = true;
  // true: the workspace already holds the query-tile index of a call with the same n_seqs,
  // n_tokens, max_context, heads, cu_seqlens and seq_context_lens, written by an earlier call on
  // the same stream (the previous layer of a forward pass): the kernel that builds it (one per
  // call otherwise) is skipped. The index does not depend on q, the caches or window.
  bool tile_index_ready = false;
};

// Bytes of device workspace attention_prefill needs; 0 when there is nothing to do. A per-sequence
// tile index (n_seqs + 1 int32s), and on the tensor-core path the key-split partials: for
// key_splits = k > 1, k per block of the unsplit grid; for key_splits = 0, an upper bound that
// holds on every GPU and for every call whose n_seqs, n_tokens and max_context are at most a's
// (same heads, head_dim and tensor_cores), so a workspace sized once for the largest step serves
// all steps (at most 512 blocks' partials: 512 * 64 rows * (head_dim + 2) floats, 16.3 MiB at
// head_dim 128).
// Needs no GPU.
size_t attention_prefill_workspace_bytes(const AttentionPrefillArgs& a);

// The key splits attention_prefill uses for a (1: unsplit; always 1 for the CUDA-core kernel).
// With key_splits = 0 this may query the device's SM count (once per process, no sync).
// Throws rz::Error for a key_splits outside [0, 64].
int attention_prefill_key_splits(const AttentionPrefillArgs& a);

// q, out: device [n_tokens, n_head, head_dim] fp32
// block_tables: device [n_seqs, table_stride] int32; cu_seqlens: device [n_seqs + 1] int32,
//   non-decreasing from 0 to n_tokens; seq_context_lens: device [n_seqs] int32
// Rows of tokens that no valid sequence covers, sequences with fewer cached tokens than query
// tokens or more than max_context, and bad block ids give NaN (never an out-of-bounds access);
// a bad block id poisons the rows of every query tile whose keys reach it (a tile is up to 64
// (token, head) rows of one sequence, so some earlier tokens of that sequence may be NaN too).
// out is written in full (NaN first, then the valid rows), or with fill_uncovered = false only
// where valid sequences' tiles are.
// out_f16: null, or device [n_tokens, n_head * head_dim] fp16 (4-byte aligned): out's fp16 form
//   for the output projection's cuBLAS path, byte for byte convert_to_half of out (kernels/
//   act_forms.hpp's f16 form), written by the tensor-core kernels themselves (the CUDA-core kernel
//   converts after it). Only with fill_uncovered (every row the call's); uncovered rows NaN too.
// Throws rz::Error for bad shapes; n_tokens == 0 launches nothing.
void attention_prefill(const float* q, const uint16_t* k_cache, const uint16_t* v_cache,
                       const int32_t* block_tables, const int32_t* cu_seqlens,
                       const int32_t* seq_context_lens, float* out, void* workspace,
                       const AttentionPrefillArgs& a, cudaStream_t stream, void* out_f16 = nullptr);

}  // namespace rz::gpu
