// Tests of model/quants.hpp. Quantized bytes and dequantized floats are compared bit for bit with
// the gguf Python package (gguf.quants) through tests/quants/quants_reference.py, on fresh random
// data each run (the seed is printed on failure; RZ_TEST_SEED=N repeats a run). A pure C++
// round-trip test bounds the quantization error per type.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "formats/common.hpp"
#include "quants/quants.hpp"

namespace rz {
namespace {

namespace fs = std::filesystem;

uint64_t test_seed() {
  static const uint64_t seed = [] {
    if (const char* s = std::getenv("RZ_TEST_SEED"))
      return static_cast<uint64_t>(std::strtoull(s, nullptr, 10));
    std::random_device rd;
    const auto t =
        static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    return (static_cast<uint64_t>(rd()) << 32 ^ rd()) ^ t;
  }();
  return seed;
}

std::string seed_note() {
  return "seed " + std::to_string(test_seed()) + " (rerun with RZ_TEST_SEED=that)";
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// A scratch folder removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    std::mt19937_64 rng(
        test_seed() ^
        static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
    path = fs::temp_directory_path() / ("rz_quants_test_" + std::to_string(rng()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

void write_file(const fs::path& p, const void* data, size_t n) {
  std::ofstream f(p, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
  ASSERT_TRUE(f.good()) << p;
}

std::vector<uint8_t> read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

// A batch of jobs for quants_reference.py, run by one Python process.
class ReferenceBatch {
 public:
  // rows: [n_rows, n] float32; returns the job index.
  size_t quantize(GgmlType t, int64_t n, const std::vector<float>& rows) {
    return add("quantize", t, n, rows.data(), rows.size() * sizeof(float));
  }
  // blocks: [n_rows, row_size(t, n)] bytes.
  size_t dequantize(GgmlType t, int64_t n, const std::vector<uint8_t>& blocks) {
    return add("dequantize", t, n, blocks.data(), blocks.size());
  }

  // Runs the reference; false (with a failure recorded) when it could not run.
  bool run() {
    const std::string py = RZ_SOURCE_DIR "/.venv/bin/python";
    if (!fs::exists(py)) {
      ADD_FAILURE() << py << " is missing: run scripts/setup.sh";
      return false;
    }
    const fs::path manifest = dir_.path / "manifest.txt";
    {
      std::ofstream f(manifest);
      f << manifest_.str();
    }
    const std::string cmd = "'" + py + "' '" RZ_SOURCE_DIR "/tests/quants/quants_reference.py' '" +
                            manifest.string() + "' 2>'" + (dir_.path / "stderr.txt").string() + "'";
    const int rc = std::system(cmd.c_str());
    if (rc != 0) {
      std::ifstream err(dir_.path / "stderr.txt");
      std::stringstream ss;
      ss << err.rdbuf();
      ADD_FAILURE() << "quants_reference.py failed (" << rc << "): " << ss.str();
      return false;
    }
    return true;
  }

  std::vector<uint8_t> output(size_t job) const {
    return read_file(dir_.path / ("out" + std::to_string(job)));
  }

 private:
  size_t add(const char* op, GgmlType t, int64_t n, const void* data, size_t bytes) {
    const size_t job = next_++;
    const fs::path in = dir_.path / ("in" + std::to_string(job));
    write_file(in, data, bytes);
    manifest_ << op << ' ' << type_traits(t).name << ' ' << n << ' ' << in.string() << ' '
              << (dir_.path / ("out" + std::to_string(job))).string() << '\n';
    return job;
  }

  TempDir dir_;
  std::ostringstream manifest_;
  size_t next_ = 0;
};

// Rows of test data: one row per kind, all of length n.
enum class Kind {
  Gaussian,
  AllEqual,
  ZerosInBlocks,
  Large,
  NegativeOnly,
  Tiny,
  MixedScales,
  AllZero,
  Uniform
};
constexpr Kind kKinds[] = {Kind::Gaussian,    Kind::AllEqual,     Kind::ZerosInBlocks,
                           Kind::Large,       Kind::NegativeOnly, Kind::Tiny,
                           Kind::MixedScales, Kind::AllZero,      Kind::Uniform};

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Gaussian: return "gaussian";
    case Kind::AllEqual: return "all-equal";
    case Kind::ZerosInBlocks: return "zeros-in-blocks";
    case Kind::Large: return "large";
    case Kind::NegativeOnly: return "negative-only";
    case Kind::Tiny: return "tiny";
    case Kind::MixedScales: return "mixed-scales";
    case Kind::AllZero: return "all-zero";
    case Kind::Uniform: return "uniform";
  }
  return "?";
}

void fill_row(Kind kind, std::mt19937_64& rng, float* x, int64_t n, int block) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unif(0.0f, 1.0f);
  const float sigma = std::exp(unif(rng) * 6.0f - 4.0f);  // 0.018 .. 7.4
  for (int64_t i = 0; i < n; ++i) x[i] = normal(rng) * sigma;
  switch (kind) {
    case Kind::Gaussian: break;
    case Kind::AllEqual: {
      const float c = normal(rng) * sigma;
      for (int64_t i = 0; i < n; ++i) x[i] = c;
      break;
    }
    case Kind::ZerosInBlocks:  // every other block zero, and scattered zeros elsewhere
      for (int64_t i = 0; i < n; ++i) {
        if ((i / block) % 2 == 1 || unif(rng) < 0.2f) x[i] = 0.0f;
      }
      break;
    case Kind::Large: {  // keeps fp16 block scales finite for every type
      const float s = 1000.0f + unif(rng) * 29000.0f;
      for (int64_t i = 0; i < n; ++i)
        x[i] = std::clamp(x[i] / sigma * s / 2.0f, -60000.0f, 60000.0f);
      break;
    }
    case Kind::NegativeOnly:
      for (int64_t i = 0; i < n; ++i) x[i] = -std::fabs(x[i]) - (unif(rng) < 0.5f ? 0.0f : sigma);
      break;
    case Kind::Tiny:  // fp16 scales land in the subnormal range
      for (int64_t i = 0; i < n; ++i) x[i] = x[i] / sigma * 1e-5f;
      break;
    case Kind::MixedScales:  // each block its own magnitude, within fp16's finite range
      for (int64_t b = 0; b < n / block; ++b) {
        const float s = std::exp(unif(rng) * 16.0f - 8.0f);
        for (int i = 0; i < block; ++i)
          x[b * block + i] = std::clamp(x[b * block + i] * s, -60000.0f, 60000.0f);
      }
      break;
    case Kind::AllZero:
      for (int64_t i = 0; i < n; ++i) x[i] = (i % 3 == 0) ? -0.0f : 0.0f;
      break;
    case Kind::Uniform: {  // all positive, offset from zero
      const float lo = unif(rng) * 10.0f;
      for (int64_t i = 0; i < n; ++i) x[i] = lo + unif(rng) * sigma;
      break;
    }
  }
}

std::vector<int64_t> row_lengths(GgmlType t) {
  const int bs = type_traits(t).block_size;
  if (bs == 256) return {256, 512, 1536};
  if (bs == 32) return {32, 64, 160, 1024};
  return {1, 7, 64, 1000};  // plain types
}

struct QuantJob {
  GgmlType type;
  int64_t n;
  std::vector<float> rows;  // [rows, n]
  std::vector<Kind> kinds;  // per row
  size_t job;
};

constexpr GgmlType kQuantizable[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0,
                                     GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                                     GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

// Types rz quantizes with its own plain quantizers (no reference to match): round trips only.
constexpr GgmlType kOwnQuantized[] = {GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::IQ4_NL,
                                      GgmlType::IQ4_XS};

std::vector<GgmlType> all_quantized() {
  std::vector<GgmlType> v(std::begin(kQuantizable), std::end(kQuantizable));
  v.insert(v.end(), std::begin(kOwnQuantized), std::end(kOwnQuantized));
  return v;
}

constexpr GgmlType kDequantizable[] = {
    GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,   GgmlType::Q4_0,
    GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q2_K,   GgmlType::Q3_K,
    GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS};

TEST(Quants, QuantizeMatchesGgufBitForBit) {
  SCOPED_TRACE(seed_note());
  std::mt19937_64 rng(test_seed());
  ReferenceBatch ref;
  std::vector<QuantJob> jobs;
  for (GgmlType t : kQuantizable) {
    ASSERT_TRUE(can_quantize(t)) << type_traits(t).name;
    const int block = std::max(type_traits(t).block_size, 32);
    for (int64_t n : row_lengths(t)) {
      QuantJob j{t, n, {}, {}, 0};
      for (Kind k : kKinds) {
        for (int rep = 0; rep < 2; ++rep) {
          j.rows.resize(j.rows.size() + static_cast<size_t>(n));
          fill_row(k, rng, j.rows.data() + j.rows.size() - n, n, block);
          j.kinds.push_back(k);
        }
      }
      j.job = ref.quantize(t, n, j.rows);
      jobs.push_back(std::move(j));
    }
  }
  ASSERT_TRUE(ref.run());
  for (const QuantJob& j : jobs) {
    const size_t rs = row_size(j.type, j.n);
    const std::vector<uint8_t> want = ref.output(j.job);
    ASSERT_EQ(want.size(), rs * j.kinds.size()) << type_traits(j.type).name << " n=" << j.n;
    std::vector<uint8_t> got(rs);
    for (size_t r = 0; r < j.kinds.size(); ++r) {
      std::memset(got.data(), 0xa5, rs);  // poison
      quantize_row(j.type, j.rows.data() + r * j.n, got.data(), j.n);
      const uint8_t* w = want.data() + r * rs;
      if (std::memcmp(got.data(), w, rs) != 0) {
        size_t at = 0;
        while (got[at] == w[at]) ++at;
        const size_t bsz = type_traits(j.type).type_size;
        ADD_FAILURE() << type_traits(j.type).name << " n=" << j.n << " row " << r << " ("
                      << kind_name(j.kinds[r]) << "): first difference in block " << at / bsz
                      << " byte " << at % bsz << ": got " << int(got[at]) << " want " << int(w[at]);
      }
    }
  }
}

// F16 and BF16 conversion of values at the edges: infinities, NaN payloads, overflow, ties,
// subnormals. Bits are compared with numpy / gguf.quants; NaN in gives NaN out on both sides.
TEST(Quants, F16Bf16SpecialValuesMatchGguf) {
  SCOPED_TRACE(seed_note());
  std::mt19937_64 rng(test_seed() + 1);
  std::vector<uint32_t> bits = {
      0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000, 0x7f800001,
      0x7fbfffff, 0x7f802000, 0xff812345, 0x7fffffff, 0x7f7fffff, 0xff7fffff, 0x00000001,
      0x807fffff, 0x00800000, 0x477fe000, 0x477fefff, 0x477ff000, 0x477ff001, 0x47800000,
      0x33000000, 0x33000001, 0x32ffffff, 0x337fffff, 0x33800000, 0x38800000, 0x387fe000,
      0x387ff000, 0x3f800000, 0x3f801000, 0x3f803000, 0x3f807fff, 0x3f808000, 0x3f818000,
      0x3f7f8000, 0x7f7f8000, 0x7f7f7fff, 0x4b000000, 0xc7000000};
  // random bit patterns, many of them NaN or out of fp16 range, plus random fp16-range values
  for (int i = 0; i < 20000; ++i) bits.push_back(static_cast<uint32_t>(rng()));
  for (int i = 0; i < 20000; ++i) {
    const uint32_t exp = 100 + static_cast<uint32_t>(rng() % 45);  // 2^-27 .. 2^17
    bits.push_back((static_cast<uint32_t>(rng()) & 0x807fffffu) | exp << 23);
  }
  // every fp16 halfway point (the value exactly between two fp16 numbers)
  for (uint32_t h = 0; h < 0x7c00; h += 7) {
    const float a = fp16_to_fp32(static_cast<uint16_t>(h)),
                b = fp16_to_fp32(static_cast<uint16_t>(h + 1));
    bits.push_back(bits_of((a + b) / 2));  // exact in float32
  }
  std::vector<float> values(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) values[i] = float_of(bits[i]);
  const auto n = static_cast<int64_t>(values.size());

  ReferenceBatch ref;
  const size_t jf16 = ref.quantize(GgmlType::F16, n, values);
  const size_t jbf16 = ref.quantize(GgmlType::BF16, n, values);
  ASSERT_TRUE(ref.run());
  for (auto [t, job] : {std::pair{GgmlType::F16, jf16}, std::pair{GgmlType::BF16, jbf16}}) {
    const std::vector<uint8_t> want = ref.output(job);
    ASSERT_EQ(want.size(), values.size() * 2);
    int failures = 0;
    for (size_t i = 0; i < values.size() && failures < 10; ++i) {
      uint16_t w;
      std::memcpy(&w, want.data() + 2 * i, 2);
      const uint16_t g = t == GgmlType::F16 ? fp32_to_fp16(values[i]) : fp32_to_bf16(values[i]);
      if (g != w) {
        ++failures;
        ADD_FAILURE() << type_traits(t).name << " of float bits 0x" << std::hex << bits[i]
                      << ": got 0x" << g << " want 0x" << w;
      }
    }
    std::vector<uint8_t> row(values.size() * 2);
    quantize_row(t, values.data(), row.data(), n);
    EXPECT_EQ(row, want) << type_traits(t).name << " quantize_row";
  }
}

// Every fp16 and bf16 bit pattern, through dequantize_row, against gguf.quants.dequantize.
TEST(Quants, F16Bf16AllPatternsDequantizeAsGguf) {
  std::vector<uint8_t> all(65536 * 2);
  for (uint32_t h = 0; h < 65536; ++h) {
    const auto v = static_cast<uint16_t>(h);
    std::memcpy(all.data() + 2 * h, &v, 2);
  }
  ReferenceBatch ref;
  const size_t jf16 = ref.dequantize(GgmlType::F16, 65536, all);
  const size_t jbf16 = ref.dequantize(GgmlType::BF16, 65536, all);
  ASSERT_TRUE(ref.run());
  for (auto [t, job] : {std::pair{GgmlType::F16, jf16}, std::pair{GgmlType::BF16, jbf16}}) {
    const std::vector<uint8_t> want = ref.output(job);
    ASSERT_EQ(want.size(), 65536u * 4);
    std::vector<float> got(65536, float_of(0x7fa5a5a5));
    dequantize_row(t, all.data(), got.data(), 65536);
    int failures = 0;
    for (uint32_t h = 0; h < 65536 && failures < 10; ++h) {
      uint32_t w;
      std::memcpy(&w, want.data() + 4 * h, 4);
      const uint32_t g = bits_of(got[h]);
      const float scalar = t == GgmlType::F16 ? fp16_to_fp32(static_cast<uint16_t>(h))
                                              : bf16_to_fp32(static_cast<uint16_t>(h));
      if (g != w || bits_of(scalar) != w) {
        ++failures;
        ADD_FAILURE() << type_traits(t).name << " 0x" << std::hex << h << ": got 0x" << g
                      << " (scalar 0x" << bits_of(scalar) << ") want 0x" << w;
      }
    }
  }
}

// Random but valid blocks: random bytes with every fp16 field (d, m, dmin) a finite fp16 value.
std::vector<size_t> half_fields(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: return {offsetof(BlockQ4_0, d)};
    case GgmlType::Q4_1: return {offsetof(BlockQ4_1, d), offsetof(BlockQ4_1, m)};
    case GgmlType::Q5_0: return {offsetof(BlockQ5_0, d)};
    case GgmlType::Q5_1: return {offsetof(BlockQ5_1, d), offsetof(BlockQ5_1, m)};
    case GgmlType::Q8_0: return {offsetof(BlockQ8_0, d)};
    case GgmlType::Q2_K: return {offsetof(BlockQ2_K, d), offsetof(BlockQ2_K, dmin)};
    case GgmlType::Q3_K: return {offsetof(BlockQ3_K, d)};
    case GgmlType::Q4_K: return {offsetof(BlockQ4_K, d), offsetof(BlockQ4_K, dmin)};
    case GgmlType::Q5_K: return {offsetof(BlockQ5_K, d), offsetof(BlockQ5_K, dmin)};
    case GgmlType::Q6_K: return {offsetof(BlockQ6_K, d)};
    case GgmlType::IQ4_NL: return {offsetof(BlockIQ4_NL, d)};
    case GgmlType::IQ4_XS: return {offsetof(BlockIQ4_XS, d)};
    default: return {};
  }
}

uint16_t random_finite_half(std::mt19937_64& rng) {
  const auto r = static_cast<uint32_t>(rng());
  const uint32_t exp = r % 31;  // 0 (zero, subnormal) .. 30, never inf/NaN
  return static_cast<uint16_t>((r >> 16 & 0x8000u) | exp << 10 | (r >> 5 & 0x3ffu));
}

std::vector<uint8_t> random_blocks(GgmlType t, int64_t n_elems, std::mt19937_64& rng) {
  const auto& tr = type_traits(t);
  std::vector<uint8_t> b(row_size(t, n_elems));
  for (auto& v : b) v = static_cast<uint8_t>(rng());
  const int64_t n_blocks = n_elems / tr.block_size;
  if (t == GgmlType::F32) {
    for (int64_t i = 0; i < n_elems; ++i) {
      uint32_t u;
      std::memcpy(&u, b.data() + 4 * i, 4);
      if ((u & 0x7f800000u) == 0x7f800000u) u &= 0xbfffffffu;  // no inf/NaN
      std::memcpy(b.data() + 4 * i, &u, 4);
    }
  } else if (t == GgmlType::F16 || t == GgmlType::BF16) {
    for (int64_t i = 0; i < n_elems; ++i) {
      uint16_t h = t == GgmlType::F16 ? random_finite_half(rng) : static_cast<uint16_t>(rng());
      if (t == GgmlType::BF16 && (h & 0x7f80u) == 0x7f80u) h &= 0xbfffu;
      std::memcpy(b.data() + 2 * i, &h, 2);
    }
  } else {
    for (int64_t k = 0; k < n_blocks; ++k) {
      for (size_t off : half_fields(t)) {
        const uint16_t h = random_finite_half(rng);
        std::memcpy(b.data() + k * tr.type_size + off, &h, 2);
      }
    }
  }
  return b;
}

TEST(Quants, DequantizeRandomBlocksMatchesGgufBitForBit) {
  SCOPED_TRACE(seed_note());
  std::mt19937_64 rng(test_seed() + 2);
  struct Job {
    GgmlType type;
    int64_t n;
    int rows;
    std::vector<uint8_t> data;
    size_t job;
  };
  ReferenceBatch ref;
  std::vector<Job> jobs;
  for (GgmlType t : kDequantizable) {
    for (int64_t n : row_lengths(t)) {
      const int rows = 6;
      Job j{t, n, rows, random_blocks(t, n * rows, rng), 0};
      j.job = ref.dequantize(t, n, j.data);
      jobs.push_back(std::move(j));
    }
  }
  // Blocks made by our own quantizers too (realistic scales, zero blocks, -0 scales).
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                     GgmlType::Q4_K, GgmlType::Q6_K}) {
    const int64_t n = 512;
    std::vector<float> x(n);
    Job j{t, n, static_cast<int>(std::size(kKinds)), {}, 0};
    j.data.resize(row_size(t, n) * std::size(kKinds));
    for (size_t r = 0; r < std::size(kKinds); ++r) {
      fill_row(kKinds[r], rng, x.data(), n, type_traits(t).block_size);
      quantize_row(t, x.data(), j.data.data() + r * row_size(t, n), n);
    }
    j.job = ref.dequantize(t, n, j.data);
    jobs.push_back(std::move(j));
  }
  ASSERT_TRUE(ref.run());
  for (const Job& j : jobs) {
    const std::vector<uint8_t> want = ref.output(j.job);
    const auto total = static_cast<size_t>(j.n) * j.rows;
    ASSERT_EQ(want.size(), total * 4) << type_traits(j.type).name;
    std::vector<float> got(total, float_of(0x7fa5a5a5));  // poison: a NaN
    const size_t rs = row_size(j.type, j.n);
    for (int r = 0; r < j.rows; ++r)
      dequantize_row(j.type, j.data.data() + r * rs, got.data() + r * j.n, j.n);
    int failures = 0;
    for (size_t i = 0; i < total && failures < 5; ++i) {
      uint32_t w;
      std::memcpy(&w, want.data() + 4 * i, 4);
      if (bits_of(got[i]) != w || std::isnan(got[i])) {
        ++failures;
        ADD_FAILURE() << type_traits(j.type).name << " n=" << j.n << " element " << i << " (row "
                      << i / j.n << ", block " << (i % j.n) / type_traits(j.type).block_size
                      << "): got " << got[i] << " (0x" << std::hex << bits_of(got[i]) << ") want "
                      << float_of(w) << " (0x" << w << ")";
      }
    }
  }
}

// Quantize then dequantize in C++ alone: the error stays within what each format can promise.
// The bound is a fraction of the range of the element's block (32 elements) or, for the K-quants
// whose sub-block scales are quantized against the whole super-block, of the super-block's range.
double error_bound(GgmlType t, const float* x, int64_t i) {
  const int64_t span = type_traits(t).block_size == 256 ? 256 : 32;
  const int64_t b0 = i / span * span;
  float mn = x[b0], mx = x[b0], amax = 0;
  for (int64_t j = b0; j < b0 + span; ++j) {
    mn = std::min(mn, x[j]);
    mx = std::max(mx, x[j]);
    amax = std::max(amax, std::fabs(x[j]));
  }
  const double ax = std::fabs(x[i]);
  // what storing v as fp16 can cost: half a unit in the last place, subnormals included
  const auto herr = [](double v) {
    return std::max(std::fabs(v) * std::ldexp(1.0, -11), std::ldexp(1.0, -25));
  };
  switch (t) {
    case GgmlType::F32: return 0;
    case GgmlType::F16: return herr(ax);
    case GgmlType::BF16: return ax * std::ldexp(1.0, -8);
    case GgmlType::Q8_0: return 0.5 * amax / 127 + 127 * herr(amax / 127);
    case GgmlType::Q4_0: return amax / 8 + 8 * herr(amax / 8);  // the +max end clips one step
    case GgmlType::Q5_0: return amax / 16 + 16 * herr(amax / 16);
    case GgmlType::Q4_1: return 0.5 * (mx - mn) / 15 + 15 * herr((mx - mn) / 15) + herr(mn);
    case GgmlType::Q5_1: return 0.5 * (mx - mn) / 31 + 31 * herr((mx - mn) / 31) + herr(mn);
    // Q4_K's min is never above 0, so its range always includes 0; Q6_K clips one step at +max.
    // d and dmin scale 6-bit sub-scales (Q4_K) or 8-bit ones (Q6_K) times the quant level.
    case GgmlType::Q4_K:
      return (std::max(mx, 0.0f) - std::min(mn, 0.0f)) * 0.1 + 63 * 16 * std::ldexp(1.0, -25);
    case GgmlType::Q5_K:  // as Q4_K with 31 levels
      return (std::max(mx, 0.0f) - std::min(mn, 0.0f)) * 0.05 + 63 * 32 * std::ldexp(1.0, -25);
    case GgmlType::Q6_K: return amax * 0.05 + 128 * 32 * std::ldexp(1.0, -25);
    // rz's plain quantizers: a level step of the super-block's (Q2_K's 4 levels, Q3_K's 8) or
    // half the table's widest gap (IQ4: 24 / 127 of the scale) plus the sub-scale rounding.
    case GgmlType::Q2_K: return (std::max(mx, 0.0f) - std::min(mn, 0.0f)) * 0.5 + 1e-6;
    case GgmlType::Q3_K: return amax * 0.3 + 1e-6;
    // IQ4's fp16 scale d = amax / 127 (IQ4_XS: d = amax / (127 * 31) times a sub-scale of at most
    // 32) multiplies table values of up to 127, so d's own rounding costs up to 127 (32 * 127)
    // times herr(d); for small blocks d is subnormal, where that rounding is coarse.
    case GgmlType::IQ4_NL: return amax * 0.15 + 127 * herr(amax / 127);
    case GgmlType::IQ4_XS: return amax * 0.15 + 32 * 127 * herr(amax / (127 * 31));
    default: return 0;
  }
}

TEST(Quants, RoundTripErrorWithinFormatBounds) {
  SCOPED_TRACE(seed_note());
  std::mt19937_64 rng(test_seed() + 3);
  for (GgmlType t : all_quantized()) {
    const int64_t n = 4096;
    std::vector<float> x(n), y(n, float_of(0x7fa5a5a5));
    for (Kind k :
         {Kind::Gaussian, Kind::NegativeOnly, Kind::MixedScales, Kind::Uniform, Kind::Large}) {
      fill_row(k, rng, x.data(), n, 32);
      std::vector<uint8_t> q(row_size(t, n));
      quantize_row(t, x.data(), q.data(), n);
      dequantize_row(t, q.data(), y.data(), n);
      double se = 0, sx = 0;
      int failures = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double err = std::fabs(static_cast<double>(y[i]) - x[i]);
        se += err * err;
        sx += static_cast<double>(x[i]) * x[i];
        if (!(err <= error_bound(t, x.data(), i)) && failures++ < 3) {
          ADD_FAILURE() << type_traits(t).name << " " << kind_name(k) << " element " << i << ": "
                        << x[i] << " -> " << y[i] << ", error " << err << " > "
                        << error_bound(t, x.data(), i);
        }
      }
      // relative RMS error, a looser whole-row check of the same
      const double rel = std::sqrt(se / sx);
      const double limit = t == GgmlType::F32    ? 0
                           : t == GgmlType::F16  ? 1e-3
                           : t == GgmlType::BF16 ? 5e-3
                           : t == GgmlType::Q8_0 ? 0.01
                           : t == GgmlType::Q6_K ? 0.03
                           : t == GgmlType::Q2_K ? 0.5
                           : t == GgmlType::Q3_K ? 0.3
                                                 : 0.15;
      if (k == Kind::Gaussian)
        std::printf("%s gaussian: relative RMS error %.4f\n", type_traits(t).name.data(), rel);
      EXPECT_LE(rel, limit) << type_traits(t).name << " " << kind_name(k);
    }
  }
}

