// The CUDA executor's step (see gpu_executor.hpp): passes of at most `cap` tokens through the
// layers, then the output matrix and sampling for the sequences whose last token was in the pass.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <string>

#include "gpu/cuda_check.hpp"
#include "gpu/gpu_executor_impl.hpp"
#include "gpu/matmul_path.hpp"
#include "kernels/add_rmsnorm.hpp"
#include "kernels/argmax.hpp"
#include "kernels/bias.hpp"
#include "kernels/dequant.hpp"
#include "kernels/embedding.hpp"
#include "kernels/fp8.hpp"
#include "kernels/gemv.hpp"
#include "kernels/gemv_q8.hpp"
#include "kernels/qkv_post.hpp"
#include "kernels/qmm.hpp"
#include "kernels/residual.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/softcap.hpp"
#include "kernels/swiglu.hpp"
#include "kernels/swiglu_rows.hpp"

namespace rz::gpu {
namespace {

size_t align256(size_t x) { return (x + 255) / 256 * 256; }

// The matrices that read a layer's attention-norm output.
std::array<const DeviceMatrix*, 3> qkv_inputs(const GpuLayerWeights& L) {
  if (L.fused_qkv) return {&L.wqkv, nullptr, nullptr};
  if (L.fused_qk) return {&L.wqk, &L.wv, nullptr};
  return {&L.wq, &L.wk, &L.wv};
}

template <typename T>
T* at(uint8_t* base, size_t offset) {
  return reinterpret_cast<T*>(base + offset);
}

}  // namespace

StepArgsLayout StepArgsLayout::make(int cap, int slots, int table_stride, int64_t max_penalty) {
  StepArgsLayout l;
  size_t o = 0;
  auto take = [&](size_t& field, size_t bytes) {
    field = o;
    o += align256(bytes);
  };
  take(l.ids, sizeof(int32_t) * size_t(cap));
  take(l.pos, sizeof(int32_t) * size_t(cap));
  take(l.rows, sizeof(int64_t) * size_t(cap));
  take(l.tables, sizeof(int32_t) * size_t(slots) * size_t(table_stride));
  take(l.ctx_lens, sizeof(int32_t) * (size_t(cap) + size_t(slots)));
  take(l.table_rows, sizeof(int32_t) * size_t(cap));
  take(l.cu_seqlens, sizeof(int32_t) * (size_t(slots) + 1));
  take(l.sample, sizeof(SampleRow) * size_t(slots));
  take(l.penalty, sizeof(PenaltyEntry) * size_t(std::max<int64_t>(max_penalty, 1)));
  l.total = o;
  l.max_penalty = max_penalty;
  return l;
}

std::vector<int32_t> GpuExecutor::Impl::run_passes(std::span<const StepSeq> seqs, bool decode) {
  // result_of[i]: entry i's index in the result (sampling entries in entry order), -1 for none.
  std::vector<int> result_of(seqs.size(), -1);
  int n_out = 0;
  for (size_t i = 0; i < seqs.size(); ++i)
    if (seqs[i].sample) result_of[i] = n_out++;
  std::vector<int32_t> result(size_t(n_out), -1);
  std::vector<Piece> pieces;
  std::vector<int> out_entries, out_slots;
  std::vector<int32_t> toks;
  std::vector<TokenLogprobs> lps;
  int used = 0;
  auto flush = [&] {
    if (pieces.empty()) return;
    forward_pass(seqs, pieces, decode, out_entries);
    if (!out_entries.empty()) {
      out_slots.clear();
      for (int e : out_entries) out_slots.push_back(seqs[size_t(e)].slot);
      sample(out_slots, toks, lps);
      if (!lps.empty() && step_logprobs.empty()) step_logprobs.resize(size_t(n_out));
      for (size_t r = 0; r < out_entries.size(); ++r) {
        const size_t k = size_t(result_of[size_t(out_entries[r])]);
        result[k] = toks[r];
        if (!lps.empty()) step_logprobs[k] = std::move(lps[r]);
      }
    }
    pieces.clear();
    used = 0;
  };
  // Passes of at most `cap` tokens; an entry that does not fit in what is left of a pass goes on
  // in the next one, whose attention reads its earlier tokens from the cache.
  for (size_t i = 0; i < seqs.size(); ++i) {
    int start = seqs[i].start, left = static_cast<int>(seqs[i].tokens.size());
    while (left > 0) {
      const int take = std::min(left, cap - used);
      pieces.push_back({static_cast<int>(i), start, take});
      start += take;
      left -= take;
      used += take;
      if (used == cap) flush();
    }
  }
  flush();
  for (int32_t t : result)
    if (t < 0) throw Error("cuda executor: a sampling entry got no token");  // not reached
  return result;
}

GpuExecutor::Impl::GraphKey GpuExecutor::Impl::graph_for(const GraphKey& want) {
  if (!builder) return want;
  take_built();
  // Its own graph, else the smallest of its kind that holds the pass: at least its tokens (pad
  // rows fill the rest), context bound and packed sequences (empty ones). The map orders keys by
  // (kind, tokens, context, sequences), so the first that holds it from `want` on is that one.
  for (auto it = graphs.lower_bound(want); it != graphs.end() && it->first.kind == want.kind; ++it)
    if (it->first.context >= want.context && it->first.seqs >= want.seqs) return it->first;
  return want;
}

void GpuExecutor::Impl::replay(const GraphKey& key, const GraphKey& want) {
  auto it = graphs.find(key);
  if (it == graphs.end() && builder) {  // no graph holds it yet: kernel by kernel this time
    enqueue_graph(key);
    ++graph_stats.plain;
    build_later(want);
    return;
  }
  if (it == graphs.end()) {  // built here and now
    cudaGraph_t graph = record(key);
    const auto t0 = std::chrono::steady_clock::now();
    cudaGraphExec_t g = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&g, graph, 0);
    cudaGraphDestroy(graph);
    RZ_CUDA_CHECK(e);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    graph_stats.instantiate_ms += ms;
    graph_stats.max_instantiate_ms = std::max(graph_stats.max_instantiate_ms, ms);
    it = keep_graph(key, g, false);
  }
  it->second.last_use = ++graph_launches;
  ++graph_stats.replays;
  RZ_CUDA_CHECK(cudaGraphLaunch(it->second.exec, stream));
  if (key != want) {  // a larger graph ran it: record its own while the GPU works
    ++graph_stats.covered;
    build_later(want);
  }
}

