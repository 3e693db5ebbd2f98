// Paged KV append (kernels/kv_append.cu) and decode attention (kernels/attention_decode.cu)
// against host references. K/V are written through kv_append into caches poisoned with 0xFF
// (fp16 NaN), with randomly permuted block tables, so a read of a wrong or unwritten position
// shows up as NaN. Attention is compared with a float64 softmax(q K^T / sqrt(head_dim)) V over the
// fp16-rounded K/V (rz::fp16_to_fp32), |err| <= 1e-4 * max |out| of the slot, for context lengths
// 1, 7, 255, 256, 257, 1000, 4097 (and an idle slot, 0) in one batch, head_dim 64/128 (also 80,
// 256), GQA ratios 1, 3, 4, 8, several block sizes; small batches (64-token partitions) at the
// partition boundaries 1, 63, 64, 65, 255, 256, 257, 1000, 4096, GQA 1/6/8, block sizes 1/16,
// with grids sized for a max_context far above the lengths (as captured graphs launch them), each
// batch again with the output projection's input forms against the preparation kernels;
// batches of more than kAttnSmallBatchHeads query heads (256-token partitions); a decode loop
// whose block tables grow, are released and recycled as the scheduler's
// (sched/kv_block_manager.hpp) do, and the bad-input paths (NaN, shape errors) on both partition
// lengths. Causal prefill attention (attention_prefill) against the same reference, one query token
// at a time at its position: several packed prompts and chunks with earlier context (cu_seqlens).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gpu/test_support.hpp"
#include "kernels/attention_decode.hpp"
#include "kernels/attention_prefill.hpp"
#include "kernels/dequant.hpp"
#include "kernels/gemv_q8.hpp"
#include "kernels/kv_append.hpp"
#include "kernels/qmm.hpp"
#include "quants/quants.hpp"
#include "sched/kv_block_manager.hpp"
#include "tests/gpu/elem_test_util.hpp"

