// attention_decode_qkv (kernels/attention_decode.hpp): a decode step's qkv_post and attention in
// one call, against the two calls it replaces (qkv_post, then attention_decode on its q): out, the
// output projection's f16 form and both caches bit for bit, q left unwritten where the attention
// took qkv_post's work over (attn_detail::folds_qkv) and qkv_post's q where it did not. Shapes:
// qwen2.5- and llama-like heads (GQA 6 and 4), GQA 1 and 8 at head dims 80 and 64, head_dim 256
// with a sliding window and a cos/sin table covering only some positions, partial rotation, NEOX
// and adjacent pairs, biases, the three qkv row layouts; the tiny, small and (streaming off)
// 256-token partitions; a cache row skipped; pad rows (length 1, all on one cache row); and the
// launches that cannot fold (16 query heads a KV head, the streaming kernel), which must give the
// same results through qkv_post. Then a decode loop that feeds each step's written cache to the
// next. Every cache position a slot reads holds random halves beforehand (the new token's too, so
// a fold that read the cache there instead of its own k and v would differ).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gpu/test_support.hpp"
#include "kernels/attention_decode.hpp"
#include "kernels/qkv_post.hpp"
#include "kernels/rope.hpp"
#include "quants/quants.hpp"
#include "tests/gpu/elem_test_util.hpp"