cudaGraph_t GpuExecutor::Impl::record(const GraphKey& key) {
  const auto t0 = std::chrono::steady_clock::now();
  cudaGraph_t graph = nullptr;
  RZ_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    enqueue_graph(key);
  } catch (...) {
    cudaStreamEndCapture(stream, &graph);
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  RZ_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  graph_stats.capture_ms +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ++graph_stats.captured;
  return graph;
}

void GpuExecutor::Impl::build_later(const GraphKey& key, bool pin) {
  if (graphs.contains(key) || unbuildable.contains(key)) return;
  for (const auto& [ticket, b] : building)
    if (b.key == key) return;
  cudaGraph_t graph = nullptr;
  try {
    graph = record(key);
  } catch (const Error& e) {  // a graph for later: the step that wanted it has launched its work
    unbuildable.insert(key);
    ++graph_stats.failed;
    graph_stats.last_error = e.what();
    return;
  }
  building.emplace(next_ticket, Building{key, pin});
  builder->submit(next_ticket++, graph);
}

void GpuExecutor::Impl::warm_graphs() {
  // Covers for every pass a graph serves, kept for good: per context bucket, the decode step of
  // every slot, and rows and packed passes of 64, 128, 256 and 512 tokens (packed: one sequence,
  // and every slot a sequence; also without decode rows). A pass whose own graph is not built
  // yet then runs at most twice its tokens at its own context bound (graph_for), never kernel
  // by kernel. The one-sequence packed covers matter: the packed attention chooses its key
  // splits for the grid's bound on query tiles, which every padded sequence raises, so a long
  // prompt's chunk run as the every-slot cover walks its keys with few splits (H100, 32 decodes
  // beside 32 tokens at 2,700: 5.5 ms, 3.0 with its own graph).
  const int rows_max = graph_tokens(std::min(cap, kMaxAttnRows), false);
  std::vector<int> ladder;
  for (int n = 64; n < rows_max; n *= 2) ladder.push_back(n);
  ladder.push_back(rows_max);
  for (int c = graph_context(1);; c *= 2) {
    c = std::min(c, graph_context(max_ctx));
    build_later({GraphKey::Kind::decode, graph_tokens(opt.slots, true), c}, true);
    for (int n : ladder) {
      build_later({GraphKey::Kind::rows, n, c}, true);
      if (n <= kMaxPackedGraphTokens)
        for (const int seqs : {1, opt.slots}) {
          build_later({GraphKey::Kind::packed, n, c, seqs}, true);
          if (c == graph_context(1)) build_later({GraphKey::Kind::packed, n, 0, seqs}, true);
        }
    }
    if (c >= graph_context(max_ctx)) break;
  }
}

std::map<GpuExecutor::Impl::GraphKey, GpuExecutor::Impl::CapturedGraph>::iterator
GpuExecutor::Impl::keep_graph(const GraphKey& key, cudaGraphExec_t g, bool pin) {
  if (!pin && graphs.size() - pinned_graphs >= kMaxGraphs) {  // the least recently launched
    auto lru = graphs.end();                                  // unpinned one goes
    for (auto i = graphs.begin(); i != graphs.end(); ++i)
      if (!i->second.pinned && (lru == graphs.end() || i->second.last_use < lru->second.last_use))
        lru = i;
    if (lru != graphs.end()) {
      RZ_CUDA_CHECK(cudaStreamSynchronize(stream));
      cudaGraphExecDestroy(lru->second.exec);
      graphs.erase(lru);
      ++graph_stats.evicted;
    }
  }
  pinned_graphs += pin ? 1 : 0;
  return graphs.emplace(key, CapturedGraph{g, 0, pin}).first;
}

void GpuExecutor::Impl::take_built() {
  for (GraphBuilder::Built& b : builder->take_ready()) {
    auto k = building.find(b.ticket);
    const Building what = k->second;
    building.erase(k);
    graph_stats.instantiate_ms += b.instantiate_ms;
    graph_stats.max_instantiate_ms = std::max(graph_stats.max_instantiate_ms, b.instantiate_ms);
    if (!b.exec) {  // its passes go on kernel by kernel (or as a cover); nothing else fails
      unbuildable.insert(what.key);
      ++graph_stats.failed;
      graph_stats.last_error = b.error;
      continue;
    }
    if (graphs.contains(what.key)) {
      cudaGraphExecDestroy(b.exec);
      continue;
    }
    keep_graph(what.key, b.exec, what.pin);
  }
}