namespace rz::gpu {
namespace {

using namespace elem_test;

constexpr double kRelTol = 1e-4;  // of the slot's max |out|: fp32 accumulation over <= 4097 tokens

// Host mirror of one layer's K and V caches (fp16 bits), starting all 0xFFFF like the device.
struct HostCache {
  KvCacheShape sh;
  std::vector<uint16_t> k, v;
  explicit HostCache(const KvCacheShape& s)
      : sh(s), k(s.layer_elems(), 0xFFFF), v(s.layer_elems(), 0xFFFF) {}
};

// Host kv_append: the fp16 rounding rz::fp32_to_fp16 does.
void append_ref(HostCache& c, const std::vector<float>& kn, const std::vector<float>& vn,
                int64_t k_stride, int64_t v_stride, const std::vector<int64_t>& rows) {
  for (size_t t = 0; t < rows.size(); ++t) {
    if (rows[t] < 0 || rows[t] >= int64_t(c.sh.n_blocks) * c.sh.block_size) continue;
    const int64_t b = rows[t] / c.sh.block_size;
    const int off = int(rows[t] % c.sh.block_size);
    for (int h = 0; h < c.sh.n_head_kv; ++h)
      for (int d = 0; d < c.sh.head_dim; ++d) {
        const int e = h * c.sh.head_dim + d;
        c.k[c.sh.index(b, h, off, d)] = fp32_to_fp16(kn[t * k_stride + e]);
        c.v[c.sh.index(b, h, off, d)] = fp32_to_fp16(vn[t * v_stride + e]);
      }
  }
}

// float64 attention of one query row over the slot's first L tokens (block table `table`), or
// over the last `window` of them.
void attention_ref(const HostCache& c, const float* q, int n_head, const int32_t* table, int L,
                   double* out, int window = 0) {
  const int first = window > 0 && L > window ? L - window : 0;
  const int hd = c.sh.head_dim, group = n_head / c.sh.n_head_kv, bs = c.sh.block_size;
  const double scale = 1.0 / std::sqrt(double(hd));
  std::vector<double> s(L);
  for (int h = 0; h < n_head; ++h) {
    const int kvh = h / group;
    double* o = out + int64_t(h) * hd;
    std::fill(o, o + hd, 0.0);
    if (L == 0) continue;
    double m = -INFINITY;
    for (int t = first; t < L; ++t) {
      const int64_t base = c.sh.index(table[t / bs], kvh, t % bs, 0);
      double acc = 0;
      for (int d = 0; d < hd; ++d) acc += double(q[h * hd + d]) * fp16_to_fp32(c.k[base + d]);
      s[t] = acc * scale;
      m = std::max(m, s[t]);
    }
    double l = 0;
    for (int t = first; t < L; ++t) l += (s[t] = std::exp(s[t] - m));
    for (int t = first; t < L; ++t) {
      const int64_t base = c.sh.index(table[t / bs], kvh, t % bs, 0);
      for (int d = 0; d < hd; ++d) o[d] += s[t] / l * fp16_to_fp32(c.v[base + d]);
    }
  }
}

std::vector<float> randn(size_t n, float sd, std::mt19937_64& rng) {
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

// Per slot: |got - ref| <= rel_tol * max |ref| over the slot's outputs (zeros exactly for L == 0).
::testing::AssertionResult check_out(const std::vector<float>& got, const std::vector<double>& ref,
                                     const std::vector<int32_t>& lens, int row,
                                     const std::string& what, double rel_tol = kRelTol) {
  for (size_t s = 0; s < lens.size(); ++s) {
    std::vector<float> g(got.begin() + s * row, got.begin() + (s + 1) * row);
    std::vector<double> r(ref.begin() + s * row, ref.begin() + (s + 1) * row);
    double mx = 0;
    for (double x : r) mx = std::max(mx, std::fabs(x));
    const auto res =
        all_close(g, r, 0.0, rel_tol * mx,
                  what + " slot " + std::to_string(s) + " (L " + std::to_string(lens[s]) +
                      ", max |out| " + std::to_string(mx) + ")");
    if (!res) return res;
  }
  return ::testing::AssertionSuccess();
}

struct Config {
  int head_dim, n_head_kv, ratio, block_size;
};

// One batch: every slot's K/V appended in one kv_append call (tokens of all slots shuffled),
// tables from a random permutation of the blocks (spare blocks stay poisoned), one attention call
// with max_context = the longest length + extra_context and a workspace of exactly
// attention_decode_workspace_floats (poisoned).
void run_batch(const Config& cf, std::vector<int32_t> lens, int extra_context, std::mt19937_64& rng,
               const std::string& what, int window = 0) {
  const int n_slots = int(lens.size()), n_head = cf.n_head_kv * cf.ratio, hd = cf.head_dim;
  const int bs = cf.block_size, width = cf.n_head_kv * hd;
  const int max_len = *std::max_element(lens.begin(), lens.end());
  const int max_context = max_len + extra_context;
  const int table_stride = (max_context + bs - 1) / bs + 1;
  int used = 0;
  for (int L : lens) used += (L + bs - 1) / bs;
  const int n_blocks = used + 5;
  std::vector<int32_t> perm(n_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> tables(size_t(n_slots) * table_stride, -1);
  int next = 0;
  for (int s = 0; s < n_slots; ++s)
    for (int b = 0; b < (lens[s] + bs - 1) / bs; ++b)
      tables[size_t(s) * table_stride + b] = perm[next++];

  // New K/V rows of every token, in a fused row [K | V | pad 3] to exercise the strides.
  std::vector<int64_t> rows;
  for (int s = 0; s < n_slots; ++s)
    for (int p = 0; p < lens[s]; ++p)
      rows.push_back(int64_t(tables[size_t(s) * table_stride + p / bs]) * bs + p % bs);
  std::shuffle(rows.begin(), rows.end(), rng);
  rows.push_back(-1);  // a padding token: skipped
  const int n_tok = int(rows.size());
  const int64_t stride = 2 * width + 3;
  const auto kv = randn(size_t(n_tok) * stride, 1.0f, rng);
  std::vector<float> vn(kv.begin() + width, kv.end());  // V view for the host reference

  const KvCacheShape sh{n_blocks, cf.n_head_kv, bs, hd};
  HostCache hc(sh);
  append_ref(hc, kv, vn, stride, stride, rows);
  auto d_kv = to_device(kv);
  auto d_rows = to_device(rows);
  auto d_k = poisoned<uint16_t>(sh.layer_elems());
  auto d_v = poisoned<uint16_t>(sh.layer_elems());
  KvAppendArgs aa;
  aa.n_tokens = n_tok;
  aa.cache = sh;
  aa.k_row_stride = aa.v_row_stride = stride;
  kv_append(d_kv.get(), d_kv.get() + width, d_rows.get(), d_k.get(), d_v.get(), aa, nullptr);
  const auto gk = d_k.download(), gv = d_v.download();
  size_t diff = 0, first = 0;
  for (size_t i = 0; i < gk.size(); ++i)
    if (gk[i] != hc.k[i] || gv[i] != hc.v[i])
      if (diff++ == 0) first = i;
  ASSERT_EQ(diff, 0u) << what << ": kv_append cache differs from fp32_to_fp16 at " << diff
                      << " elements, first [" << first << "] K got 0x" << std::hex << gk[first]
                      << " want 0x" << hc.k[first] << ", V got 0x" << gv[first] << " want 0x"
                      << hc.v[first];

  // q scaled by 3 so that the softmax is peaked rather than nearly uniform.
  const auto q = randn(size_t(n_slots) * n_head * hd, 3.0f, rng);
  std::vector<double> ref(q.size());
  for (int s = 0; s < n_slots; ++s)
    attention_ref(hc, q.data() + size_t(s) * n_head * hd, n_head,
                  tables.data() + size_t(s) * table_stride, lens[s],
                  ref.data() + size_t(s) * n_head * hd, window);

  AttentionDecodeArgs a;
  a.n_slots = n_slots;
  a.n_head = n_head;
  a.cache = sh;
  a.max_context = max_context;
  a.table_stride = table_stride;
  a.window = window;
  auto d_q = to_device(q);
  auto d_tables = to_device(tables);
  auto d_lens = to_device(lens);
  auto d_out = poisoned<float>(q.size());
  const size_t ws_n = attention_decode_workspace_floats(a);
  auto d_ws = ws_n ? poisoned<float>(ws_n) : DeviceBuffer<float>();  // no 0-byte memset
  attention_decode(d_q.get(), d_k.get(), d_v.get(), d_tables.get(), d_lens.get(), d_out.get(),
                   ws_n ? d_ws.get() : nullptr, a, nullptr);
  const auto out = d_out.download();
  EXPECT_TRUE(check_out(out, ref, lens, n_head * hd, what));

  // Again with the output projection's input forms (kernels/act_forms.hpp): out bit for bit the
  // same, and every form byte for byte what the preparation kernels make of it (the buffers
  // poisoned first, qmm's pad rows included).
  const int64_t cols = int64_t(n_head) * hd;
  if (cols % 4 != 0) return;
  const bool with_qmm = cols % kQmmChunk == 0, with_q8 = cols % kQ8Group == 0;
  const size_t f16_bytes = 2 * out.size(),
               qmm_bytes = with_qmm ? 2 * size_t(qmm_x_elems(n_slots, cols)) : 16,
               q8_bytes = with_q8 ? q8_activation_bytes(n_slots, cols) : 16;
  auto d_f16 = poisoned<uint8_t>(f16_bytes), d_qmm = poisoned<uint8_t>(qmm_bytes),
       d_q8 = poisoned<uint8_t>(q8_bytes);
  const ActForms forms{.f16 = d_f16.get(),
                       .qmm = with_qmm ? d_qmm.get() : nullptr,
                       .q8 = with_q8 ? d_q8.get() : nullptr};
  auto d_out2 = poisoned<float>(q.size());
  auto d_ws2 = ws_n ? poisoned<float>(ws_n) : DeviceBuffer<float>();
  attention_decode(d_q.get(), d_k.get(), d_v.get(), d_tables.get(), d_lens.get(), d_out2.get(),
                   ws_n ? d_ws2.get() : nullptr, a, nullptr, forms);
  EXPECT_TRUE(all_bits_equal(d_out2.download(), out, what + ": out with forms vs without"));
  auto want = poisoned<uint8_t>(f16_bytes);
  convert_to_half(d_out.get(), want.get(), HalfType::f16, int64_t(out.size()), nullptr);
  EXPECT_TRUE(d_f16.download() == want.download()) << what << ": f16 form vs convert_to_half";
  if (with_qmm) {
    auto want_qmm = poisoned<uint8_t>(qmm_bytes);
    qmm_prepare_x(d_out.get(), want_qmm.get(), n_slots, cols, nullptr);
    EXPECT_TRUE(d_qmm.download() == want_qmm.download()) << what << ": qmm form vs qmm_prepare_x";
  }
  if (with_q8) {
    auto want_q8 = poisoned<uint8_t>(q8_bytes);
    quantize_x_q8(d_out.get(), want_q8.get(), n_slots, cols, nullptr);
    EXPECT_TRUE(d_q8.download() == want_q8.download()) << what << ": q8 form vs quantize_x_q8";
  }
}

// The tokens of one prompt chunk as decode-attention rows (attention_decode_rows): every row
// reads the same table row, each attends to its own length (its position + 1), against the host
// reference.
void run_rows_of_one_sequence(const Config& cf, int len, int n_rows, std::mt19937_64& rng,
                              const std::string& what) {
  const int n_head = cf.n_head_kv * cf.ratio, hd = cf.head_dim, bs = cf.block_size;
  const int width = cf.n_head_kv * hd, table_stride = (len + bs - 1) / bs + 2;
  const int n_blocks = table_stride + 3;
  std::vector<int32_t> perm(n_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  // Table row 0 is another sequence's (never read); row 1 holds the chunk's sequence.
  std::vector<int32_t> tables(size_t(2) * table_stride, -1);
  for (int b = 0; b < (len + bs - 1) / bs; ++b) tables[size_t(table_stride) + b] = perm[b];
  std::vector<int64_t> rows;
  for (int p = 0; p < len; ++p)
    rows.push_back(int64_t(tables[size_t(table_stride) + p / bs]) * bs + p % bs);
  const auto kv = randn(size_t(len) * 2 * width, 1.0f, rng);
  std::vector<float> vn(kv.begin() + width, kv.end());
  const KvCacheShape sh{n_blocks, cf.n_head_kv, bs, hd};
  HostCache hc(sh);
  append_ref(hc, kv, vn, 2 * width, 2 * width, rows);
  auto d_kv = to_device(kv);
  auto d_rows = to_device(rows);
  auto d_k = poisoned<uint16_t>(sh.layer_elems());
  auto d_v = poisoned<uint16_t>(sh.layer_elems());
  KvAppendArgs aa;
  aa.n_tokens = len;
  aa.cache = sh;
  aa.k_row_stride = aa.v_row_stride = 2 * width;
  kv_append(d_kv.get(), d_kv.get() + width, d_rows.get(), d_k.get(), d_v.get(), aa, nullptr);

  std::vector<int32_t> lens, table_rows(size_t(n_rows), 1);
  for (int r = 0; r < n_rows; ++r) lens.push_back(len - n_rows + 1 + r);
  const auto q = randn(size_t(n_rows) * n_head * hd, 3.0f, rng);
  std::vector<double> ref(q.size());
  for (int r = 0; r < n_rows; ++r)
    attention_ref(hc, q.data() + size_t(r) * n_head * hd, n_head, tables.data() + table_stride,
                  lens[size_t(r)], ref.data() + size_t(r) * n_head * hd);
  AttentionDecodeArgs a;
  a.n_slots = n_rows;
  a.n_head = n_head;
  a.cache = sh;
  a.max_context = len;
  a.table_stride = table_stride;
  auto d_q = to_device(q);
  auto d_tables = to_device(tables);
  auto d_table_rows = to_device(table_rows);
  auto d_lens = to_device(lens);
  auto d_out = poisoned<float>(q.size());
  const size_t ws_n = attention_decode_workspace_floats(a);
  auto d_ws = ws_n ? poisoned<float>(ws_n) : DeviceBuffer<float>();
  attention_decode_rows(d_q.get(), d_k.get(), d_v.get(), d_tables.get(), d_table_rows.get(),
                        d_lens.get(), d_out.get(), ws_n ? d_ws.get() : nullptr, a, nullptr);
  EXPECT_TRUE(check_out(d_out.download(), ref, lens, n_head * hd, what));
}

TEST(AttentionDecode, RowsOfOneSequenceEachAttendToTheirPosition) {
  RZ_REQUIRE_GPU();
  std::mt19937_64 rng(fresh_seed());
  for (const Config& cf : {Config{128, 2, 6, 16}, Config{64, 4, 1, 16}, Config{128, 8, 4, 32}})
    for (auto [len, n_rows] :
         {std::pair{40, 32}, std::pair{1100, 16}, std::pair{3400, 32}, std::pair{70, 1}})
      run_rows_of_one_sequence(cf, len, n_rows, rng,
                               "hd " + std::to_string(cf.head_dim) + " len " + std::to_string(len) +
                                   " rows " + std::to_string(n_rows));
}

TEST(AttentionDecode, ContextLengthsHeadDimsGqaRatios) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int block_sizes[] = {16, 5, 32, 256};
  int k = 0;
  for (int hd : {64, 128})
    for (int ratio : {1, 3, 4, 8}) {
      std::vector<int32_t> lens = {1, 7, 255, 256, 257, 1000, 4097, 0};
      std::shuffle(lens.begin(), lens.end(), rng);
      const Config cf{hd, 2, ratio, block_sizes[k++ % 4]};
      const std::string what = "head_dim " + std::to_string(hd) + " ratio " +
                               std::to_string(ratio) + " block_size " +
                               std::to_string(cf.block_size);
      run_batch(cf, lens, (k % 2) ? 0 : 300, rng, what);
    }
}

TEST(AttentionDecode, OtherHeadDimsAndShortBatches) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  run_batch({80, 3, 3, 16}, {1, 300, 513, 2}, 0, rng, "head_dim 80 (9 heads / 3 kv)");
  run_batch({256, 1, 8, 16}, {600, 33}, 0, rng, "head_dim 256");
  run_batch({2, 1, 1, 1}, {3, 1, 700}, 0, rng, "head_dim 2 block_size 1");  // per-head kernel
  run_batch({64, 1, 16, 16}, {300, 5, 1}, 0, rng, "16 heads a KV head (per-head kernel)");
  run_batch({64, 2, 12, 16}, {800, 70}, 0, rng, "12 heads a KV head (per-head kernel)");
  run_batch({128, 8, 4, 16}, {1, 17, 200}, 0, rng, "single partition (no workspace)");
  run_batch({64, 4, 1, 16}, {512, 768, 1}, 56, rng, "partition multiples");
}

const std::vector<int32_t> kBoundaryLens = {1, 63, 64, 65, 255, 256, 257, 1000, 4096};

// f(config, description) for every head dim x GQA ratio (2 KV heads) x block size 1 and 16, until
// a test failure (one failing shape is enough output).
template <class F>
void for_each_config(std::initializer_list<int> head_dims, std::initializer_list<int> ratios,
                     F&& f) {
  for (int hd : head_dims)
    for (int ratio : ratios)
      for (int bs : {1, 16}) {
        f(Config{hd, 2, ratio, bs}, "head_dim " + std::to_string(hd) + " ratio " +
                                        std::to_string(ratio) + " block_size " +
                                        std::to_string(bs));
        if (::testing::Test::HasFailure()) return;
      }
}

// Small batches (n_slots * n_head <= kAttnSmallBatchHeads: kAttnSmallPartition-token partitions):
// all boundary lengths in one batch (plus an idle slot), then each length alone at batch 1 with
// the grid sized for max_context 5096 (graph replay launches all partitions; those past a
// slot's length must leave it alone).
// (Grouped batches of kAttnStreamMinBlocks or more 256-token blocks stream; the same batches
// without streaming are in WithoutStreaming below.)
void small_batch_partition_boundaries(std::mt19937_64& rng) {
  static_assert(kAttnSmallPartition == 64 && kAttnPartition == 256,
                "the boundary lengths below assume 64- and 256-token partitions");
  int k = 0;
  for_each_config({64, 128}, {1, 6, 8}, [&](const Config& cf, const std::string& what) {
    std::vector<int32_t> lens = kBoundaryLens;
    lens.push_back(0);
    std::shuffle(lens.begin(), lens.end(), rng);
    ASSERT_LE(int(lens.size()) * 2 * cf.ratio, kAttnSmallBatchHeads);
    run_batch(cf, lens, (k++ % 2) ? 0 : 3000, rng,
              what + " batch of " + std::to_string(lens.size()));
    for (int L : kBoundaryLens)
      run_batch(cf, {L}, 5096 - L, rng, what + " batch 1, max_context 5096");
  });
  // The largest small batch (exactly kAttnSmallBatchHeads heads) with graph-sized grids.
  std::vector<int32_t> lens(kAttnSmallBatchHeads / 16);
  for (size_t s = 0; s < lens.size(); ++s) lens[s] = kBoundaryLens[s % kBoundaryLens.size()];
  run_batch({128, 2, 8, 16}, lens, 2000, rng, "16 slots x 16 heads, max_context + 2000");
}

TEST(AttentionDecode, SmallBatchPartitionBoundaries) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  small_batch_partition_boundaries(rng);
}

// The grouped kernel's tiny partitions (kAttnTinyPartition tokens, up to kAttnTinyBatchGroups
// KV-head blocks and kAttnTinyMaxParts partitions) over their boundaries, at each GQA ratio and
// head-dim class, block sizes 1 and 16: a batch of the lengths, the largest tiny batch, each
// length alone with the graph-sized grid of the longest tiny context, and sliding windows.
TEST(AttentionDecode, TinyPartitionBoundaries) {
  RZ_REQUIRE_GPU();
  static_assert(kAttnTinyPartition == 32 && kAttnTinyMaxParts == 32,
                "the lengths below assume 32-token partitions up to 1,024 tokens");
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const std::vector<int32_t> tiny_lens = {1,   31,  32,  33,   63,   64,  65,
                                          255, 256, 257, 1000, 1023, 1024};
  for_each_config({64, 128, 256}, {1, 4, 8}, [&](const Config& cf, const std::string& what) {
    std::vector<int32_t> lens = tiny_lens;
    lens.push_back(0);
    std::shuffle(lens.begin(), lens.end(), rng);
    run_batch(cf, lens, 0, rng, what + " batch of " + std::to_string(lens.size()));
    for (int L : {1, 32, 33, 1024}) run_batch(cf, {L}, 1024 - L, rng, what + " batch 1");
  });
  // The largest tiny batch: 32 slots x 2 KV heads = kAttnTinyBatchGroups blocks a partition.
  std::vector<int32_t> lens(kAttnTinyBatchGroups / 2);
  for (size_t s = 0; s < lens.size(); ++s) lens[s] = tiny_lens[s % tiny_lens.size()];
  run_batch({128, 2, 4, 16}, lens, 0, rng, "32 slots x 2 KV heads");
  for (int window : {1, 24, 33, 300}) {
    std::shuffle(lens.begin(), lens.end(), rng);
    run_batch({128, 2, 4, 16}, std::vector<int32_t>(lens.begin(), lens.begin() + 8), 0, rng,
              "window " + std::to_string(window), window);
  }
}

// kAttnPartition-token partitions, same boundaries: the per-head kernel past kAttnSmallBatchHeads
// query heads, the grouped kernel past kAttnSmallBatchGroups KV heads or past the small
// partitions' head-partition cap.
// The grouped ones stream unless streaming is off (WithoutStreaming).
void large_batch_partition_boundaries(std::mt19937_64& rng) {
  std::vector<int32_t> lens = kBoundaryLens;
  for (int L : {0, 2, 511, 512, 513, 767, 768, 769}) lens.push_back(L);  // 17 slots
  for (int hd : {64, 128})
    for (int extra : {0, 3000}) {
      std::shuffle(lens.begin(), lens.end(), rng);
      ASSERT_GT(int(lens.size()) * 16, kAttnSmallBatchHeads);
      run_batch({hd, 1, 16, 16}, lens, extra, rng,
                "17 slots x 16 heads (per-head kernel), head_dim " + std::to_string(hd) +
                    " extra context " + std::to_string(extra));
    }
  run_batch({64, 4, 1, 1}, std::vector<int32_t>(130, 300), 0, rng,
            "130 slots x 4 heads, block_size 1");
  // The grouped kernel with 256-token partitions at each head-dim class it is instantiated for
  // (up to 64, 128, 256; 80 in the 128 class), over the partition boundaries: more than
  // kAttnSmallBatchGroups KV-head blocks a partition (130 slots x 4 KV heads), and more than
  // 65,536 head-partitions of the small length (65 slots x 8 heads, context 8,300).
  std::vector<int32_t> many(130);
  for (size_t s = 0; s < many.size(); ++s) many[s] = kBoundaryLens[s % kBoundaryLens.size()];
  ASSERT_GT(int(many.size()) * 4, kAttnSmallBatchGroups);
  std::vector<int32_t> long_few(many.begin(), many.begin() + 65);
  for (int hd : {80, 128, 256}) {
    std::shuffle(many.begin(), many.end(), rng);
    run_batch(
        {hd, 4, 2, 16}, many, 300, rng,
        "130 slots x 4 KV heads (grouped, 256-token partitions), head_dim " + std::to_string(hd));
    std::shuffle(long_few.begin(), long_few.end(), rng);
    run_batch({hd, 4, 2, 16}, long_few, 8300 - 4096, rng,
              "65 slots x 4 KV heads, context 8300 (grouped, 256-token partitions), head_dim " +
                  std::to_string(hd));
  }
}

TEST(AttentionDecode, LargeBatchPartitionBoundaries) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  large_batch_partition_boundaries(rng);
}

// With streaming off (RZ_ATTN_STREAM_OFF=1), the grouped launches the streaming kernel takes run
// attn_decode_group_kernel's small and 256-token partitions: both batches above again.
TEST(AttentionDecode, WithoutStreaming) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  struct Off {
    Off() { attn_detail::set_streaming(false); }
    ~Off() { attn_detail::set_streaming(true); }
  } off;
  small_batch_partition_boundaries(rng);
  if (!::testing::Test::HasFailure()) large_batch_partition_boundaries(rng);
}

