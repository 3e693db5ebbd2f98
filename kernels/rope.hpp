// Rotary position embedding on the GPU, applied in place to the Q and K rows of a step's tokens
// after the QKV projection (and bias), before the KV-cache write. Mirrors cpu/cpu_ops.cpp:
//   angle_i = inv_freq[i] * float(pos)          (one fp32 multiply, as rope_table)
//   c, s    = float(cos(double angle)) * attn_factor, float(sin(double angle)) * attn_factor
//   x[a], x[b] = x[a] c - x[b] s, x[a] s + x[b] c   (as rope_apply; products rounded separately)
// with pairs (a, b) = (2i, 2i+1) (normal) or (i, i + n_rot/2) (NeoX), i < n_rot/2. Elements
// n_rot..head_dim-1 of a head are left as they are.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

namespace rz::gpu {

// Per-pair inverse frequencies [n_rot / 2], computed on the host in double as RopeFreqs::make
// does and rounded to fp32 once:
//   inv_freq[i] = theta^(-2i / n_rot) / linear_factor / freq_factors[i]
// linear_factor: linear rope scaling (1 = none). freq_factors: optional [n_rot / 2] per-frequency
// divisors (GGUF rope_freqs / llama3-style), null for none. For llama3 or yarn scaling computed
// from the model config, pass RopeFreqs::make(config).inv_freq and .attn_factor instead: the
// kernel takes any table. Throws rz::Error for odd or non-positive n_rot, theta <= 0, or a
// non-positive factor.
std::vector<float> rope_inv_freq(double theta, int n_rot, double linear_factor = 1.0,
                                 const float* freq_factors = nullptr);

struct RopeArgs {
  int n_tokens = 0;
  int n_head = 0;     // query heads
  int n_head_kv = 0;  // key heads (0: no K)
  int head_dim = 0;
  int n_rot = 0;             // rotated dimensions, even, <= head_dim
  bool neox = false;         // pairs (i, i + n_rot/2) instead of (2i, 2i+1)
  float attn_factor = 1.0f;  // multiplied into cos and sin (yarn; 1 otherwise)
  // Floats between consecutive tokens' rows (0: dense, n_head * head_dim for Q and
  // n_head_kv * head_dim for K). Lets Q and K live inside one fused QKV row.
  int64_t q_row_stride = 0;
  int64_t k_row_stride = 0;
  // Optional precomputed cos/sin table (rope_cs_table, made from the same inv_freq, n_rot and
  // attn_factor): [cs_positions, n_rot] fp32. With it, one thread per (token, head, pair) reads
  // c and s instead of computing them; results are bit-identical to the table-free path. A token
  // whose position is outside [0, cs_positions) computes its c and s as without the table.
  const float* cs_table = nullptr;
  int cs_positions = 0;
};

// q: device [n_tokens, q_row_stride], head h of token t at q + t * q_row_stride + h * head_dim
// k: device [n_tokens, k_row_stride], likewise with n_head_kv heads (may be null if n_head_kv 0)
// pos: device [n_tokens] int32 positions; inv_freq: device [n_rot / 2] fp32.
// inv_freq is needed with a.cs_table too (positions outside the table use it).
// Throws rz::Error for bad shapes or strides; n_tokens == 0 launches nothing.
void rope_inplace(float* q, float* k, const int32_t* pos, const float* inv_freq, const RopeArgs& a,
                  cudaStream_t stream);

// The cos/sin table of rope_inplace's arithmetic, computed on the GPU: for p < n_pos, i < n_rot/2
//   angle = fp32(inv_freq[i] * float(p)); c = float(cos(double angle)) * attn_factor (fp32 mul)
//   cs[p * n_rot + 2i] = c, cs[p * n_rot + 2i + 1] = s (likewise with sin)
// inv_freq: device [n_rot / 2]; cs: device [n_pos, n_rot] fp32 (131072 positions x 128: 64 MiB).
// Throws rz::Error for odd or non-positive n_rot, n_pos < 0, or null pointers; n_pos == 0
// launches nothing. Asynchronous on `stream`, no allocation.
void rope_cs_table(const float* inv_freq, int n_rot, float attn_factor, int n_pos, float* cs,
                   cudaStream_t stream);

}  // namespace rz::gpu
