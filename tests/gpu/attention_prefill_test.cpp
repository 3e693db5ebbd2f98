// Tiled causal prefill attention (kernels/attention_prefill.cu) against a float64 CPU reference on
// fresh random data (seed printed on failure). The K/V caches are filled on the host (fp16, every
// unused element 0xFFFF = NaN, blocks handed out from a random permutation so a read of a wrong or
// unwritten position shows up as NaN) and uploaded; outputs are poisoned with NaN first and every
// element is compared: |got - ref| <= tol * max |ref| over the token's row (all heads), tol 1e-4
// for the fp32 CUDA-core kernel and 2e-3 for the tensor-core kernel (Q and the softmax weights
// in fp16; each test prints the largest error it saw). Every case runs on both kernels where the
// tensor-core one applies (head_dim a multiple of 16 up to 128).
// Covers what a tiled kernel can get wrong: sequence lengths around the tile sizes (1, 2, 15, 16,
// 17, 63, 64, 65, 300) packed together, chunked prefill (cached tokens before the chunk), GQA
// ratios 1, 2, 4, 7 and groups wider than a tile (64, 65, 96 heads per kv head), head_dim 64,
// 128, 96 and the generic path (2, 66, 80, 200, 256), block sizes 1, 16, 32, an explicit scale,
// and the NaN paths (invalid sequences, uncovered tokens, a bad block id); a 2048-token prompt
// against the decode kernel run per token, with both times printed. Key splits of the tensor-core
// kernel: forced 1, 2, 3, 7 and automatic on long contexts (splits with keys, splits without, tiles
// that use one split next to tiles that use several), bad block ids in the first and a later
// split, forced 1 against automatic bit for bit where the automatic choice is 1, (no GPU needed)
// that the workspace sized for the largest call covers the splits of every smaller one, and the
// times of a qwen2.5-1.5b chunk by split count, printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gpu/test_support.hpp"
#include "kernels/attention_decode.hpp"
#include "kernels/attention_prefill.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/kv_cache_shape.hpp"
#include "quants/quants.hpp"
#include "tests/gpu/elem_test_util.hpp"