// Which launches stream: grouped ones of at least kAttnStreamMinBlocks (KV head, slot, 256-token
// partition of max_context) blocks, unless the tiny partitions take them; never per-head ones.
TEST(AttentionDecode, StreamingRule) {
  const auto args = [](int n_slots, int n_head, int n_head_kv, int max_context) {
    AttentionDecodeArgs a;
    a.n_slots = n_slots;
    a.n_head = n_head;
    a.cache = KvCacheShape{1, n_head_kv, 16, 128};
    a.max_context = max_context;
    a.table_stride = (max_context + 15) / 16;
    return a;
  };
  static_assert(kAttnStreamMinBlocks == 128, "the cases below assume 128 blocks");
  EXPECT_TRUE(attn_detail::streams(args(32, 32, 8, 256)));    // llama3.1-8b B = 32: 256 blocks
  EXPECT_TRUE(attn_detail::streams(args(16, 32, 8, 256)));    // 128
  EXPECT_FALSE(attn_detail::streams(args(15, 32, 8, 256)));   // 120
  EXPECT_TRUE(attn_detail::streams(args(15, 32, 8, 1536)));   // 6 partitions: 720
  EXPECT_TRUE(attn_detail::streams(args(256, 12, 2, 256)));   // qwen2.5-1.5b B = 256: 512
  EXPECT_TRUE(attn_detail::streams(args(64, 12, 2, 256)));    // 128
  EXPECT_FALSE(attn_detail::streams(args(63, 12, 2, 256)));   // 126
  EXPECT_FALSE(attn_detail::streams(args(32, 12, 2, 256)));   // 64 blocks (tiny partitions)
  EXPECT_TRUE(attn_detail::streams(args(16, 12, 2, 2048)));   // 32 KV-head blocks x 8 partitions
  EXPECT_FALSE(attn_detail::streams(args(1, 32, 8, 2048)));   // 64
  EXPECT_TRUE(attn_detail::streams(args(1, 32, 8, 4096)));    // 128
  EXPECT_FALSE(attn_detail::streams(args(8, 32, 8, 1024)));   // tiny: 64 KV-head blocks, 1,024
  EXPECT_FALSE(attn_detail::streams(args(256, 32, 2, 256)));  // 16 heads a KV head: per head
  attn_detail::set_streaming(false);
  EXPECT_FALSE(attn_detail::streams(args(256, 12, 2, 256)));
  attn_detail::set_streaming(true);
}

