// Bytes and FLOPs of a model's steps (see bench_cost.hpp for the formulas).
#include "apps/bench/bench_cost.hpp"

namespace rz::bench {

ModelCost model_cost(const ModelConfig& c, double weight_bytes, int kv_element_bytes) {
  const double e = c.n_embd, q = double(c.n_head) * c.head_dim,
               kv = double(c.n_head_kv) * c.head_dim;
  ModelCost m;
  m.weight_bytes = weight_bytes;
  m.kv_bytes_per_token = double(c.n_layer) * 2.0 * kv * kv_element_bytes;
  m.layer_params = double(c.n_layer) * (e * (q + 2 * kv) + q * e + 3.0 * e * c.n_ff);
  m.output_params = double(c.n_vocab) * e;
  m.attn_flops_per_pair = 4.0 * c.n_layer * c.n_head * c.head_dim;
  return m;
}

int kv_element_bytes(const std::string& device) { return device == "cuda" ? 2 : 4; }

double step_flops(const ModelCost& m, double tokens, double pairs, double sampled) {
  return 2.0 * m.layer_params * tokens + 2.0 * m.output_params * sampled +
         m.attn_flops_per_pair * pairs;
}

double prefill_flops(const ModelCost& m, int n) {
  const double t = n;
  return step_flops(m, t, t * (t + 1) / 2, 1);
}

double mean_kv_tokens(int batch, int len0, int steps) {
  if (steps <= 0) return 0;
  // Sum over i < steps of batch * (len0 + i + 1), divided by steps.
  return double(batch) * (len0 + (steps + 1) / 2.0);
}

double decode_flops(const ModelCost& m, int batch, int len0, int steps) {
  const double tokens = double(batch) * steps;
  return step_flops(m, tokens, mean_kv_tokens(batch, len0, steps) * steps, tokens);
}

double decode_bytes_per_step(const ModelCost& m, int batch, int len0, int steps) {
  return m.weight_bytes + mean_kv_tokens(batch, len0, steps) * m.kv_bytes_per_token;
}

}  // namespace rz::bench