namespace rz::gpu {
namespace {

using namespace elem_test;

struct FoldCase {
  const char* name;
  int n_head, n_head_kv, head_dim, n_rot;
  bool neox, bias;
  int layout;  // 0: fused [q | k | v] rows (padded), 1: [q | k] rows and v apart, 2: all apart
  int block_size;
  std::vector<int32_t> lens;
  int extra_context = 0;  // max_context = the longest length + this
  int window = 0;
  int table_positions = -1;  // cos/sin table: -1 none, else the positions it covers
  int skip_slot = -1;        // this slot's cache row is -1 (qkv_post skips its k and v)
  bool pad_rows = false;     // the slots of length 1 all share one cache row (a graph's pad rows)
  bool expect_fold = true;   // whether the launch folds qkv_post in (checked)
};

std::vector<float> randn(size_t n, float sd, std::mt19937_64& rng) {
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

std::vector<uint16_t> random_halves(size_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = fp32_to_fp16(nd(rng));
  return v;
}

::testing::AssertionResult halves_equal(const std::vector<uint16_t>& got,
                                        const std::vector<uint16_t>& ref, const std::string& what) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != ref[i] && bad++ == 0) first = i;
  if (got.size() == ref.size() && bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << got.size()
                                       << " halves differ; first at [" << first << "]";
}

// One decode step of c's slots at lengths `lens`, from caches k0 / v0 (host, updated to the
// caches after the step): qkv_post + attention_decode against attention_decode_qkv.
void run_step(const FoldCase& c, const std::vector<int32_t>& lens, const KvCacheShape& sh,
              const std::vector<int32_t>& tables, int table_stride, int max_context,
              std::vector<uint16_t>& k0, std::vector<uint16_t>& v0, std::mt19937_64& rng,
              const std::string& what) {
  SCOPED_TRACE(what);
  const int S = int(lens.size()), hd = c.head_dim, bs = c.block_size;
  const int q_dim = c.n_head * hd, kv_dim = c.n_head_kv * hd;
  std::vector<int32_t> pos(S);
  std::vector<int64_t> rows(S);
  for (int s = 0; s < S; ++s) {
    pos[s] = lens[s] - 1;
    rows[s] = int64_t(tables[size_t(s) * table_stride + pos[s] / bs]) * bs + pos[s] % bs;
  }
  if (c.skip_slot >= 0 && c.skip_slot < S) rows[c.skip_slot] = -1;

  // The projection's rows in c's layout; q, k, v of token s at their strides.
  const int64_t fused_stride = q_dim + 2 * kv_dim + 3, qk_stride = q_dim + kv_dim + 1;
  const int64_t width = c.layout == 0 ? fused_stride : c.layout == 1 ? qk_stride : q_dim + 2;
  auto qkv = randn(size_t(S) * width, 1.0f, rng);
  for (size_t i = 0; i < qkv.size(); i += 29) qkv[i] = -0.0f;
  auto kv_apart = randn(size_t(S) * (kv_dim + 5), 1.0f, rng);  // v (layout 1), k (layout 2)
  auto v_apart = randn(size_t(S) * kv_dim, 1.0f, rng);         // v (layout 2)
  if (c.pad_rows) {  // pad rows are one token at one position: the same rows (a graph's)
    int first = -1;
    for (int s = 0; s < S; ++s) {
      if (lens[s] != 1) continue;
      if (first < 0) {
        first = s;
        continue;
      }
      const auto copy_row = [&](std::vector<float>& v, size_t n) {
        std::copy_n(v.begin() + first * n, n, v.begin() + s * n);
      };
      copy_row(qkv, size_t(width));
      copy_row(kv_apart, size_t(kv_dim + 5));
      copy_row(v_apart, size_t(kv_dim));
    }
  }
  std::vector<float> bq, bk, bv;
  if (c.bias) {
    bq = randn(q_dim, 0.5f, rng);
    bk = randn(kv_dim, 0.5f, rng);
    bv = randn(kv_dim, 0.5f, rng);
  }
  auto d_qkv = to_device(qkv), d_kva = to_device(kv_apart), d_va = to_device(v_apart);
  auto d_bq = to_device(bq), d_bk = to_device(bk), d_bv = to_device(bv);
  auto d_pos = to_device(pos);
  auto d_rows = to_device(rows);
  const auto inv_freq = rope_inv_freq(c.neox ? 1e6 : 10000.0, c.n_rot);
  auto d_inv = to_device(inv_freq);
  const float attn_factor = c.table_positions >= 0 ? 1.0f : 0.875f;
  DeviceBuffer<float> d_table;
  QkvPostArgs qa;
  qa.n_tokens = S;
  qa.n_head = c.n_head;
  qa.n_rot = c.n_rot;
  qa.neox = c.neox;
  qa.attn_factor = attn_factor;
  qa.cache = sh;
  if (c.table_positions >= 0) {
    d_table = DeviceBuffer<float>(size_t(std::max(c.table_positions, 1)) * c.n_rot);
    rope_cs_table(d_inv.get(), c.n_rot, attn_factor, c.table_positions, d_table.get(), nullptr);
    qa.cs_table = d_table.get();
    qa.cs_positions = c.table_positions;
  }
  if (c.layout == 0) {
    qa.qkv_row_stride = fused_stride;
  } else if (c.layout == 1) {
    qa.qkv_row_stride = qa.k_row_stride = qk_stride;
    qa.k_src = d_qkv.get() + q_dim;
    qa.v_src = d_kva.get();
    qa.v_row_stride = kv_dim + 5;
  } else {
    qa.qkv_row_stride = q_dim + 2;
    qa.k_src = d_kva.get();
    qa.k_row_stride = kv_dim + 5;
    qa.v_src = d_va.get();
  }
  AttentionQkv in{d_qkv.get(), d_bq.get(),  d_bk.get(),   d_bv.get(),
                  d_pos.get(), d_inv.get(), d_rows.get(), qa};

  AttentionDecodeArgs a;
  a.n_slots = S;
  a.n_head = c.n_head;
  a.cache = sh;
  a.max_context = max_context;
  a.table_stride = table_stride;
  a.window = c.window;
  const size_t ws_n = attention_decode_workspace_floats(a);
  auto d_tables = to_device(tables);
  auto d_lens = to_device(lens);

  // qkv_post, then attention_decode on its q
  auto d_k1 = to_device(k0), d_v1 = to_device(v0);
  auto d_q1 = poisoned<float>(size_t(S) * q_dim);
  auto d_out1 = poisoned<float>(size_t(S) * q_dim);
  auto d_f1 = poisoned<uint16_t>(size_t(S) * q_dim);
  auto d_ws1 = ws_n ? poisoned<float>(ws_n) : DeviceBuffer<float>();
  qkv_post(in.qkv, in.bq, in.bk, in.bv, in.pos, in.inv_freq, in.cache_rows, d_q1.get(), d_k1.get(),
           d_v1.get(), qa, nullptr);
  attention_decode(d_q1.get(), d_k1.get(), d_v1.get(), d_tables.get(), d_lens.get(), d_out1.get(),
                   ws_n ? d_ws1.get() : nullptr, a, nullptr, ActForms{.f16 = d_f1.get()});

  // one call
  ASSERT_EQ(attn_detail::folds_qkv(a), c.expect_fold);
  auto d_k2 = to_device(k0), d_v2 = to_device(v0);
  auto d_q2 = poisoned<float>(size_t(S) * q_dim);
  auto d_out2 = poisoned<float>(size_t(S) * q_dim);
  auto d_f2 = poisoned<uint16_t>(size_t(S) * q_dim);
  auto d_ws2 = ws_n ? poisoned<float>(ws_n) : DeviceBuffer<float>();
  attention_decode_qkv(in, d_q2.get(), d_k2.get(), d_v2.get(), d_tables.get(), d_lens.get(),
                       d_out2.get(), ws_n ? d_ws2.get() : nullptr, a, nullptr,
                       ActForms{.f16 = d_f2.get()});

  const auto out1 = d_out1.download();
  for (float x : out1) ASSERT_FALSE(std::isnan(x)) << "the reference must be finite";
  EXPECT_TRUE(all_bits_equal(d_out2.download(), out1, "out"));
  EXPECT_TRUE(halves_equal(d_f2.download(), d_f1.download(), "f16 form"));
  const auto k1 = d_k1.download(), v1 = d_v1.download();
  EXPECT_TRUE(halves_equal(d_k2.download(), k1, "K cache"));
  EXPECT_TRUE(halves_equal(d_v2.download(), v1, "V cache"));
  const auto q2 = d_q2.download();
  if (c.expect_fold) {
    for (float x : q2) ASSERT_TRUE(std::isnan(x)) << "q written by a launch that folds qkv_post";
  } else {
    EXPECT_TRUE(all_bits_equal(q2, d_q1.download(), "q (qkv_post ran)"));
  }
  // The step wrote the new tokens' k and v: at least one cache half changed (else the check
  // above could not tell the fold's writes from none).
  EXPECT_NE(k1, k0);
  k0 = k1;
  v0 = v1;
}

// c's batch: block tables from a shuffled block list, caches of random halves, one step; then
// (loop_steps) more steps, each slot one token longer.
void run_case(const FoldCase& c, std::mt19937_64& rng, int loop_steps = 0) {
  SCOPED_TRACE(c.name);
  const int S = int(c.lens.size()), bs = c.block_size;
  const int max_len = *std::max_element(c.lens.begin(), c.lens.end()) + loop_steps;
  const int max_context = max_len + c.extra_context;
  const int table_stride = (max_context + bs - 1) / bs + 1;
  int used = 1;  // block 0 of the shuffled list: the pad rows' shared block
  for (int L : c.lens) used += (L + loop_steps + bs - 1) / bs;
  const int n_blocks = used + 3;
  std::vector<int32_t> perm(n_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> tables(size_t(S) * table_stride, -1);
  int next = 1;
  for (int s = 0; s < S; ++s) {
    if (c.pad_rows && c.lens[s] == 1) {  // a graph's pad row: one token, on the spare block
      tables[size_t(s) * table_stride] = perm[0];
      continue;
    }
    for (int b = 0; b < (c.lens[s] + loop_steps + bs - 1) / bs; ++b)
      tables[size_t(s) * table_stride + b] = perm[next++];
  }
  const KvCacheShape sh{n_blocks, c.n_head_kv, bs, c.head_dim};
  auto k0 = random_halves(sh.layer_elems(), rng), v0 = random_halves(sh.layer_elems(), rng);
  std::vector<int32_t> lens = c.lens;
  for (int step = 0; step <= loop_steps; ++step) {
    run_step(c, lens, sh, tables, table_stride, max_context, k0, v0, rng,
             "step " + std::to_string(step));
    if (::testing::Test::HasFatalFailure()) return;
    for (int s = 0; s < S; ++s)
      if (!(c.pad_rows && c.lens[s] == 1)) ++lens[s];
  }
}

struct FoldGuard {  // restores the switches whatever a test set
  ~FoldGuard() {
    attn_detail::set_qkv_fold(true);
    attn_detail::set_streaming(true);
  }
};

TEST(AttentionDecodeQkv, FoldedLaunchesMatchQkvPostThenAttention) {
  RZ_REQUIRE_GPU();
  FoldGuard guard;
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  // name, heads (query, KV), head_dim, rotated dims, NEOX, biases, layout, block size, lengths
  const auto fc = [](const char* name, int n_head, int n_kv, int hd, int n_rot, bool neox,
                     bool bias, int layout, int bs, std::vector<int32_t> lens, int extra) {
    return FoldCase{name, n_head, n_kv, hd, n_rot, neox, bias, layout, bs, std::move(lens), extra};
  };
  std::vector<FoldCase> cases = {
      // tiny partitions (32 tokens)
      fc("qwen-like, neox, biases, fused rows", 12, 2, 128, 128, true, true, 0, 16,
         {1, 2, 17, 64, 65, 200}, 56),
      fc("llama-like, pairs, [q | k] + v, a skipped row", 32, 8, 128, 128, false, false, 1, 16,
         {5, 33, 1000, 7}, 24),
      fc("GQA 1, head_dim 80, partial rotation, apart", 4, 4, 80, 48, true, true, 2, 8,
         {3, 31, 32, 33, 96}, 0),
      fc("GQA 8, head_dim 64, block size 1", 16, 2, 64, 64, false, true, 0, 1, {1, 9, 40}, 3),
      fc("head_dim 256, window, partial table", 8, 4, 256, 256, false, false, 0, 32,
         {1, 49, 50, 51, 300}, 20),
      fc("pad rows on one cache row", 12, 2, 128, 128, true, true, 0, 16, {1, 1, 40, 1}, 0),
      // small partitions (64 tokens): more than kAttnTinyBatchGroups KV-head blocks, fewer than
      // kAttnStreamMinBlocks of 256 tokens (max_context 256)
      fc("small partitions", 12, 2, 128, 64, true, true, 1, 16,
         {1,  63, 64, 65, 129, 2,  7,  8,  100, 31, 32, 33, 250, 5,  6,  70, 71,
          72, 3,  4,  9,  10,  11, 12, 13, 14,  15, 16, 17, 18,  19, 20, 21},
         6),
      // not grouped (16 query heads a KV head): qkv_post runs
      fc("GQA 16: not folded", 32, 2, 64, 64, true, false, 0, 16, {1, 20, 300}, 0),
  };
  cases[1].skip_slot = 2;
  cases[4].window = 50;
  cases[4].table_positions = 120;
  cases[5].pad_rows = true;
  cases[7].expect_fold = false;
  for (const FoldCase& c : cases) {
    run_case(c, rng);
    if (HasFatalFailure()) return;
  }
}

TEST(AttentionDecodeQkv, LargePartitionsFoldWithoutStreamingAndStreamingDoesNot) {
  RZ_REQUIRE_GPU();
  FoldGuard guard;
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  // 72 slots x 8 KV heads: past kAttnSmallBatchGroups, so 256-token partitions.
  std::vector<int32_t> lens(72);
  for (int s = 0; s < 72; ++s) lens[s] = 1 + int(rng() % 600);
  lens[0] = 256, lens[1] = 257, lens[2] = 1, lens[3] = 512;
  FoldCase c{"256-token partitions", 32, 8, 128, 128, false, true, 1, 16, lens, 10};
  attn_detail::set_streaming(false);
  c.expect_fold = true;
  run_case(c, rng);
  if (HasFatalFailure()) return;
  attn_detail::set_streaming(true);
  c.name = "streaming: not folded";
  c.expect_fold = false;
  run_case(c, rng);
}

TEST(AttentionDecodeQkv, SwitchedOffRunsQkvPost) {
  RZ_REQUIRE_GPU();
  FoldGuard guard;
  std::mt19937_64 rng(fresh_seed());
  attn_detail::set_qkv_fold(false);
  FoldCase c{"fold off", 12, 2, 128, 128, true, true, 0, 16, {1, 40, 90}, 0};
  c.expect_fold = false;
  run_case(c, rng);
}

// Steps in a row, each step's cache (written by the fold) read by the next.
TEST(AttentionDecodeQkv, DecodeLoop) {
  RZ_REQUIRE_GPU();
  FoldGuard guard;
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  FoldCase c{"loop", 12, 2, 128, 128, true, true, 0, 4, {1, 30, 31, 32}, 16};
  run_case(c, rng, 6);
}

TEST(AttentionDecodeQkv, MismatchedArgumentsThrow) {
  QkvPostArgs qa;
  qa.n_tokens = 2;
  qa.n_head = 4;
  qa.n_rot = 64;
  qa.cache = {8, 2, 16, 64};
  AttentionDecodeArgs a;
  a.n_slots = 2;
  a.n_head = 4;
  a.cache = qa.cache;
  a.max_context = 32;
  a.table_stride = 2;
  AttentionQkv in;
  in.args = qa;
  in.args.n_tokens = 3;
  EXPECT_THROW(attention_decode_qkv(in, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                    nullptr, a, nullptr),
               Error);
  in.args = qa;
  in.args.cache.block_size = 8;
  EXPECT_THROW(attention_decode_qkv(in, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                    nullptr, a, nullptr),
               Error);
  in.args = qa;  // matching, but the pointers null
  EXPECT_THROW(attention_decode_qkv(in, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                    nullptr, a, nullptr),
               Error);
}

}  // namespace
}  // namespace rz::gpu