// The streaming kernel (grouped launches of kAttnStreamMinBlocks 256-token blocks or more) at
// each head-dim class it is instantiated for and groups of 1 to 8 query heads a KV head (its mma
// rows past the group are zero), over its 32-token tiles' and the partitions' boundaries, with
// sliding windows.
TEST(AttentionDecode, StreamingTilesHeadSetsAndWindows) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::vector<int32_t> lens = kBoundaryLens;
  for (int L : {0, 2, 31, 32, 33, 95, 96, 97, 511, 513}) lens.push_back(L);
  std::vector<int32_t> many(130);  // 130 slots x 4 KV heads > kAttnSmallBatchGroups
  ASSERT_GT(int(many.size()) * 4, kAttnSmallBatchGroups);
  for (int hd : {64, 128, 256})
    for (int ratio : {1, 3, 4, 5, 6, 8}) {
      for (size_t s = 0; s < many.size(); ++s) many[s] = lens[(s * 7 + ratio) % lens.size()];
      std::shuffle(many.begin(), many.end(), rng);
      const std::string what = "head_dim " + std::to_string(hd) + " ratio " + std::to_string(ratio);
      run_batch({hd, 4, ratio, 16}, many, ratio == 4 ? 2000 : 0, rng, what);
      if (hd == 128) run_batch({hd, 4, ratio, 16}, many, 0, rng, what + " window 40", 40);
      if (::testing::Test::HasFailure()) return;
    }
}

