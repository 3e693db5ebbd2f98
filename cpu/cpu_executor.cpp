// CPU executor (see cpu_executor.hpp): slot bookkeeping, request checks, and the forward step.
#include "cpu/cpu_executor.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "cpu/cpu_matmul.hpp"
#include "cpu/cpu_ops.hpp"
#include "cpu/thread_pool.hpp"
#include "formats/common.hpp"
#include "model/executor_checks.hpp"
#include "quants/quants.hpp"

namespace rz {

CpuExecutor::CpuExecutor(std::shared_ptr<const ModelFile> file, const CpuExecutorOptions& opt)
    : file_(std::move(file)), cfg_(file_->config()), w_(ModelWeights::load(*file_)) {
  if (opt.slots < 1) throw Error("cpu executor: slots must be at least 1");
  if (cfg_.n_rot > cfg_.head_dim || cfg_.n_rot % 2 != 0)
    throw file_error(file_->path(), "rotary dimensions " + std::to_string(cfg_.n_rot) +
                                        " do not fit head_dim " + std::to_string(cfg_.head_dim));
  max_ctx_ = opt.max_context > 0 ? opt.max_context : default_context(cfg_);
  q_dim_ = int64_t{cfg_.n_head} * cfg_.head_dim;
  kv_dim_ = int64_t{cfg_.n_head_kv} * cfg_.head_dim;
  pool_ = std::make_unique<ThreadPool>(opt.threads);
  rope_ = std::make_unique<RopeFreqs>(RopeFreqs::make(cfg_));
  slots_.resize(opt.slots);
  const size_t cache_floats = size_t(cfg_.n_layer) * max_ctx_ * kv_dim_;
  for (int s = 0; s < opt.slots; ++s) {
    k_cache_.emplace_back(new float[cache_floats]);
    v_cache_.emplace_back(new float[cache_floats]);
  }
  scores_.resize(pool_->size(), std::vector<float>(max_ctx_));
}

CpuExecutor::~CpuExecutor() = default;

int CpuExecutor::threads() const { return pool_->size(); }

float* CpuExecutor::k_cache(int slot, int layer) const {
  return k_cache_[slot].get() + size_t(layer) * max_ctx_ * kv_dim_;
}
float* CpuExecutor::v_cache(int slot, int layer) const {
  return v_cache_[slot].get() + size_t(layer) * max_ctx_ * kv_dim_;
}

SlotView CpuExecutor::slot_view() const {
  return {max_slots(), max_ctx_, cfg_.n_vocab, [this](int s) { return slots_[s].active; },
          [this](int s) { return static_cast<int>(slots_[s].history.size()); }};
}

bool CpuExecutor::slot_active(int slot) const {
  return slot >= 0 && slot < max_slots() && slots_[slot].active;
}

int CpuExecutor::slot_length(int slot) const {
  check_slot(slot, max_slots(), "slot_length");
  return static_cast<int>(slots_[slot].history.size());
}

void CpuExecutor::release(int slot) {
  check_slot(slot, max_slots(), "release");
  Slot& s = slots_[slot];
  s.active = false;
  s.history.clear();
  s.logits.clear();
}

std::span<const float> CpuExecutor::last_logits(int slot) const {
  check_slot(slot, max_slots(), "last_logits");
  return slots_[slot].logits;
}

std::vector<int32_t> CpuExecutor::prefill(std::span<const PrefillRequest> reqs) {
  check_prefill(reqs, slot_view());
  if (reqs.empty()) return {};
  std::vector<Seq> seqs;
  for (const auto& r : reqs) {
    Slot& s = slots_[r.slot];
    s.active = true;
    s.history = r.tokens;
    s.sampler = Sampler(r.sampling);
    s.logits.clear();
    seqs.push_back({r.slot, static_cast<int>(r.tokens.size())});
  }
  return step(seqs);
}

std::vector<int32_t> CpuExecutor::decode(std::span<const DecodeRequest> reqs) {
  check_decode(reqs, slot_view());
  if (reqs.empty()) return {};
  std::vector<Seq> seqs;
  for (const auto& r : reqs) {
    slots_[r.slot].history.push_back(r.token);
    seqs.push_back({r.slot, 1});
  }
  return step(seqs);
}

void CpuExecutor::ensure_buffers(int n_tok, int n_seq) {
  auto grow = [](std::vector<float>& v, size_t n) {
    if (v.size() < n) v.resize(n);
  };
  const size_t N = n_tok;
  grow(x_, N * cfg_.n_embd);
  grow(xn_, N * cfg_.n_embd);
  grow(tmp_, N * cfg_.n_embd);
  grow(q_, N * q_dim_);
  grow(att_, N * q_dim_);
  grow(k_, N * kv_dim_);
  grow(v_, N * kv_dim_);
  grow(gate_, N * cfg_.n_ff);
  grow(up_, N * cfg_.n_ff);
  grow(rope_cs_, N * cfg_.n_rot);
  grow(last_, size_t(n_seq) * cfg_.n_embd);
  grow(logits_, size_t(n_seq) * cfg_.n_vocab);
}

std::vector<int32_t> CpuExecutor::step(const std::vector<Seq>& seqs) {
  const int E = cfg_.n_embd, HD = cfg_.head_dim, FF = cfg_.n_ff;
  const int n_seq = static_cast<int>(seqs.size());
  // Step token i belongs to slot tok_slot[i] at position tok_pos[i].
  std::vector<int> tok_slot, tok_pos;
  for (const auto& s : seqs) {
    const int len = static_cast<int>(slots_[s.slot].history.size());
    for (int p = len - s.n_new; p < len; ++p) {
      tok_slot.push_back(s.slot);
      tok_pos.push_back(p);
    }
  }
  const int N = static_cast<int>(tok_slot.size());
  ensure_buffers(N, n_seq);
  ThreadPool& pool = *pool_;

  // Embedding rows (dequantized) and rotary tables.
  pool.parallel_for(N, 16, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      const int32_t tok = slots_[tok_slot[i]].history[tok_pos[i]];
      dequantize_row(w_.token_embd->type, w_.token_embd->row(tok), &x_[i * E], E);
      rope_table(*rope_, tok_pos[i], &rope_cs_[i * cfg_.n_rot]);
    }
  });

  const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
  const int group = cfg_.n_head / cfg_.n_head_kv;
  for (int l = 0; l < cfg_.n_layer; ++l) {
    const LayerWeights& L = w_.layers[l];
    // Attention block: norm, Q/K/V, RoPE, cache write, attention, output projection.
    pool.parallel_for(N, 16, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i)
        rms_norm(&x_[i * E], L.attn_norm.data(), &xn_[i * E], E, cfg_.norm_eps);
    });
    const MatmulJob qkv[3] = {{L.wq, xn_.data(), q_.data(), q_dim_},
                              {L.wk, xn_.data(), k_.data(), kv_dim_},
                              {L.wv, xn_.data(), v_.data(), kv_dim_}};
    matmul(pool, qkv, N);
    pool.parallel_for(N, 16, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) {
        float* q = &q_[i * q_dim_];
        float* k = &k_[i * kv_dim_];
        float* v = &v_[i * kv_dim_];
        if (cfg_.qkv_bias) {
          for (int64_t d = 0; d < q_dim_; ++d) q[d] += L.bq[d];
          for (int64_t d = 0; d < kv_dim_; ++d) k[d] += L.bk[d], v[d] += L.bv[d];
        }
        const float* cs = &rope_cs_[i * cfg_.n_rot];
        for (int h = 0; h < cfg_.n_head; ++h)
          rope_apply(q + h * HD, cs, cfg_.n_rot, cfg_.rope_neox);
        for (int h = 0; h < cfg_.n_head_kv; ++h)
          rope_apply(k + h * HD, cs, cfg_.n_rot, cfg_.rope_neox);
        const size_t at = size_t(tok_pos[i]) * kv_dim_;
        std::memcpy(k_cache(tok_slot[i], l) + at, k, kv_dim_ * sizeof(float));
        std::memcpy(v_cache(tok_slot[i], l) + at, v, kv_dim_ * sizeof(float));
      }
    });
    // One work item per (token, head); token i sees positions 0..tok_pos[i] of its slot.
    pool.parallel_for(int64_t(N) * cfg_.n_head, 1, [&](int64_t b, int64_t e, int t) {
      for (int64_t it = b; it < e; ++it) {
        const int64_t i = it / cfg_.n_head;
        const int h = static_cast<int>(it % cfg_.n_head), kvh = h / group;
        attend_head(&q_[i * q_dim_ + h * HD], k_cache(tok_slot[i], l) + kvh * HD,
                    v_cache(tok_slot[i], l) + kvh * HD, kv_dim_, tok_pos[i] + 1, HD, scale,
                    scores_[t].data(), &att_[i * q_dim_ + h * HD]);
      }
    });
    const MatmulJob wo{L.wo, att_.data(), tmp_.data(), E};
    matmul(pool, {&wo, 1}, N);
    // Residual add, then the feed-forward block.
    pool.parallel_for(N, 16, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) {
        for (int d = 0; d < E; ++d) x_[i * E + d] += tmp_[i * E + d];
        rms_norm(&x_[i * E], L.ffn_norm.data(), &xn_[i * E], E, cfg_.norm_eps);
      }
    });
    const MatmulJob gu[2] = {{L.w_gate, xn_.data(), gate_.data(), FF},
                             {L.w_up, xn_.data(), up_.data(), FF}};
    matmul(pool, gu, N);
    pool.parallel_for(N, 4, [&](int64_t b, int64_t e, int) {
      swiglu(&gate_[b * FF], &up_[b * FF], (e - b) * FF);
    });
    const MatmulJob down{L.w_down, gate_.data(), tmp_.data(), E};
    matmul(pool, {&down, 1}, N);
    pool.parallel_for(N, 16, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b * E; i < e * E; ++i) x_[i] += tmp_[i];
    });
  }

  // Final norm and output matrix, only for the last token of each sequence.
  {
    int end = 0;
    for (int s = 0; s < n_seq; ++s) {
      end += seqs[s].n_new;
      rms_norm(&x_[size_t(end - 1) * E], w_.output_norm.data(), &last_[size_t(s) * E], E,
               cfg_.norm_eps);
    }
  }
  const MatmulJob out{w_.output, last_.data(), logits_.data(), cfg_.n_vocab};
  matmul(pool, {&out, 1}, n_seq);

  std::vector<int32_t> result;
  for (int s = 0; s < n_seq; ++s) {
    Slot& slot = slots_[seqs[s].slot];
    std::span<float> lg(&logits_[size_t(s) * cfg_.n_vocab], cfg_.n_vocab);
    if (keep_logits_) slot.logits.assign(lg.begin(), lg.end());
    result.push_back(slot.sampler.sample(lg, slot.history));
  }
  return result;
}

}  // namespace rz