void GpuExecutor::Impl::forward_pass(std::span<const StepSeq> seqs,
                                     const std::vector<Piece>& pieces, bool decode,
                                     std::vector<int>& out_entries) {
  const int P = static_cast<int>(pieces.size());
  const int bs = shape.block_size;
  // Row pieces first (decodes and prompt chunks of at most opt.row_chunk tokens, up to
  // kMaxAttnRows tokens): each of their
  // tokens attends as a decode-attention row; the other pieces (longer prompt chunks) are packed
  // for the prefill attention over the rows after them.
  std::vector<Piece> order(pieces.begin(), pieces.end());
  const int row_chunk = std::clamp(opt.row_chunk, 0, kMaxAttnRows);
  const auto as_rows = [&](const Piece& pc) {
    return pc.n == 1 ||
           (pc.n <= row_chunk && int64_t(pc.n) * (pc.start + pc.n) <= int64_t(opt.row_chunk_keys));
  };
  std::stable_partition(order.begin(), order.end(), as_rows);
  int R = 0, D = 0;  // row pieces, their tokens
  while (R < P && as_rows(order[size_t(R)]) && D + order[size_t(R)].n <= kMaxAttnRows)
    D += order[size_t(R++)].n;
  // A pass with packed pieces of at most kMaxPackedGraphTokens tokens in all replays a graph too,
  // keyed by its padded token count Nf, packed sequences (a power of two, empty ones added) and
  // the decode rows' context bucket only, not by how its tokens split between decode rows and
  // packed ones (which changes from step to step while a long prompt goes on in chunks): the decode
  // attention spans all Nf rows and leaves the packed ones (length -1) to the prefill attention,
  // whose sequences count from row 0 (PassShape::fixed). Pad rows N..Nf-1 belong to neither; their
  // outputs are never read. The layout does not depend on opt.cuda_graphs, so that a graph replays
  // exactly what launching its kernels one by one computes.
  int T = 0;  // packed tokens
  for (int p = R; p < P; ++p) T += order[size_t(p)].n;
  const int S = P - R;
  int S_pad = 1;
  while (S_pad < S) S_pad *= 2;
  S_pad = std::max(S, std::min(S_pad, opt.slots));  // the workspace's and cu_seqlens' bound
  const int Nf = graph_tokens(D + T, false);
  const bool fixed = R < P && T <= kMaxPackedGraphTokens && Nf <= std::min(cap, kMaxAttnRows);
  const int N = D + T;
  int max_rows = 0;  // the decode-attention rows' longest context
  for (int p = 0; p < R; ++p)
    max_rows = std::max(max_rows, order[size_t(p)].start + order[size_t(p)].n);
  // The graph shape this pass has (whether or not graphs are on: the layout is the same), and
  // the one it runs as: a larger one while its own is built in the background (graph_for).
  const bool use_decode = decode && N == P;
  const bool graphed = R == P || fixed;
  GraphKey want;
  if (use_decode)
    want = {GraphKey::Kind::decode, graph_tokens(N, true), graph_context(max_rows)};
  else if (R == P)
    want = {GraphKey::Kind::rows, graph_tokens(N, false), graph_context(max_rows)};
  else if (fixed)
    want = {GraphKey::Kind::packed, Nf, D > 0 ? graph_context(max_rows) : 0, S_pad};
  const GraphKey key = graphed && opt.cuda_graphs ? graph_for(want) : want;
  // The previous pass may still be reading the pinned arguments.
  RZ_CUDA_CHECK(cudaStreamSynchronize(stream));
  uint8_t* h = args_host.get();
  auto* ids = at<int32_t>(h, args_layout.ids);
  auto* pos = at<int32_t>(h, args_layout.pos);
  auto* rows = at<int64_t>(h, args_layout.rows);
  auto* tables = at<int32_t>(h, args_layout.tables);
  auto* ctx_lens = at<int32_t>(h, args_layout.ctx_lens);  // D rows, then P - R packed pieces
  auto* table_rows = at<int32_t>(h, args_layout.table_rows);
  auto* cu = at<int32_t>(h, args_layout.cu_seqlens);
  int n = 0, max_packed = 0;
  const int n_fixed = fixed ? key.n_tokens : 0;  // fixed: the rows the pass runs
  cu[0] = fixed ? D : 0;  // the packed pieces' token offsets, from row D (fixed: from row 0)
  const int len_base = fixed ? n_fixed : D;  // where the packed pieces' lengths go in ctx_lens
  for (int p = 0; p < P; ++p) {
    const Piece& pc = order[size_t(p)];
    const StepSeq& e = seqs[size_t(pc.entry)];
    const Slot& slot = slots[e.slot];
    // The piece's table row: p, or (fixed) the packed pieces' first, from row 0, so that the
    // graph's prefill attention reads its tables from a row that does not depend on R.
    const int trow = !fixed ? p : p < R ? S + p : p - R;
    // The entry's block table (check_step: it covers e.end() <= max_ctx tokens, so the blocks
    // beyond table_stride are never read).
    for (int i = 0; i < pc.n; ++i, ++n) {
      const int tp = pc.start + i;
      ids[n] = slot.history[size_t(tp)];
      pos[n] = tp;
      rows[n] = int64_t(e.blocks[size_t(tp / bs)]) * bs + tp % bs;
      if (p < R) {  // a decode-attention row: its own position, its piece's table
        ctx_lens[n] = tp + 1;
        table_rows[n] = trow;
      } else if (fixed) {  // not a decode-attention row
        ctx_lens[n] = -1;
        table_rows[n] = 0;
      }
    }
    int32_t* row = tables + size_t(trow) * table_stride;
    const size_t nb = std::min(e.blocks.size(), size_t(table_stride));
    std::copy(e.blocks.begin(), e.blocks.begin() + std::ptrdiff_t(nb), row);
    std::fill(row + nb, row + table_stride, -1);
    if (p >= R) {
      ctx_lens[len_base + p - R] = pc.start + pc.n;
      max_packed = std::max(max_packed, pc.start + pc.n);
      cu[p - R + 1] = fixed ? n : n - D;
    }
  }
  if (fixed) {
    for (int i = S; i < key.seqs; ++i) {  // empty sequences: no tiles
      cu[i + 1] = cu[i];
      ctx_lens[len_base + i] = 0;
    }
    for (int r = n; r < n_fixed; ++r) {  // pad rows: neither attention's
      ids[r] = 0;
      pos[r] = 0;
      rows[r] = int64_t(pad_block) * bs;
      ctx_lens[r] = -1;
      table_rows[r] = 0;
    }
  }
  // A pass whose every piece attends as decode rows runs padded to graph_tokens(N) tokens (or
  // the larger graph's), so that few token counts (and so few CUDA graphs) recur: pad token i
  // (ids 0, position 0) writes its K/V into the spare block pad_block and attends to that one
  // row. Its outputs are never read. The decode layout reads table row r for row r (pad rows:
  // rows N..Np-1 of the tables), the other row layout table_rows (pad rows: table row P).
  const int Np = R == P ? key.n_tokens : N;
  if (Np > N) {
    for (int r = N; r < Np; ++r) {
      ids[r] = 0;
      pos[r] = 0;
      rows[r] = int64_t(pad_block) * bs;
      ctx_lens[r] = 1;
      table_rows[r] = use_decode ? r : P;
    }
    for (int t = P; t < (use_decode ? Np : P + 1); ++t) {
      int32_t* row = tables + size_t(t) * table_stride;
      row[0] = pad_block;
      std::fill(row + 1, row + table_stride, -1);
    }
  }
  RZ_CUDA_CHECK(
      cudaMemcpyAsync(args_dev.get(), h, args_layout.sample, cudaMemcpyHostToDevice, stream));

  // Sampling entries whose last token is in this pass get a logits row.
  out_entries.clear();
  std::vector<int> out_rows;
  for (int p = 0, row = 0; p < P; row += order[size_t(p)].n, ++p) {
    const Piece& pc = order[size_t(p)];
    const StepSeq& e = seqs[size_t(pc.entry)];
    if (!e.sample || pc.start + pc.n != e.end()) continue;
    out_rows.push_back(row + pc.n - 1);
    out_entries.push_back(pc.entry);
  }
  if (!graphed) {
    enqueue_forward(PassShape{N, P, R, D, max_rows, max_packed, false}, out_rows);
    return;
  }
  // Decode: every token is its sequence's last, rows 0..Np-1 in order, the pad rows' logits too
  // (lengths stay out of the graph: attention spans the key's context bound). The other shapes:
  // the layers from the graph, the output rows after it (rows find their tables through
  // table_rows; fixed: see above).
  if (opt.cuda_graphs)
    replay(key, want);
  else
    enqueue_graph(key);
  if (!use_decode) enqueue_logits(out_rows);
}

