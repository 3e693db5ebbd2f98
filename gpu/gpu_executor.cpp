// The CUDA executor (see gpu_executor.hpp): set-up and memory plan, slot bookkeeping, request
// checks and the step's entry point. The forward pass itself is in gpu_forward.cpp.
#include "gpu/gpu_executor.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <string>
#include <utility>

#include "formats/common.hpp"
#include "gpu/gpu_executor_impl.hpp"
#include "gpu/matmul_path.hpp"
#include "kernels/argmax.hpp"
#include "kernels/gemv_q8.hpp"
#include "kernels/qmm.hpp"
#include "kernels/rope.hpp"
#include "model/executor_checks.hpp"
#include "model/rope_freqs.hpp"

namespace rz::gpu {
namespace {

std::string gib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", double(bytes) / double(size_t{1} << 30));
  return buf;
}

}  // namespace

std::string GpuMemoryPlan::summary() const {
  return device_name + " (" + gib(total_bytes) + ", " + gib(free_at_start) + " free): weights " +
         gib(weight_bytes) +
         (fp8_matrices > 0 ? " (" + std::to_string(fp8_matrices) + " matrices FP8)" : "") +
         (fp16_copy_bytes > 0 ? " + fp16 copies " + gib(fp16_copy_bytes) : "") + ", scratch " +
         gib(scratch_bytes) + ", KV cache " + gib(kv_bytes) + " = " + std::to_string(kv_blocks) +
         " blocks x " + std::to_string(kv_block_size) + " tokens (" +
         std::to_string(kv_blocks * kv_block_size) + " tokens); " + std::to_string(slots) +
         " slots, context " + std::to_string(max_context) +
         (gemm_tuned_buckets > 0
              ? "; GEMM tuned at load: " + std::to_string(gemm_tuned_lt) + " of " +
                    std::to_string(gemm_tuned_buckets) + " shape buckets on cuBLASLt kernels (" +
                    std::to_string(int(gemm_tune_seconds * 1e3)) + " ms)"
              : "");
}

std::string GpuGraphStats::summary() const {
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "CUDA graphs: %d captured (%.2f ms each), instantiated in %.2f ms each (at most "
                "%.2f); %lld passes replayed (%lld from a larger graph while their own was "
                "built), %lld run kernel by kernel; %d evicted",
                captured, captured > 0 ? capture_ms / captured : 0.0,
                captured > building ? instantiate_ms / (captured - building) : 0.0,
                max_instantiate_ms, static_cast<long long>(replays),
                static_cast<long long>(covered), static_cast<long long>(plain), evicted);
  std::string out = buf;
  if (failed > 0) out += "; " + std::to_string(failed) + " failed to build (" + last_error + ")";
  return out;
}

