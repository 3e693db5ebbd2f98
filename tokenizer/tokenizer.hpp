// Tokenizers: byte-level BPE (tokenizer.ggml.model = "gpt2", pre-tokenizer regexes chosen by
// tokenizer.ggml.pre and run with PCRE2) and SentencePiece BPE with byte fallback ("llama").
// Added tokens are matched as whole pieces in the text: user-defined ones always (as Hugging Face
// tokenizers and llama.cpp do), control ones only when special parsing is on.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace rz {

class GgufFile;

enum class TokenType : int32_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Builds the tokenizer a GGUF file describes. Throws rz::Error naming the file for an unknown
  // tokenizer model or pre-tokenizer, or inconsistent vocabulary arrays.
  static std::shared_ptr<Tokenizer> from_gguf(const GgufFile& f);
  // Builds a byte-level BPE tokenizer from a Hugging Face tokenizer.json (+ tokenizer_config.json
  // when present) in `dir`. Throws rz::Error when unsupported.
  static std::shared_ptr<Tokenizer> from_hf_dir(const std::string& dir);

  // add_special: add BOS/EOS as the metadata's add_bos/add_eos flags say.
  // parse_special: text of control (and unknown) tokens becomes those tokens; otherwise it is
  // encoded as ordinary text. The text of user-defined tokens (tokenizer.json added tokens with
  // "special": false, such as <think> or runs of spaces) always becomes those tokens.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special,
                                      bool parse_special) const = 0;
  // Bytes of one token as it appears in text (byte-level BPE decoded; SentencePiece "▁" turned
  // into a space, <0xNN> into the byte). Control tokens give their text unless skip_special.
  virtual std::string token_to_piece(int32_t id, bool skip_special = false) const = 0;
  // Whole-sequence decode (SentencePiece: the leading space of the first token is dropped when
  // the tokenizer adds a space prefix).
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  virtual int n_vocab() const = 0;
  virtual const std::string& token_text(int32_t id) const = 0;  // vocabulary entry as stored
  virtual TokenType token_type(int32_t id) const = 0;
  virtual std::string_view model() const = 0;  // "gpt2" or "llama"
  virtual std::string_view pre() const = 0;    // pre-tokenizer name ("default" for llama)
  virtual bool add_space_prefix() const = 0;   // SentencePiece's leading-space rule
  int32_t bos_id() const { return bos_; }
  int32_t eos_id() const { return eos_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  // End of generation: EOS, EOT and the end-of-turn tokens of the chat templates.
  virtual bool is_eog(int32_t id) const = 0;
  // -1 when the vocabulary has no such token.
  virtual int32_t find_token(std::string_view text) const = 0;

 protected:
  int32_t bos_ = -1, eos_ = -1;
  bool add_bos_ = false, add_eos_ = false;
};

// Turns a token stream into text incrementally: emits only whole UTF-8 characters, holding back
// an incomplete multi-byte sequence until the token that completes it, and applies
// SentencePiece's leading-space rule to the first token.
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tok, bool skip_special = true);
  std::string push(int32_t id);  // text that became complete with this token (may be empty)
  std::string flush();           // whatever is left (invalid bytes replaced by U+FFFD)

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  bool first_ = true;
  std::string pending_;
};

}  // namespace rz