namespace rz::gpu {

namespace prefill_detail {  // kernels/attention_prefill.cu
int choose_key_splits(const AttentionPrefillArgs& a, int sm_count);
size_t workspace_bytes_for(const AttentionPrefillArgs& a, int splits);
}  // namespace prefill_detail

namespace {

using namespace elem_test;

constexpr double kRelTol = 1e-4;  // of the row's max |out|: fp32 accumulation, exp2 softmax
// Tensor cores: Q (scaled) and P rounded to fp16 (2^-11 relative each); with these inputs the
// observed error is a few 1e-4 of the row's max (printed by each test), over random seeds up to
// 2.07e-3 (H100, 2026-11-24: one element of a head_dim 16 case, and 2.07e-3 at head_dim 64), so
// 4e-3: a wrong key or weight is an error of the order of the row's max.
constexpr double kMmaRelTol = 4e-3;

struct Config {
  int head_dim, n_head_kv, ratio, block_size;
  float scale = 0.0f;        // 0: 1 / sqrt(head_dim)
  bool tensor_cores = true;  // AttentionPrefillArgs::tensor_cores
  int key_splits = 0;        // AttentionPrefillArgs::key_splits (0: automatic)
  // A second call with AttentionPrefillArgs::tile_index_ready on the first one's workspace (as
  // a forward pass's later layers make): the same bits.
  bool reuse_index = false;
};

// Whether attention_prefill runs the tensor-core kernel for cf (attention_prefill.hpp).
bool mma_path(const Config& cf) {
  return cf.tensor_cores && cf.head_dim % 16 == 0 && cf.head_dim <= 128;
}

// Largest |got - ref| / max |ref of the row| seen per kernel in this test (printed at its end).
struct ErrorLog {
  double worst[2] = {0, 0};  // [mma_path]
  void print(const char* test) const {
    std::printf(
        "[ %s: largest error / row max: CUDA cores %.2e (tol %.0e), tensor cores %.2e "
        "(tol %.0e) ]\n",
        test, worst[0], kRelTol, worst[1], kMmaRelTol);
  }
};

struct Seq {
  int prior, chunk;  // cached tokens before this chunk, query tokens of the chunk
};

// How a run deviates from a clean batch (for the NaN-path test).
struct Faults {
  std::vector<int> ctx_delta;       // added to seq_context_lens[i] on the device only (empty: none)
  int extra_tokens = 0;             // n_tokens = cu_seqlens[n_seqs] + extra (rows nobody covers)
  int bad_seq = -1, bad_block = 0;  // block table entry made out of range
};

std::string describe(const Config& cf) {
  return std::string(mma_path(cf) ? "tensor cores" : "CUDA cores") + ", head_dim " +
         std::to_string(cf.head_dim) + ", " + std::to_string(cf.n_head_kv * cf.ratio) +
         " heads / " + std::to_string(cf.n_head_kv) + " kv, block_size " +
         std::to_string(cf.block_size) +
         (cf.scale != 0.0f ? ", scale " + std::to_string(cf.scale) : "") +
         (cf.key_splits != 0 ? ", key_splits " + std::to_string(cf.key_splits) : "");
}

// Runs attention_prefill on fresh data drawn from rng and checks every row; *got (when given)
// receives the output.
void run_prefill(const Config& cf, const std::vector<Seq>& seqs, std::mt19937_64& rng,
                 const std::string& what, ErrorLog& log, const Faults& f = {},
                 std::vector<float>* got = nullptr) {
  SCOPED_TRACE(what + " (" + describe(cf) + ")");
  const int n_seqs = int(seqs.size()), n_head = cf.n_head_kv * cf.ratio, hd = cf.head_dim;
  const int bs = cf.block_size;
  std::vector<int32_t> ctx(n_seqs), cu(n_seqs + 1, 0);
  int max_context = 1, used = 0;
  for (int i = 0; i < n_seqs; ++i) {
    ctx[i] = seqs[i].prior + seqs[i].chunk;
    cu[i + 1] = cu[i] + seqs[i].chunk;
    max_context = std::max(max_context, ctx[i]);
    used += (ctx[i] + bs - 1) / bs;
  }
  const int n_tokens = cu[n_seqs] + f.extra_tokens;
  const int table_stride = (max_context + bs - 1) / bs + 1;  // one spare (-1) entry per row
  const int n_blocks = used + 3;                             // 3 spare blocks stay NaN
  std::vector<int32_t> perm(n_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> tables(size_t(n_seqs) * table_stride, -1);
  const KvCacheShape sh{n_blocks, cf.n_head_kv, bs, hd};
  std::vector<uint16_t> kc(sh.layer_elems(), 0xFFFF), vc(sh.layer_elems(), 0xFFFF);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  int next = 0;
  for (int i = 0; i < n_seqs; ++i) {
    int32_t* row = tables.data() + size_t(i) * table_stride;
    for (int b = 0; b < (ctx[i] + bs - 1) / bs; ++b) row[b] = perm[next++];
    for (int p = 0; p < ctx[i]; ++p)
      for (int h = 0; h < cf.n_head_kv; ++h)
        for (int d = 0; d < hd; ++d) {
          kc[sh.index(row[p / bs], h, p % bs, d)] = fp32_to_fp16(nd(rng));
          vc[sh.index(row[p / bs], h, p % bs, d)] = fp32_to_fp16(nd(rng));
        }
  }
  std::vector<float> q(size_t(n_tokens) * n_head * hd);
  std::normal_distribution<float> nq(0.0f, 2.0f);
  for (auto& x : q) x = nq(rng);

  // float64 reference; qpos[t] = query position (-1: no valid sequence, expect NaN)
  const double scale = cf.scale != 0.0f ? double(cf.scale) : 1.0 / std::sqrt(double(hd));
  const int group = n_head / cf.n_head_kv;
  std::vector<float> kf(kc.size()), vf(vc.size());
  for (size_t e = 0; e < kc.size(); ++e) {
    kf[e] = fp16_to_fp32(kc[e]);
    vf[e] = fp16_to_fp32(vc[e]);
  }
  std::vector<double> ref(q.size(), 0.0);
  std::vector<int> qpos(n_tokens, -1), qseq(n_tokens, -1);
  std::vector<double> s(max_context);
  for (int i = 0; i < n_seqs; ++i) {
    const int32_t* row = tables.data() + size_t(i) * table_stride;
    for (int j = 0; j < seqs[i].chunk; ++j) {
      const int t = cu[i] + j, L = seqs[i].prior + j + 1;
      qpos[t] = L - 1;
      qseq[t] = i;
      for (int h = 0; h < n_head; ++h) {
        const float* qh = q.data() + (size_t(t) * n_head + h) * hd;
        double* o = ref.data() + (size_t(t) * n_head + h) * hd;
        double m = -INFINITY;
        for (int p = 0; p < L; ++p) {
          const int64_t base = sh.index(row[p / bs], h / group, p % bs, 0);
          double acc = 0;
          for (int d = 0; d < hd; ++d) acc += double(qh[d]) * kf[base + d];
          s[p] = acc * scale;
          m = std::max(m, s[p]);
        }
        double l = 0;
        for (int p = 0; p < L; ++p) l += (s[p] = std::exp(s[p] - m));
        for (int p = 0; p < L; ++p) {
          const int64_t base = sh.index(row[p / bs], h / group, p % bs, 0);
          for (int d = 0; d < hd; ++d) o[d] += s[p] / l * vf[base + d];
        }
      }
    }
  }

  // Faults: rows that must come out NaN, rows that may (bad block: earlier rows of its tiles)
  std::vector<int32_t> ctx_dev = ctx;
  std::vector<char> want_nan(n_tokens, 0), may_nan(n_tokens, 0);
  for (int t = cu[n_seqs]; t < n_tokens; ++t) want_nan[t] = 1;
  for (size_t i = 0; i < f.ctx_delta.size(); ++i)
    if (f.ctx_delta[i] != 0) {
      ctx_dev[i] += f.ctx_delta[i];
      for (int t = cu[i]; t < cu[i + 1]; ++t) want_nan[t] = 1;
    }
  if (f.bad_seq >= 0) {
    tables[size_t(f.bad_seq) * table_stride + f.bad_block] = n_blocks;  // one past the end
    for (int t = cu[f.bad_seq]; t < cu[f.bad_seq + 1]; ++t) {
      if (qpos[t] >= f.bad_block * bs)
        want_nan[t] = 1;
      else
        may_nan[t] = 1;
    }
  }

  AttentionPrefillArgs a;
  a.n_seqs = n_seqs;
  a.n_tokens = n_tokens;
  a.n_head = n_head;
  a.cache = sh;
  a.max_context = max_context;
  a.table_stride = table_stride;
  a.scale = cf.scale;
  a.tensor_cores = cf.tensor_cores;
  a.key_splits = cf.key_splits;
  auto d_k = to_device(kc), d_v = to_device(vc);
  auto d_q = to_device(q);
  auto d_t = to_device(tables);
  auto d_cu = to_device(cu);
  auto d_ctx = to_device(ctx_dev);
  auto d_out = poisoned<float>(q.size());
  auto d_ws = poisoned<uint8_t>(std::max<size_t>(attention_prefill_workspace_bytes(a), 1));
  attention_prefill(d_q.get(), d_k.get(), d_v.get(), d_t.get(), d_cu.get(), d_ctx.get(),
                    d_out.get(), d_ws.get(), a, nullptr);
  const auto out = d_out.download();
  if (got) *got = out;
  if (cf.reuse_index) {
    AttentionPrefillArgs again = a;
    again.tile_index_ready = true;
    auto d_out2 = poisoned<float>(q.size());
    attention_prefill(d_q.get(), d_k.get(), d_v.get(), d_t.get(), d_cu.get(), d_ctx.get(),
                      d_out2.get(), d_ws.get(), again, nullptr);
    const auto out2 = d_out2.download();
    for (size_t e = 0; e < out.size(); ++e)
      ASSERT_EQ(bits_of(out[e]), bits_of(out2[e])) << "the reused tile index: element " << e;
  }

  const size_t rw = size_t(n_head) * hd;
  for (int t = 0; t < n_tokens; ++t) {
    const std::string where = "token " + std::to_string(t) + " (sequence " +
                              std::to_string(qseq[t]) + ", position " + std::to_string(qpos[t]) +
                              ")";
    std::vector<float> g(out.begin() + t * rw, out.begin() + (t + 1) * rw);
    if (want_nan[t]) {
      for (size_t e = 0; e < rw; ++e)
        ASSERT_TRUE(std::isnan(g[e]))
            << where << ": element " << e << " is " << g[e] << ", want NaN";
      continue;
    }
    if (may_nan[t] && std::all_of(g.begin(), g.end(), [](float x) { return std::isnan(x); }))
      continue;
    std::vector<double> r(ref.begin() + t * rw, ref.begin() + (t + 1) * rw);
    double mx = 0, err = 0;
    for (double x : r) mx = std::max(mx, std::fabs(x));
    for (size_t e = 0; e < rw; ++e) err = std::max(err, std::fabs(g[e] - r[e]));
    if (mx > 0) log.worst[mma_path(cf)] = std::max(log.worst[mma_path(cf)], err / mx);
    ASSERT_TRUE(all_close(g, r, 0.0, (mma_path(cf) ? kMmaRelTol : kRelTol) * mx,
                          where + " [head][dim], max |ref| " + std::to_string(mx)));
  }
}

std::vector<Seq> fresh(const std::vector<int>& lens) {
  std::vector<Seq> v;
  for (int n : lens) v.push_back({0, n});
  return v;
}

TEST(AttentionPrefillTiled, MixedLengthsGqaHeadDims) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::vector<int> lens = {1, 2, 15, 16, 17, 63, 64, 65, 300};
  const int block_sizes[] = {16, 1, 32};
  int k = 0;
  ErrorLog log;
  for (bool tc : {true, false})
    for (int hd : {64, 128, 96})
      for (int ratio : {1, 2, 4, 7}) {
        std::shuffle(lens.begin(), lens.end(), rng);
        run_prefill({hd, 2, ratio, block_sizes[k++ % 3], 0.0f, tc}, fresh(lens), rng,
                    "mixed lengths", log);
      }
  log.print("mixed lengths");
}

TEST(AttentionPrefillTiled, ChunkedPrefill) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  // (cached before, chunk): ragged both ways, a one-token chunk, an empty chunk, a fresh prompt
  const std::vector<Seq> seqs = {{5, 17}, {16, 16},  {100, 50}, {64, 1}, {7, 0},
                                 {1, 64}, {250, 65}, {31, 33},  {0, 40}};
  const int block_sizes[] = {16, 1, 32};
  int k = 0;
  ErrorLog log;
  for (bool tc : {true, false}) {
    for (int hd : {64, 128})
      for (int ratio : {1, 2, 4, 7})
        run_prefill({hd, 2, ratio, block_sizes[k++ % 3], 0.0f, tc}, seqs, rng, "chunked", log);
    run_prefill({64, 1, 2, 16, 0.0f, tc}, {{500, 700}}, rng, "one long chunk", log);
    run_prefill({128, 2, 6, 16, 0.0f, tc}, {{1300, 224}, {0, 1}, {60, 3}}, rng,
                "a 224-token chunk after 1,300 cached", log);
  }
  log.print("chunked");
}

TEST(AttentionPrefillTiled, GenericHeadDimsAndWideGroups) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const auto lens = fresh({1, 17, 64, 65, 130});
  ErrorLog log;
  // CUDA cores only (not a multiple of 16, or above 128)
  for (int hd : {2, 66, 80, 200, 256})
    run_prefill({hd, 2, 3, 16}, lens, rng, "generic head_dim", log);
  for (bool tc : {true, false}) {
    run_prefill({16, 2, 3, 16, 0.0f, tc}, lens, rng, "head_dim 16", log);
    run_prefill({112, 2, 3, 16, 0.0f, tc}, lens, rng, "head_dim 112", log);
    // groups wider than a 64-row tile: one token per tile, heads split over chunks
    for (int ratio : {64, 65, 96})
      run_prefill({64, 1, ratio, 32, 0.0f, tc}, fresh({1, 3, 40}), rng, "wide group", log);
    run_prefill({64, 2, 4, 16, 0.05f, tc}, fresh({17, 70}), rng, "explicit scale", log);
  }
  log.print("generic head dims and wide groups");
}

