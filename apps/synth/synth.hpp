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
// Formats: f16, bf16 and llama-quantize's presets q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k_m,
// q4_k_m, q5_k_m, q6_k and iq4_xs, each with llama.cpp's per-tensor types (see preset_type: the
// output matrix in Q6_K, more bits for some attn_v / ffn_down / attn_output); with pure
// (`--pure`) every matrix in the preset's one type, so a benchmark of one type's kernels reads
// only that type. Norm weights and qwen2 biases are always F32. Q2_K, Q3_K, IQ4_NL and IQ4_XS
// values come from rz's plain quantizers (quants/quants_simple_quantize.cpp), the others from
// quantizers bit for bit gguf's and ggml's.
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

// llama-quantize's presets (and f16 / bf16).
enum class SynthFormat {
  F16,
  BF16,
  Q8_0,
  Q4_0,
  Q4_1,
  Q5_0,
  Q5_1,
  Q2_K,
  Q3_K_M,
  Q4_K_M,
  Q5_K_M,
  Q6_K,
  IQ4_XS
};

// Throws rz::Error listing the accepted names.
SynthFormat parse_synth_format(const std::string& name);
const char* synth_format_name(SynthFormat f);
const std::string& synth_format_list();   // "f16, bf16, q8_0, ..."
uint32_t synth_file_type(SynthFormat f);  // general.file_type (llama.cpp's llama_ftype)

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
// The type of one 2-D weight of `cols` columns in preset f, as llama-quantize chooses it for a
// dense llama/qwen2 model without an importance matrix (llama.cpp's llama_tensor_get_type):
//   - every matrix the preset's type (Q3_K for q3_k_m, Q4_K for q4_k_m, ...), except:
//   - the output matrix (the token embedding when the output is tied): Q6_K (Q8_0 stays Q8_0);
//   - attn_v: q2_k Q4_K (Q3_K when fewer than 4 query heads share a KV head), q3_k_m Q5_K in
//     layers 0 and 1 and Q4_K after, iq4_xs Q5_K with 4 or more query heads a KV head, q4_k_m and
//     q5_k_m Q6_K in use_more_bits layers;
//   - ffn_down: q2_k Q3_K, q3_k_m Q5_K in the first sixteenth of the layers and Q4_K after,
//     q4_k_m and q5_k_m Q6_K in use_more_bits layers;
//   - attn_output: q2_k Q3_K, q3_k_m Q4_K;
//   - a K or IQ4_XS type on rows that are not whole 256-element super-blocks: its fallback
//     (Q2_K/Q3_K/IQ4_XS -> IQ4_NL, Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0).
// pure (llama-quantize --pure): every matrix the preset's type. f16 and bf16 are always pure.
GgmlType preset_type(const SynthShape& s, SynthFormat f, const std::string& tensor_name,
                     int64_t cols, bool pure = false);

struct SynthTensor {
  std::string name;
  GgmlType type;
  std::vector<int64_t> ne;  // GGUF order (ne[0] innermost)
  uint64_t bytes = 0;
  enum class Init { Matrix, Norm, Bias, RopeFreqs } init = Init::Matrix;
};

// The tensors of the file in order, with their types and byte sizes (no data: cheap even for
// 8B shapes).
std::vector<SynthTensor> synth_plan(const SynthShape& s, SynthFormat f, bool pure = false);
uint64_t synth_plan_bytes(const std::vector<SynthTensor>& plan);

struct SynthOptions {
  std::string shape;
  SynthFormat format = SynthFormat::F16;
  bool pure = false;  // every matrix in the format's type (llama-quantize --pure)
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