// Decode steps over block tables kept as the scheduler keeps them (blocks from a KvBlockManager,
// one table per slot): prompts appended, then one token per slot per step (the table grown to
// cover L + 1, append at the new position's row, attend over L + 1), one slot released and
// recycled for a new sequence midway. The host reference follows the same cache rows.
TEST(AttentionDecode, DecodeLoopWithBlockTables) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int n_slots = 3, n_head_kv = 3, n_head = 9, hd = 64, bs = 16, n_blocks = 80;
  const int max_context = 600, table_stride = (max_context + bs - 1) / bs, width = n_head_kv * hd;
  KvBlockManager blocks(n_blocks, bs, false);
  std::vector<std::vector<int32_t>> table(n_slots);
  // Grows slot s's table to hold n tokens.
  auto cover = [&](int s, int n) {
    auto& t = table[size_t(s)];
    while (int64_t(t.size()) < blocks.blocks_for(n)) {
      const int32_t b = blocks.allocate();
      ASSERT_GE(b, 0) << "out of blocks";
      t.push_back(b);
    }
  };
  auto release = [&](int s) {
    auto& t = table[size_t(s)];
    for (auto it = t.rbegin(); it != t.rend(); ++it) blocks.release(*it);
    t.clear();
  };
  // Cache row of position p of slot s.
  auto row_of = [&](int s, int p) {
    return int64_t(table.at(size_t(s)).at(size_t(p / bs))) * bs + p % bs;
  };
  const KvCacheShape sh{n_blocks, n_head_kv, bs, hd};
  HostCache hc(sh);
  auto d_k = poisoned<uint16_t>(sh.layer_elems());
  auto d_v = poisoned<uint16_t>(sh.layer_elems());
  std::vector<int32_t> lens = {250, 20, 0};
  AttentionDecodeArgs a;
  a.n_slots = n_slots;
  a.n_head = n_head;
  a.cache = sh;
  a.max_context = max_context;
  a.table_stride = table_stride;
  auto d_ws = poisoned<float>(attention_decode_workspace_floats(a));

  auto append = [&](const std::vector<int64_t>& rows) {
    const auto kn = randn(rows.size() * width, 1.0f, rng),
               vn = randn(rows.size() * width, 1.0f, rng);
    append_ref(hc, kn, vn, width, width, rows);
    auto dk = to_device(kn), dv = to_device(vn);
    auto dr = to_device(rows);
    KvAppendArgs aa;
    aa.n_tokens = int(rows.size());
    aa.cache = sh;
    kv_append(dk.get(), dv.get(), dr.get(), d_k.get(), d_v.get(), aa, nullptr);
  };
  auto prompt = [&](int s, int len) {
    cover(s, len);
    std::vector<int64_t> rows;
    for (int p = 0; p < len; ++p) rows.push_back(row_of(s, p));
    append(rows);
    lens[s] = len;
  };
  for (int s = 0; s < n_slots; ++s) prompt(s, lens[s]);
  for (int step = 0; step < 24; ++step) {
    if (step == 10) {  // slot 1 finishes; a new 70-token sequence takes its place
      release(1);
      prompt(1, 70);
    }
    std::vector<int64_t> rows;
    for (int s = 0; s < n_slots; ++s) {
      cover(s, lens[s] + 1);
      rows.push_back(row_of(s, lens[s]));
      ++lens[s];
    }
    append(rows);
    std::vector<int32_t> tables(size_t(n_slots) * table_stride, -1);
    for (int s = 0; s < n_slots; ++s) {
      const auto& t = table[size_t(s)];
      std::copy(t.begin(), t.end(), tables.begin() + size_t(s) * table_stride);
    }
    const auto q = randn(size_t(n_slots) * n_head * hd, 3.0f, rng);
    std::vector<double> ref(q.size());
    for (int s = 0; s < n_slots; ++s)
      attention_ref(hc, q.data() + size_t(s) * n_head * hd, n_head,
                    tables.data() + size_t(s) * table_stride, lens[s],
                    ref.data() + size_t(s) * n_head * hd);
    auto d_q = to_device(q);
    auto d_t = to_device(tables);
    auto d_l = to_device(lens);
    auto d_out = poisoned<float>(q.size());
    attention_decode(d_q.get(), d_k.get(), d_v.get(), d_t.get(), d_l.get(), d_out.get(), d_ws.get(),
                     a, nullptr);
    ASSERT_TRUE(
        check_out(d_out.download(), ref, lens, n_head * hd, "step " + std::to_string(step)));
  }
}

// A block id out of range or a length above max_context: that slot's output is NaN (no stray
// read), the other slots are still right.
TEST(AttentionDecode, BadTablesAndLengthsGiveNaN) {
  RZ_REQUIRE_GPU();
  // 2 query heads a KV head: the grouped kernel, tiny partitions; 80 heads of one KV head: the
  // per-head kernel, 256-token partitions; 320 heads of 160 KV heads (640 KV-head blocks): the
  // streaming kernel.
  for (auto [n_head, n_head_kv] : {std::pair{2, 1}, std::pair{80, 1}, std::pair{320, 160}}) {
    SCOPED_TRACE("n_head " + std::to_string(n_head) + " n_head_kv " + std::to_string(n_head_kv));
    const int hd = 64, bs = 16, n_blocks = 4, table_stride = 40;
    const KvCacheShape sh{n_blocks, n_head_kv, bs, hd};
    std::vector<uint16_t> kc(sh.layer_elems()), vc(sh.layer_elems());
    std::mt19937_64 rng(7);
    for (auto& x : kc) x = fp32_to_fp16(std::normal_distribution<float>(0, 1)(rng));
    for (auto& x : vc) x = fp32_to_fp16(std::normal_distribution<float>(0, 1)(rng));
    HostCache hc(sh);
    hc.k = kc;
    hc.v = vc;
    // slot 0: good, 40 tokens; slot 1: block id 9 (>= n_blocks) at its 2nd block; slot 2: length
    // 641 > max_context 640; slot 3: block id -3 in its 20th block (second partition).
    std::vector<int32_t> tables(4 * table_stride, 0);
    for (int s = 0; s < 4; ++s)
      for (int b = 0; b < table_stride; ++b) tables[s * table_stride + b] = (b + s) % n_blocks;
    tables[1 * table_stride + 1] = 9;
    tables[3 * table_stride + 19] = -3;
    const std::vector<int32_t> lens = {40, 30, 641, 400};
    AttentionDecodeArgs a;
    a.n_slots = 4;
    a.n_head = n_head;
    a.cache = sh;
    a.max_context = 640;
    a.table_stride = table_stride;
    const auto q = randn(size_t(4) * n_head * hd, 1.0f, rng);
    auto d_k = to_device(kc), d_v = to_device(vc);
    auto d_q = to_device(q);
    auto d_t = to_device(tables);
    auto d_l = to_device(lens);
    auto d_out = poisoned<float>(q.size());
    auto d_ws = poisoned<float>(attention_decode_workspace_floats(a));
    attention_decode(d_q.get(), d_k.get(), d_v.get(), d_t.get(), d_l.get(), d_out.get(), d_ws.get(),
                     a, nullptr);
    const auto out = d_out.download();
    std::vector<double> ref(size_t(n_head) * hd);
    attention_ref(hc, q.data(), n_head, tables.data(), lens[0], ref.data());
    EXPECT_TRUE(check_out(std::vector<float>(out.begin(), out.begin() + n_head * hd), ref, {40},
                          n_head * hd, "good slot"));
    for (int s = 1; s < 4; ++s)
      for (int i = 0; i < n_head * hd; ++i)
        ASSERT_TRUE(std::isnan(out[size_t(s) * n_head * hd + i]))
            << "slot " << s << " element " << i;
  }
}

