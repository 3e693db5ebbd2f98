// Decode attention over the paged KV cache (layout in kernels/kv_cache_shape.hpp): for each slot of
// a batch, one new query token q [n_head, head_dim] fp32 attends to the slot's first L_s cached
// tokens (the new token's K/V already appended by kv_append):
//   out[h] = softmax(q[h] . K[0..L_s)^T * scale) V[0..L_s),   kv head of h = h / (n_head /
//   n_head_kv)
// K and V are fp16, everything else fp32 (fp32 accumulation, max-subtracted softmax).
//
// Flash-decoding split: the context is cut into partitions of kAttnPartition tokens (of
// kAttnSmallPartition tokens when the blocks per partition are at most kAttnSmallBatchHeads, or
// kAttnSmallBatchGroups for the grouped kernel, so that small batches still spread over the GPU's
// SMs and mid-sized ones wait on one round of loads a block, not several; of kAttnTinyPartition
// tokens for grouped launches of at most kAttnTinyBatchGroups KV-head blocks and contexts of at
// most kAttnTinyMaxParts such partitions, where a block's chain of instructions is the step's
// latency); one thread block per (KV head, slot, partition) for all the query heads sharing that
// KV head (at most 8 of them and head_dim a multiple of 8; otherwise one block per query head)
// writes that partition's max score m, sum of exp(score - m) and unnormalized output per query
// head; a second kernel combines the partitions of slots that have more than one. Grouped
// launches of at least kAttnStreamMinBlocks such blocks at kAttnPartition tokens (slots x KV
// heads x partitions of max_context) take kAttnPartition-token partitions in a kernel that
// streams each partition's keys and values through shared memory, 32-token tiles copied ahead
// of their use, with an online softmax (kernels/attention_decode_stream.cuh). Slots with a
// single partition are finished by the first kernel. The partition length is chosen from the
// shapes and max_context only (never from the lengths on the device), so a captured graph stays
// valid.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/act_forms.hpp"
#include "kernels/kv_cache_shape.hpp"
#include "kernels/qkv_post.hpp"

