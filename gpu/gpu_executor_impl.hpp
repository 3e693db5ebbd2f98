// Internals of the CUDA executor (gpu_executor.hpp), shared by gpu_executor.cpp (set-up, slots,
// checks) and gpu_forward.cpp (the step). Not part of the public interface.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <span>
#include <vector>

#include "gpu/device_buffer.hpp"
#include "gpu/gemm.hpp"
#include "gpu/gpu_executor.hpp"
#include "gpu/gpu_weights.hpp"
#include "gpu/graph_builder.hpp"
#include "gpu/matmul_path.hpp"
#include "kernels/act_forms.hpp"
#include "kernels/attention_decode.hpp"
#include "kernels/attention_prefill.hpp"
#include "kernels/kv_cache_shape.hpp"
#include "kernels/sampling.hpp"
#include "model/executor_checks.hpp"
#include "model/sampling.hpp"

namespace rz::gpu {

// Byte offsets of one step's arguments inside one buffer (host pinned and device alike), each
// piece 256-byte aligned.
struct StepArgsLayout {
  size_t ids = 0;     // [cap] int32 token ids
  size_t pos = 0;     // [cap] int32 positions
  size_t rows = 0;    // [cap] int64 KV cache rows
  size_t tables = 0;  // [slots, table_stride] int32 block tables, one row per piece
  // [cap + slots] int32 context of each decode-attention row (tokens 0..its position), then of
  // each packed piece (its sequence's tokens after the pass)
  size_t ctx_lens = 0;
  size_t table_rows = 0;  // [cap] int32 the table row (piece) of each decode-attention row
  size_t cu_seqlens = 0;  // [slots + 1] int32 token offsets of the packed pieces, from row n_rows
  size_t sample = 0;      // [slots] SampleRow
  size_t penalty = 0;     // [max_penalty] PenaltyEntry
  size_t total = 0;
  int64_t max_penalty = 0;
  static StepArgsLayout make(int cap, int slots, int table_stride, int64_t max_penalty);
};

struct CudaHostFree {
  void operator()(void* p) const { cudaFreeHost(p); }
};

struct GpuExecutor::Impl {
  struct Slot {
    bool active = false;
    std::vector<int32_t> history;  // prompt + appended tokens: size() == tokens in the cache
    SamplingParams sampling;
    std::mt19937_64 rng;        // the same stream the CPU Sampler draws from
    int prompt_len = -1;        // history length at the first sampling (-1: none yet)
    std::vector<float> logits;  // kept logits (keep_logits)
  };
  // Tokens [start, start + n) of step entry `entry`'s sequence, run in one forward pass (an
  // entry longer than what is left of a pass continues in the next one).
  struct Piece {
    int entry;
    int start;
    int n;
  };

  Impl(std::shared_ptr<const ModelFile> file, const GpuExecutorOptions& opt);
  ~Impl();
  void allocate_scratch();
  // GpuExecutorOptions::tune_gemm: Gemm::tune_x16 for each fp16 shape the GEMM path takes.
  void tune_gemms();
  void plan_kv_cache();
  SlotView slot_view() const;  // for the shared request checks (model/executor_checks.hpp)
  void release(int slot);
  // Checks the step, updates the slots (begin, history) and runs it; on a failure part way the
  // entries' slots are released and the error rethrown.
  std::vector<int32_t> step(std::span<const StepSeq> seqs);