// Rows another kernel owns (a step replayed from one graph for every split between decode rows
// and packed chunk tokens, gpu_forward.cpp): the decode attention leaves rows of length -1 as they
// were, bit for bit, and computes the others; the prefill attention with fill_uncovered = false
// leaves the rows no sequence covers (sequences counting from row 3 of 26) and computes the rest.
// Grouped (8 query heads) and per-head (80) decode kernels, both prefill kernels.
TEST(AttentionDecode, RowsOfOtherKernelsAreLeftAlone) {
  RZ_REQUIRE_GPU();
  std::mt19937_64 rng(17);
  const int hd = 64, bs = 16, n_blocks = 24, table_stride = 24;
  const KvCacheShape sh{n_blocks, 1, bs, hd};
  std::vector<uint16_t> kc(sh.layer_elems()), vc(sh.layer_elems());
  for (auto& x : kc) x = fp32_to_fp16(std::normal_distribution<float>(0, 1)(rng));
  for (auto& x : vc) x = fp32_to_fp16(std::normal_distribution<float>(0, 1)(rng));
  HostCache hc(sh);
  hc.k = kc;
  hc.v = vc;
  std::vector<int32_t> tables(size_t(4) * table_stride);
  for (int s = 0; s < 4; ++s)
    for (int b = 0; b < table_stride; ++b)
      tables[size_t(s) * table_stride + b] = (b * 5 + s) % n_blocks;
  auto d_k = to_device(kc), d_v = to_device(vc);
  auto d_t = to_device(tables);
  const auto untouched = [](const std::vector<float>& out, size_t from, size_t n) {
    for (size_t i = from; i < from + n; ++i) {
      uint32_t bits = 0;
      std::memcpy(&bits, &out[i], sizeof bits);
      if (bits != 0xFFFFFFFFu) return false;
    }
    return true;
  };
  for (int n_head : {8, 80}) {
    SCOPED_TRACE("decode, n_head " + std::to_string(n_head));
    const std::vector<int32_t> lens = {40, -1, 300, -1}, table_rows = {0, 1, 2, 3};
    AttentionDecodeArgs a;
    a.n_slots = 4;
    a.n_head = n_head;
    a.cache = sh;
    a.max_context = 384;
    a.table_stride = table_stride;
    const auto q = randn(size_t(4) * n_head * hd, 1.0f, rng);
    auto d_q = to_device(q);
    auto d_l = to_device(lens);
    auto d_r = to_device(table_rows);
    auto d_out = poisoned<float>(q.size());
    auto d_ws = poisoned<float>(attention_decode_workspace_floats(a));
    attention_decode_rows(d_q.get(), d_k.get(), d_v.get(), d_t.get(), d_r.get(), d_l.get(),
                          d_out.get(), d_ws.get(), a, nullptr);
    const auto out = d_out.download();
    const size_t row = size_t(n_head) * hd;
    for (int s : {0, 2}) {
      std::vector<double> ref(row);
      attention_ref(hc, q.data() + s * row, n_head, tables.data() + size_t(s) * table_stride,
                    lens[size_t(s)], ref.data());
      EXPECT_TRUE(check_out(std::vector<float>(out.begin() + s * row, out.begin() + (s + 1) * row),
                            ref, {lens[size_t(s)]}, int(row), "row " + std::to_string(s)));
    }
    EXPECT_TRUE(untouched(out, row, row)) << "row 1 was written";
    EXPECT_TRUE(untouched(out, 3 * row, row)) << "row 3 was written";
  }
  // Prefill: one sequence of 120 cached tokens whose last 20 are query rows 3..22 of 26.
  const int n_head = 4, n_tokens = 26, first = 3, chunk = 20, ctx = 120;
  const auto q = randn(size_t(n_tokens) * n_head * hd, 3.0f, rng);
  const std::vector<int32_t> cu = {first, first + chunk}, ctx_lens = {ctx};
  std::vector<double> ref(q.size());
  std::vector<int32_t> qlens;
  for (int j = 0; j < chunk; ++j) {
    const size_t t = size_t(first + j);
    qlens.push_back(ctx - chunk + j + 1);
    attention_ref(hc, q.data() + t * n_head * hd, n_head, tables.data(), qlens.back(),
                  ref.data() + t * n_head * hd);
  }
  AttentionPrefillArgs a;
  a.n_seqs = 1;
  a.n_tokens = n_tokens;
  a.n_head = n_head;
  a.cache = sh;
  a.max_context = 384;
  a.table_stride = table_stride;
  a.fill_uncovered = false;
  auto d_q = to_device(q);
  auto d_cu = to_device(cu);
  auto d_c = to_device(ctx_lens);
  auto d_ws = poisoned<uint8_t>(attention_prefill_workspace_bytes(a));
  for (bool tc : {false, true}) {
    SCOPED_TRACE(tc ? "prefill, tensor cores" : "prefill, CUDA cores");
    a.tensor_cores = tc;
    auto d_out = poisoned<float>(q.size());
    attention_prefill(d_q.get(), d_k.get(), d_v.get(), d_t.get(), d_cu.get(), d_c.get(),
                      d_out.get(), d_ws.get(), a, nullptr);
    const auto out = d_out.download();
    const size_t row = size_t(n_head) * hd;
    EXPECT_TRUE(check_out(
        std::vector<float>(out.begin() + first * row, out.begin() + (first + chunk) * row),
        std::vector<double>(ref.begin() + first * row, ref.begin() + (first + chunk) * row), qlens,
        int(row), "covered rows", tc ? 4e-3 : kRelTol));
    EXPECT_TRUE(untouched(out, 0, first * row)) << "rows 0..2 were written";
    EXPECT_TRUE(untouched(out, (first + chunk) * row, (n_tokens - first - chunk) * row))
        << "rows 23..25 were written";
  }
}

