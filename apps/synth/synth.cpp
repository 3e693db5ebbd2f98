// rz synth, the writer: metadata as llama.cpp's converter writes it, the vocabulary copied and
// padded, and random tensor data generated row by row (seeded per tensor and row, so the bytes
// do not depend on the thread count), quantized with quantize_row and streamed into the file
// chunk by chunk through GgufWriter::add_tensor_streamed (see synth.hpp).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <thread>

#include "apps/synth/synth.hpp"
#include "formats/common.hpp"
#include "formats/gguf.hpp"
#include "formats/gguf_writer.hpp"
#include "quants/quants.hpp"

namespace rz {
namespace {

constexpr float kStd = 0.02f;
constexpr size_t kChunkBytes = size_t{32} << 20;  // output bytes generated per parallel chunk
constexpr int32_t kPadTokenType = 5;              // TokenType::Unused

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// xoshiro256** seeded through splitmix64; normal deviates by Box-Muller.
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (auto& w : s_) w = splitmix64(seed);
  }
  uint64_t next() {
    const uint64_t r = rotl(s_[1] * 5, 7) * 9, t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return r;
  }
  double uniform() { return (next() >> 11) * 0x1.0p-53; }  // [0, 1)
  // Fills n values ~ N(0, 1).
  void normals(float* out, int64_t n) {
    for (int64_t i = 0; i < n; i += 2) {
      const double u1 = 1.0 - uniform(), u2 = uniform();  // u1 in (0, 1]
      const double r = std::sqrt(-2.0 * std::log(u1)), a = 6.283185307179586 * u2;
      out[i] = static_cast<float>(r * std::cos(a));
      if (i + 1 < n) out[i + 1] = static_cast<float>(r * std::sin(a));
    }
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

uint64_t row_seed(uint64_t seed, const std::string& tensor, int64_t row) {
  uint64_t x = seed ^ fnv1a(tensor);
  uint64_t h = splitmix64(x);
  h ^= static_cast<uint64_t>(row) * 0xD1B54A32D192ED03ull;
  return splitmix64(h);
}

// Llama 3.1's rope frequency divisors as llama.cpp's converter computes them (factor 8, low/high
// frequency factors 1 and 4, original context 8192).
std::vector<float> llama3_rope_factors(const SynthShape& s) {
  const double factor = 8, low = 1, high = 4, old_ctx = 8192;
  const double low_wavelen = old_ctx / low, high_wavelen = old_ctx / high;
  std::vector<float> out;
  for (int i = 0; i < s.head_dim; i += 2) {
    const double freq = 1.0 / std::pow(double(s.rope_theta), double(i) / s.head_dim);
    const double wavelen = 6.283185307179586 / freq;
    double f = 1;
    if (wavelen < high_wavelen)
      f = 1;
    else if (wavelen > low_wavelen)
      f = factor;
    else {
      const double smooth = (old_ctx / wavelen - low) / (high - low);
      f = 1 / ((1 - smooth) / factor + smooth);
    }
    out.push_back(static_cast<float>(f));
  }
  return out;
}

// One row of a tensor's values (before quantization).
void fill_row(const SynthTensor& t, uint64_t seed, int64_t row, float* x) {
  const int64_t n = t.ne[0];
  Rng rng(row_seed(seed, t.name, row));
  rng.normals(x, n);
  const float offset = t.init == SynthTensor::Init::Norm ? 1.0f : 0.0f;
  for (int64_t i = 0; i < n; ++i) x[i] = offset + kStd * x[i];
}

GgufWriter::TensorProducer producer(const SynthTensor& t, uint64_t seed, int threads,
                                    const SynthShape& shape) {
  return [t, seed, threads, shape](const GgufWriter::ByteSink& sink) {
    const int64_t n = t.ne[0];
    int64_t rows = 1;
    for (size_t d = 1; d < t.ne.size(); ++d) rows *= t.ne[d];
    const size_t row_bytes = static_cast<size_t>(t.bytes / rows);
    if (t.init == SynthTensor::Init::RopeFreqs) {
      std::vector<float> f = llama3_rope_factors(shape);
      sink(reinterpret_cast<const uint8_t*>(f.data()), f.size() * sizeof(float));
      return;
    }
    const int64_t chunk_rows = std::max<int64_t>(1, static_cast<int64_t>(kChunkBytes / row_bytes));
    std::vector<uint8_t> buf(static_cast<size_t>(std::min(chunk_rows, rows)) * row_bytes);
    for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
      const int64_t r1 = std::min(rows, r0 + chunk_rows);
      std::atomic<int64_t> next{r0};
      auto work = [&] {
        std::vector<float> x(static_cast<size_t>(n));
        for (int64_t r; (r = next.fetch_add(1)) < r1;) {
          fill_row(t, seed, r, x.data());
          quantize_row(t.type, x.data(), buf.data() + (r - r0) * row_bytes, n);
        }
      };
      const int nt = static_cast<int>(std::min<int64_t>(threads, r1 - r0));
      std::vector<std::thread> pool;
      for (int i = 1; i < nt; ++i) pool.emplace_back(work);
      work();
      for (auto& th : pool) th.join();
      sink(buf.data(), static_cast<size_t>(r1 - r0) * row_bytes);
    }
  };
}

// Copies every tokenizer.* key of `vocab`, padding tokens/token_type/scores to n_vocab.
void copy_vocab(GgufWriter& w, const GgufFile& vocab, int n_vocab) {
  const GgufValue* toks = vocab.find("tokenizer.ggml.tokens");
  const int64_t n_src = toks && toks->type == GgufValueType::ARRAY
                            ? static_cast<int64_t>(toks->as_array().items.size())
                            : 0;
  for (const std::string& key : vocab.metadata_keys()) {
    if (key.rfind("tokenizer.", 0) != 0) continue;
    const GgufValue& v = *vocab.find(key);
    GgufValue pad;
    if (key == "tokenizer.ggml.tokens")
      pad = gguf_string("");
    else if (key == "tokenizer.ggml.token_type")
      pad = gguf_int(GgufValueType::INT32, kPadTokenType);
    else if (key == "tokenizer.ggml.scores")
      pad = gguf_float(GgufValueType::FLOAT32, 0.0);
    else {
      w.set(key, v);
      continue;
    }
    if (v.type != GgufValueType::ARRAY || static_cast<int64_t>(v.as_array().items.size()) != n_src)
      throw file_error(vocab.path(), "'" + key + "' is not an array of one entry per token");
    auto a = std::make_shared<GgufArray>(v.as_array());
    for (int64_t id = n_src; id < n_vocab; ++id) {
      if (key == "tokenizer.ggml.tokens")
        a->items.push_back(gguf_string("[PAD" + std::to_string(id) + "]"));
      else {
        GgufValue p = pad;
        p.type = a->elem_type;  // keep the file's element type
        a->items.push_back(p);
      }
    }
    w.set(key, GgufValue{GgufValueType::ARRAY, std::move(a)});
  }
}

}  // namespace

