// rz synth (apps/synth/synth.hpp): the tiny shape written in every format reads back through
// ModelFile / config_from_gguf / Tokenizer::from_gguf with the right config, tensor types and
// value distribution, encodes llama.cpp's GPT-2 test vectors like the source vocabulary, and runs
// on the CPU executor; files are reproducible per seed and independent of the thread count. The
// big shapes are checked through their plan only: parameter counts against the published ones
// (Qwen2.5-1.5B: 1,543,714,304; Llama-3.1-8B: 8,030,261,248) and Q4_K_M sizes against
// PERFORMANCE.md. Also GgufWriter::add_tensor_streamed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "apps/synth/synth.hpp"
#include "cpu/cpu_executor.hpp"
#include "formats/common.hpp"
#include "formats/gguf.hpp"
#include "formats/gguf_writer.hpp"
#include "formats/model_file.hpp"
#include "model/model_weights.hpp"
#include "quants/quants.hpp"
#include "sched/slot_runner.hpp"
#include "tests/tokenizer/tokenizer_test_util.hpp"
#include "tokenizer/tokenizer.hpp"

namespace rz {
namespace {

namespace fs = std::filesystem;

const std::string kVocab = RZ_SOURCE_DIR "/" + std::string(kSynthDefaultVocab);

fs::path tmp_dir() {
  fs::path d = fs::temp_directory_path() / ("rz_synth_test_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

std::string synth_tiny(SynthFormat f, uint64_t seed, const std::string& name, int threads = 0,
                       bool vocab = true) {
  SynthOptions o;
  o.shape = "tiny";
  o.format = f;
  o.seed = seed;
  o.out = (tmp_dir() / name).string();
  o.vocab = vocab ? kVocab : "";
  o.threads = threads;
  synth_write(o);
  return o.out;
}

// Removes this process's temporary files at exit.
class TmpCleanup : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(tmp_dir(), ec);
  }
};
[[maybe_unused]] ::testing::Environment* const kCleanup =
    ::testing::AddGlobalTestEnvironment(new TmpCleanup);

#define REQUIRE_VOCAB() RZ_REQUIRE_TEST_DATA(kVocab)

const SynthFormat kFormats[] = {SynthFormat::F16,    SynthFormat::BF16,   SynthFormat::Q8_0,
                                SynthFormat::Q4_0,   SynthFormat::Q4_1,   SynthFormat::Q5_0,
                                SynthFormat::Q5_1,   SynthFormat::Q2_K,   SynthFormat::Q3_K_M,
                                SynthFormat::Q4_K_M, SynthFormat::Q5_K_M, SynthFormat::Q6_K,
                                SynthFormat::IQ4_XS};

// Each preset's one type (llama-quantize's default_type).
GgmlType pure(SynthFormat f) {
  switch (f) {
    case SynthFormat::F16: return GgmlType::F16;
    case SynthFormat::BF16: return GgmlType::BF16;
    case SynthFormat::Q8_0: return GgmlType::Q8_0;
    case SynthFormat::Q4_0: return GgmlType::Q4_0;
    case SynthFormat::Q4_1: return GgmlType::Q4_1;
    case SynthFormat::Q5_0: return GgmlType::Q5_0;
    case SynthFormat::Q5_1: return GgmlType::Q5_1;
    case SynthFormat::Q2_K: return GgmlType::Q2_K;
    case SynthFormat::Q3_K_M: return GgmlType::Q3_K;
    case SynthFormat::Q4_K_M: return GgmlType::Q4_K;
    case SynthFormat::Q5_K_M: return GgmlType::Q5_K;
    case SynthFormat::Q6_K: return GgmlType::Q6_K;
    case SynthFormat::IQ4_XS: return GgmlType::IQ4_XS;
  }
  return GgmlType::F32;
}

// The tiny shape's types (2 layers, 2 query heads a KV head, rows of 256 and 512) under
// llama.cpp's rules, written out by hand for each preset.
GgmlType tiny_type(SynthFormat f, const std::string& name) {
  const GgmlType base = pure(f);
  if (f == SynthFormat::F16 || f == SynthFormat::BF16) return base;
  if (name == "output.weight") return base == GgmlType::Q8_0 ? GgmlType::Q8_0 : GgmlType::Q6_K;
  const bool v = name.ends_with("attn_v.weight"), down = name.ends_with("ffn_down.weight");
  const bool out = name.ends_with("attn_output.weight"), l1 = name.rfind("blk.1.", 0) == 0;
  switch (f) {
    case SynthFormat::Q2_K:
      if (v) return GgmlType::Q3_K;  // fewer than 4 query heads a KV head
      if (down || out) return GgmlType::Q3_K;
      break;
    case SynthFormat::Q3_K_M:
      if (v) return GgmlType::Q5_K;            // layers 0 and 1
      if (down || out) return GgmlType::Q4_K;  // past the first sixteenth (0 layers)
      break;
    case SynthFormat::Q4_K_M:
    case SynthFormat::Q5_K_M:
      if ((v || down) && l1) return GgmlType::Q6_K;  // use_more_bits(1, 2)
      break;
    default: break;
  }
  return base;
}

// ---- the Q4_K_M rule ----------------------------------------------------------------------------

std::vector<int> more_bits_layers(int n) {
  std::vector<int> v;
  for (int i = 0; i < n; ++i)
    if (use_more_bits(i, n)) v.push_back(i);
  return v;
}

TEST(SynthQ4KM, UseMoreBitsMatchesHandComputedLists) {
  // 28 layers: n/8 = 3, 7n/8 = 24: {0,1,2} + {24..27} + every third from 5.
  EXPECT_EQ(more_bits_layers(28),
            (std::vector<int>{0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 24, 25, 26, 27}));
  // 32 layers: n/8 = 4, 7n/8 = 28: {0..3} + {28..31} + every third from 6.
  EXPECT_EQ(more_bits_layers(32),
            (std::vector<int>{0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31}));
  EXPECT_EQ(more_bits_layers(2), (std::vector<int>{1}));
}

TEST(SynthQ4KM, TypesOfTheBigShapes) {
  const auto t = [](const SynthShape& s, SynthFormat f, const std::string& name) {
    return preset_type(s, f, name, name.ends_with("ffn_down.weight") ? s.n_ff : s.n_embd);
  };
  const SynthFormat km = SynthFormat::Q4_K_M;
  const SynthShape q = synth_shape("qwen2.5-1.5b", 50257);
  EXPECT_EQ(t(q, km, "token_embd.weight"), GgmlType::Q6_K);  // tied: it is the output
  EXPECT_EQ(t(q, km, "blk.5.attn_v.weight"), GgmlType::Q6_K);
  EXPECT_EQ(t(q, km, "blk.6.attn_v.weight"), GgmlType::Q4_K);
  EXPECT_EQ(t(q, km, "blk.23.ffn_down.weight"), GgmlType::Q6_K);
  EXPECT_EQ(t(q, km, "blk.0.attn_q.weight"), GgmlType::Q4_K);
  EXPECT_EQ(t(q, km, "blk.0.ffn_up.weight"), GgmlType::Q4_K);
  const SynthShape l = synth_shape("llama3.1-8b", 50257);
  EXPECT_EQ(t(l, km, "token_embd.weight"), GgmlType::Q4_K);
  EXPECT_EQ(t(l, km, "output.weight"), GgmlType::Q6_K);
  EXPECT_EQ(t(l, km, "blk.27.ffn_down.weight"), GgmlType::Q6_K);
  EXPECT_EQ(t(l, km, "blk.26.ffn_down.weight"), GgmlType::Q4_K);
  EXPECT_EQ(t(l, km, "blk.31.attn_output.weight"), GgmlType::Q4_K);
  // The other presets' rules (llama.cpp's llama_tensor_get_type), on qwen2.5-1.5b (28 layers, 6
  // query heads a KV head, hidden 1536, ffn 8960 = 35 x 256) and llama3.1-8b (32 layers, 4).
  EXPECT_EQ(t(q, SynthFormat::Q2_K, "blk.3.attn_v.weight"), GgmlType::Q4_K);
  EXPECT_EQ(t(q, SynthFormat::Q2_K, "blk.3.ffn_down.weight"), GgmlType::Q3_K);
  EXPECT_EQ(t(q, SynthFormat::Q2_K, "blk.3.attn_output.weight"), GgmlType::Q3_K);
  EXPECT_EQ(t(q, SynthFormat::Q2_K, "blk.3.ffn_gate.weight"), GgmlType::Q2_K);
  EXPECT_EQ(t(q, SynthFormat::Q2_K, "token_embd.weight"), GgmlType::Q6_K);
  EXPECT_EQ(t(l, SynthFormat::Q3_K_M, "blk.1.attn_v.weight"), GgmlType::Q5_K);
  EXPECT_EQ(t(l, SynthFormat::Q3_K_M, "blk.2.attn_v.weight"), GgmlType::Q4_K);
  EXPECT_EQ(t(l, SynthFormat::Q3_K_M, "blk.1.ffn_down.weight"), GgmlType::Q5_K);  // < 32 / 16
  EXPECT_EQ(t(l, SynthFormat::Q3_K_M, "blk.2.ffn_down.weight"), GgmlType::Q4_K);
  EXPECT_EQ(t(l, SynthFormat::Q3_K_M, "blk.2.attn_output.weight"), GgmlType::Q4_K);
  EXPECT_EQ(t(l, SynthFormat::Q3_K_M, "blk.2.attn_k.weight"), GgmlType::Q3_K);
  EXPECT_EQ(t(l, SynthFormat::Q5_K_M, "blk.0.attn_v.weight"), GgmlType::Q6_K);
  EXPECT_EQ(t(l, SynthFormat::Q5_K_M, "blk.4.attn_v.weight"), GgmlType::Q5_K);
  EXPECT_EQ(t(l, SynthFormat::IQ4_XS, "blk.4.attn_v.weight"), GgmlType::Q5_K);
  EXPECT_EQ(t(l, SynthFormat::IQ4_XS, "blk.4.ffn_down.weight"), GgmlType::IQ4_XS);
  EXPECT_EQ(t(l, SynthFormat::Q4_0, "output.weight"), GgmlType::Q6_K);
  EXPECT_EQ(t(l, SynthFormat::Q8_0, "output.weight"), GgmlType::Q8_0);
  EXPECT_EQ(t(l, SynthFormat::Q6_K, "blk.4.attn_v.weight"), GgmlType::Q6_K);
  // --pure: one type; rows of partial super-blocks fall back (tiny's 256 and 512 never do)
  EXPECT_EQ(preset_type(l, SynthFormat::Q4_0, "output.weight", 4096, true), GgmlType::Q4_0);
  EXPECT_EQ(preset_type(l, SynthFormat::Q4_K_M, "blk.0.attn_q.weight", 4000), GgmlType::Q5_0);
  EXPECT_EQ(preset_type(l, SynthFormat::Q5_K_M, "blk.4.attn_q.weight", 4000), GgmlType::Q5_1);
  EXPECT_EQ(preset_type(l, SynthFormat::Q6_K, "blk.4.attn_q.weight", 4000), GgmlType::Q8_0);
  EXPECT_EQ(preset_type(l, SynthFormat::IQ4_XS, "blk.4.attn_q.weight", 4000), GgmlType::IQ4_NL);
  EXPECT_EQ(preset_type(l, SynthFormat::Q4_0, "output.weight", 4000), GgmlType::Q8_0);
}

// ---- plans of the big shapes --------------------------------------------------------------------

uint64_t n_params(const std::vector<SynthTensor>& plan) {
  uint64_t n = 0;
  for (const auto& t : plan) {
    uint64_t e = 1;
    for (int64_t d : t.ne) e *= d;
    n += e;
  }
  return n;
}

int count_type(const std::vector<SynthTensor>& plan, GgmlType t) {
  int n = 0;
  for (const auto& x : plan) n += x.type == t;
  return n;
}

TEST(SynthPlan, Qwen25_1_5B) {
  const SynthShape s = synth_shape("qwen2.5-1.5b", 0);
  const auto f16 = synth_plan(s, SynthFormat::F16);
  EXPECT_EQ(n_params(f16), 1543714304u);    // Hugging Face Qwen/Qwen2.5-1.5B
  EXPECT_EQ(f16.size(), 1u + 1 + 28 * 12);  // embd, output_norm, 12 per layer (3 biases)
  const auto q = synth_plan(s, SynthFormat::Q4_K_M);
  const double gb = synth_plan_bytes(q) / 1e9;
  EXPECT_NEAR(gb, 0.98, 0.98 * 0.05);                                   // PERFORMANCE.md
  EXPECT_NEAR(synth_plan_bytes(q) / double(1 << 20), 935, 935 * 0.05);  // "935 MiB"
  EXPECT_EQ(count_type(q, GgmlType::Q6_K), 1 + 2 * 14);
  EXPECT_EQ(count_type(q, GgmlType::Q4_K), 28 * 7 - 2 * 14);
  EXPECT_EQ(count_type(q, GgmlType::F32), 1 + 28 * 5);  // norms and biases
}

TEST(SynthPlan, Llama31_8B) {
  const SynthShape s = synth_shape("llama3.1-8b", 0);
  const auto f16 = synth_plan(s, SynthFormat::F16);
  EXPECT_EQ(n_params(f16), 8030261248u + 64);  // Hugging Face Llama-3.1-8B + rope_freqs
  const double f16_gb = synth_plan_bytes(f16) / 1e9;
  EXPECT_NEAR(f16_gb, 16.1, 16.1 * 0.05);
  const auto q = synth_plan(s, SynthFormat::Q4_K_M);
  EXPECT_NEAR(synth_plan_bytes(q) / 1e9, 4.92, 4.92 * 0.05);
  EXPECT_NEAR(synth_plan_bytes(q) / double(1 << 30), 4.58, 4.58 * 0.05);  // "4.58 GiB"
  EXPECT_EQ(count_type(q, GgmlType::Q6_K), 1 + 2 * 16);
  EXPECT_EQ(count_type(q, GgmlType::F32), 2 + 32 * 2);  // output_norm, rope_freqs, norms
}

TEST(SynthPlan, Errors) {
  EXPECT_THROW(synth_shape("llama-70b", 0), Error);
  EXPECT_THROW(parse_synth_format("q4_k_s"), Error);
  EXPECT_EQ(parse_synth_format("iq4_xs"), SynthFormat::IQ4_XS);
  EXPECT_EQ(synth_file_type(SynthFormat::Q5_K_M), 17u);  // llama_ftype
  EXPECT_EQ(synth_file_type(SynthFormat::IQ4_XS), 30u);
  EXPECT_EQ(parse_synth_format("q4_k_m"), SynthFormat::Q4_K_M);
  SynthOptions o;
  o.shape = "tiny";
  o.out = "/nonexistent-dir/x.gguf";
  try {
    synth_write(o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/x.gguf"), std::string::npos) << e.what();
  }
}

// ---- the tiny model, every format ---------------------------------------------------------------

class SynthTiny : public ::testing::TestWithParam<SynthFormat> {};

TEST_P(SynthTiny, ReadsBackAndRuns) {
  REQUIRE_VOCAB();
  const SynthFormat f = GetParam();
  const std::string path = synth_tiny(f, 7, std::string("tiny_") + synth_format_name(f) + ".gguf");
  auto m = ModelFile::open(path);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.arch, Arch::Llama);
  EXPECT_EQ(c.n_vocab, 50304);  // 50257 GPT-2 tokens rounded up to 128
  EXPECT_EQ(c.n_embd, 256);
  EXPECT_EQ(c.n_layer, 2);
  EXPECT_EQ(c.n_head, 4);
  EXPECT_EQ(c.n_head_kv, 2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.n_rot, 64);
  EXPECT_EQ(c.n_ff, 512);
  EXPECT_EQ(c.n_ctx_train, 2048);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_FLOAT_EQ(c.norm_eps, 1e-5f);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(m->gguf()->get_int("general.file_type"), int64_t(synth_file_type(f)));

  // tensor types
  for (const auto& t : m->tensors())
    EXPECT_EQ(t.type, t.n_dims == 1 ? GgmlType::F32 : tiny_type(f, t.name)) << t.name;
  EXPECT_EQ(m->tensors().size(), 3u + 2 * 9);

  // values: matrices ~ N(0, 0.02^2), norms ~ 1 + N(0, 0.02^2) (quantization error included)
  auto moments = [](const TensorView& t, double& mean, double& sd) {
    std::vector<float> row(t.cols());
    double s = 0, s2 = 0;
    for (int64_t r = 0; r < t.rows(); ++r) {
      dequantize_row(t.type, t.row(r), row.data(), t.cols());
      for (float x : row) {
        ASSERT_TRUE(std::isfinite(x));
        s += x;
        s2 += double(x) * x;
      }
    }
    const double n = double(t.n_elements());
    mean = s / n;
    sd = std::sqrt(s2 / n - mean * mean);
  };
  double mean = 0, sd = 0;
  moments(m->require("blk.0.ffn_up.weight"), mean, sd);
  EXPECT_NEAR(mean, 0.0, 0.001);
  // rz's plain 2- and 3-bit quantizers add more noise (relative RMS error 0.33 and 0.15)
  const bool coarse = f == SynthFormat::Q2_K || f == SynthFormat::Q3_K_M;
  EXPECT_NEAR(sd, 0.02,
              f == SynthFormat::F16 || f == SynthFormat::BF16 ? 0.0005
              : coarse                                        ? 0.008
                                                              : 0.003);
  moments(m->require("blk.1.attn_norm.weight"), mean, sd);
  EXPECT_NEAR(mean, 1.0, 0.005);
  EXPECT_NEAR(sd, 0.02, 0.004);

  // tokenizer: every GPT-2 test vector encodes as llama.cpp encoded it with the source vocab
  auto gguf = GgufFile::open(path);
  auto tok = Tokenizer::from_gguf(*gguf);
  EXPECT_EQ(tok->token_to_piece(50303), "");  // unused padding decodes as nothing
  EXPECT_EQ(gguf->get_string_array("tokenizer.ggml.tokens").at(50300), "[PAD50300]");
  EXPECT_EQ(gguf->get_int_array("tokenizer.ggml.token_type").at(50300), 5);
  EXPECT_EQ(gguf->get_string_array("tokenizer.ggml.merges").size(), 50000u);
  const auto cases = test::read_vocab_cases(kVocab);
  ASSERT_GE(cases.size(), 40u);
  for (const auto& k : cases) EXPECT_EQ(tok->encode(k.text, false, false), k.ids) << k.text;

  // CPU executor: greedy prefill + decode, finite logits
  CpuExecutorOptions eo;
  eo.max_context = 64;
  CpuExecutor ex(m, eo);
  SlotRunner run(ex);
  ex.set_keep_logits(true);
  PrefillRequest pr;
  pr.tokens = tok->encode("Hello world, this is", false, false);
  ASSERT_FALSE(pr.tokens.empty());
  int32_t next = run.prefill(pr);
  for (int step = 0; step < 4; ++step) {
    auto lg = ex.last_logits(0);
    ASSERT_EQ(lg.size(), 50304u);
    for (float x : lg) ASSERT_TRUE(std::isfinite(x));
    ASSERT_GE(next, 0);
    ASSERT_LT(next, 50304);
    next = run.decode(0, next);
  }
  EXPECT_EQ(ex.slot_length(0), int(pr.tokens.size()) + 4);
}

INSTANTIATE_TEST_SUITE_P(Formats, SynthTiny, ::testing::ValuesIn(kFormats), [](const auto& info) {
  return std::string(synth_format_name(info.param));
});

TEST(SynthTinyFiles, SameSeedSameBytesAnyThreads) {
  REQUIRE_VOCAB();
  const auto a = test::read_all(synth_tiny(SynthFormat::Q4_K_M, 1, "s1a.gguf", 1));
  const auto b = test::read_all(synth_tiny(SynthFormat::Q4_K_M, 1, "s1b.gguf", 3));
  const auto c = test::read_all(synth_tiny(SynthFormat::Q4_K_M, 2, "s2.gguf", 3));
  ASSERT_GT(a.size(), 10000000u);
  EXPECT_TRUE(a == b) << "same seed, different bytes";
  EXPECT_EQ(a.size(), c.size());
  EXPECT_FALSE(a == c) << "different seeds, same bytes";
}

TEST(SynthTinyFiles, WithoutVocabulary) {
  const std::string path = synth_tiny(SynthFormat::Q8_0, 3, "novocab.gguf", 0, false);
  auto m = ModelFile::open(path);
  EXPECT_EQ(m->config().n_vocab, 256);
  EXPECT_EQ(m->gguf()->find("tokenizer.ggml.tokens"), nullptr);
}

// ---- GgufWriter::add_tensor_streamed ------------------------------------------------------------

TEST(GgufWriterStreamed, SameBytesAsInMemoryAndChecksTheCount) {
  std::vector<float> x(64 * 3);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i) * 0.5f - 7;
  auto bytes = [&](size_t i) { return reinterpret_cast<const uint8_t*>(x.data()) + i; };
  GgufWriter a, b;
  a.set_u32("k", 1).add_tensor_f32("t", {64, 3}, x).add_tensor_f32("u", {64, 3}, x);
  b.set_u32("k", 1).add_tensor_f32("t", {64, 3}, x);
  b.add_tensor_streamed("u", GgmlType::F32, {64, 3}, [&](const GgufWriter::ByteSink& sink) {
    sink(bytes(0), 100);  // uneven pieces
    sink(bytes(100), x.size() * 4 - 100);
  });
  EXPECT_EQ(a.bytes(), b.bytes());
  const std::string path = (tmp_dir() / "streamed.gguf").string();
  b.write(path);
  const std::string on_disk = test::read_all(path);
  const auto mem = b.bytes();
  EXPECT_EQ(std::vector<uint8_t>(on_disk.begin(), on_disk.end()), mem);