TEST(Quants, AllZeroBlocksRoundTripToZero) {
  for (GgmlType t : all_quantized()) {
    const int64_t n = 512;
    std::vector<float> x(n, 0.0f), y(n, 1.0f);
    std::vector<uint8_t> q(row_size(t, n), 0xa5);
    quantize_row(t, x.data(), q.data(), n);
    dequantize_row(t, q.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(y[i], 0.0f) << type_traits(t).name << " element " << i;
  }
}

TEST(Quants, UnsupportedTypesAndBadLengthsThrow) {
  std::vector<uint8_t> buf(4096);
  std::vector<float> f(1024);
  EXPECT_THROW(dequantize_row(GgmlType::IQ2_XXS, buf.data(), f.data(), 256), Error);
  EXPECT_THROW(dequantize_row(GgmlType::Q8_1, buf.data(), f.data(), 32), Error);
  EXPECT_THROW(dequantize_row(static_cast<GgmlType>(63), buf.data(), f.data(), 32), Error);
  EXPECT_THROW(dequantize_row(GgmlType::Q4_K, buf.data(), f.data(), 100), Error);
  EXPECT_THROW(quantize_row(GgmlType::IQ2_XXS, f.data(), buf.data(), 256), Error);
  EXPECT_THROW(quantize_row(GgmlType::Q8_1, f.data(), buf.data(), 32), Error);
  EXPECT_THROW(quantize_row(GgmlType::Q8_0, f.data(), buf.data(), 48), Error);
  EXPECT_FALSE(can_quantize(GgmlType::IQ3_S));
  EXPECT_TRUE(can_quantize(GgmlType::IQ4_XS));
  for (GgmlType t : kDequantizable) {
    EXPECT_TRUE(type_traits(t).can_dequantize) << type_traits(t).name;
    EXPECT_NO_THROW(dequantize_row(t, buf.data(), f.data(), 256)) << type_traits(t).name;
  }
}

}  // namespace
}  // namespace rz