SynthSummary synth_write(const SynthOptions& opt) {
  std::shared_ptr<GgufFile> vocab;
  int n_tokens = 0;
  if (!opt.vocab.empty()) {
    vocab = GgufFile::open(opt.vocab);
    const GgufValue* toks = vocab->find("tokenizer.ggml.tokens");
    if (!toks || toks->type != GgufValueType::ARRAY)
      throw file_error(opt.vocab, "no tokenizer.ggml.tokens (not a vocabulary file)");
    n_tokens = static_cast<int>(toks->as_array().items.size());
  }
  const SynthShape s = synth_shape(opt.shape, n_tokens);
  if (n_tokens > s.n_vocab)
    throw file_error(opt.vocab, std::to_string(n_tokens) + " tokens do not fit the " + s.name +
                                    " vocabulary of " + std::to_string(s.n_vocab));
  const std::vector<SynthTensor> plan = synth_plan(s, opt.format, opt.pure);

  GgufWriter w;
  const std::string& a = s.arch;
  w.set_string("general.architecture", a);
  w.set_string("general.name", "synthetic " + s.name + " " + synth_format_name(opt.format));
  w.set_u32(a + ".context_length", static_cast<uint32_t>(s.n_ctx));
  w.set_u32(a + ".embedding_length", static_cast<uint32_t>(s.n_embd));
  w.set_u32(a + ".block_count", static_cast<uint32_t>(s.n_layer));
  w.set_u32(a + ".feed_forward_length", static_cast<uint32_t>(s.n_ff));
  w.set_u32(a + ".attention.head_count", static_cast<uint32_t>(s.n_head));
  w.set_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(s.n_head_kv));
  w.set_f32(a + ".rope.freq_base", s.rope_theta);
  w.set_f32(a + ".attention.layer_norm_rms_epsilon", s.norm_eps);
  w.set_u32(a + ".rope.dimension_count", static_cast<uint32_t>(s.head_dim));
  w.set_u32(a + ".vocab_size", static_cast<uint32_t>(s.n_vocab));
  w.set_u32("general.file_type", synth_file_type(opt.format));
  if (opt.format != SynthFormat::F16 && opt.format != SynthFormat::BF16)
    w.set_u32("general.quantization_version", 2);
  if (vocab) copy_vocab(w, *vocab, s.n_vocab);

  int threads =
      opt.threads > 0 ? opt.threads : static_cast<int>(std::thread::hardware_concurrency());
  threads = std::max(threads, 1);
  for (const SynthTensor& t : plan)
    w.add_tensor_streamed(t.name, t.type, t.ne, producer(t, opt.seed, threads, s));
  w.write(opt.out);

  SynthSummary sum;
  sum.tensors = static_cast<int>(plan.size());
  sum.data_bytes = synth_plan_bytes(plan);
  std::error_code ec;
  sum.file_bytes = std::filesystem::file_size(opt.out, ec);
  std::map<uint32_t, int> counts;
  for (const auto& t : plan) ++counts[static_cast<uint32_t>(t.type)];
  for (auto [type, n] : counts) sum.type_counts.emplace_back(static_cast<GgmlType>(type), n);
  return sum;
}

}  // namespace rz
