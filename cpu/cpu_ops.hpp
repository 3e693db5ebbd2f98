// The non-matmul pieces of a Llama-family forward pass on the CPU, fp32: RMSNorm, rotary position
// embedding tables (plain, linear, llama3, yarn), rotation, causal attention of one query head
// over a paged KV cache, SwiGLU. Single-threaded building blocks; cpu_executor.cpp parallelises
// them.
#pragma once
#include <cstdint>
#include <vector>

#include "formats/model_config.hpp"
#include "model/rope_freqs.hpp"

namespace rz {

// y[i] = x[i] / sqrt(mean(x^2) + eps) * w[i]; y may alias x.
void rms_norm(const float* x, const float* w, float* y, int n, float eps);

// cos/sin of position `pos` for every pair: cs[2i] = cos, cs[2i + 1] = sin.  [n_rot]
void rope_table(const RopeFreqs& f, int pos, float* cs);

// Rotates one head vector in place. neox: pairs (i, i + n_rot/2); else adjacent pairs (2i, 2i+1).
void rope_apply(float* x, const float* cs, int n_rot, bool neox);

// Attention of one query head over positions [first, n_pos) of a paged cache (first > 0: a
// sliding window):
//   out = softmax(q · K[p] * scale) · V[p]
// Position p is row blocks[p / block_size] * block_size + p % block_size of the cache; k, v point
// at the head's part of row 0 and `stride` floats separate consecutive rows. (A contiguous cache
// is one block: blocks = {0}, block_size >= n_pos.) The blocks are walked in order, so the
// result does not depend on where they lie.
// blocks: [ceil(n_pos / block_size)]  scores: scratch of n_pos floats.  q, out: [head_dim]
void attend_head(const float* q, const float* k, const float* v, const int32_t* blocks,
                 int block_size, int64_t stride, int n_pos, int head_dim, float scale,
                 float* scores, float* out, int first = 0);

// gate[i] = silu(gate[i]) * up[i]
void swiglu(float* gate, const float* up, int64_t n);
// gate[i] = gelu_tanh(gate[i]) * up[i], gelu_tanh(x) = x / 2 (1 + tanh(sqrt(2 / pi) (x + 0.044715
// x^3))) (torch's gelu(approximate="tanh"), gemma's gelu_pytorch_tanh)
void geglu(float* gate, const float* up, int64_t n);
// x[i] = cap * tanh(x[i] / cap) (gemma's final logit soft-capping)
void softcap(float* x, size_t n, float cap);

float dot_f32(const float* a, const float* b, int n);

}  // namespace rz