TEST(AttentionPrefillTiled, InvalidInputsGiveNaN) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const std::vector<Seq> seqs = {{0, 20}, {3, 30}, {10, 40}, {0, 70}, {40, 90}};
  Faults f;
  f.ctx_delta = {0, -31, 0, 0, 0};  // sequence 1: fewer cached tokens than query tokens
  f.extra_tokens = 5;               // five trailing tokens nobody covers
  f.bad_seq = 4;                    // sequence 4: positions 64..79 in a bad block
  f.bad_block = 4;
  Faults g;
  g.ctx_delta = {0, 0, 1000, 0, 0};  // sequence 2: context above max_context
  ErrorLog log;
  for (bool tc : {true, false}) {
    run_prefill({64, 2, 2, 16, 0.0f, tc}, seqs, rng, "faults", log, f);
    run_prefill({128, 1, 4, 32, 0.0f, tc}, seqs, rng, "context above max_context", log, g);
  }
}

// The shapes run_prefill passes to attention_prefill, as far as the key splits depend on them.
AttentionPrefillArgs split_args(const Config& cf, const std::vector<Seq>& seqs) {
  AttentionPrefillArgs a;
  a.n_seqs = int(seqs.size());
  a.n_head = cf.n_head_kv * cf.ratio;
  a.cache = {1, cf.n_head_kv, cf.block_size, cf.head_dim};
  a.max_context = 1;
  for (const Seq& q : seqs) {
    a.n_tokens += q.chunk;
    a.max_context = std::max(a.max_context, q.prior + q.chunk);
  }
  a.table_stride = (a.max_context + cf.block_size - 1) / cf.block_size;
  a.tensor_cores = cf.tensor_cores;
  a.key_splits = cf.key_splits;
  return a;
}