GpuExecutor::Impl::Impl(std::shared_ptr<const ModelFile> f, const GpuExecutorOptions& o)
    : file(std::move(f)), cfg(file->config()), opt(o) {
  if (opt.slots < 1) throw Error("cuda executor: slots must be at least 1");
  if (opt.kv_block_size < 1) throw Error("cuda executor: kv block size must be at least 1");
  if (!(opt.kv_memory_fraction > 0.0 && opt.kv_memory_fraction <= 1.0))
    throw Error("cuda executor: the KV memory fraction must be in (0, 1]");
  if (cfg.n_rot > cfg.head_dim || cfg.n_rot % 2 != 0)
    throw file_error(file->path(), "rotary dimensions " + std::to_string(cfg.n_rot) +
                                       " do not fit head_dim " + std::to_string(cfg.head_dim));
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
    cudaGetLastError();
    throw Error("cuda executor: no CUDA device");
  }
  if (opt.device < 0 || opt.device >= n_dev)
    throw Error("cuda executor: device " + std::to_string(opt.device) + " out of range (" +
                std::to_string(n_dev) + " present)");
  RZ_CUDA_CHECK(cudaSetDevice(opt.device));
  cudaDeviceProp prop{};
  RZ_CUDA_CHECK(cudaGetDeviceProperties(&prop, opt.device));
  plan.device_name = prop.name;
  RZ_CUDA_CHECK(cudaMemGetInfo(&plan.free_at_start, &plan.total_bytes));

  max_ctx = opt.max_context > 0 ? opt.max_context : default_context(cfg);
  q_dim = int64_t{cfg.n_head} * cfg.head_dim;
  kv_dim = int64_t{cfg.n_head_kv} * cfg.head_dim;
  cap = std::max(std::max(opt.max_step_tokens, opt.slots), 1);
  cap = std::min(cap, 65535);  // attention_prefill's limit per call
  table_stride = (max_ctx + opt.kv_block_size - 1) / opt.kv_block_size;

  RZ_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  RZ_CUDA_CHECK(cudaStreamCreateWithFlags(&attn_side, cudaStreamNonBlocking));
  RZ_CUDA_CHECK(cudaEventCreateWithFlags(&attn_fork, cudaEventDisableTiming));
  RZ_CUDA_CHECK(cudaEventCreateWithFlags(&attn_join, cudaEventDisableTiming));
  if (opt.fp8_weights && prop.major * 10 + prop.minor < 89)
    throw Error("cuda executor: FP8 weights need compute capability 8.9 or later; " +
                plan.device_name + " has " + std::to_string(prop.major) + "." +
                std::to_string(prop.minor));
  w = GpuWeights::upload(*file, opt.fp8_weights);
  plan.weight_bytes = w.bytes;
  plan.fp8_matrices = w.fp8_matrices;
  if (opt.fp16_copies &&
      double(w.f16_copy_bytes()) <= opt.fp16_copies_max_share * double(plan.total_bytes))
    plan.fp16_copy_bytes = w.keep_f16_copies();
  gemm = std::make_unique<Gemm>(stream);
  qmm_wide = opt.qmm && qmm_runs_wide(kQmmMaxTokens);

  const RopeFreqs rf = RopeFreqs::make(cfg);
  inv_freq = DeviceBuffer<float>(rf.inv_freq.size());
  inv_freq.upload(rf.inv_freq);
  attn_factor = rf.attn_factor;
  rope_cs = DeviceBuffer<float>(size_t(max_ctx) * cfg.n_rot);
  rope_cs_table(inv_freq.get(), cfg.n_rot, attn_factor, max_ctx, rope_cs.get(), stream);
  if (cfg.rope_theta_swa > 0) {
    const RopeFreqs local = RopeFreqs::make_swa(cfg);
    inv_freq_swa = DeviceBuffer<float>(local.inv_freq.size());
    inv_freq_swa.upload(local.inv_freq);
    rope_cs_swa = DeviceBuffer<float>(size_t(max_ctx) * cfg.n_rot);
    rope_cs_table(inv_freq_swa.get(), cfg.n_rot, local.attn_factor, max_ctx, rope_cs_swa.get(),
                  stream);
  }
  RZ_CUDA_CHECK(cudaDeviceSynchronize());

  allocate_scratch();
  tune_gemms();
  plan_kv_cache();
  slots.resize(opt.slots);
  plan.slots = opt.slots;
  plan.max_context = max_ctx;
  if (opt.cuda_graphs && opt.graphs_in_background) {
    builder = std::make_unique<GraphBuilder>(opt.device);
    warm_graphs();
  }
}

GpuExecutor::Impl::~Impl() {
  builder.reset();  // its thread joined, the graphs not taken back destroyed
  for (auto& [key, g] : graphs) cudaGraphExecDestroy(g.exec);
  if (stream) {
    cudaStreamSynchronize(stream);
    gemm.reset();
    cudaStreamDestroy(stream);
  }
  if (attn_side) {
    cudaStreamSynchronize(attn_side);
    cudaStreamDestroy(attn_side);
  }
  if (attn_fork) cudaEventDestroy(attn_fork);
  if (attn_join) cudaEventDestroy(attn_join);
}

