// Gathering and checking the weights both executors read (see model_weights.hpp).
#include "model/model_weights.hpp"

#include <initializer_list>
#include <string>

#include "formats/common.hpp"
#include "quants/quants.hpp"

namespace rz {
namespace {

std::string shape_str(const TensorView& t) {
  std::string s = "[";
  for (int i = 0; i < t.n_dims; ++i) s += (i ? ", " : "") + std::to_string(t.ne[i]);
  return s + "]";
}

const TensorView& matrix(const ModelFile& f, const std::string& name, int64_t rows, int64_t cols) {
  const TensorView& t = f.require(name);
  if (t.cols() != cols || t.rows() != rows)
    throw file_error(f.path(), name + " has shape " + shape_str(t) + ", expected [" +
                                   std::to_string(cols) + ", " + std::to_string(rows) + "]");
  if (!type_traits(t.type).can_dequantize)
    throw file_error(f.path(), name + " has type " + std::string(type_traits(t.type).name) +
                                   ", which rz cannot decode");
  return t;
}

std::vector<float> vec(const ModelFile& f, const std::string& name, int64_t n) {
  const TensorView& t = f.require(name);
  if (t.n_elements() != n)
    throw file_error(
        f.path(), name + " has shape " + shape_str(t) + ", expected [" + std::to_string(n) + "]");
  if (!type_traits(t.type).can_dequantize || n % type_traits(t.type).block_size != 0)
    throw file_error(f.path(),
                     name + " has unsupported type " + std::string(type_traits(t.type).name));
  std::vector<float> out(n);
  dequantize_row(t.type, t.data, out.data(), n);
  return out;
}

// Rows [first, first + n) of matrix t, kept alive by `owner`.
const TensorView* row_range(std::vector<std::unique_ptr<TensorView>>& owner, const TensorView& t,
                            int64_t first, int64_t n, const std::string& part) {
  auto v = std::make_unique<TensorView>(t);
  v->name = t.name + "[" + part + "]";
  v->n_dims = 2;
  v->ne = {t.cols(), n, 1, 1};
  v->data = t.row(first);
  v->nbytes = size_t(n) * t.row_bytes();
  owner.push_back(std::move(v));
  return owner.back().get();
}

}  // namespace

ModelWeights ModelWeights::load(const ModelFile& f) {
  const ModelConfig& c = f.config();
  // An RMSNorm weight, with the config's offset added (gemma's 1 + w) in fp32 as transformers.
  const auto norm = [&](const std::string& name, int64_t n) {
    std::vector<float> v = vec(f, name, n);
    if (c.norm_weight_add != 0.0f)
      for (float& x : v) x += c.norm_weight_add;
    return v;
  };
  const int64_t q_dim = int64_t{c.n_head} * c.head_dim, kv_dim = int64_t{c.n_head_kv} * c.head_dim;
  ModelWeights w;
  w.token_embd = &matrix(f, "token_embd.weight", c.n_vocab, c.n_embd);
  w.output_norm = norm("output_norm.weight", c.n_embd);
  const TensorView* out = f.find_tensor("output.weight");
  w.output = out ? &matrix(f, "output.weight", c.n_vocab, c.n_embd) : w.token_embd;
  for (int i = 0; i < c.n_layer; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    LayerWeights l;
    l.attn_norm = norm(p + "attn_norm.weight", c.n_embd);
    if (c.fused_qkv_gate_up) {
      const TensorView& qkv = matrix(f, p + "attn_qkv.weight", q_dim + 2 * kv_dim, c.n_embd);
      l.wq = row_range(w.row_ranges, qkv, 0, q_dim, "q");
      l.wk = row_range(w.row_ranges, qkv, q_dim, kv_dim, "k");
      l.wv = row_range(w.row_ranges, qkv, q_dim + kv_dim, kv_dim, "v");
      const TensorView& gu = matrix(f, p + "ffn_up.weight", 2 * int64_t{c.n_ff}, c.n_embd);
      l.w_gate = row_range(w.row_ranges, gu, 0, c.n_ff, "gate");
      l.w_up = row_range(w.row_ranges, gu, c.n_ff, c.n_ff, "up");
    } else {
      l.wq = &matrix(f, p + "attn_q.weight", q_dim, c.n_embd);
      l.wk = &matrix(f, p + "attn_k.weight", kv_dim, c.n_embd);
      l.wv = &matrix(f, p + "attn_v.weight", kv_dim, c.n_embd);
      l.w_gate = &matrix(f, p + "ffn_gate.weight", c.n_ff, c.n_embd);
      l.w_up = &matrix(f, p + "ffn_up.weight", c.n_ff, c.n_embd);
    }
    if (c.qk_norm) {
      l.q_norm = norm(p + "attn_q_norm.weight", c.head_dim);
      l.k_norm = norm(p + "attn_k_norm.weight", c.head_dim);
    }
    if (c.qkv_bias) {
      l.bq = vec(f, p + "attn_q.bias", q_dim);
      l.bk = vec(f, p + "attn_k.bias", kv_dim);
      l.bv = vec(f, p + "attn_v.bias", kv_dim);
    }
    l.wo = &matrix(f, p + "attn_output.weight", c.n_embd, q_dim);
    l.ffn_norm = norm(p + "ffn_norm.weight", c.n_embd);
    if (c.post_norms) {
      l.post_attn_norm = norm(p + "post_attention_norm.weight", c.n_embd);
      l.post_ffn_norm = norm(p + "post_ffw_norm.weight", c.n_embd);
    }
    l.w_down = &matrix(f, p + "ffn_down.weight", c.n_embd, c.n_ff);
    w.layers.push_back(std::move(l));
  }
  return w;
}

bool fp8_converts(GgmlType type, int64_t rows, int64_t cols) {
  return (type == GgmlType::F16 || type == GgmlType::BF16) && rows > 0 && rows % 16 == 0 &&
         cols > 0 && cols % 16 == 0;
}

size_t ModelWeights::matrix_bytes(bool fp8) const {
  const auto bytes = [fp8](const TensorView* t) {
    return fp8 && fp8_converts(t->type, t->rows(), t->cols())
               ? size_t(t->rows()) * size_t(t->cols() + 4)
               : t->nbytes;
  };
  size_t n = output->nbytes;
  for (const auto& l : layers)
    for (const TensorView* t : {l.wq, l.wk, l.wv, l.wo, l.w_gate, l.w_up, l.w_down}) n += bytes(t);
  return n;
}

}  // namespace rz