GpuExecutor::Impl::PassShape GpuExecutor::Impl::graph_shape(const GraphKey& k) const {
  switch (k.kind) {
    case GraphKey::Kind::decode:
      return PassShape{k.n_tokens, k.n_tokens, k.n_tokens, k.n_tokens, k.context, 0, true};
    case GraphKey::Kind::rows: return PassShape{k.n_tokens, 1, 1, k.n_tokens, k.context, 0, false};
    case GraphKey::Kind::packed:
      // The packed attention's context bound is the slots' (its key splits are chosen for the
      // grid's blocks, and each tile uses the splits its own keys fill), so that a long prompt's
      // chunks replay one graph from its start to its end; the decode rows' stays a bucket
      // (their grid has a block per partition of it), 0 without decode rows.
      return PassShape{k.n_tokens, k.seqs,  0,     k.context > 0 ? k.n_tokens : 0,
                       k.context,  max_ctx, false, true};
  }
  return {};
}

void GpuExecutor::Impl::enqueue_graph(const GraphKey& k) {
  const PassShape ps = graph_shape(k);
  if (k.kind != GraphKey::Kind::decode) return enqueue_layers(ps);
  std::vector<int> out_rows(size_t(k.n_tokens));
  std::iota(out_rows.begin(), out_rows.end(), 0);
  enqueue_forward(ps, out_rows);
}

int GpuExecutor::Impl::graph_tokens(int n, bool decode) const {
  int step = n <= 8 ? 1 : n <= 64 ? 8 : n <= 128 ? 16 : n <= 256 ? 32 : 64;
  const int padded = (n + step - 1) / step * step;
  // Decode rows own table rows and logits rows (one per slot); other row passes, scratch rows.
  const int limit = decode ? int(slots.size()) : std::min(cap, kMaxAttnRows);
  return std::max(n, std::min(padded, limit));
}

int GpuExecutor::Impl::graph_context(int longest) const {
  int c = 256;
  while (c < longest && c < max_ctx) c *= 2;
  return std::min(c, max_ctx);
}

void GpuExecutor::Impl::enqueue_forward(const PassShape& ps, const std::vector<int>& out_rows) {
  enqueue_layers(ps);
  enqueue_logits(out_rows);
}