  // gpu_forward.cpp
  // Splits the entries (already in their slots' histories) into passes of at most `cap` tokens
  // and runs them; one sampled token per sampling entry, in entry order. `decode`: every entry is
  // one token that samples.
  std::vector<int32_t> run_passes(std::span<const StepSeq> seqs, bool decode);
  // Runs the layers over one pass; pieces that end a sampling entry (its last token is in this
  // pass) leave their final hidden row in last[row r] and logits row r, r in the pass's row
  // order (one-token pieces first);
  // out_entries[r] is that piece's entry.
  void forward_pass(std::span<const StepSeq> seqs, const std::vector<Piece>& pieces, bool decode,
                    std::vector<int>& out_entries);
  // The shape of one pass: N tokens in P pieces. The first row_pieces pieces (decodes and
  // prompt chunks of at most opt.row_chunk tokens) have their n_rows tokens attend as decode rows
  // (paged decode attention, one row per token, longest context max_rows; `graph`: the decode
  // step's plain layout, table row = row); the other pieces are packed (prefill attention over
  // rows n_rows.., longest context max_packed).
  struct PassShape {
    int n_tokens = 0, n_pieces = 0, row_pieces = 0, n_rows = 0;
    int max_rows = 0, max_packed = 0;
    bool graph = false;
    // A pass with packed pieces laid out for a graph (gpu_forward.cpp): the decode attention
    // spans all n_tokens rows (the packed ones marked -1: not its rows), the packed pieces'
    // cu_seqlens count from row 0, their lengths follow the n_tokens row lengths, and there are
    // n_pieces - row_pieces of them (empty ones pad the count).
    bool fixed = false;
  };
  // Decode-attention rows of one pass at most (decodes and prompt chunks of at most
  // GpuExecutorOptions::row_chunk tokens).
  static constexpr int kMaxAttnRows = 512;
  // Passes with packed prompt chunks of up to this many tokens in all replay graphs too.
  static constexpr int kMaxPackedGraphTokens = 512;
  // FP8 matrices times at most this many tokens take gemv_fp8, more take cuBLASLt.
  static constexpr int kFp8GemvMaxTokens = 8;
  // Enqueues embedding -> layers -> final norm -> logits for a pass whose step arguments are on
  // the device already; out_rows: token index of each logits row.
  void enqueue_forward(const PassShape& ps, const std::vector<int>& out_rows);
  // enqueue_forward's two halves: embedding and layers (x holds the last hidden states), then
  // the final norm and the output matrix for out_rows.
  void enqueue_layers(const PassShape& ps);
  void enqueue_logits(const std::vector<int>& out_rows);
  // same_input: `in` holds what the previous matmul call read (the second and third of Q/K/V,
  // up after gate), so prepared activations (qmm's, gemv_q8's) from that call are reused when
  // they match.
  void matmul(const DeviceMatrix& w, const float* in, float* out, int n_tokens,
              bool same_input = false);
  // The path matmul() takes for a quantized, F16 or BF16 matrix at n tokens.
  MatmulPath path_of(const DeviceMatrix& m, int n) const;
  // qmm of m on prepared activations xp (qmm_x or qmm_x_gated) into out [n, m.rows], on stream s
  // (the direct kernel never touches qmm_ws, so it may run on attn_side).
  void qmm_on(const DeviceMatrix& m, const void* xp, float* out, int n, cudaStream_t s);
  // Whether matmul(m, in, ..., n, true) would be one launch of qmm's direct kernel on qmm_x as
  // already prepared from `in`: no preparation, no workspace, so it may run on another stream.
  bool direct_qmm_on_prepared(const DeviceMatrix& m, const float* in, int n) const;
  // Whether layer L's fused gate/up runs gated in qmm's direct kernel (qmm_gated) at n tokens.
  bool gated_here(const GpuLayerWeights& L, int n) const;
  // The input forms that `consumers` (null entries skipped) read of the n x cols activation `in`,
  // as buffers of this executor, for the kernel that produces `in` to write beside it
  // (kernels/act_forms.hpp; none without GpuExecutorOptions::fused_input_forms). Marks them
  // prepared for `in` and every other form not: the first consumer's matmul then passes
  // same_input = true. fp32_optional (the producers that can leave their fp32 output out: the
  // norms, swiglu_rows): when every consumer reads a form, f32 is false and `in` is marked as
  // holding no fp32 values (f32_absent) until the next call, so a matmul that would read them
  // throws instead of reading stale ones.
  using Consumers = std::array<const DeviceMatrix*, 3>;
  ActForms forms_for(const float* in, int n, int64_t cols, const Consumers& consumers,
                     bool fp32_optional = false);
  // `in` for a matmul that reads its fp32 values: throws when forms_for left them out.
  const float* fp32_input(const float* in, int n, int64_t cols) const;
  // Samples logits row r for slot out_slots[r]; lps[r] gets its log-probabilities when the
  // slot's sampling asks for them (lps is left empty when no row does).
  void sample(const std::vector<int>& out_slots, std::vector<int32_t>& tokens,
              std::vector<TokenLogprobs>& lps);

  std::shared_ptr<const ModelFile> file;
  ModelConfig cfg;
  GpuExecutorOptions opt;
  // qmm takes 65+ tokens of the matrices without copies in its wide kernel (qmm_runs_wide;
  // path_of's MatmulChoices::qmm_wide), set once the device is selected.
  bool qmm_wide = false;
  GpuMemoryPlan plan;
  int max_ctx = 0;
  int64_t q_dim = 0, kv_dim = 0;
  int cap = 0;           // tokens per forward pass
  int table_stride = 0;  // blocks of one full context
  bool keep_logits = false;
  std::vector<Slot> slots;