void GpuExecutor::Impl::allocate_scratch() {
  const int64_t E = cfg.n_embd, FF = cfg.n_ff, V = cfg.n_vocab, S = opt.slots;
  size_t bytes = 0;
  auto f32 = [&](DeviceBuffer<float>& b, int64_t n) {
    b = DeviceBuffer<float>(size_t(n));
    bytes += b.bytes();
  };
  f32(x, cap * E);
  f32(xn, cap * E);
  f32(tmp, cap * E);
  f32(q, cap * q_dim);
  f32(att, cap * q_dim);
  f32(k, cap * kv_dim);
  f32(v, cap * kv_dim);
  f32(gate, cap * FF);
  f32(up, cap * FF);
  f32(qkv, cap * (q_dim + 2 * kv_dim));
  f32(gu, cap * 2 * FF);
  f32(last, S * E);
  f32(last_norm, S * E);
  f32(logits, S * V);
  x16 = DeviceBuffer<uint16_t>(size_t(cap) * w.max_cols());
  bytes += x16.bytes();
  // Dequantized weights for the GEMM path, a slice of rows at a time (64 Mi elements at most).
  // At least 256 rows of the widest matrix, so that a slice can start on a 256-byte boundary.
  // None when every quantized matrix has its fp16 copy.
  w16_elems =
      plan.fp16_copy_bytes > 0
          ? 0
          : std::min<int64_t>(w.max_matrix_elems(),
                              std::max<int64_t>(opt.gemm_scratch_elems, 256 * w.max_cols()));
  w16 = DeviceBuffer<uint16_t>(size_t(w16_elems));
  bytes += w16.bytes();
  const int64_t qmm_n = std::min<int64_t>(cap, kQmmMaxTokens);
  if (opt.qmm) {
    size_t ws_floats = 0;
    w.for_each_matrix([&](const DeviceMatrix& m) {
      if (qmm_supported(m.type, m.cols))
        ws_floats = std::max(ws_floats, qmm_workspace_floats(m.rows, m.cols, qmm_n));
    });
    qmm_x = DeviceBuffer<uint16_t>(size_t(qmm_x_elems(qmm_n, w.max_cols())));
    qmm_ws = DeviceBuffer<float>(std::max<size_t>(ws_floats, 1));
    bytes += qmm_x.bytes() + qmm_ws.bytes();
    if (cfg.n_ff % kQmmChunk == 0) {  // qmm_gated's output form (16 tokens at most)
      qmm_x_gated = DeviceBuffer<uint16_t>(
          size_t(qmm_x_elems(std::min<int64_t>(qmm_n, kQmmDirectMaxTokens), cfg.n_ff)));
      bytes += qmm_x_gated.bytes();
    }
  }
  if (opt.int8_activations) {
    int64_t q8_cols = 0;  // the widest input a gemv_q8 type reads
    w.for_each_matrix([&](const DeviceMatrix& m) {
      if (gemv_q8_supported(m.type, 1)) q8_cols = std::max(q8_cols, m.cols);
    });
    if (q8_cols > 0) {
      q8_x = DeviceBuffer<uint8_t>(q8_activation_bytes(kGemvQ8MaxBatch, q8_cols));
      bytes += q8_x.bytes();
    }
  }

  if (w.fp8_matrices > 0) {
    int64_t cols = 0;  // the widest input an FP8 matrix reads
    w.for_each_matrix([&](const DeviceMatrix& m) {
      if (m.fp8) cols = std::max(cols, m.cols);
    });
    fp8_x = DeviceBuffer<uint8_t>(size_t(cap) * size_t(cols));
    fp8_x_scale = DeviceBuffer<float>(size_t(cap));
    bytes += fp8_x.bytes() + fp8_x_scale.bytes();
  }

  AttentionDecodeArgs da;
  da.n_slots = std::max(opt.slots, std::min(cap, kMaxAttnRows));  // decode-attention rows
  da.n_head = cfg.n_head;
  da.max_context = max_ctx;
  da.table_stride = table_stride;
  da.cache = KvCacheShape{1, cfg.n_head_kv, opt.kv_block_size, cfg.head_dim};
  AttentionPrefillArgs pa;
  pa.n_seqs = opt.slots;
  pa.n_tokens = cap;
  pa.n_head = cfg.n_head;
  pa.cache = da.cache;
  pa.max_context = max_ctx;
  pa.table_stride = table_stride;
  // The two attentions of a pass may run at once (attn_side): a workspace each.
  attn_prefill_ws = (attention_decode_workspace_floats(da) * sizeof(float) + 255) / 256 * 256;
  const size_t attn_bytes = attn_prefill_ws + attention_prefill_workspace_bytes(pa);
  attn_ws = DeviceBuffer<uint8_t>(std::max<size_t>(attn_bytes, 256));
  bytes += attn_ws.bytes();
  argmax_ws_bytes = argmax_workspace_bytes(opt.slots, cfg.n_vocab);
  argmax_ws = DeviceBuffer<uint8_t>(std::max<size_t>(argmax_ws_bytes, 256));
  bytes += argmax_ws.bytes() + rope_cs.bytes() + rope_cs_swa.bytes();
  sample_ws_bytes = sample_rows_workspace_bytes(opt.slots, cfg.n_vocab);
  sample_ws = DeviceBuffer<uint8_t>(std::max<size_t>(sample_ws_bytes, 256));
  bytes += sample_ws.bytes();

  // Per-step arguments: one pinned host buffer, copied up in one transfer.
  // Tables: one row per slot, and one for the pad rows of a pass (gpu_forward.cpp). Penalty
  // entries: a slot's distinct history ids (at most its context) and its logit bias.
  args_layout = StepArgsLayout::make(cap, opt.slots + 1, table_stride,
                                     int64_t(opt.slots) * (max_ctx + kMaxLogitBias));
  args_dev = DeviceBuffer<uint8_t>(args_layout.total);
  bytes += args_dev.bytes();
  void* h = nullptr;
  RZ_CUDA_CHECK(cudaMallocHost(&h, args_layout.total));
  args_host.reset(static_cast<uint8_t*>(h));
  void* ho = nullptr;
  RZ_CUDA_CHECK(cudaMallocHost(&ho, sizeof(int32_t) * size_t(opt.slots)));
  out_host.reset(static_cast<int32_t*>(ho));
  out_dev = DeviceBuffer<int32_t>(size_t(opt.slots));
  void* hl = nullptr;
  RZ_CUDA_CHECK(cudaMallocHost(&hl, sizeof(LogprobsRow) * size_t(opt.slots)));
  lp_host.reset(static_cast<LogprobsRow*>(hl));
  lp_dev = DeviceBuffer<LogprobsRow>(size_t(opt.slots));
  penalty_raw = DeviceBuffer<float>(size_t(std::max<int64_t>(args_layout.max_penalty, 1)));
  bytes += lp_dev.bytes() + penalty_raw.bytes();
  plan.scratch_bytes = bytes;
}