void GpuExecutor::Impl::enqueue_layers(const PassShape& ps) {
  const int E = cfg.n_embd, FF = cfg.n_ff, N = ps.n_tokens, P = ps.n_pieces, R = ps.row_pieces,
            D = ps.n_rows;
  uint8_t* d = args_dev.get();
  const auto* d_ids = at<int32_t>(d, args_layout.ids);
  const auto* d_pos = at<int32_t>(d, args_layout.pos);
  const auto* d_rows = at<int64_t>(d, args_layout.rows);
  const auto* d_tables = at<int32_t>(d, args_layout.tables);
  const auto* d_ctx = at<int32_t>(d, args_layout.ctx_lens);
  const auto* d_table_rows = at<int32_t>(d, args_layout.table_rows);
  const auto* d_cu = at<int32_t>(d, args_layout.cu_seqlens);
  embedding_gather(w.token_embd.type, w.token_embd.ptr(), cfg.n_vocab, E, d_ids, N, x.get(), stream,
                   cfg.embd_scale);
  QkvPostArgs qp_args;
  qp_args.n_tokens = N;
  qp_args.n_head = cfg.n_head;
  qp_args.n_rot = cfg.n_rot;
  qp_args.neox = cfg.rope_neox;
  qp_args.attn_factor = attn_factor;
  qp_args.cache = shape;
  qp_args.cs_table = rope_cs.get();
  qp_args.cs_positions = max_ctx;
  QkvPostArgs qp_sep = qp_args;  // layers whose Q, K, V were not all stacked: separate sources
  qp_sep.k_src = k.get();
  qp_sep.v_src = v.get();
  const GateAct act = cfg.act == ModelConfig::Act::GeluTanh ? GateAct::gelu_tanh : GateAct::silu;
  for (int l = 0; l < cfg.n_layer; ++l) {
    const GpuLayerWeights& L = w.layers[l];
    uint16_t* kc = k_cache.get() + size_t(l) * size_t(shape.layer_elems());
    uint16_t* vc = v_cache.get() + size_t(l) * size_t(shape.layer_elems());
    // The first layer's attention norm; later layers' comes fused with the previous residual add.
    if (l == 0)
      rms_norm(x.get(), L.attn_norm.get(), xn.get(), N, E, cfg.norm_eps, stream,
               forms_for(xn.get(), N, E, qkv_inputs(L), true));
    // One matmul writes [q | k | v] rows, or [q | k] rows and a second one v (Q and K of one
    // type, V of another), or three write q, k, v apart; one kernel adds the biases, rotates q
    // and k, writes q out dense for attention and k, v into the cache.
    float* q_rows = qkv.get();
    float* k_rows = k.get();
    int64_t q_stride = q_dim, k_stride = kv_dim;  // floats between consecutive tokens' q, k
    QkvPostArgs qp = qp_sep;
    if (L.fused_qkv) {
      matmul(L.wqkv, xn.get(), qkv.get(), N, true);
      k_rows = qkv.get() + q_dim;
      q_stride = k_stride = q_dim + 2 * kv_dim;
      qp = qp_args;
    } else if (L.fused_qk) {
      // V's matmul runs on attn_side beside [Q; K]'s where it is qmm's direct kernel on the
      // input the norm prepared: it then only reads qmm_x and needs no workspace (H200, rz bench
      // B = 1 / 4: qwen2.5-1.5b +1.6 / +2.0 %, llama3.1-8b +0.6 %;
      // bench/gpu-runs/2026-11-28-h200-qmm-9-16-experiment.log).
      const bool v_beside = direct_qmm_on_prepared(L.wv, xn.get(), N);
      if (v_beside) {
        RZ_CUDA_CHECK(cudaEventRecord(attn_fork, stream));
        RZ_CUDA_CHECK(cudaStreamWaitEvent(attn_side, attn_fork, 0));
        qmm_on(L.wv, qmm_x.get(), v.get(), N, attn_side);
      }
      matmul(L.wqk, xn.get(), qkv.get(), N, true);  // [q | k] rows
      if (v_beside) {
        RZ_CUDA_CHECK(cudaEventRecord(attn_join, attn_side));
        RZ_CUDA_CHECK(cudaStreamWaitEvent(stream, attn_join, 0));
      } else {
        matmul(L.wv, xn.get(), v.get(), N, true);
      }
      k_rows = qkv.get() + q_dim;
      q_stride = k_stride = q_dim + kv_dim;
      qp.qkv_row_stride = qp.k_row_stride = q_stride;
      qp.k_src = k_rows;
    } else {
      matmul(L.wq, xn.get(), qkv.get(), N, true);  // dense q rows [N, q_dim]
      matmul(L.wk, xn.get(), k.get(), N, true);
      matmul(L.wv, xn.get(), v.get(), N, true);
    }
    const float* bq = cfg.qkv_bias ? L.bq.get() : nullptr;
    const float* bk = cfg.qkv_bias ? L.bk.get() : nullptr;
    if (cfg.qk_norm) {  // per-head norms of q and k, after their biases and before RoPE
      if (bq) bias_add(q_rows, bq, N, q_dim, stream, q_stride);
      if (bk) bias_add(k_rows, bk, N, kv_dim, stream, k_stride);
      bq = bk = nullptr;
      rms_norm_heads(q_rows, L.q_norm.get(), N, cfg.n_head, cfg.head_dim, q_stride, cfg.norm_eps,
                     stream);
      rms_norm_heads(k_rows, L.k_norm.get(), N, cfg.n_head_kv, cfg.head_dim, k_stride, cfg.norm_eps,
                     stream);
    }
    // Sliding layers with their own rotary base (gemma3) rotate with its tables.
    const bool swa_rope = cfg.layer_rope_swa(l);
    if (swa_rope) {
      qp.cs_table = rope_cs_swa.get();
      qp.attn_factor = 1.0f;  // RopeFreqs::make_swa: unscaled
    }
    // The decode step's attention takes qkv_post's work over where it can (attention_decode_qkv:
    // one kernel fewer a layer); other passes run it first.
    const AttentionQkv qkv_in{qkv.get(), bq,
                              bk,        cfg.qkv_bias ? L.bv.get() : nullptr,
                              d_pos,     swa_rope ? inv_freq_swa.get() : inv_freq.get(),
                              d_rows,    qp};
    // (ps.graph: the decode kind's pass, every row a decode row: D == N > 0, graph_shape.)
    const bool qkv_in_attention = ps.graph;
    if (!qkv_in_attention)
      qkv_post(qkv_in.qkv, qkv_in.bq, qkv_in.bk, qkv_in.bv, qkv_in.pos, qkv_in.inv_freq,
               qkv_in.cache_rows, q.get(), kc, vc, qp, stream);
    const int window = cfg.layer_window(l);
    // When every row is a decode-style row, the attention writes the output projection's input
    // forms itself (no preparation kernel before that matmul); when every row is a packed prompt
    // row, the prefill attention writes the cuBLAS path's fp16 form, the one it has.
    const bool prefill_f16 = D == 0 && !ps.fixed && !L.wo.fp8 && L.wo.type != GgmlType::F32 &&
                             path_of(L.wo, N) == MatmulPath::gemm;
    const ActForms att_forms = (D == N || prefill_f16) && !ps.fixed
                                   ? forms_for(att.get(), N, q_dim, {&L.wo, nullptr, nullptr})
                                   : ActForms{};
    // Decode rows and packed pieces both: the packed pieces' attention runs on attn_side, beside
    // the decode rows' (both read q and the cache qkv_post wrote; they write apart rows of att).
    const bool side_by_side = opt.attention_side_by_side && D > 0 && R < P;
    if (side_by_side) {
      RZ_CUDA_CHECK(cudaEventRecord(attn_fork, stream));
      RZ_CUDA_CHECK(cudaStreamWaitEvent(attn_side, attn_fork, 0));
    }
    if (D > 0) {  // rows 0..D-1: one query token each
      AttentionDecodeArgs a;
      a.n_slots = D;
      a.n_head = cfg.n_head;
      a.cache = shape;
      a.max_context = ps.max_rows;
      a.table_stride = table_stride;
      a.window = window;
      a.scale = cfg.attn_scale;
      auto* ws = reinterpret_cast<float*>(attn_ws.get());
      if (qkv_in_attention)  // the decode step: row r is piece r (no indirection in the graph)
        attention_decode_qkv(qkv_in, q.get(), kc, vc, d_tables, d_ctx, att.get(), ws, a, stream,
                             att_forms);
      else
        attention_decode_rows(q.get(), kc, vc, d_tables, d_table_rows, d_ctx, att.get(), ws, a,
                              stream, att_forms);
    }
    if (R < P) {
      // The packed pieces: rows D..N-1, their tables from row R, lengths after the D rows; or
      // (fixed) sequences counting from row 0, tables from row 0, lengths after the N rows.
      const int first = ps.fixed ? 0 : D;
      AttentionPrefillArgs a;
      a.n_seqs = P - R;
      a.n_tokens = N - first;
      a.n_head = cfg.n_head;
      a.cache = shape;
      a.max_context = ps.max_packed;
      a.table_stride = table_stride;
      a.window = window;
      a.scale = cfg.attn_scale;
      a.fill_uncovered = !ps.fixed;  // fixed: the decode attention owns the other rows
      a.tile_index_ready = l > 0;    // the same sequences every layer: layer 0 built the index
      attention_prefill(q.get() + size_t(first) * size_t(q_dim), kc, vc,
                        d_tables + size_t(ps.fixed ? 0 : R) * size_t(table_stride), d_cu,
                        d_ctx + (ps.fixed ? N : D), att.get() + size_t(first) * size_t(q_dim),
                        attn_ws.get() + attn_prefill_ws, a, side_by_side ? attn_side : stream,
                        prefill_f16 ? att_forms.f16 : nullptr);
    }
    if (side_by_side) {
      RZ_CUDA_CHECK(cudaEventRecord(attn_join, attn_side));
      RZ_CUDA_CHECK(cudaStreamWaitEvent(stream, attn_join, 0));
    }
    matmul(L.wo, att.get(), tmp.get(), N, att_forms.any());
    if (cfg.post_norms)  // gemma: the attention output normalized before the residual add
      rms_norm(tmp.get(), L.post_attn_norm.get(), tmp.get(), N, E, cfg.norm_eps, stream);
    add_rms_norm(x.get(), tmp.get(), L.ffn_norm.get(), xn.get(), N, E, cfg.norm_eps, stream,
                 forms_for(xn.get(), N, E,
                           {L.fused_gate_up ? &L.w_gate_up : &L.w_gate,
                            L.fused_gate_up ? nullptr : &L.w_up, nullptr},
                           true));
    if (L.fused_gate_up && gated_here(L, N)) {
      // One kernel: qmm's direct kernel gates its own sums (qmm_gated). It reads qmm_x (the
      // norm's output form), so the down matmul's qmm form goes to qmm_x_gated, and the down
      // matmul reads it there.
      const ActForms f = forms_for(gate.get(), N, FF, {&L.w_down, nullptr, nullptr});
      ActForms fg = f;
      if (f.qmm) fg.qmm = qmm_x_gated.get();
      if (!qmm_gated(L.w_gate_up.type, L.w_gate_up.ptr(), qmm_x.get(), gate.get(), FF,
                     L.w_gate_up.cols, N, act, fg, stream))
        throw Error("qmm_gated declined a call gated_here accepted");
      if (f.qmm) {
        qmm_prepared = {};  // qmm_x still holds the norm's form; gate's is in qmm_x_gated
        qmm_on(L.w_down, qmm_x_gated.get(), tmp.get(), N, stream);
      } else {
        matmul(L.w_down, gate.get(), tmp.get(), N, true);
      }
    } else if (L.fused_gate_up) {
      matmul(L.w_gate_up, xn.get(), gu.get(), N, true);
      swiglu_rows(gu.get(), gate.get(), N, FF, stream,
                  forms_for(gate.get(), N, FF, {&L.w_down, nullptr, nullptr}, true), act);
      matmul(L.w_down, gate.get(), tmp.get(), N, true);
    } else {
      matmul(L.w_gate, xn.get(), gate.get(), N, true);
      matmul(L.w_up, xn.get(), up.get(), N, true);
      swiglu(gate.get(), up.get(), gate.get(), int64_t(N) * FF, stream, act);
      matmul(L.w_down, gate.get(), tmp.get(), N);
    }
    if (cfg.post_norms)
      rms_norm(tmp.get(), L.post_ffn_norm.get(), tmp.get(), N, E, cfg.norm_eps, stream);
    if (l + 1 < cfg.n_layer)
      add_rms_norm(x.get(), tmp.get(), w.layers[l + 1].attn_norm.get(), xn.get(), N, E,
                   cfg.norm_eps, stream,
                   forms_for(xn.get(), N, E, qkv_inputs(w.layers[l + 1]), true));
    else
      residual_add(x.get(), tmp.get(), int64_t(N) * E, stream);
  }
}