namespace rz::gpu {

inline constexpr int kAttnPartition = 256;         // context tokens per thread block
inline constexpr int kAttnSmallPartition = 64;     // ... for launches of few query heads:
inline constexpr int kAttnSmallBatchHeads = 256;   // blocks per partition at most this
inline constexpr int kAttnSmallBatchGroups = 512;  // ... of the grouped kernel (KV-head blocks)
inline constexpr int kAttnTinyPartition = 32;      // grouped launches of very few KV-head blocks:
inline constexpr int kAttnTinyBatchGroups = 64;    // blocks per partition at most this, and
inline constexpr int kAttnTinyMaxParts = 32;       // at most this many partitions (1,024 tokens)
inline constexpr int kAttnStreamMinBlocks = 128;   // grouped launches streaming from this many
                                                   // (KV head, slot, 256-token partition) blocks
inline constexpr int kAttnMaxHeadDim = 256;

struct AttentionDecodeArgs {
  int n_slots = 0;       // batch size (query tokens)
  int n_head = 0;        // query heads; a multiple of cache.n_head_kv
  KvCacheShape cache;    // one layer's K (and V) cache shape; head_dim even, <= 256
  int max_context = 0;   // an upper bound on every context_lens[s] (sizes grid and workspace)
  int table_stride = 0;  // int32s between consecutive slots' rows of block_tables;
                         // max_context <= table_stride * block_size
  float scale = 0.0f;    // score scale; 0 means 1 / sqrt(head_dim)
  int window = 0;        // sliding window: a slot of length L attends to its last `window`
                         // tokens [L - window, L); 0: to all of them
};

// Floats of workspace attention_decode needs: an upper bound for every launch whose n_slots and
// max_context are at most a's (same n_head and head_dim); 0 when every such launch has one
// partition (max_context <= kAttnTinyPartition; <= kAttnSmallPartition where the tiny partitions
// do not apply).
size_t attention_decode_workspace_floats(const AttentionDecodeArgs& a);

// q: device [n_slots, n_head, head_dim] fp32
// k_cache, v_cache: device, one layer's cache each, fp16 bits
// block_tables: device [n_slots, table_stride] int32, slot s's token p in block
//   block_tables[s * table_stride + p / block_size]
// context_lens: device [n_slots] int32. 0 marks an idle slot: its output is zeros. A negative
//   length marks a row that is not this call's (another kernel writes it, e.g. the prefill
//   attention's rows of a pass whose shape a CUDA graph fixes): nothing of it is written. A length
//   above max_context, or a block id outside [0, n_blocks), makes that slot's output NaN (a bug
//   upstream, never an out-of-bounds read).
//   The kernels read block_tables, context_lens (and table_rows below) before they wait for the
//   kernel launched before them in the stream (programmatic dependent launch, kernels/launch.cuh),
//   so that kernel must not write them (the executor uploads them before the step); q and the
//   caches are read after the wait.
// out: device [n_slots, n_head, head_dim] fp32
// workspace: device, attention_decode_workspace_floats(a) floats (may be null when that is 0)
// forms: the matmul input forms of out ([n_slots, n_head * head_dim], kernels/act_forms.hpp) for
//   the output projection, byte for byte what the preparation kernels make of out: written by
//   the attention kernels themselves where they run grouped (f16, qmm), else by those kernels
//   after them (and q8 always so)
// Throws rz::Error for bad shapes; n_slots == 0 launches nothing.
void attention_decode(const float* q, const uint16_t* k_cache, const uint16_t* v_cache,
                      const int32_t* block_tables, const int32_t* context_lens, float* out,
                      float* workspace, const AttentionDecodeArgs& a, cudaStream_t stream,
                      const ActForms& forms = {});

// The same for query rows that share sequences: row r reads block table row table_rows[r]
// (device [n_slots] int32, each in [0, number of table rows)) and attends to its own first
// context_lens[r] tokens. The tokens of a short prompt chunk, each at its own position, are such
// rows (causal attention by their lengths), with the split-context parallelism of decode.
void attention_decode_rows(const float* q, const uint16_t* k_cache, const uint16_t* v_cache,
                           const int32_t* block_tables, const int32_t* table_rows,
                           const int32_t* context_lens, float* out, float* workspace,
                           const AttentionDecodeArgs& a, cudaStream_t stream,
                           const ActForms& forms = {});

// A qkv_post call's inputs (kernels/qkv_post.hpp): the projection's rows, biases, positions,
// rotary frequencies, cache rows and the rest of its arguments.
struct AttentionQkv {
  const float* qkv = nullptr;
  const float* bq = nullptr;
  const float* bk = nullptr;
  const float* bv = nullptr;
  const int32_t* pos = nullptr;
  const float* inv_freq = nullptr;
  const int64_t* cache_rows = nullptr;
  QkvPostArgs args;  // n_tokens and n_head the attention's n_slots and n_head, cache its cache
};

// qkv_post(in..., q, k_cache, v_cache) and then attention_decode(q, ...) of a decode step, with
// the same results bit for bit (q, where written, the caches and out): slot s is token s of the
// qkv rows, its new token (position pos[s] = context_lens[s] - 1) at cache row cache_rows[s], the
// row its block table gives that position. Where the launch runs the grouped partitions
// (attn_decode_group_kernel, attn_detail::folds_qkv) its blocks do qkv_post's work themselves:
// each rotates its query heads' q, and the block whose partition holds a slot's new token
// computes that token's k and v for its KV head, writes them to the cache and attends to them from
// shared memory. q is then left unwritten: a kernel fewer a layer. pos is read before the wait
// for the kernel launched before (as context_lens). Throws rz::Error as qkv_post and
// attention_decode do, and when in.args does not match a.
void attention_decode_qkv(const AttentionQkv& in, float* q, uint16_t* k_cache, uint16_t* v_cache,
                          const int32_t* block_tables, const int32_t* context_lens, float* out,
                          float* workspace, const AttentionDecodeArgs& a, cudaStream_t stream,
                          const ActForms& forms = {});

namespace attn_detail {
// Test seam: whether attention_decode_qkv folds qkv_post into the attention where it can
// (initially on unless RZ_ATTN_QKV_FOLD_OFF=1); off, it runs qkv_post first.
void set_qkv_fold(bool on);
// Whether attention_decode_qkv folds qkv_post into a launch of these shapes.
bool folds_qkv(const AttentionDecodeArgs& a);
// Test seam: whether grouped launches stream (initially on unless RZ_ATTN_STREAM_OFF=1); off, the
// launches the streaming kernel would take run attn_decode_group_kernel's partitions instead.
void set_streaming(bool on);
// Whether a launch of these shapes runs the streaming kernel.
bool streams(const AttentionDecodeArgs& a);
}  // namespace attn_detail

}  // namespace rz::gpu