  GgufWriter shortw, longw;
  shortw.add_tensor_streamed("s", GgmlType::F32, {64},
                             [&](const GgufWriter::ByteSink& sink) { sink(bytes(0), 64 * 4 - 1); });
  longw.add_tensor_streamed("l", GgmlType::F32, {64},
                            [&](const GgufWriter::ByteSink& sink) { sink(bytes(0), 64 * 4 + 4); });
  EXPECT_THROW(shortw.bytes(), Error);
  EXPECT_THROW(longw.bytes(), Error);
  EXPECT_THROW(longw.write((tmp_dir() / "bad.gguf").string()), Error);
}

}  // namespace
}  // namespace rz

namespace rz {
namespace {

// What `--weights fp8` converts (model/model_weights.hpp's fp8_converts) and the bytes a step then
// reads (ModelWeights::matrix_bytes(true), rz bench's MBU): on the tiny shape every layer matrix
// of an F16 or BF16 file becomes rows * (cols + 4) bytes, the output matrix keeps its bytes, and
// a Q4_K_M file is unchanged.
TEST(Fp8Bytes, LayerMatricesOfF16AndBf16Files) {
  EXPECT_TRUE(fp8_converts(GgmlType::F16, 256, 512));
  EXPECT_TRUE(fp8_converts(GgmlType::BF16, 16, 16));
  EXPECT_FALSE(fp8_converts(GgmlType::F16, 250, 512));  // rows not a multiple of 16
  EXPECT_FALSE(fp8_converts(GgmlType::F16, 256, 40));   // cols not a multiple of 16
  EXPECT_FALSE(fp8_converts(GgmlType::F32, 256, 512));
  EXPECT_FALSE(fp8_converts(GgmlType::Q4_K, 256, 512));
  for (const SynthFormat f : {SynthFormat::F16, SynthFormat::BF16}) {
    const auto mf =
        ModelFile::open(synth_tiny(f, 3, std::string("fp8_") + synth_format_name(f) + ".gguf"));
    const ModelWeights w = ModelWeights::load(*mf);
    size_t want = w.output->nbytes;
    for (const auto& l : w.layers)
      for (const TensorView* t : {l.wq, l.wk, l.wv, l.wo, l.w_gate, l.w_up, l.w_down})
        want += size_t(t->rows()) * size_t(t->cols() + 4);
    EXPECT_EQ(w.matrix_bytes(true), want) << synth_format_name(f);
    EXPECT_LT(w.matrix_bytes(true), w.matrix_bytes(false));
  }
  const auto q = ModelFile::open(synth_tiny(SynthFormat::Q4_K_M, 3, "fp8_q4km.gguf"));
  const ModelWeights wq = ModelWeights::load(*q);
  EXPECT_EQ(wq.matrix_bytes(true), wq.matrix_bytes(false));
}

}  // namespace
}  // namespace rz