void GpuExecutor::Impl::enqueue_logits(const std::vector<int>& out_rows) {
  const int E = cfg.n_embd;
  const int n_out = static_cast<int>(out_rows.size());
  if (n_out == 0) return;
  // Contiguous runs of output rows go in one copy (all of them, for decode).
  for (int r = 0; r < n_out;) {
    int e = r + 1;
    while (e < n_out && out_rows[e] == out_rows[e - 1] + 1) ++e;
    RZ_CUDA_CHECK(cudaMemcpyAsync(last.get() + size_t(r) * E, x.get() + size_t(out_rows[r]) * E,
                                  sizeof(float) * E * (e - r), cudaMemcpyDeviceToDevice, stream));
    r = e;
  }
  rms_norm(last.get(), w.output_norm.get(), last_norm.get(), n_out, E, cfg.norm_eps, stream,
           forms_for(last_norm.get(), n_out, E, {&w.output(), nullptr, nullptr}, true));
  matmul(w.output(), last_norm.get(), logits.get(), n_out, true);
  if (cfg.final_logit_softcap > 0)
    softcap(logits.get(), int64_t(n_out) * cfg.n_vocab, cfg.final_logit_softcap, stream);
}

bool GpuExecutor::Impl::gated_here(const GpuLayerWeights& L, int n) const {
  const DeviceMatrix& gu = L.w_gate_up;
  if (!direct_qmm_on_prepared(gu, xn.get(), n) || !qmm_gated_runs(gu.type, cfg.n_ff, gu.cols, n))
    return false;
  // the down matmul's input forms: qmm's goes to qmm_x_gated (sized for it), q8's it cannot write
  const DeviceMatrix& d = L.w_down;
  const bool form_path = opt.fused_input_forms && !d.fp8 && d.type != GgmlType::F32;
  const MatmulPath p = form_path ? path_of(d, n) : MatmulPath::gemv;
  return p != MatmulPath::gemv_q8 && (p != MatmulPath::qmm || qmm_x_gated.size() > 0);
}