// Key splits of the tensor-core kernel, forced and automatic, on contexts long enough that the
// splits have keys: a qwen2.5-1.5b chunk (12 heads / 2 kv, head_dim 128: the automatic choice
// splits it on any GPU of 50 SMs or more), one long chunk whose tiles end between 501 and 1,200
// keys, mixed batches in which the short tiles use one split (written by the attention kernel)
// or leave forced splits without keys next to long tiles that use all of them, and a group
// wider than a tile (two head chunks).
TEST(AttentionPrefillTiled, KeySplits) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const std::vector<Seq> qwen = {{1300, 224}, {0, 1}, {60, 3}};
  const std::vector<Seq> mixed = {{0, 300},  {900, 65},  {0, 17}, {1, 64},
                                  {250, 65}, {1500, 16}, {7, 0}};
  const int auto_qwen = attention_prefill_key_splits(split_args({128, 2, 6, 16}, qwen));
  std::printf("[ automatic key splits: qwen chunk %d, mixed %d (%d SMs) ]\n", auto_qwen,
              attention_prefill_key_splits(split_args({128, 2, 7, 16}, mixed)), device_sm_count());
  if (device_sm_count() >= 50) {
    EXPECT_GE(auto_qwen, 2);
  }
  const int block_sizes[] = {16, 1, 32};
  int k = 0;
  ErrorLog log;
  for (int splits : {1, 2, 3, 7, 0}) {
    run_prefill({128, 2, 6, 16, 0.0f, true, splits}, qwen, rng,
                "a 224-token chunk after 1,300 cached", log);
    run_prefill({64, 1, 2, 16, 0.0f, true, splits}, {{500, 700}}, rng, "one long chunk", log);
    for (const auto& [hd, ratio] : {std::pair{128, 1}, std::pair{64, 4}, std::pair{128, 3}})
      run_prefill({hd, 2, ratio, block_sizes[k++ % 3], 0.0f, true, splits}, mixed, rng, "mixed",
                  log);
    run_prefill({64, 1, 65, 32, 0.0f, true, splits}, {{600, 3}, {0, 40}}, rng, "wide group", log);
  }
  log.print("key splits");
}

// Bad block ids and impossible lengths under key splits: a bad block in the first split and in a
// later one (only that split's partial carries the NaN to the combine), and the faults of
// InvalidInputsGiveNaN.
TEST(AttentionPrefillTiled, KeySplitsInvalidInputsGiveNaN) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const std::vector<Seq> seqs = {{1000, 100}, {0, 50}, {40, 90}};
  Faults late, early, mixed;
  late.bad_seq = early.bad_seq = 0;
  late.bad_block = 56;           // positions 896..911 (block_size 16): past the first split
  early.bad_block = 2;           // positions 32..47: the first split
  mixed.ctx_delta = {0, -1, 0};  // sequence 1: fewer cached tokens than query tokens
  mixed.extra_tokens = 3;
  mixed.bad_seq = 2;  // sequence 2: positions 64..79
  mixed.bad_block = 4;
  Faults above;
  above.ctx_delta = {0, 5000, 0};  // sequence 1: context above max_context
  ErrorLog log;
  for (int splits : {2, 3, 7, 0}) {
    const Config cf{128, 2, 2, 16, 0.0f, true, splits};
    run_prefill(cf, seqs, rng, "bad block in a later split", log, late);
    run_prefill(cf, seqs, rng, "bad block in the first split", log, early);
    run_prefill(cf, seqs, rng, "faults", log, mixed);
    run_prefill({64, 1, 4, 32, 0.0f, true, splits}, seqs, rng, "context above max_context", log,
                above);
  }
}

