// Pre-tokenizers of byte-level BPE: the text is cut into words by a sequence of regular
// expressions (PCRE2 with UTF, UCP and JIT). Each regex of the sequence splits every piece the
// previous ones produced; both the matches and the text between them become pieces ("isolated"
// splitting, as Hugging Face `tokenizers` does it).
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace rz::tok {

class PreTokenizer {
 public:
  // Named pre-tokenizer (tokenizer.ggml.pre). Throws rz::Error("SOURCE: unknown pre-tokenizer
  // 'NAME' (known: ...)").
  PreTokenizer(const std::string& name, const std::string& source);
  // Explicit regex sequence (from a tokenizer.json). Throws rz::Error on a regex that does not
  // compile.
  PreTokenizer(const std::vector<std::string>& regexes, const std::string& source);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Appends the words of `text` (views into it, in order, covering it exactly) to `words`.
  void split(std::string_view text, std::vector<std::string_view>& words) const;

  static std::vector<std::string> known_names();
  // The regex sequence of a known name; empty when unknown.
  static std::vector<std::string> regexes_for(const std::string& name);
  // Regex of GPT-2's byte-level pre-tokenizer (Hugging Face ByteLevel with use_regex).
  static const char* gpt2_regex();

 private:
  void compile(const std::vector<std::string>& regexes, const std::string& source);
  std::vector<void*> codes_;  // pcre2_code_8*
};

}  // namespace rz::tok