void GpuExecutor::Impl::qmm_on(const DeviceMatrix& m, const void* xp, float* out, int n,
                               cudaStream_t s) {
  qmm(m.type, m.ptr(), xp, out, m.rows, m.cols, n, m.rows, qmm_ws.get(), qmm_ws.size(), s);
}

bool GpuExecutor::Impl::direct_qmm_on_prepared(const DeviceMatrix& m, const float* in,
                                               int n) const {
  return !m.fp8 && m.type != GgmlType::F32 && path_of(m, n) == MatmulPath::qmm &&
         qmm_prepared.holds(in, n, m.cols) && qmm_runs_direct(m.type, m.rows, m.cols, n);
}

void GpuExecutor::Impl::matmul(const DeviceMatrix& m, const float* in, float* out, int n,
                               bool same_input) {
  if (!same_input) qmm_prepared = q8_prepared = fp8_prepared = x16_prepared = {};  // it may differ
  if (n == 0) return;
  if (m.fp8) {
    // A few tokens: gemv_fp8 on the fp32 activations (W8A16: one byte a weight and no rounding
    // kernel on the latency-bound decode step). More: the activations rounded to FP8 per token
    // once per input (kernels/fp8.hpp), then cuBLASLt's FP8 GEMM.
    if (n <= kFp8GemvMaxTokens) {
      gemv_fp8(static_cast<const uint8_t*>(m.ptr()), m.scale.get(), fp32_input(in, n, m.cols), out,
               m.rows, m.cols, n, stream);
      return;
    }
    if (!fp8_prepared.holds(in, n, m.cols)) {
      quantize_rows_fp8(fp32_input(in, n, m.cols), Fp8Source::f32, fp8_x.get(), fp8_x_scale.get(),
                        n, m.cols, stream);
      fp8_prepared = {in, n, m.cols};
    }
    gemm->matmul_fp8(static_cast<const uint8_t*>(m.ptr()), m.scale.get(), fp8_x.get(),
                     fp8_x_scale.get(), out, m.rows, m.cols, n);
    return;
  }
  if (m.type == GgmlType::F32) {
    gemm->matmul_f32(static_cast<const float*>(m.ptr()), fp32_input(in, n, m.cols), out, m.rows,
                     m.cols, n);
    return;
  }
  const MatmulPath path = path_of(m, n);
  if (path == MatmulPath::qmm) {
    if (!qmm_prepared.holds(in, n, m.cols)) {
      qmm_prepare_x(fp32_input(in, n, m.cols), qmm_x.get(), n, m.cols, stream);
      qmm_prepared = {in, n, m.cols};
    }
    qmm_on(m, qmm_x.get(), out, n, stream);
    return;
  }
  if (path == MatmulPath::gemv_q8) {
    if (!q8_prepared.holds(in, n, m.cols)) {
      quantize_x_q8(fp32_input(in, n, m.cols), q8_x.get(), n, m.cols, stream);
      q8_prepared = {in, n, m.cols};
    }
    gemv_q8(m.type, m.ptr(), q8_x.get(), out, m.rows, m.cols, n, stream);
    return;
  }
  if (path == MatmulPath::gemv) {
    gemv(m.type, m.ptr(), fp32_input(in, n, m.cols), out, m.rows, m.cols, n, stream);
    return;
  }
  // Larger batches: fp16 activations times fp16 weights (dequantized a slice of rows at a time)
  // through cuBLAS, fp32 accumulation and output.
  if (!x16_prepared.holds(in, n, m.cols)) {
    convert_to_half(fp32_input(in, n, m.cols), x16.get(), HalfType::f16, int64_t(n) * m.cols,
                    stream);
    x16_prepared = {in, n, m.cols};
  }
  if (m.type == GgmlType::F16 || m.has_f16_copy()) {
    const void* w16_all = m.type == GgmlType::F16 ? m.ptr() : m.f16_copy.get();
    gemm->matmul_x16(HalfType::f16, w16_all, x16.get(), out, m.rows, m.cols, n);
    return;
  }
  // Slices start at multiples of `align` rows, 256-byte boundaries of the quantized data.
  const int64_t align = 256 / std::gcd<int64_t>(int64_t(m.row_bytes), 256);
  const int64_t slice = m.rows * m.cols <= w16_elems
                            ? m.rows
                            : std::max<int64_t>(align, w16_elems / m.cols / align * align);
  for (int64_t r0 = 0; r0 < m.rows; r0 += slice) {
    const int64_t nr = std::min(slice, m.rows - r0);
    dequantize_matrix(m.type, static_cast<const uint8_t*>(m.ptr()) + size_t(r0) * m.row_bytes,
                      w16.get(), HalfType::f16, nr, m.cols, stream);
    gemm->matmul_x16(HalfType::f16, w16.get(), x16.get(), out + r0, nr, m.cols, n, m.rows);
  }
}

MatmulPath GpuExecutor::Impl::path_of(const DeviceMatrix& m, int n) const {
  return choose_matmul_path(m.type, m.rows, m.cols, n,
                            {.qmm = opt.qmm,
                             .int8 = opt.int8_activations,
                             .f16_copy = m.has_f16_copy(),
                             .qmm_wide = qmm_wide});
}

ActForms GpuExecutor::Impl::forms_for(const float* in, int n, int64_t cols,
                                      const Consumers& consumers, bool fp32_optional) {
  qmm_prepared = q8_prepared = fp8_prepared = x16_prepared = f32_absent = {};
  ActForms f;
  if (!opt.fused_input_forms || n == 0) return f;
  bool fp32_read = false;  // a consumer reads the fp32 values themselves
  for (const DeviceMatrix* m : consumers) {
    if (!m) continue;
    if (m->fp8 || m->type == GgmlType::F32) {  // their own input paths, from the fp32 values
      fp32_read = true;
      continue;
    }
    switch (path_of(*m, n)) {
      case MatmulPath::qmm:
        f.qmm = qmm_x.get();
        qmm_prepared = {in, n, cols};
        break;
      case MatmulPath::gemv_q8:
        f.q8 = q8_x.get();
        q8_prepared = {in, n, cols};
        break;
      case MatmulPath::gemm:
        f.f16 = x16.get();
        x16_prepared = {in, n, cols};
        break;
      case MatmulPath::gemv: fp32_read = true; break;
    }
  }
  // No reader of the fp32 matrix: its producer writes the forms only. A qwen2.5-1.5b pp512 pass
  // wrote 18 MB of swiglu output and 3 MB of each norm's a layer that no kernel read; without
  // them (H200, rz bench, two rounds) pp512 +2.4 %, B = 256 +3.0 %, llama3.1-8b pp512 +1.5 %
  // (bench/gpu-runs/2026-11-29-h200-forms-f32-ab.log).
  if (fp32_optional && !fp32_read && f.any()) {
    f.f32 = false;
    f32_absent = {in, n, cols};
  }
  return f;
}