// Packed prefill: sequence i has prior[i] tokens cached from earlier chunks and chunk[i] new
// query tokens (all ctx_i = prior + chunk tokens appended first); query j attends causally to
// positions 0..prior + j. Both prefill kernels: the fp32 one at kRelTol, the tensor-core one (Q
// and P in fp16) at 2e-3 (tests/gpu/attention_prefill_test.cpp has the error analysis).
void run_prefill(const Config& cf, const std::vector<int>& prior, const std::vector<int>& chunk,
                 std::mt19937_64& rng, const std::string& what, int window = 0) {
  const int n_seqs = int(prior.size()), n_head = cf.n_head_kv * cf.ratio, hd = cf.head_dim;
  const int bs = cf.block_size, width = cf.n_head_kv * hd;
  std::vector<int32_t> ctx(n_seqs), cu(n_seqs + 1, 0);
  int max_context = 1, used = 0;
  for (int i = 0; i < n_seqs; ++i) {
    ctx[i] = prior[i] + chunk[i];
    cu[i + 1] = cu[i] + chunk[i];
    max_context = std::max(max_context, ctx[i]);
    used += (ctx[i] + bs - 1) / bs;
  }
  const int n_tokens = cu[n_seqs], table_stride = (max_context + bs - 1) / bs;
  const int n_blocks = used + 3;
  std::vector<int32_t> perm(n_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> tables(size_t(n_seqs) * table_stride, -1);
  std::vector<int64_t> rows;
  int next = 0;
  for (int i = 0; i < n_seqs; ++i) {
    for (int b = 0; b < (ctx[i] + bs - 1) / bs; ++b)
      tables[size_t(i) * table_stride + b] = perm[next++];
    for (int p = 0; p < ctx[i]; ++p)
      rows.push_back(int64_t(tables[size_t(i) * table_stride + p / bs]) * bs + p % bs);
  }
  const KvCacheShape sh{n_blocks, cf.n_head_kv, bs, hd};
  HostCache hc(sh);
  const auto kn = randn(rows.size() * width, 1.0f, rng), vn = randn(rows.size() * width, 1.0f, rng);
  append_ref(hc, kn, vn, width, width, rows);
  auto d_k = poisoned<uint16_t>(sh.layer_elems());
  auto d_v = poisoned<uint16_t>(sh.layer_elems());
  {
    auto dk = to_device(kn), dv = to_device(vn);
    auto dr = to_device(rows);
    KvAppendArgs aa;
    aa.n_tokens = int(rows.size());
    aa.cache = sh;
    kv_append(dk.get(), dv.get(), dr.get(), d_k.get(), d_v.get(), aa, nullptr);
  }
  const auto q = randn(size_t(n_tokens) * n_head * hd, 3.0f, rng);
  std::vector<double> ref(q.size());
  std::vector<int32_t> qlens(n_tokens);  // causal length per query token (for the messages)
  for (int i = 0; i < n_seqs; ++i)
    for (int j = 0; j < chunk[i]; ++j) {
      const int t = cu[i] + j;
      qlens[t] = prior[i] + j + 1;
      attention_ref(hc, q.data() + size_t(t) * n_head * hd, n_head,
                    tables.data() + size_t(i) * table_stride, qlens[t],
                    ref.data() + size_t(t) * n_head * hd, window);
    }
  AttentionPrefillArgs a;
  a.n_seqs = n_seqs;
  a.n_tokens = n_tokens;
  a.n_head = n_head;
  a.cache = sh;
  a.max_context = max_context;
  a.table_stride = table_stride;
  a.window = window;
  auto d_q = to_device(q);
  auto d_t = to_device(tables);
  auto d_cu = to_device(cu);
  auto d_ctx = to_device(ctx);
  size_t ws_bytes = attention_prefill_workspace_bytes(a);  // automatic splits
  a.key_splits = 3;
  ws_bytes = std::max(ws_bytes, attention_prefill_workspace_bytes(a));
  auto d_ws = poisoned<uint8_t>(ws_bytes);
  // The tensor-core kernel with a sliding window once more with forced key splits (splits that
  // start at the window's first key tile).
  for (int run = 0; run < (window > 0 ? 3 : 2); ++run) {
    const bool tc = run > 0;
    a.tensor_cores = tc;
    a.key_splits = run == 2 ? 3 : 0;
    auto d_out = poisoned<float>(q.size());
    attention_prefill(d_q.get(), d_k.get(), d_v.get(), d_t.get(), d_cu.get(), d_ctx.get(),
                      d_out.get(), d_ws.get(), a, nullptr);
    const auto out = d_out.download();
    // Again with the output projection's fp16 form: out bit for bit the same, the form byte for
    // byte convert_to_half's of it.
    auto d_out2 = poisoned<float>(q.size());
    auto d_f16 = poisoned<uint16_t>(q.size()), d_want = poisoned<uint16_t>(q.size());
    attention_prefill(d_q.get(), d_k.get(), d_v.get(), d_t.get(), d_cu.get(), d_ctx.get(),
                      d_out2.get(), d_ws.get(), a, nullptr, d_f16.get());
    convert_to_half(d_out.get(), d_want.get(), HalfType::f16, int64_t(q.size()), nullptr);
    EXPECT_TRUE(all_bits_equal(d_out2.download(), out, what + ": out with the fp16 form"));
    EXPECT_TRUE(d_f16.download() == d_want.download()) << what << ": fp16 form vs convert_to_half";
    EXPECT_TRUE(check_out(
        out, ref, qlens, n_head * hd,
        what + (tc ? " (prefill, tensor cores" : " (prefill, CUDA cores") +
            (run == 2 ? ", 3 key splits" : "") + "; slot = query token)",
        // Tensor cores: attention_prefill_test.cpp's kMmaRelTol (fp16 Q and P; random seeds reach
        // ~2.1e-3 of the row's max: 2.14e-3 on the H200, seed 4430053448056023812, 2026-11-25).
        tc ? 4e-3 : kRelTol));
  }
}

TEST(AttentionPrefill, PackedPromptsAndChunks) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  // (prior, chunk): fresh prompts 1, 7, 300; chunks after 100 and 250 cached tokens; an empty chunk
  const std::vector<int> prior = {0, 0, 100, 0, 7, 250};
  const std::vector<int> chunk = {1, 7, 50, 300, 0, 260};
  const int block_sizes[] = {16, 5, 32, 256};
  int k = 0;
  for (int hd : {64, 128})
    for (int ratio : {1, 3, 4, 8}) {
      const Config cf{hd, 2, ratio, block_sizes[k++ % 4]};
      run_prefill(cf, prior, chunk, rng,
                  "head_dim " + std::to_string(hd) + " ratio " + std::to_string(ratio) +
                      " block_size " + std::to_string(cf.block_size));
    }
}

// A sliding window (qwen's and gemma's local layers, phi3): each query attends to its last
// `window` positions; windows shorter and longer than the partitions, key tiles and prompts.
TEST(AttentionDecode, SlidingWindow) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::vector<int32_t> lens = kBoundaryLens;
  lens.push_back(0);
  for (int window : {1, 24, 64, 65, 300, 5000})
    for (int hd : {64, 128}) {
      const std::string what =
          "window " + std::to_string(window) + " head_dim " + std::to_string(hd);
      std::shuffle(lens.begin(), lens.end(), rng);
      run_batch({hd, 2, 4, 16}, lens, 100, rng, what + ", small partitions", window);
      // 260 slots x 2 KV heads (> kAttnSmallBatchGroups blocks): 256-token partitions
      std::vector<int32_t> many(260, 0);
      for (size_t s = 0; s < many.size(); ++s) many[s] = lens[s % lens.size()];
      ASSERT_GT(int(many.size()) * 2, kAttnSmallBatchGroups);
      run_batch({hd, 2, 4, 16}, many, 0, rng, what + ", large partitions", window);
      if (::testing::Test::HasFailure()) return;
    }
}

TEST(AttentionPrefill, SlidingWindow) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const std::vector<int> prior = {0, 0, 100, 0, 250};
  const std::vector<int> chunk = {1, 30, 50, 300, 260};
  for (int window : {1, 24, 64, 100, 129, 1000})
    for (int hd : {64, 128, 256})
      for (int ratio : {1, 4}) {
        run_prefill({hd, 2, ratio, 16}, prior, chunk, rng,
                    "window " + std::to_string(window) + " head_dim " + std::to_string(hd) +
                        " ratio " + std::to_string(ratio),
                    window);
        if (::testing::Test::HasFailure()) return;
      }
}

TEST(AttentionPrefill, ShapeErrors) {
  AttentionPrefillArgs a;
  a.n_seqs = 1;
  a.n_tokens = 4;
  a.n_head = 9;
  a.cache = {8, 3, 16, 64};
  a.max_context = 100;
  a.table_stride = 7;
  uint8_t dummy = 0;
  auto call = [&](AttentionPrefillArgs b, void* ws) {
    return [b, ws] {
      attention_prefill(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, ws, b,
                        nullptr);
    };
  };
  EXPECT_TRUE(throws_shape_error(call(a, nullptr), "workspace"));
  auto b = a;
  b.n_head = 8;
  EXPECT_TRUE(throws_shape_error(call(b, &dummy), "multiple of n_head_kv"));
  b = a;
  b.n_tokens = 70000;
  EXPECT_TRUE(throws_shape_error(call(b, &dummy), "65535"));
  b = a;
  b.n_seqs = 0;
  EXPECT_TRUE(throws_shape_error(call(b, &dummy), "without sequences"));
  b = a;
  b.table_stride = 6;
  EXPECT_TRUE(throws_shape_error(call(b, &dummy), "cannot hold"));
  // the fp16 form: only over every row of the call, 4-byte aligned
  b = a;
  b.n_head = 3;
  b.fill_uncovered = false;
  alignas(4) uint16_t f16[2] = {};
  const auto with_form = [&](AttentionPrefillArgs c, void* f) {
    return [c, f, &dummy] {
      attention_prefill(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, &dummy, c,
                        nullptr, f);
    };
  };
  EXPECT_TRUE(throws_shape_error(with_form(b, f16), "fill_uncovered"));
  b.fill_uncovered = true;
  EXPECT_TRUE(throws_shape_error(with_form(b, reinterpret_cast<uint8_t*>(f16) + 2), "4-byte"));
  EXPECT_GE(attention_prefill_workspace_bytes(a), 2 * 4 * sizeof(int32_t));
}