void GpuExecutor::Impl::tune_gemms() {
  if (!opt.tune_gemm) return;
  const auto t0 = std::chrono::steady_clock::now();
  const int n_cap = std::min(cap, kGemmTuneMaxTokens);
  // The token range each distinct fp16 shape takes the GEMM path at (the output matrix only
  // for the sampled rows: at most one per slot).
  struct Job {
    const void* w16;
    int64_t rows, cols;
    int n_lo, n_hi;
  };
  std::vector<Job> jobs;
  std::set<std::pair<int64_t, int64_t>> seen;
  int64_t y_elems = 0;
  const DeviceMatrix* out = &w.output();
  w.for_each_matrix([&](const DeviceMatrix& m) {
    if (m.rows == 0 || m.fp8 || m.type == GgmlType::F32) return;
    if (m.type != GgmlType::F16 && !m.has_f16_copy()) return;  // dequantized per call: not tuned
    const int n_hi = &m == out ? std::min(n_cap, opt.slots) : n_cap;
    int n_lo = 1;
    while (n_lo <= n_hi && path_of(m, n_lo) != MatmulPath::gemm) ++n_lo;
    if (n_lo > n_hi || !seen.insert({m.rows, m.cols}).second) return;
    jobs.push_back(
        {m.type == GgmlType::F16 ? m.ptr() : m.f16_copy.get(), m.rows, m.cols, n_lo, n_hi});
    y_elems = std::max(y_elems, m.rows * int64_t(n_hi));
  });
  if (jobs.empty()) return;
  DeviceBuffer<float> y{static_cast<size_t>(y_elems)};  // freed before the KV cache is sized
  RZ_CUDA_CHECK(cudaMemsetAsync(x16.get(), 0, x16.bytes(), stream));
  for (const Job& j : jobs) {
    const Gemm::TuneCount c =
        gemm->tune_x16(HalfType::f16, j.w16, x16.get(), y.get(), j.rows, j.cols, j.n_lo, j.n_hi);
    plan.gemm_tuned_buckets += c.buckets;
    plan.gemm_tuned_lt += c.lt;
  }
  plan.gemm_tune_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void GpuExecutor::Impl::plan_kv_cache() {
  const int bs = opt.kv_block_size;
  const size_t block_bytes =
      2 * size_t(cfg.n_layer) * size_t(cfg.n_head_kv) * size_t(bs) * size_t(cfg.head_dim) * 2;
  const int64_t per_slot = table_stride;  // blocks of one full context
  const int64_t useful = per_slot * opt.slots;
  int64_t blocks = 0;
  if (opt.kv_blocks > 0) {
    blocks = opt.kv_blocks;
  } else {
    size_t free_now = 0, total = 0;
    RZ_CUDA_CHECK(cudaMemGetInfo(&free_now, &total));
    const auto budget = size_t(double(free_now) * opt.kv_memory_fraction);
    blocks = std::min<int64_t>(int64_t(budget / block_bytes), useful);
  }
  blocks = std::min<int64_t>(blocks, 1 << 30);
  if (blocks < per_slot)
    throw Error("cuda executor: device memory for " + std::to_string(blocks) + " KV blocks of " +
                std::to_string(bs) + " tokens, fewer than one context of " +
                std::to_string(max_ctx) + " tokens needs (" + std::to_string(per_slot) +
                "); lower --context or raise the memory fraction");
  // One block more than the scheduler gets: the pad rows of a padded pass write there.
  pad_block = int(blocks);
  shape = KvCacheShape{int(blocks) + 1, cfg.n_head_kv, bs, cfg.head_dim};
  k_cache = DeviceBuffer<uint16_t>(size_t(cfg.n_layer) * size_t(shape.layer_elems()));
  v_cache = DeviceBuffer<uint16_t>(size_t(cfg.n_layer) * size_t(shape.layer_elems()));
  plan.kv_blocks = blocks;
  plan.kv_block_size = bs;
  plan.kv_bytes = k_cache.bytes() + v_cache.bytes();
}

SlotView GpuExecutor::Impl::slot_view() const {
  SlotView v;
  v.n_slots = int(slots.size());
  v.max_context = max_ctx;
  v.n_vocab = cfg.n_vocab;
  v.kv_block_size = shape.block_size;
  v.kv_blocks = pad_block;
  v.active = [this](int s) { return slots[s].active; };
  v.length = [this](int s) { return static_cast<int>(slots[s].history.size()); };
  return v;
}

void GpuExecutor::Impl::release(int slot) {
  check_slot(slot, int(slots.size()), "release");
  Slot& s = slots[slot];
  s.active = false;
  s.history.clear();
  s.logits.clear();
}

std::vector<int32_t> GpuExecutor::Impl::step(std::span<const StepSeq> seqs) {
  check_step(seqs, slot_view());
  step_logprobs.clear();
  if (seqs.empty()) return {};
  // A decode step: one token per entry, each sampled (the CUDA-graph path). Anything else runs
  // through the packed prefill attention.
  bool decode = true;
  for (const StepSeq& e : seqs) decode = decode && e.tokens.size() == 1 && e.sample;
  for (const StepSeq& e : seqs) {
    Slot& s = slots[e.slot];
    if (e.begin) {
      s.active = true;
      s.history = e.cached;
      s.sampling = e.sampling;
      s.rng.seed(e.sampling.seed);
      s.prompt_len = -1;
      s.logits.clear();
    }
    s.history.insert(s.history.end(), e.tokens.begin(), e.tokens.end());
  }
  try {
    return run_passes(seqs, decode);
  } catch (...) {
    // The step's slots are in an unknown state: free them (the caller fails their requests).
    cudaStreamSynchronize(stream);
    for (const StepSeq& e : seqs) release(e.slot);
    throw;
  }
}

// ---- the public class forwards to Impl ----

GpuExecutor::GpuExecutor(std::shared_ptr<const ModelFile> file, const GpuExecutorOptions& opt)
    : impl_(std::make_unique<Impl>(std::move(file), opt)) {}
GpuExecutor::~GpuExecutor() = default;
const ModelConfig& GpuExecutor::config() const { return impl_->cfg; }
int GpuExecutor::max_slots() const { return static_cast<int>(impl_->slots.size()); }
int GpuExecutor::max_context() const { return impl_->max_ctx; }
int GpuExecutor::kv_block_size() const { return impl_->shape.block_size; }
int64_t GpuExecutor::kv_blocks() const { return impl_->pad_block; }
std::vector<int32_t> GpuExecutor::step(std::span<const StepSeq> seqs) { return impl_->step(seqs); }
void GpuExecutor::release(int slot) { impl_->release(slot); }
bool GpuExecutor::slot_active(int slot) const {
  return slot >= 0 && slot < max_slots() && impl_->slots[slot].active;
}
int GpuExecutor::slot_length(int slot) const {
  check_slot(slot, max_slots(), "slot_length");
  return static_cast<int>(impl_->slots[slot].history.size());
}
void GpuExecutor::set_keep_logits(bool keep) { impl_->keep_logits = keep; }
std::span<const TokenLogprobs> GpuExecutor::step_logprobs() const { return impl_->step_logprobs; }
std::span<const float> GpuExecutor::last_logits(int slot) const {
  check_slot(slot, max_slots(), "last_logits");
  return impl_->slots[slot].logits;
}
const GpuMemoryPlan& GpuExecutor::memory_plan() const { return impl_->plan; }

GpuGraphStats GpuExecutor::graph_stats() const {
  GpuGraphStats s = impl_->graph_stats;
  s.building = static_cast<int>(impl_->building.size());
  return s;
}

std::vector<ExecutorCounter> GpuExecutor::counters() const {
  const GpuGraphStats& s = impl_->graph_stats;
  return {
      {"rz_cuda_graphs_built_total",
       "CUDA graphs captured (each step shape once; again after an "
       "eviction).",
       uint64_t(s.captured)},
      {"rz_cuda_graph_replays_total", "Forward passes launched from a CUDA graph.",
       uint64_t(s.replays)},
      {"rz_cuda_graph_cover_replays_total",
       "Forward passes launched from a larger CUDA graph while their own was being built.",
       uint64_t(s.covered)},
      {"rz_cuda_plain_passes_total",
       "Forward passes launched kernel by kernel while no CUDA graph held them.",
       uint64_t(s.plain)},
      {"rz_cuda_graph_evictions_total", "CUDA graphs destroyed to stay within the cap.",
       uint64_t(s.evicted)},
      {"rz_cuda_graph_build_failures_total",
       "CUDA graphs that failed to record or instantiate (their passes run without).",
       uint64_t(s.failed)},
  };
}

void GpuExecutor::finish_graphs() {
  if (!impl_->builder) return;
  impl_->builder->wait_idle();
  impl_->take_built();
}

}  // namespace rz::gpu