const float* GpuExecutor::Impl::fp32_input(const float* in, int n, int64_t cols) const {
  if (f32_absent.holds(in, n, cols))
    throw Error(
        "cuda executor: a matmul would read an activation whose producer wrote only its "
        "input forms (a bug: forms_for's consumers miss this matmul)");
  return in;
}

void GpuExecutor::Impl::sample(const std::vector<int>& out_slots, std::vector<int32_t>& tokens,
                               std::vector<TokenLogprobs>& lps) {
  const int R = static_cast<int>(out_slots.size()), V = cfg.n_vocab;
  if (keep_logits) {
    RZ_CUDA_CHECK(cudaStreamSynchronize(stream));
    for (int r = 0; r < R; ++r) {
      auto& lg = slots[out_slots[r]].logits;
      lg.resize(size_t(V));
      RZ_CUDA_CHECK(cudaMemcpyAsync(lg.data(), logits.get() + size_t(r) * V, sizeof(float) * V,
                                    cudaMemcpyDeviceToHost, stream));
    }
  }
  bool greedy = true, any_lp = false;
  for (int s : out_slots) {
    Slot& slot = slots[s];
    if (slot.prompt_len < 0) slot.prompt_len = static_cast<int>(slot.history.size());
    const SamplingParams& p = slot.sampling;
    greedy = greedy && p.temperature <= 0.0f && !penalty_active(p) && p.logprobs < 0;
    any_lp = any_lp || p.logprobs >= 0;
  }
  if (greedy) {
    argmax_rows(logits.get(), R, V, out_dev.get(), argmax_ws.get(), argmax_ws_bytes, stream);
  } else {
    RZ_CUDA_CHECK(cudaStreamSynchronize(stream));  // the pinned rows may still be in flight
    uint8_t* h = args_host.get();
    auto* rows = at<SampleRow>(h, args_layout.sample);
    auto* pen = at<PenaltyEntry>(h, args_layout.penalty);
    int64_t n_pen = 0;
    std::vector<PenaltyEntry> entries;
    for (int r = 0; r < R; ++r) {
      Slot& slot = slots[out_slots[r]];
      const SamplingParams& p = slot.sampling;
      SampleRow& row = rows[r];
      row = SampleRow{};
      row.temperature = p.temperature;
      row.top_k = p.top_k;
      row.top_p = p.top_p;
      row.min_p = p.min_p;
      row.logprobs = std::min(p.logprobs, kMaxLogprobs);
      row.penalty_begin = row.penalty_end = static_cast<int>(n_pen);
      if (penalty_active(p)) {
        penalty_entries(p, slot.history, slot.history.size() - size_t(slot.prompt_len), V, entries);
        if (n_pen + int64_t(entries.size()) > args_layout.max_penalty)
          throw Error("cuda executor: penalty entries exceed their buffer");
        std::copy(entries.begin(), entries.end(), pen + n_pen);
        n_pen += int64_t(entries.size());
        row.penalty_end = static_cast<int>(n_pen);
      }
      // The CPU Sampler's draw from the slot's stream.
      if (p.temperature > 0.0f) row.u = uniform_draw(slot.rng);
    }
    uint8_t* d = args_dev.get();
    RZ_CUDA_CHECK(cudaMemcpyAsync(d + args_layout.sample, rows, sizeof(SampleRow) * size_t(R),
                                  cudaMemcpyHostToDevice, stream));
    if (n_pen > 0)
      RZ_CUDA_CHECK(cudaMemcpyAsync(d + args_layout.penalty, pen,
                                    sizeof(PenaltyEntry) * size_t(n_pen), cudaMemcpyHostToDevice,
                                    stream));
    sample_rows(logits.get(), R, V, at<SampleRow>(d, args_layout.sample),
                n_pen > 0 ? at<PenaltyEntry>(d, args_layout.penalty) : nullptr,
                any_lp ? penalty_raw.get() : nullptr, out_dev.get(),
                any_lp ? lp_dev.get() : nullptr, sample_ws.get(), sample_ws_bytes, stream);
    if (any_lp)
      RZ_CUDA_CHECK(cudaMemcpyAsync(lp_host.get(), lp_dev.get(), sizeof(LogprobsRow) * size_t(R),
                                    cudaMemcpyDeviceToHost, stream));
  }
  RZ_CUDA_CHECK(cudaMemcpyAsync(out_host.get(), out_dev.get(), sizeof(int32_t) * size_t(R),
                                cudaMemcpyDeviceToHost, stream));
  RZ_CUDA_CHECK(cudaStreamSynchronize(stream));
  tokens.assign(out_host.get(), out_host.get() + R);
  for (int32_t t : tokens)
    if (t < 0 || t >= V)
      throw Error("cuda executor: sampling produced token id " + std::to_string(t));
  lps.clear();
  if (!any_lp) return;
  lps.resize(size_t(R));
  for (int r = 0; r < R; ++r) {
    if (slots[out_slots[r]].sampling.logprobs < 0) continue;
    const LogprobsRow& g = lp_host.get()[r];
    TokenLogprobs& lp = lps[size_t(r)];
    lp.present = true;
    lp.logprob = g.logprob;
    lp.top_ids.assign(g.top_ids, g.top_ids + g.n_top);
    lp.top_logprobs.assign(g.top_logprobs, g.top_logprobs + g.n_top);
  }
}

}  // namespace rz::gpu
