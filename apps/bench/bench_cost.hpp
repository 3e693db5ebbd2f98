// What a step of a model must move and compute, counted before anything is timed (rz bench:
// bench_runner.cpp counts each workload with it; bench_figures.hpp turns the counts and the
// measured times into MBU and TFLOP/s).
//
// Bytes a decode step must read = the weights (every matrix once, ModelWeights::matrix_bytes: the
// output matrix included, the token embedding only when it is the tied output matrix; gathering
// B embedding rows and the norm vectors are left out) + the KV cache of every slot: for each slot
// (tokens in it, the new one included) x n_layer x 2 (K and V) x n_head_kv x head_dim x the KV
// element size (fp16 on cuda, fp32 on the cpu).
//
// FLOPs of a step (multiply-add = 2): 2 x P_layers x tokens + 2 x P_out x sampled
// + 4 x n_layer x n_head x head_dim x (query, key) pairs, where P_layers = n_layer x (n_embd x
// (q_dim + 2 kv_dim) + q_dim x n_embd + 3 x n_embd x n_ff) are the per-layer matrices' elements,
// P_out = n_vocab x n_embd (only sampled tokens go through the output matrix), and a token at
// position p attends to p + 1 keys (QK^T and PV, 2 x head_dim each per head). A prefill of n
// tokens from an empty slot: 2 P_layers n + 2 P_out + 2 n_layer n_head head_dim n (n + 1).
// Norms, RoPE, softmax, SwiGLU and biases are left out (under 1 % for these models).
#pragma once
#include <cstddef>
#include <string>

#include "formats/model_config.hpp"

namespace rz::bench {

struct ModelCost {
  double weight_bytes = 0;         // matrix bytes one decode step reads
  double kv_bytes_per_token = 0;   // K and V of one token, all layers
  double layer_params = 0;         // P_layers
  double output_params = 0;        // P_out
  double attn_flops_per_pair = 0;  // 4 x n_layer x n_head x head_dim
};

// `weight_bytes`: ModelWeights::matrix_bytes(); `kv_element_bytes`: 2 (fp16) or 4 (fp32).
ModelCost model_cost(const ModelConfig& c, double weight_bytes, int kv_element_bytes);

// The KV element size of an executor: cuda fp16 (gpu/gpu_executor.hpp), cpu fp32
// (cpu/cpu_executor.hpp).
int kv_element_bytes(const std::string& device);

// FLOPs of one step computing `tokens` tokens that attend over `pairs` (query, key) pairs in all
// and sample `sampled` tokens.
double step_flops(const ModelCost& m, double tokens, double pairs, double sampled);
// A prefill of `n` tokens into an empty slot (the last one sampled).
double prefill_flops(const ModelCost& m, int n);
// Mean tokens held by B slots over `steps` decode steps that start with `len0` tokens in each
// slot: at step i (0-based) each slot holds len0 + i + 1, the new token included.
double mean_kv_tokens(int batch, int len0, int steps);
// All FLOPs of those steps.
double decode_flops(const ModelCost& m, int batch, int len0, int steps);
// Bytes one of those steps reads on average: weights + the mean KV cache.
double decode_bytes_per_step(const ModelCost& m, int batch, int len0, int steps);

}  // namespace rz::bench