// Shape checks throw before any launch (no GPU needed).
TEST(AttentionDecode, ShapeErrors) {
  AttentionDecodeArgs a;
  a.n_slots = 1;
  a.n_head = 9;
  a.cache = {8, 3, 16, 64};
  a.max_context = 100;
  a.table_stride = 7;
  auto call = [&](AttentionDecodeArgs b, float* ws = nullptr) {
    return [b, ws] {
      attention_decode(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, ws, b, nullptr);
    };
  };
  auto b = a;
  b.n_head = 8;
  EXPECT_TRUE(throws_shape_error(call(b), "multiple of n_head_kv"));
  b = a;
  b.cache.head_dim = 63;
  EXPECT_TRUE(throws_shape_error(call(b), "must be even"));
  b = a;
  b.cache.head_dim = 258;
  EXPECT_TRUE(throws_shape_error(call(b), "must be even"));
  b = a;
  b.table_stride = 6;  // 96 < 100 tokens
  EXPECT_TRUE(throws_shape_error(call(b), "cannot hold"));
  b = a;
  b.max_context = 0;
  EXPECT_TRUE(throws_shape_error(call(b), "cannot hold"));
  // Workspace: none within one tiny partition; a tiny launch (9 heads) needs it past 32 tokens
  // (2 partitions at 64).
  b = a;
  b.max_context = 32;
  EXPECT_EQ(attention_decode_workspace_floats(b), 0u);
  b.max_context = 64;
  EXPECT_EQ(attention_decode_workspace_floats(b), size_t(9) * 2 * (64 + 2));
  EXPECT_GT(attention_decode_workspace_floats(a), 0u);
  EXPECT_TRUE(throws_shape_error(call(a), "workspace"));
  b = a;
  b.max_context = 257;
  b.table_stride = 17;
  EXPECT_TRUE(throws_shape_error(call(b), "workspace"));
  // (n_slots * n_head heads) * (partitions) * (head_dim + 2): 27 heads in 9 partitions of 32
  // (grouped: 3 query heads a KV head, so blocks per partition = n_slots * 3 <= 64)
  b.n_slots = 3;
  EXPECT_EQ(attention_decode_workspace_floats(b), size_t(27) * 9 * (64 + 2));
  // 40 slots x 3 KV heads = 120 blocks per partition (tiny up to 21 slots: 189 heads x 9): 360
  // heads in 5 partitions of 64
  b.n_slots = 40;
  EXPECT_EQ(attention_decode_workspace_floats(b), size_t(360) * 5 * (64 + 2));
  b.max_context = 1000;  // tiny (up to 21 slots): 189 heads x 32 partitions; small: 360 x 16
  b.table_stride = 63;
  EXPECT_EQ(attention_decode_workspace_floats(b), size_t(189) * 32 * (64 + 2));
  b.n_slots = 100;  // small: 900 heads x 16
  EXPECT_EQ(attention_decode_workspace_floats(b), size_t(900) * 16 * (64 + 2));
  b.n_slots = 40;
  b.max_context = 4096;  // 360 heads x 64 partitions of 64 (23,040 head-partitions <= 65,536)
  b.table_stride = 256;
  EXPECT_EQ(attention_decode_workspace_floats(b), size_t(360) * 64 * (64 + 2));
  // 200 slots: launches of up to 170 slots (510 blocks <= kAttnSmallBatchGroups) take small
  // partitions, up to the cap of 65,536 head-partitions (170 x 9 heads x 64 = 97,920); large:
  // 1800 x 16 = 28,800
  b.n_slots = 200;
  EXPECT_EQ(attention_decode_workspace_floats(b), size_t(65536) * (64 + 2));
  b.n_slots = 60;  // 60 x 9 x 64 = 34,560 head-partitions, all small
  EXPECT_EQ(attention_decode_workspace_floats(b), size_t(60) * 9 * 64 * (64 + 2));
  b.n_slots = 1000;  // small partitions capped likewise; large: 9000 x 16
  EXPECT_EQ(attention_decode_workspace_floats(b), size_t(9000) * 16 * (64 + 2));
  b.n_slots = 200;
  b.max_context = 16384;  // small partitions capped at 65,536 head-partitions; large: 1800 x 64
  b.table_stride = 1024;
  EXPECT_EQ(attention_decode_workspace_floats(b), size_t(1800) * 64 * (64 + 2));
  b.max_context = 4096;
  b.table_stride = 256;
  // An upper bound for every launch with fewer slots and a shorter max_context (the executor
  // sizes one workspace for its largest batch and context): the need of a launch is the formula
  // above with the partition length it uses (32 or 64 for few blocks a partition, else 256).
  for (int n_head : {9, 12, 16, 32})
    for (int ns : {1, 7, 21, 22, 40, 64, 170, 171, 300, 1000})
      for (int mc : {1, 32, 33, 64, 65, 100, 256, 257, 1000, 1024, 1025, 4096, 4097}) {
        AttentionDecodeArgs big = a, small = a;
        big.n_head = small.n_head = n_head;
        big.n_slots = 1000;
        big.max_context = 4097;
        small.n_slots = ns;
        small.max_context = mc;
        const int64_t heads = int64_t(ns) * n_head;
        // the documented rule: grouped when n_head / n_head_kv <= 8 (head_dim 64); small
        // partitions when the blocks per partition are <= kAttnSmallBatchHeads (grouped:
        // kAttnSmallBatchGroups) and, grouped, heads x small partitions <= 65,536; tiny ones
        // (grouped) for <= kAttnTinyBatchGroups blocks and <= kAttnTinyMaxParts partitions
        const bool grouped = n_head / a.cache.n_head_kv <= 8;
        const int64_t blocks = int64_t(ns) * (grouped ? a.cache.n_head_kv : n_head);
        const int64_t small_parts = (mc + kAttnSmallPartition - 1) / kAttnSmallPartition;
        const bool use_small = blocks <= (grouped ? kAttnSmallBatchGroups : kAttnSmallBatchHeads) &&
                               (!grouped || heads * small_parts <= 65536);
        const bool use_tiny =
            grouped && blocks <= kAttnTinyBatchGroups &&
            (mc + kAttnTinyPartition - 1) / kAttnTinyPartition <= kAttnTinyMaxParts;
        const int part = use_tiny    ? kAttnTinyPartition
                         : use_small ? kAttnSmallPartition
                                     : kAttnPartition;
        const int64_t parts = (mc + part - 1) / part;
        const size_t need = parts > 1 ? size_t(heads * parts * (64 + 2)) : 0;
        EXPECT_GE(attention_decode_workspace_floats(small), need)
            << "n_head " << n_head << " n_slots " << ns << " max_context " << mc;
        EXPECT_GE(attention_decode_workspace_floats(big), attention_decode_workspace_floats(small))
            << "n_head " << n_head << " n_slots " << ns << " max_context " << mc;
      }

  KvAppendArgs k;
  k.n_tokens = 1;
  k.cache = {8, 3, 16, 64};
  k.k_row_stride = 100;  // < 3 * 64
  EXPECT_TRUE(throws_shape_error(
      [&] { kv_append(nullptr, nullptr, nullptr, nullptr, nullptr, k, nullptr); }, "row stride"));
  k.k_row_stride = 0;
  k.cache.block_size = 0;
  EXPECT_TRUE(throws_shape_error(
      [&] { kv_append(nullptr, nullptr, nullptr, nullptr, nullptr, k, nullptr); }, "bad shape"));
}

}  // namespace
}  // namespace rz::gpu
