// Synthetic models for `rz synth`: random weights in the exact shape of a real model, written as
// GGUF with the metadata llama.cpp's converter writes, so that ModelFile::open, config_from_gguf,
// Tokenizer::from_gguf and the executors take them like the real thing (benchmarks: the bytes
// moved and the arithmetic are the real model's, only the values are random).
//
// Shapes: "tiny" (llama, 2 layers, hidden 256, 4 heads / 2 kv, head_dim 64, ffn 512, untied
// output; vocab = the vocabulary file's size rounded up to a multiple of 128), "qwen2.5-1.5b" and
// "llama3.1-8b" (as /work/shared/PERFORMANCE.md lists them; llama3.1-8b also carries the
// rope_freqs.weight tensor of Llama 3.1's frequency scaling, as converted GGUF files do).
//
// Formats: f16, bf16, q8_0, q4_0, q4_1: every matrix (token embedding and output included) in
// that type ("pure", so a benchmark of one type's kernels reads only that type); q4_k_m: the
// tensor-type mix of `llama-quantize Q4_K_M` (see q4_k_m_type). Norm weights and qwen2 biases
// are always F32.
//
// Values: matrices and biases ~ N(0, 0.02²), norm weights ~ 1 + N(0, 0.02²), drawn row by row
// from a generator seeded by (seed, tensor name, row), so the file's bytes depend only on the
// seed, never on the thread count.
//
// Tokenizer: every tokenizer.* key of the vocabulary file, the token lists padded to the shape's
// vocabulary size with "[PAD<id>]" tokens of type 5 (unused: never matched in text, decoded as
// nothing), score 0 where the file has scores; merges untouched.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "formats/ggml_types.hpp"

namespace rz {

enum class SynthFormat { F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K_M };

// Throws rz::Error listing the accepted names.
SynthFormat parse_synth_format(const std::string& name);
const char* synth_format_name(SynthFormat f);
uint32_t synth_file_type(SynthFormat f);  // general.file_type (llama_ftype: 1, 32, 7, 2, 3, 15)

struct SynthShape {
  std::string name;
  std::string arch;  // "llama" or "qwen2"
  int n_vocab = 0;
  int n_embd = 0;
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  int n_ff = 0;
  int n_ctx = 0;
  float rope_theta = 10000.0f;
  float norm_eps = 1e-5f;
  bool tied_embeddings = false;
  bool qkv_bias = false;
  bool llama3_rope = false;  // write rope_freqs.weight (Llama 3.1 scaling: factor 8, orig 8192)
};

const std::vector<std::string>& synth_shape_names();
// `vocab_tokens`: size of the vocabulary file's token list (0 when there is none); only "tiny"
// depends on it. Throws rz::Error for an unknown name.
SynthShape synth_shape(const std::string& name, int vocab_tokens);

// llama.cpp's use_more_bits(i_layer, n_layers): the layers whose attn_v and ffn_down get Q6_K in
// Q4_K_M — the first eighth, the last eighth and every third layer in between.
bool use_more_bits(int i_layer, int n_layers);
// Q4_K_M type of one 2-D weight: Q6_K for the output matrix (the token embedding when the output
// is tied) and for attn_v / ffn_down of use_more_bits layers, Q4_K otherwise.
GgmlType q4_k_m_type(const SynthShape& s, const std::string& tensor_name);

struct SynthTensor {
  std::string name;
  GgmlType type;
  std::vector<int64_t> ne;  // GGUF order (ne[0] innermost)
  uint64_t bytes = 0;
  enum class Init { Matrix, Norm, Bias, RopeFreqs } init = Init::Matrix;
};

// The tensors of the file in order, with their types and byte sizes (no data: cheap even for
// 8B shapes).
std::vector<SynthTensor> synth_plan(const SynthShape& s, SynthFormat f);
uint64_t synth_plan_bytes(const std::vector<SynthTensor>& plan);

struct SynthOptions {
  std::string shape;
  SynthFormat format = SynthFormat::F16;
  std::string out;
  uint64_t seed = 0;
  std::string vocab;  // GGUF file whose tokenizer.* keys are copied; "" for none
  int threads = 0;    // 0: all cores
};

struct SynthSummary {
  int tensors = 0;
  uint64_t data_bytes = 0;  // tensor data (without alignment padding)
  uint64_t file_bytes = 0;
  std::vector<std::pair<GgmlType, int>> type_counts;  // tensors per type, in type order
};

// Generates and writes the file (tensor data streamed: memory stays at a few rows per thread
// plus one chunk). Throws rz::Error("PATH: cause") for a bad vocabulary file or an unwritable
// output, rz::Error for an unknown shape or a vocabulary larger than the shape's.
SynthSummary synth_write(const SynthOptions& opt);

// The default vocabulary file relative to the repository root.
inline constexpr const char* kSynthDefaultVocab = "../shared/testdata/vocab/ggml-vocab-gpt-2.gguf";

}  // namespace rz
