// CPU executor (see cpu_executor.hpp): slot bookkeeping, request checks, and the forward pass.
#include "cpu/cpu_executor.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>
#include <string>

#include "cpu/cpu_matmul.hpp"
#include "cpu/cpu_ops.hpp"
#include "cpu/host_memory.hpp"
#include "cpu/thread_pool.hpp"
#include "formats/common.hpp"
#include "model/executor_checks.hpp"
#include "quants/quants.hpp"

namespace rz {

CpuExecutor::CpuExecutor(std::shared_ptr<const ModelFile> file, const CpuExecutorOptions& opt)
    : file_(std::move(file)), cfg_(file_->config()), w_(ModelWeights::load(*file_)) {
  if (opt.slots < 1) throw Error("cpu executor: slots must be at least 1");
  if (opt.kv_block_size < 0)
    throw Error("cpu executor: kv_block_size must be at least 1 (0: the default), got " +
                std::to_string(opt.kv_block_size));
  if (opt.kv_blocks < 0 || opt.kv_blocks > std::numeric_limits<int32_t>::max())
    throw Error("cpu executor: bad kv_blocks " + std::to_string(opt.kv_blocks));
  if (cfg_.n_rot > cfg_.head_dim || cfg_.n_rot % 2 != 0)
    throw file_error(file_->path(), "rotary dimensions " + std::to_string(cfg_.n_rot) +
                                        " do not fit head_dim " + std::to_string(cfg_.head_dim));
  max_ctx_ = opt.max_context > 0 ? opt.max_context : default_context(cfg_);
  block_size_ = opt.kv_block_size > 0 ? opt.kv_block_size : kDefaultKvBlockSize;
  n_blocks_ = opt.kv_blocks > 0
                  ? opt.kv_blocks
                  : int64_t{opt.slots} * ((int64_t{max_ctx_} + block_size_ - 1) / block_size_);
  q_dim_ = int64_t{cfg_.n_head} * cfg_.head_dim;
  kv_dim_ = int64_t{cfg_.n_head_kv} * cfg_.head_dim;
  pool_ = std::make_unique<ThreadPool>(opt.threads);
  rope_ = std::make_unique<RopeFreqs>(RopeFreqs::make(cfg_));
  if (cfg_.rope_theta_swa > 0) rope_swa_ = std::make_unique<RopeFreqs>(RopeFreqs::make_swa(cfg_));
  slots_.resize(opt.slots);
  const size_t cache_floats = size_t(cfg_.n_layer) * size_t(n_blocks_) * block_size_ * kv_dim_;
  // K and V in fp32: refused up front when the machine cannot hold them (new[] may succeed under
  // overcommit and the OOM killer come later, as the cache fills).
  const double cache_bytes = 2.0 * double(cache_floats) * sizeof(float);
  const auto gib = [](double bytes) {
    char s[64];
    std::snprintf(s, sizeof s, "%.1f GiB", bytes / double(1 << 30));
    return std::string(s);
  };
  const auto too_large = [&](const std::string& why) {
    return Error("cpu executor: the KV cache of " + std::to_string(opt.slots) + " slots x " +
                 std::to_string(max_ctx_) + " tokens (" + std::to_string(cfg_.n_layer) +
                 " layers, fp32 K and V) needs " + gib(cache_bytes) + ", " + why +
                 "; lower --ctx or --max-slots");
  };
  if (const auto room = host_memory_available(); room && cache_bytes > double(*room))
    throw too_large("more than the " + gib(double(*room)) + " of memory available");
  try {
    k_cache_.reset(new float[cache_floats]);
    v_cache_.reset(new float[cache_floats]);
  } catch (const std::bad_alloc&) {
    throw too_large("which could not be allocated");
  }
  scores_.resize(pool_->size(), std::vector<float>(max_ctx_));
}

CpuExecutor::~CpuExecutor() = default;

int CpuExecutor::threads() const { return pool_->size(); }

float* CpuExecutor::k_cache(int layer) const {
  return k_cache_.get() + size_t(layer) * size_t(n_blocks_) * block_size_ * kv_dim_;
}
float* CpuExecutor::v_cache(int layer) const {
  return v_cache_.get() + size_t(layer) * size_t(n_blocks_) * block_size_ * kv_dim_;
}

SlotView CpuExecutor::slot_view() const {
  return {max_slots(),
          max_ctx_,
          cfg_.n_vocab,
          block_size_,
          n_blocks_,
          [this](int s) { return slots_[s].active; },
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

std::vector<int32_t> CpuExecutor::step(std::span<const StepSeq> seqs) {
  check_step(seqs, slot_view());
  step_logprobs_.clear();
  if (seqs.empty()) return {};
  for (const StepSeq& e : seqs) {
    Slot& s = slots_[e.slot];
    if (e.begin) {
      s.active = true;
      s.sampler = Sampler(e.sampling);
      s.prompt_len = -1;
      s.history = e.cached;
      s.logits.clear();
    }
    s.history.insert(s.history.end(), e.tokens.begin(), e.tokens.end());
  }
  try {
    return forward(seqs);
  } catch (...) {
    // The histories already hold the step's tokens, whose KV may be half written.
    for (const StepSeq& e : seqs) release(e.slot);
    throw;
  }
}

void CpuExecutor::ensure_buffers(int n_tok, int n_sample) {
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
  if (rope_swa_) grow(rope_cs_swa_, N * cfg_.n_rot);
  grow(last_, size_t(n_sample) * cfg_.n_embd);
  grow(logits_, size_t(n_sample) * cfg_.n_vocab);
}

std::vector<int32_t> CpuExecutor::forward(std::span<const StepSeq> seqs) {
  const int E = cfg_.n_embd, HD = cfg_.head_dim, FF = cfg_.n_ff, BS = block_size_;
  // Step token i is tokens[j] of entry tok_seq[i], at position tok_pos[i] = start + j.
  std::vector<int> tok_seq, tok_pos;
  std::vector<int32_t> tok_id;
  // The last step token of each sampling entry.
  std::vector<int> sample_tok;
  for (size_t e = 0; e < seqs.size(); ++e) {
    const StepSeq& s = seqs[e];
    for (size_t j = 0; j < s.tokens.size(); ++j) {
      tok_seq.push_back(static_cast<int>(e));
      tok_pos.push_back(s.start + static_cast<int>(j));
      tok_id.push_back(s.tokens[j]);
    }
    if (s.sample) sample_tok.push_back(static_cast<int>(tok_seq.size()) - 1);
  }
  const int N = static_cast<int>(tok_seq.size());
  const int n_sample = static_cast<int>(sample_tok.size());
  ensure_buffers(N, n_sample);
  ThreadPool& pool = *pool_;

  // Embedding rows (dequantized) and rotary tables.
  pool.parallel_for(N, 16, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      dequantize_row(w_.token_embd->type, w_.token_embd->row(tok_id[i]), &x_[i * E], E);
      if (cfg_.embd_scale > 0)
        for (int d = 0; d < E; ++d) x_[i * E + d] *= cfg_.embd_scale;
      rope_table(*rope_, tok_pos[i], &rope_cs_[i * cfg_.n_rot]);
      if (rope_swa_) rope_table(*rope_swa_, tok_pos[i], &rope_cs_swa_[i * cfg_.n_rot]);
    }
  });

  const float scale =
      cfg_.attn_scale > 0 ? cfg_.attn_scale : 1.0f / std::sqrt(static_cast<float>(HD));
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
        if (cfg_.qk_norm) {  // in place, one head at a time
          for (int h = 0; h < cfg_.n_head; ++h)
            rms_norm(q + h * HD, L.q_norm.data(), q + h * HD, HD, cfg_.norm_eps);
          for (int h = 0; h < cfg_.n_head_kv; ++h)
            rms_norm(k + h * HD, L.k_norm.data(), k + h * HD, HD, cfg_.norm_eps);
        }
        const float* cs = &(cfg_.layer_rope_swa(l) ? rope_cs_swa_ : rope_cs_)[i * cfg_.n_rot];
        for (int h = 0; h < cfg_.n_head; ++h)
          rope_apply(q + h * HD, cs, cfg_.n_rot, cfg_.rope_neox);
        for (int h = 0; h < cfg_.n_head_kv; ++h)
          rope_apply(k + h * HD, cs, cfg_.n_rot, cfg_.rope_neox);
        const int p = tok_pos[i];
        const int64_t row = int64_t{seqs[tok_seq[i]].blocks[p / BS]} * BS + p % BS;
        std::memcpy(k_cache(l) + row * kv_dim_, k, kv_dim_ * sizeof(float));
        std::memcpy(v_cache(l) + row * kv_dim_, v, kv_dim_ * sizeof(float));
      }
    });
    // One work item per (token, head); token i sees positions 0..tok_pos[i] of its entry's
    // block table, or the layer's sliding window of them.
    const int window = cfg_.layer_window(l);
    pool.parallel_for(int64_t(N) * cfg_.n_head, 1, [&](int64_t b, int64_t e, int t) {
      for (int64_t it = b; it < e; ++it) {
        const int64_t i = it / cfg_.n_head;
        const int h = static_cast<int>(it % cfg_.n_head), kvh = h / group;
        attend_head(&q_[i * q_dim_ + h * HD], k_cache(l) + kvh * HD, v_cache(l) + kvh * HD,
                    seqs[tok_seq[i]].blocks.data(), BS, kv_dim_, tok_pos[i] + 1, HD, scale,
                    scores_[t].data(), &att_[i * q_dim_ + h * HD],
                    window > 0 ? tok_pos[i] + 1 - window : 0);
      }
    });
    const MatmulJob wo{L.wo, att_.data(), tmp_.data(), E};
    matmul(pool, {&wo, 1}, N);
    // (Post-attention norm,) residual add, then the feed-forward block.
    pool.parallel_for(N, 16, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) {
        if (cfg_.post_norms)
          rms_norm(&tmp_[i * E], L.post_attn_norm.data(), &tmp_[i * E], E, cfg_.norm_eps);
        for (int d = 0; d < E; ++d) x_[i * E + d] += tmp_[i * E + d];
        rms_norm(&x_[i * E], L.ffn_norm.data(), &xn_[i * E], E, cfg_.norm_eps);
      }
    });
    const MatmulJob gu[2] = {{L.w_gate, xn_.data(), gate_.data(), FF},
                             {L.w_up, xn_.data(), up_.data(), FF}};
    matmul(pool, gu, N);
    pool.parallel_for(N, 4, [&](int64_t b, int64_t e, int) {
      if (cfg_.act == ModelConfig::Act::GeluTanh)
        geglu(&gate_[b * FF], &up_[b * FF], (e - b) * FF);
      else
        swiglu(&gate_[b * FF], &up_[b * FF], (e - b) * FF);
    });
    const MatmulJob down{L.w_down, gate_.data(), tmp_.data(), E};
    matmul(pool, {&down, 1}, N);
    pool.parallel_for(N, 16, [&](int64_t b, int64_t e, int) {
      if (cfg_.post_norms)
        for (int64_t i = b; i < e; ++i)
          rms_norm(&tmp_[i * E], L.post_ffn_norm.data(), &tmp_[i * E], E, cfg_.norm_eps);
      for (int64_t i = b * E; i < e * E; ++i) x_[i] += tmp_[i];
    });
  }

  // Final norm and output matrix, only for the last token of each sampling entry.
  if (n_sample == 0) return {};
  for (int k = 0; k < n_sample; ++k)
    rms_norm(&x_[size_t(sample_tok[k]) * E], w_.output_norm.data(), &last_[size_t(k) * E], E,
             cfg_.norm_eps);
  const MatmulJob out{w_.output, last_.data(), logits_.data(), cfg_.n_vocab};
  matmul(pool, {&out, 1}, n_sample);
  if (cfg_.final_logit_softcap > 0)
    softcap(logits_.data(), size_t(n_sample) * cfg_.n_vocab, cfg_.final_logit_softcap);

  std::vector<int32_t> result;
  bool any_logprobs = false;
  for (int k = 0; k < n_sample; ++k)
    any_logprobs |= slots_[seqs[tok_seq[sample_tok[k]]].slot].sampler.params().logprobs >= 0;
  if (any_logprobs) step_logprobs_.assign(size_t(n_sample), TokenLogprobs{});
  for (int k = 0; k < n_sample; ++k) {
    Slot& slot = slots_[seqs[tok_seq[sample_tok[k]]].slot];
    std::span<float> lg(&logits_[size_t(k) * cfg_.n_vocab], cfg_.n_vocab);
    if (keep_logits_) slot.logits.assign(lg.begin(), lg.end());
    if (slot.prompt_len < 0) slot.prompt_len = static_cast<int>(slot.history.size());
    const size_t generated = slot.history.size() - size_t(slot.prompt_len);
    result.push_back(slot.sampler.sample(lg, slot.history, generated,
                                         any_logprobs ? &step_logprobs_[size_t(k)] : nullptr));
  }
  return result;
}

}  // namespace rz