// AttentionPrefillArgs::tile_index_ready: a call that reuses the tile index an earlier call with
// the same sequences left in the workspace gives the same bits, unsplit, with key splits and with
// faults (bad lengths and blocks).
TEST(AttentionPrefillTiled, ReusedTileIndexGivesTheSameBits) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const std::vector<Seq> qwen = {{1300, 224}, {0, 1}, {60, 3}};
  const std::vector<Seq> mixed = {{0, 300}, {900, 65}, {0, 17}, {1, 64}, {7, 0}};
  Faults faults;
  faults.ctx_delta = {0, 0, -1, 0, 0};  // sequence 2 (17 new tokens): fewer cached than new
  faults.extra_tokens = 3;
  faults.bad_seq = 0;
  faults.bad_block = 4;
  ErrorLog log;
  for (int splits : {1, 3, 0}) {
    run_prefill({128, 2, 6, 16, 0.0f, true, splits, true}, qwen, rng, "qwen chunk", log);
    run_prefill({64, 2, 4, 16, 0.0f, true, splits, true}, mixed, rng, "mixed", log);
    run_prefill({128, 2, 2, 32, 0.0f, true, splits, true}, mixed, rng, "faults", log, faults);
  }
  run_prefill({96, 2, 3, 16, 0.0f, false, 0, true}, mixed, rng, "CUDA cores", log);
}

// Where the automatic choice is 1 (whatever the GPU: max_context 190 has fewer than 2 * 2 key
// tiles), the automatic launch and key_splits = 1 give the same bits.
TEST(AttentionPrefillTiled, OneKeySplitIsTheUnsplitKernel) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const std::vector<Seq> seqs = {{0, 120}, {40, 150}, {5, 17}};
  ErrorLog log;
  for (const auto& [hd, ratio] : {std::pair{128, 6}, std::pair{64, 1}, std::pair{128, 2}}) {
    const Config automatic{hd, 2, ratio, 16};
    Config one = automatic;
    one.key_splits = 1;
    ASSERT_EQ(attention_prefill_key_splits(split_args(automatic, seqs)), 1);
    std::vector<float> got_auto, got_one;
    std::mt19937_64 same = rng;  // the same data for both runs
    run_prefill(automatic, seqs, rng, "automatic", log, {}, &got_auto);
    run_prefill(one, seqs, same, "key_splits 1", log, {}, &got_one);
    ASSERT_EQ(got_auto.size(), got_one.size());
    for (size_t e = 0; e < got_auto.size(); ++e)
      ASSERT_EQ(bits_of(got_auto[e]), bits_of(got_one[e])) << "element " << e;
  }
}

// The workspace sized for the largest call (as the executor does at start: its slots, step
// tokens and context) covers the key splits that any smaller call chooses on any GPU; no GPU
// needed.
TEST(AttentionPrefillTiled, WorkspaceCoversKeySplits) {
  struct Model {
    int n_head, n_kv, head_dim;
  };
  struct Limits {
    int slots, tokens, context;
  };
  const Model models[] = {{12, 2, 128}, {32, 8, 128}, {16, 16, 64}, {64, 1, 64}, {14, 2, 64}};
  const Limits limits[] = {{1, 512, 4096}, {4, 256, 1024}, {16, 2048, 32768}, {256, 8192, 32768}};
  const int sms[] = {1, 16, 66, 132, 264, 1000};
  for (const Model& m : models)
    for (const Limits& lim : limits) {
      AttentionPrefillArgs mx;
      mx.n_seqs = lim.slots;
      mx.n_tokens = lim.tokens;
      mx.n_head = m.n_head;
      mx.cache = {1, m.n_kv, 16, m.head_dim};
      mx.max_context = lim.context;
      mx.table_stride = (lim.context + 15) / 16;
      const size_t ws = attention_prefill_workspace_bytes(mx);
      for (int n_seqs : {1, 2, 3, 7, 16, 64, 256})
        for (int n_tokens : {1, 10, 64, 224, 512, 2048, 8192})
          for (int ctx : {1, 255, 256, 448, 512, 1524, 4096, 32768}) {
            if (n_seqs > lim.slots || n_tokens > lim.tokens || ctx > lim.context) continue;
            AttentionPrefillArgs a = mx;
            a.n_seqs = n_seqs;
            a.n_tokens = n_tokens;
            a.max_context = ctx;
            for (int sm : sms) {
              const int s = prefill_detail::choose_key_splits(a, sm);
              ASSERT_TRUE(s >= 1 && s <= 64) << s;
              ASSERT_LE(prefill_detail::workspace_bytes_for(a, s), ws)
                  << m.n_head << " heads / " << m.n_kv << " kv, head_dim " << m.head_dim
                  << ": sized for " << lim.slots << " seqs, " << lim.tokens << " tokens, context "
                  << lim.context << "; call " << n_seqs << " seqs, " << n_tokens
                  << " tokens, context " << ctx << ", " << sm << " SMs: " << s << " splits";
            }
          }
    }
  // qwen2.5-1.5b, a 224-token chunk at context 1,524 on the H200 (132 SMs): 46 blocks unsplit,
  // 5 splits (230 blocks, within the 264 that are resident at once).
  AttentionPrefillArgs q;
  q.n_seqs = 1;
  q.n_tokens = 224;
  q.n_head = 12;
  q.cache = {1, 2, 16, 128};
  q.max_context = 1524;
  q.table_stride = 96;
  EXPECT_EQ(prefill_detail::choose_key_splits(q, 132), 5);
  EXPECT_EQ(prefill_detail::choose_key_splits(q, 20), 1);  // 46 blocks fill 20 SMs
  q.max_context = 190;                                     // too few keys to split
  EXPECT_EQ(prefill_detail::choose_key_splits(q, 132), 1);
  q.max_context = 1524;
  auto fp32 = q;
  fp32.tensor_cores = false;  // the CUDA-core kernel is never split
  EXPECT_EQ(prefill_detail::choose_key_splits(fp32, 132), 1);
  fp32.key_splits = 3;
  EXPECT_EQ(prefill_detail::choose_key_splits(fp32, 132), 1);
  EXPECT_EQ(attention_prefill_workspace_bytes(fp32), prefill_detail::workspace_bytes_for(q, 1));
  for (int k : {1, 2, 3, 7, 64}) {  // forced splits: exactly what the launch uses
    q.key_splits = k;
    EXPECT_EQ(prefill_detail::choose_key_splits(q, 132), k);
    EXPECT_EQ(attention_prefill_workspace_bytes(q), prefill_detail::workspace_bytes_for(q, k));
  }
}