  cudaStream_t stream = nullptr;
  // A pass with both decode-attention rows and packed pieces runs the two attentions side by
  // side: the packed one on attn_side, forked from and joined back to stream by these events
  // (each a small, latency-bound grid; gpu_forward.cpp).
  cudaStream_t attn_side = nullptr;
  cudaEvent_t attn_fork = nullptr, attn_join = nullptr;
  GpuWeights w;
  std::unique_ptr<Gemm> gemm;
  DeviceBuffer<float> inv_freq;
  DeviceBuffer<float> rope_cs;  // [max_ctx, n_rot] cos/sin of every position (kernels/rope.hpp)
  // The sliding layers' own (ModelConfig::rope_theta_swa; empty without): gemma3's local layers.
  DeviceBuffer<float> inv_freq_swa, rope_cs_swa;
  float attn_factor = 1.0f;

  KvCacheShape shape;  // one layer's cache; n_blocks = kv_blocks() + 1 (pad_block)
  DeviceBuffer<uint16_t> k_cache, v_cache;  // [n_layer][n_blocks][n_head_kv][block][head_dim]

  // Scratch (cap = tokens per pass, S = slots).
  DeviceBuffer<float> x, xn, tmp;  // [cap, n_embd]
  DeviceBuffer<float> q, att;      // [cap, n_head * head_dim]
  DeviceBuffer<float> k, v;        // [cap, n_head_kv * head_dim]
  DeviceBuffer<float> gate, up;    // [cap, n_ff]
  DeviceBuffer<float> qkv;         // [cap, q_dim + 2 kv_dim] fused Q/K/V rows (fused_qkv layers)
  DeviceBuffer<float> gu;          // [cap, 2 n_ff] fused gate/up rows (fused_gate_up layers)
  DeviceBuffer<float> last, last_norm;  // [S, n_embd] final hidden rows of finished sequences
  DeviceBuffer<float> logits;           // [S, n_vocab]
  DeviceBuffer<uint16_t> x16;           // [cap, max cols] fp16 activations for the GEMM path
  DeviceBuffer<uint16_t> w16;           // dequantized weight rows for the GEMM path
  struct Prepared {  // what a prepared-activation buffer holds, while the input is unchanged
    const float* in = nullptr;
    int n = 0;
    int64_t cols = 0;
    bool holds(const float* i, int n_, int64_t c) const { return in == i && n == n_ && cols == c; }
  };
  Prepared x16_prepared;         // what x16 holds
  DeviceBuffer<uint16_t> qmm_x;  // activations prepared for qmm (kernels/qmm.hpp)
  // The gated feed-forward output's qmm form (qmm_gated reads qmm_x while it writes this).
  DeviceBuffer<uint16_t> qmm_x_gated;
  Prepared qmm_prepared;
  DeviceBuffer<uint8_t> q8_x;  // activations quantized for gemv_q8 (kernels/gemv_q8.hpp)
  Prepared q8_prepared;
  DeviceBuffer<float> qmm_ws;  // qmm's K-split partial sums
  // Activations rounded for cuBLASLt's FP8 GEMM (GpuExecutorOptions::fp8_weights): codes
  // [cap, max cols] and per-token scales [cap].
  DeviceBuffer<uint8_t> fp8_x;
  DeviceBuffer<float> fp8_x_scale;
  Prepared fp8_prepared;
  Prepared f32_absent;  // the activation whose producer wrote only its forms (forms_for)
  int64_t w16_elems = 0;
  DeviceBuffer<uint8_t> attn_ws;  // the decode attention's, then from attn_prefill_ws the prefill's
  size_t attn_prefill_ws = 0;
  DeviceBuffer<uint8_t> sample_ws;
  DeviceBuffer<uint8_t> argmax_ws;
  size_t argmax_ws_bytes = 0;
  size_t sample_ws_bytes = 0;
  StepArgsLayout args_layout;
  DeviceBuffer<uint8_t> args_dev;
  std::unique_ptr<uint8_t, CudaHostFree> args_host;
  DeviceBuffer<int32_t> out_dev;  // [S] sampled ids
  std::unique_ptr<int32_t, CudaHostFree> out_host;
  DeviceBuffer<LogprobsRow> lp_dev;  // [S] log-probabilities of the rows that ask
  std::unique_ptr<LogprobsRow, CudaHostFree> lp_host;
  DeviceBuffer<float> penalty_raw;           // [max_penalty] raw values of penalised logits
  std::vector<TokenLogprobs> step_logprobs;  // of the last step (Executor::step_logprobs)
  // Captured passes. Three kinds: the whole decode step (every token its sequence's last, rows in
  // piece order); the layers of a pass whose every piece attends as decode rows (decodes beside
  // short prompt chunks; the output rows vary and go after it); the layers of a pass with packed
  // prompt chunks (PassShape::fixed, keyed also by its padded sequence count). They depend on the
  // token count, padded to graph_tokens(), and the attention's context bound, graph_context():
  // the longest context rounded up to a power of two (at least 256), so a short context does not
  // pay for attention over max_ctx. At most kMaxGraphs live; past that the least recently
  // launched one is destroyed. Instantiating a captured pass costs 5-10 ms (a few hundred
  // nodes); the padding keeps the keys few, so a server captures each once, and with
  // opt.graphs_in_background that happens on `builder`'s thread while the step goes on.
  struct GraphKey {
    enum class Kind { decode, rows, packed } kind = Kind::decode;
    int n_tokens = 0, context = 0;
    int seqs = 0;  // passes with packed pieces: the packed sequences (PassShape::fixed)
    auto operator<=>(const GraphKey&) const = default;
  };
  struct CapturedGraph {
    cudaGraphExec_t exec = nullptr;
    uint64_t last_use = 0;
    bool pinned = false;  // warm_graphs' covers: never evicted
  };
  std::map<GraphKey, CapturedGraph> graphs;
  size_t pinned_graphs = 0;  // of them (not counted against kMaxGraphs)
  uint64_t graph_launches = 0;
  GpuGraphStats graph_stats;
  // opt.graphs_in_background: the graphs submitted and not yet taken back, by ticket.
  std::unique_ptr<GraphBuilder> builder;
  struct Building {
    GraphKey key;
    bool pin = false;
  };
  std::map<uint64_t, Building> building;
  std::set<GraphKey> unbuildable;  // recording or instantiating failed: never tried again
  uint64_t next_ticket = 0;
  // Takes the builder's finished graphs into `graphs`.
  void take_built();
  // Adds a graph, the least recently launched unpinned one destroyed past kMaxGraphs.
  std::map<GraphKey, CapturedGraph>::iterator keep_graph(const GraphKey& key, cudaGraphExec_t g,
                                                         bool pin);
  // The pass shape a graph key stands for, and its kernels enqueued (decode: the logits of
  // every row too; the other kinds: the layers only).
  PassShape graph_shape(const GraphKey& k) const;
  void enqueue_graph(const GraphKey& k);
  // The graph a pass of shape `want` runs as: its own when built; with opt.graphs_in_background,
  // until then the smallest built graph of its kind that holds it (pad rows, empty sequences,
  // a longer context bound), or `want` itself when none does.
  GraphKey graph_for(const GraphKey& want);
  // Launches `key`'s graph (graph_for's choice for `want`), capturing it first when inline;
  // in the background, a pass without a graph runs kernel by kernel, and `want`'s own graph is
  // recorded after the launch and handed to the builder.
  void replay(const GraphKey& key, const GraphKey& want);
  cudaGraph_t record(const GraphKey& key);  // captures enqueue_graph(key), launching nothing
  // Records `key` and hands it to the builder, unless built, being built or unbuildable. A
  // recording that fails marks the key unbuildable (counted in graph_stats) and throws nothing:
  // the pass that wanted it has run already.
  void build_later(const GraphKey& key, bool pin = false);
  // With the builder: a ladder of decode, rows and packed shapes, pinned (graph_for's covers).
  void warm_graphs();
  static constexpr size_t kMaxGraphs = 160;
  int graph_context(int longest) const;
  // Tokens a pass of n decode-attention rows runs as: n up to 8, then rounded up to a multiple
  // of 8 (to 64), 16 (to 128), 32 (to 256), 64; at most the slots (decode: one table and logits
  // row per slot) or the scratch rows.
  int graph_tokens(int n, bool decode) const;
  // The KV block pad rows write to and read: one past the blocks the scheduler hands out.
  int pad_block = 0;
};

}  // namespace rz::gpu
