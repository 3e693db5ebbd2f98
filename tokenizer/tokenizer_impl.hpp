// Internals shared by the tokenizer implementations (not part of the public interface):
// the plain vocabulary description both loaders (GGUF, tokenizer.json) produce, the common base
// that owns the vocabulary tables and splits out special tokens, and small UTF-8 helpers.
//
//   from_gguf / from_hf_dir ──▶ VocabData ──▶ make_bpe_tokenizer | make_spm_tokenizer
//   encode: add BOS ─▶ split out added-token text ─▶ encode_text() per plain run ─▶ add EOS
//
// Added tokens (llama.cpp's tokenizer_st_partition, Hugging Face's AddedVocabulary): the text of
// user-defined tokens (tokenizer.json: added tokens with "special": false) is always cut out of
// the input as that token; control and unknown tokens only when special parsing is on. Longer
// tokens are cut first. A token marked strip-left/right also swallows the ASCII whitespace
// before/after it.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/tokenizer.hpp"

namespace rz::tok {

// Everything a tokenizer is built from, independent of the file format it came from.
struct VocabData {
  std::string source;                    // file or directory named in error messages
  std::string model;                     // "gpt2" (byte-level BPE) or "llama" (SentencePiece BPE)
  std::string pre = "default";           // pre-tokenizer name (gpt2 only)
  std::vector<std::string> pre_regexes;  // explicit regex sequence; overrides `pre` when set
  std::vector<std::string> tokens;       // [n_vocab] token text as stored
  std::vector<TokenType> types;          // [n_vocab]
  std::vector<float> scores;             // [n_vocab] SentencePiece merge scores (llama only)
  std::vector<std::string> merges;       // "left right", rank = index (gpt2 only)
  // Merges given as pairs (tokenizer.json's array form, where a side may contain a space);
  // used instead of `merges` when not empty.
  std::vector<std::pair<std::string, std::string>> merge_pairs;
  int32_t bos = -1, eos = -1, unk = -1, eot = -1, eom = -1;
  bool add_bos = false, add_eos = false, add_space_prefix = false;
  bool ignore_merges = false;  // a whole word found in the vocabulary skips the merges
  // [n_vocab] or empty (no stripping): kStripLeft | kStripRight of added tokens.
  std::vector<uint8_t> strip;
};

inline constexpr uint8_t kStripLeft = 1, kStripRight = 2;

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenIndex = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// Vocabulary tables, special-token partitioning and BOS/EOS handling common to both models.
class VocabTokenizer : public Tokenizer {
 public:
  explicit VocabTokenizer(VocabData d);

  std::vector<int32_t> encode(std::string_view text, bool add_special,
                              bool parse_special) const override;
  int n_vocab() const override { return static_cast<int>(d_.tokens.size()); }
  const std::string& token_text(int32_t id) const override;
  TokenType token_type(int32_t id) const override;
  std::string_view model() const override { return d_.model; }
  std::string_view pre() const override { return d_.pre; }
  bool is_eog(int32_t id) const override;
  int32_t find_token(std::string_view text) const override;

 protected:
  // Encodes one run of plain text (no special token inside). `after_special` is true at the
  // start of the input and right after a special token (SentencePiece adds its space prefix
  // there).
  virtual void encode_text(std::string_view text, bool after_special,
                           std::vector<int32_t>& out) const = 0;
  void check_id(int32_t id) const;  // throws rz::Error for an id outside the vocabulary

  VocabData d_;
  TokenIndex index_;
  // Added tokens cut out of the input, longest text first: user-defined ones always, the others
  // (control, unknown) only when special parsing is on.
  std::vector<int32_t> specials_;
  std::vector<int32_t> eog_;  // sorted
};

std::shared_ptr<Tokenizer> make_bpe_tokenizer(VocabData d);
std::shared_ptr<Tokenizer> make_spm_tokenizer(VocabData d);

// ---- UTF-8 helpers ----

// Length of the sequence a lead byte announces (1 for ASCII and for bytes that cannot lead).
inline size_t utf8_seq_len(unsigned char c) {
  if (c < 0xC0) return 1;
  if (c < 0xE0) return 2;
  if (c < 0xF0) return 3;
  if (c < 0xF8) return 4;
  return 1;
}

inline void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Result of looking at the bytes at `s[i..]`: a valid character of `len` bytes, an invalid
// maximal subpart of `len` bytes (to become one U+FFFD), or an incomplete but so far valid prefix
// that runs to the end of `s`.
struct Utf8Step {
  enum Kind { Valid, Invalid, Incomplete } kind;
  size_t len;
};
Utf8Step utf8_step(std::string_view s, size_t i);

// Replaces every invalid sequence (and an incomplete tail) with U+FFFD.
std::string utf8_sanitize(std::string_view s);

}  // namespace rz::tok