// Milliseconds per call of fn: one warm-up call, then the mean of reps calls (a rough benchmark).
double time_ms(const std::function<void()>& fn, int reps) {
  fn();
  RZ_CUDA_CHECK(cudaDeviceSynchronize());
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) fn();
  RZ_CUDA_CHECK(cudaDeviceSynchronize());
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
         reps;
}

// Microseconds per call of fn(stream) as a forward pass runs it: reps calls captured in one CUDA
// graph and replayed (launched from the host one by one, calls this small time the launches).
double graph_time_us(const std::function<void(cudaStream_t)>& fn, int reps) {
  cudaStream_t st = nullptr;
  RZ_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  RZ_CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  for (int r = 0; r < reps; ++r) fn(st);
  RZ_CUDA_CHECK(cudaStreamEndCapture(st, &graph));
  RZ_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  RZ_CUDA_CHECK(cudaEventCreate(&e0));
  RZ_CUDA_CHECK(cudaEventCreate(&e1));
  RZ_CUDA_CHECK(cudaGraphLaunch(exec, st));  // warm-up (uploads the graph)
  RZ_CUDA_CHECK(cudaEventRecord(e0, st));
  RZ_CUDA_CHECK(cudaGraphLaunch(exec, st));
  RZ_CUDA_CHECK(cudaEventRecord(e1, st));
  RZ_CUDA_CHECK(cudaEventSynchronize(e1));
  float ms = 0.0f;
  RZ_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
  RZ_CUDA_CHECK(cudaEventDestroy(e0));
  RZ_CUDA_CHECK(cudaEventDestroy(e1));
  RZ_CUDA_CHECK(cudaGraphExecDestroy(exec));
  RZ_CUDA_CHECK(cudaGraphDestroy(graph));
  RZ_CUDA_CHECK(cudaStreamDestroy(st));
  return 1e3 * double(ms) / reps;
}

// One random sequence for the benchmarks below: fp16 K/V caches of n_blocks blocks of shape sh
// (every element normal), a shuffled block table over all of them, and n query tokens' Q.
struct RandomSeq {
  std::vector<uint16_t> kc, vc;
  std::vector<int32_t> table;
  std::vector<float> q;
};
RandomSeq random_seq(const KvCacheShape& sh, int n, int n_head, std::mt19937_64& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  RandomSeq r;
  r.kc.resize(sh.layer_elems());
  r.vc.resize(sh.layer_elems());
  for (auto& x : r.kc) x = fp32_to_fp16(nd(rng));
  for (auto& x : r.vc) x = fp32_to_fp16(nd(rng));
  r.table.resize(size_t(sh.n_blocks));
  std::iota(r.table.begin(), r.table.end(), 0);
  std::shuffle(r.table.begin(), r.table.end(), rng);
  r.q.resize(size_t(n) * n_head * sh.head_dim);
  for (auto& x : r.q) x = 2.0f * nd(rng);
  return r;
}

