// GPU token-embedding gather (kernels/embedding.cu) against the CPU's dequantize_row, which the
// CPU executor uses for the same job: every storage type, tables both from the reference
// quantizers and from random block bytes (every bit pattern of scales and quants), shapes swept,
// output poisoned, every element compared bit for bit.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "formats/ggml_types.hpp"
#include "gpu/test_support.hpp"
#include "kernels/embedding.hpp"
#include "quants/quants.hpp"
#include "tests/gpu/elem_test_util.hpp"

namespace rz::gpu {
namespace {

using namespace elem_test;

const GgmlType kTypes[] = {GgmlType::F32,  GgmlType::F16,    GgmlType::BF16,  GgmlType::Q8_0,
                           GgmlType::Q4_0, GgmlType::Q4_1,   GgmlType::Q4_K,  GgmlType::Q6_K,
                           GgmlType::Q5_0, GgmlType::Q5_1,   GgmlType::Q2_K,  GgmlType::Q3_K,
                           GgmlType::Q5_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS};

std::string name_of(GgmlType t) { return std::string(type_traits(t).name); }

// Byte offsets of the fp16 scale fields (d, m, dmin) inside one block.
std::vector<int> fp16_fields(GgmlType t) {
  switch (t) {
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
    case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS:
    case GgmlType::Q5_0: return {0};
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: return {0, 2};
    case GgmlType::Q2_K: return {80, 82};
    case GgmlType::Q3_K: return {108};
    case GgmlType::Q6_K: return {208};
    default: return {};
  }
}

// Random bytes for `rows` rows of n elements; floats and fp16 fields kept finite (an inf/NaN
// exponent loses its top exponent bit), everything else any bit pattern.
std::vector<uint8_t> random_table_bytes(GgmlType t, int rows, int n, std::mt19937_64& rng) {
  const size_t rb = row_size(t, n);
  std::vector<uint8_t> bytes(rb * rows);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  auto fix_half = [&](size_t off) {  // little-endian fp16 (or bf16 high byte rule below)
    uint16_t h = static_cast<uint16_t>(bytes[off] | bytes[off + 1] << 8);
    if ((h & 0x7c00) == 0x7c00) h &= ~0x4000;
    bytes[off] = static_cast<uint8_t>(h), bytes[off + 1] = static_cast<uint8_t>(h >> 8);
  };
  if (t == GgmlType::F32) {
    for (size_t off = 0; off < bytes.size(); off += 4)
      if ((bytes[off + 3] & 0x7f) == 0x7f && (bytes[off + 2] & 0x80)) bytes[off + 3] &= 0xbf;
  } else if (t == GgmlType::F16) {
    for (size_t off = 0; off < bytes.size(); off += 2) fix_half(off);
  } else if (t == GgmlType::BF16) {
    for (size_t off = 0; off < bytes.size(); off += 2)
      if ((bytes[off + 1] & 0x7f) == 0x7f && (bytes[off] & 0x80)) bytes[off + 1] &= 0xbf;
  } else {
    const size_t bb = type_traits(t).type_size;
    for (size_t blk = 0; blk < bytes.size(); blk += bb)
      for (int f : fp16_fields(t)) fix_half(blk + f);
  }
  return bytes;
}

// Rows made by the reference quantizer from gaussian floats with a per-row scale.
std::vector<uint8_t> quantized_table(GgmlType t, int rows, int n, std::mt19937_64& rng) {
  const size_t rb = row_size(t, n);
  std::vector<uint8_t> bytes(rb * rows);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> src(n);
  for (int r = 0; r < rows; ++r) {
    const float scale = std::pow(10.0f, static_cast<float>(r % 7) - 3.0f);
    for (auto& v : src) v = nd(rng) * scale;
    quantize_row(t, src.data(), bytes.data() + rb * r, n);
  }
  return bytes;
}

// Runs the gather for `ids` and compares with dequantize_row row by row.
void check_gather(GgmlType t, const std::vector<uint8_t>& table, int n_vocab, int n_embd,
                  const std::vector<int32_t>& ids, const std::string& what) {
  const size_t rb = row_size(t, n_embd);
  auto d_table = to_device(table);
  auto d_ids = to_device(ids);
  const int n_tokens = static_cast<int>(ids.size());
  auto d_out = poisoned<float>(size_t(n_tokens) * n_embd);  // [n_tokens, n_embd]
  embedding_gather(t, d_table.get(), n_vocab, n_embd, d_ids.get(), n_tokens, d_out.get(), nullptr);
  const std::vector<float> got = d_out.download();
  std::vector<float> ref(size_t(n_tokens) * n_embd);
  for (int i = 0; i < n_tokens; ++i)
    dequantize_row(t, table.data() + rb * ids[i], &ref[size_t(i) * n_embd], n_embd);
  ASSERT_TRUE(all_bits_equal(got, ref, what));
}

std::vector<int> widths_for(GgmlType t) {
  const int bs = type_traits(t).block_size;
  if (bs == 1) return {1, 7, 64, 576, 1001, 4096};
  if (bs == 32) return {32, 96, 576, 2080, 4096};
  return {256, 768, 2304, 4096};
}

TEST(EmbeddingGather, EveryTypeMatchesDequantizeRowBitForBit) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (GgmlType t : kTypes) {
    ASSERT_TRUE(embedding_type_supported(t)) << name_of(t);
    for (int n_embd : widths_for(t)) {
      const int n_vocab = 37;
      for (int table_kind = 0; table_kind < 2; ++table_kind) {
        if (table_kind == 0 && !can_quantize(t)) continue;  // Q2_K, Q3_K, Q5_K: random bytes
        const auto table = table_kind == 0 ? quantized_table(t, n_vocab, n_embd, rng)
                                           : random_table_bytes(t, n_vocab, n_embd, rng);
        for (int n_tokens : {1, 5, 64}) {
          std::vector<int32_t> ids(n_tokens);
          for (auto& id : ids) id = static_cast<int32_t>(rng() % n_vocab);
          ids[0] = n_vocab - 1;  // the last row: catches a row-size error past the end
          if (n_tokens > 2) ids[1] = 0, ids[2] = ids[0];
          const std::string what = name_of(t) + (table_kind == 0 ? " quantized" : " random-bytes") +
                                   " n_embd " + std::to_string(n_embd) + " n_tokens " +
                                   std::to_string(n_tokens);
          check_gather(t, table, n_vocab, n_embd, ids, what);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(EmbeddingGather, ManyTokensLargeVocab) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  // SmolLM2-like: Q8_0 table of 49152 x 576, a prefill of 700 tokens.
  const int n_vocab = 49152, n_embd = 576;
  const auto table = quantized_table(GgmlType::Q8_0, n_vocab, n_embd, rng);
  std::vector<int32_t> ids(700);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % n_vocab);
  ids.back() = n_vocab - 1;
  check_gather(GgmlType::Q8_0, table, n_vocab, n_embd, ids, "Q8_0 49152x576, 700 tokens");
}

TEST(EmbeddingGather, OutOfRangeIdGivesNaNRowOthersIntact) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int n_vocab = 11, n_embd = 64;
  const auto table = quantized_table(GgmlType::Q4_0, n_vocab, n_embd, rng);
  const std::vector<int32_t> ids = {3, -1, n_vocab, 0, n_vocab - 1};
  auto d_table = to_device(table);
  auto d_ids = to_device(ids);
  auto d_out = poisoned<float>(ids.size() * n_embd);
  d_out.fill_bytes(0);  // zeros, so the NaN rows must come from the kernel
  embedding_gather(GgmlType::Q4_0, d_table.get(), n_vocab, n_embd, d_ids.get(),
                   static_cast<int>(ids.size()), d_out.get(), nullptr);
  const auto got = d_out.download();
  std::vector<float> ref(n_embd);
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::vector<float> row(got.begin() + i * n_embd, got.begin() + (i + 1) * n_embd);
    if (ids[i] < 0 || ids[i] >= n_vocab) {
      for (int j = 0; j < n_embd; ++j)
        ASSERT_TRUE(std::isnan(row[j])) << "token " << i << " [" << j << "]";
    } else {
      dequantize_row(GgmlType::Q4_0, table.data() + row_size(GgmlType::Q4_0, n_embd) * ids[i],
                     ref.data(), n_embd);
      ASSERT_TRUE(all_bits_equal(row, ref, "token " + std::to_string(i)));
    }
  }
}

// Shape checks fire before any CUDA call, so these run without a GPU too.
TEST(EmbeddingGather, RejectsBadArguments) {
  float* out = reinterpret_cast<float*>(16);
  const int32_t* ids = reinterpret_cast<const int32_t*>(16);
  const void* table = reinterpret_cast<const void*>(16);
  EXPECT_TRUE(throws_shape_error(
      [&] { embedding_gather(GgmlType::IQ3_S, table, 10, 256, ids, 1, out, nullptr); }, "IQ3_S"));
  EXPECT_TRUE(throws_shape_error(
      [&] { embedding_gather(GgmlType::Q4_K, table, 10, 200, ids, 1, out, nullptr); },
      "n_embd 200"));
  EXPECT_TRUE(throws_shape_error(
      [&] { embedding_gather(GgmlType::F32, table, 0, 8, ids, 1, out, nullptr); }, "n_vocab 0"));
  EXPECT_TRUE(throws_shape_error(
      [&] { embedding_gather(GgmlType::F32, table, 10, 8, ids, -1, out, nullptr); },
      "n_tokens -1"));
  EXPECT_TRUE(throws_shape_error(
      [&] { embedding_gather(GgmlType::F32, nullptr, 10, 8, ids, 1, out, nullptr); }, "null"));
  EXPECT_TRUE(embedding_type_supported(GgmlType::IQ4_XS));
  EXPECT_FALSE(embedding_type_supported(GgmlType::IQ3_S));
  EXPECT_FALSE(embedding_type_supported(GgmlType::IQ2_XXS));
  EXPECT_NO_THROW(
      embedding_gather(GgmlType::F32, table, 10, 8, ids, 0, out, nullptr));  // no launch
}

}  // namespace
}  // namespace rz::gpu