// One sequence of qwen2.5-1.5b's attention shape (12 heads / 2 kv, head_dim 128) with n query
// tokens at context ctx: prints the time of each key split count in `splits` (0: the automatic
// choice), each output checked against the first count's (which must be 1). As in a forward
// pass's layers after the first, the tile index is built once and uncovered rows are not filled.
void time_qwen_chunk(int n, int ctx, const std::vector<int>& splits, int reps) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int n_head = 12, n_kv = 2, hd = 128, bs = 16;
  const int n_blocks = (ctx + bs - 1) / bs;
  const KvCacheShape sh{n_blocks, n_kv, bs, hd};
  const RandomSeq rs = random_seq(sh, n, n_head, rng);
  const std::vector<float>& q = rs.q;
  AttentionPrefillArgs a;
  a.n_seqs = 1;
  a.n_tokens = n;
  a.n_head = n_head;
  a.cache = sh;
  a.max_context = ctx;
  a.table_stride = n_blocks;
  a.fill_uncovered = false;
  size_t ws_bytes = 0;
  for (int k : splits) {
    a.key_splits = k;
    ws_bytes = std::max(ws_bytes, attention_prefill_workspace_bytes(a));
  }
  auto d_k = to_device(rs.kc), d_v = to_device(rs.vc);
  auto d_q = to_device(q);
  auto d_t = to_device(rs.table), d_cu = to_device(std::vector<int32_t>{0, n});
  auto d_ctx = to_device(std::vector<int32_t>{ctx});
  auto d_out = poisoned<float>(q.size());
  auto d_ws = poisoned<uint8_t>(ws_bytes);
  std::string line = "[ qwen chunk, " + std::to_string(n) + " tokens at context " +
                     std::to_string(ctx) + ", us by key splits:";
  std::vector<float> first;
  for (int k : splits) {
    a.key_splits = k;
    a.tile_index_ready = false;  // the first call builds the index, the timed ones reuse it
    const auto call = [&](cudaStream_t st) {
      attention_prefill(d_q.get(), d_k.get(), d_v.get(), d_t.get(), d_cu.get(), d_ctx.get(),
                        d_out.get(), d_ws.get(), a, st);
      a.tile_index_ready = true;
    };
    call(nullptr);
    RZ_CUDA_CHECK(cudaDeviceSynchronize());
    const double us = graph_time_us(call, reps);
    char buf[64];
    std::snprintf(buf, sizeof buf, " %s%d: %.1f", k == 0 ? "auto=" : "",
                  attention_prefill_key_splits(a), us);
    line += buf;
    const auto got = d_out.download();
    if (first.empty()) {
      ASSERT_EQ(k, 1);
      first = got;
      continue;
    }
    const size_t rw = size_t(n_head) * hd;
    for (int t = 0; t < n; ++t) {
      std::vector<double> r(first.begin() + t * rw, first.begin() + (t + 1) * rw);
      double mx = 0;
      for (double x : r) mx = std::max(mx, std::fabs(x));
      std::vector<float> g(got.begin() + t * rw, got.begin() + (t + 1) * rw);
      ASSERT_TRUE(all_close(g, r, 0.0, kMmaRelTol * mx,
                            "context " + std::to_string(ctx) + ", key_splits " + std::to_string(k) +
                                ", token " + std::to_string(t)));
    }
  }
  const double gflop = 4.0 * n * double(ctx) * hd * n_head * 1e-9;
  std::printf("%s ] (%.2f GFLOP)\n", line.c_str(), gflop);
}

// The qwen2.5-1.5b chunk shape (224 query tokens) at a few contexts, by key split count (a rough
// benchmark, as the test below).
TEST(AttentionPrefillTiled, KeySplitsTimesOfAQwenChunk) {
  RZ_REQUIRE_GPU();
  for (int ctx : {1524, 4096, 16384}) time_qwen_chunk(224, ctx, {1, 2, 3, 4, 5, 6, 8, 0}, 20);
}

// Short chunks deep in a long prompt beside decodes (issue 9's join bench: 32-96 prompt tokens at
// ~3,000 keys): RZ_ATTN_BENCH="n:ctx n:ctx ..." picks the shapes. Run with
// --gtest_also_run_disabled_tests --gtest_filter='AttentionPrefillBench.*'.
TEST(AttentionPrefillBench, DISABLED_ShortChunks) {
  RZ_REQUIRE_GPU();
  const char* env = std::getenv("RZ_ATTN_BENCH");
  std::string spec = env ? env : "32:3072 64:3072 96:3072 96:1024 128:3072 224:4096";
  // RZ_ATTN_BENCH_SPLITS (the first must be 1) and RZ_ATTN_BENCH_REPS: fewer launches under ncu.
  std::vector<int> splits = {1, 2, 4, 8, 12, 16, 24, 0};
  if (const char* e = std::getenv("RZ_ATTN_BENCH_SPLITS")) {
    splits.clear();
    std::istringstream in(e);
    for (int k; in >> k;) splits.push_back(k);
  }
  const char* reps_env = std::getenv("RZ_ATTN_BENCH_REPS");
  const int reps = reps_env ? std::max(1, std::atoi(reps_env)) : 200;
  for (size_t i = 0; i < spec.size();) {
    const size_t j = std::min(spec.find(' ', i), spec.size());
    const std::string item = spec.substr(i, j - i);
    i = j + 1;
    const size_t colon = item.find(':');
    if (colon == std::string::npos) continue;
    time_qwen_chunk(std::stoi(item.substr(0, colon)), std::stoi(item.substr(colon + 1)), splits,
                    reps);
  }
}

// A long prompt (no CPU reference: too slow) against the decode kernel run once per query token,
// each with its own causal length, which is what prefill did before the tiled kernel; prints both
// times (a rough benchmark: 2048 tokens, 32 heads / 8 kv, head_dim 128).
TEST(AttentionPrefillTiled, LongPromptMatchesPerTokenDecode) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int n = 2048, n_head = 32, n_kv = 8, hd = 128, bs = 16;
  const int n_blocks = n / bs, table_stride = n_blocks;
  const KvCacheShape sh{n_blocks, n_kv, bs, hd};
  const RandomSeq rs = random_seq(sh, n, n_head, rng);
  const std::vector<uint16_t>&kc = rs.kc, &vc = rs.vc;
  const std::vector<int32_t>& table = rs.table;
  const std::vector<float>& q = rs.q;
  // decode: slot t = query token t, context t + 1, every slot the sequence's table row
  std::vector<int32_t> tables(size_t(n) * table_stride), lens(n);
  for (int t = 0; t < n; ++t) {
    std::copy(table.begin(), table.end(), tables.begin() + size_t(t) * table_stride);
    lens[t] = t + 1;
  }
  auto d_k = to_device(kc), d_v = to_device(vc);
  auto d_q = to_device(q);
  auto d_t1 = to_device(table), d_tn = to_device(tables), d_lens = to_device(lens);
  auto d_cu = to_device(std::vector<int32_t>{0, n});
  auto d_ctx = to_device(std::vector<int32_t>{n});
  AttentionDecodeArgs da;
  da.n_slots = n;
  da.n_head = n_head;
  da.cache = sh;
  da.max_context = n;
  da.table_stride = table_stride;
  AttentionPrefillArgs pa;
  pa.n_seqs = 1;
  pa.n_tokens = n;
  pa.n_head = n_head;
  pa.cache = sh;
  pa.max_context = n;
  pa.table_stride = table_stride;
  auto d_dout = poisoned<float>(q.size()), d_pout = poisoned<float>(q.size());
  auto d_dws = poisoned<float>(attention_decode_workspace_floats(da));
  auto d_pws = poisoned<uint8_t>(attention_prefill_workspace_bytes(pa));
  const auto timed = [](const std::function<void()>& fn) { return time_ms(fn, 5); };
  const double ms_decode = timed([&] {
    attention_decode(d_q.get(), d_k.get(), d_v.get(), d_tn.get(), d_lens.get(), d_dout.get(),
                     d_dws.get(), da, nullptr);
  });
  const auto prefill = [&](bool tc) {
    pa.tensor_cores = tc;
    return timed([&] {
      attention_prefill(d_q.get(), d_k.get(), d_v.get(), d_t1.get(), d_cu.get(), d_ctx.get(),
                        d_pout.get(), d_pws.get(), pa, nullptr);
    });
  };
  const double ms_fp32 = prefill(false);
  const auto got_fp32 = d_pout.download();
  const double ms_mma = prefill(true);
  const auto got_mma = d_pout.download();
  std::printf(
      "[ prefill attention, %d tokens, %d heads / %d kv, head_dim %d: tensor cores %.3f ms, "
      "CUDA cores %.3f ms, per-token decode %.3f ms ]\n",
      n, n_head, n_kv, hd, ms_mma, ms_fp32, ms_decode);
  const auto want = d_dout.download();
  const size_t rw = size_t(n_head) * hd;
  for (int t = 0; t < n; ++t) {
    std::vector<double> r(want.begin() + t * rw, want.begin() + (t + 1) * rw);
    double mx = 0;
    for (double x : r) mx = std::max(mx, std::fabs(x));
    std::vector<float> g(got_fp32.begin() + t * rw, got_fp32.begin() + (t + 1) * rw);
    ASSERT_TRUE(all_close(g, r, 0.0, 2 * kRelTol * mx,
                          "CUDA cores, token " + std::to_string(t) + " [head][dim]"));
    g.assign(got_mma.begin() + t * rw, got_mma.begin() + (t + 1) * rw);
    ASSERT_TRUE(all_close(g, r, 0.0, kMmaRelTol * mx,
                          "tensor cores, token " + std::to_string(t) + " [head][dim]"));
  }
}

TEST(AttentionPrefillTiled, ShapeErrorsAndWorkspace) {
  AttentionPrefillArgs a;
  a.n_seqs = 3;
  a.n_tokens = 40;
  a.n_head = 8;
  a.cache = {8, 2, 16, 128};
  a.max_context = 100;
  a.table_stride = 7;
  uint8_t dummy = 0;
  auto call = [](AttentionPrefillArgs b, void* ws) {
    return [b, ws] {
      attention_prefill(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, ws, b,
                        nullptr);
    };
  };
  auto b = a;
  b.cache.head_dim = 258;
  EXPECT_TRUE(throws_shape_error(call(b, &dummy), "must be even"));
  b.cache.head_dim = 63;
  EXPECT_TRUE(throws_shape_error(call(b, &dummy), "must be even"));
  b = a;
  b.max_context = 0;
  EXPECT_TRUE(throws_shape_error(call(b, &dummy), "cannot hold"));
  b = a;
  b.key_splits = -1;
  EXPECT_TRUE(throws_shape_error(call(b, &dummy), "key_splits"));
  b.key_splits = 65;
  EXPECT_TRUE(throws_shape_error(call(b, &dummy), "key_splits"));
  b = a;
  b.n_tokens = 0;  // nothing to do: no launch, no workspace needed
  EXPECT_NO_THROW(call(b, nullptr)());
  EXPECT_EQ(attention_prefill_workspace_bytes(b), 0u);
  EXPECT_GE(attention_prefill_workspace_bytes(a), size_t(a.n_seqs + 1) * sizeof(int32_t));
  EXPECT_EQ(attention_prefill_workspace_bytes(a) % 256, 0u);
}

}  // namespace
}  // namespace rz::gpu
