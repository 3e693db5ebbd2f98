// Pre-tokenizer regex table and the PCRE2 splitting loop (see tokenizer_pretok.hpp).
// The regexes are those of each model family's tokenizer.json; llama.cpp's pre-tokenizer table
// groups the names that share one.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/tokenizer_pretok.hpp"

#include <pcre2.h>

#include <map>

#include "formats/common.hpp"
#include "tokenizer/tokenizer_impl.hpp"

namespace rz::tok {
namespace {

// GPT-2 (Hugging Face ByteLevel with use_regex=true).
constexpr const char* kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Llama 3 (tiktoken cl100k-style, numbers in groups of up to three).
constexpr const char* kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen2: as Llama 3 but every digit on its own.
constexpr const char* kQwen2 = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N})"
                               R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// DeepSeek LLM: explicit letter ranges (Latin, Greek, Cyrillic, ... scripts with case).
constexpr const char* kDeepseekLetters =
    "\\s?[A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF\u01C4-\u0293"
    "\u0295-\u02AF\u0370-\u0373\u0376\u0377\u037B-\u037D\u037F\u0386\u0388-\u038A\u038C"
    "\u038E-\u03A1\u03A3-\u03F5\u03F7-\u0481\u048A-\u052F\u0531-\u0556\u10A0-\u10C5"
    "\u13A0-\u13F5\u13F8-\u13FD\u1C90-\u1CBA\u1CBD-\u1CBF\u1D00-\u1D2B\u1D6B-\u1D77"
    "\u1D79-\u1D9A\u1E00-\u1F15\u1F18-\u1F1D\u1F20-\u1F45\u1F48-\u1F4D\u1F50-\u1F57\u1F59"
    "\u1F5B\u1F5D\u1F5F-\u1F7D\u1F80-\u1FB4\u1FB6-\u1FBC\u1FBE\u1FC2-\u1FC4\u1FC6-\u1FCC"
    "\u1FD0-\u1FD3\u1FD6-\u1FDB\u1FE0-\u1FEC\u1FF2-\u1FF4\u1FF6-\u1FFC\u2102\u2107"
    "\u210A-\u2113\u2115\u2119-\u211D\u2124\u2126\u2128\u212A-\u212D\u212F-\u2134\u2139"
    "\u213C-\u213F\u2145-\u2149\u214E\u2183\u2184\u2C00-\u2C7B\u2C7E-\u2CE4\u2CEB-\u2CEE"
    "\u2CF2\u2CF3\uA640-\uA66D\uA680-\uA69B\uA722-\uA76F\uA771-\uA787\uA78B-\uA78E"
    "\uAB70-\uABBF\uFB00-\uFB06\uFB13-\uFB17\uFF21-\uFF3A\uFF41-\uFF5A\U00010400-\U0001044F"
    "\U000104B0-\U000104D3\U000104D8-\U000104FB\U00010C80-\U00010CB2\U00010CC0-\U00010CF2"
    "\U000118A0-\U000118DF\U0001E900-\U0001E943]+";
constexpr const char* kCjk = "[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+";

struct Entry {
  std::vector<const char*> names;
  std::vector<std::string> regexes;
};

const std::vector<Entry>& table() {
  static const std::vector<Entry> t = {
      {{"gpt-2", "mpt", "olmo", "jais", "phi-2", "roberta-bpe"}, {kGpt2}},
      {{"llama-bpe", "llama3", "llama-v3", "dbrx", "smaug-bpe", "falcon3"}, {kLlama3}},
      {{"qwen2", "qwen2.5", "deepseek-r1-qwen", "stablelm2"}, {kQwen2}},
      {{"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"},
       {R"(\p{N})", kGpt2}},
      {{"deepseek-llm"},
       {R"([\r\n])", kDeepseekLetters,
        "\\s?[!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002]+", R"(\s+$)", kCjk,
        R"(\p{N}+)"}},
      {{"deepseek-coder"}, {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kCjk, R"(\p{N})"}},
      {{"falcon"}, {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, R"([0-9][0-9][0-9])"}},
      // llama.cpp's fallback for byte-level BPE files without a pre-tokenizer name.
      {{"default"}, {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", R"([0-9][0-9][0-9])"}},
  };
  return t;
}

}  // namespace

const char* PreTokenizer::gpt2_regex() { return kGpt2; }

std::vector<std::string> PreTokenizer::known_names() {
  std::vector<std::string> out;
  for (const auto& e : table())
    for (const char* n : e.names) out.emplace_back(n);
  return out;
}

std::vector<std::string> PreTokenizer::regexes_for(const std::string& name) {
  for (const auto& e : table())
    for (const char* n : e.names)
      if (name == n) return e.regexes;
  return {};
}

PreTokenizer::PreTokenizer(const std::string& name, const std::string& source) {
  auto res = regexes_for(name);
  if (res.empty()) {
    std::string known;
    for (const auto& n : known_names()) known += (known.empty() ? "" : ", ") + n;
    throw file_error(source, "unknown pre-tokenizer '" + name + "' (known: " + known + ")");
  }
  compile(res, source);
}

PreTokenizer::PreTokenizer(const std::vector<std::string>& regexes, const std::string& source) {
  compile(regexes, source);
}

void PreTokenizer::compile(const std::vector<std::string>& regexes, const std::string& source) {
  for (const auto& re : regexes) {
    const std::string& pat = re;
    int err = 0;
    PCRE2_SIZE off = 0;
    pcre2_code* code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.data()), pat.size(),
                      PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &off, nullptr);
    if (!code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      for (void* c : codes_) pcre2_code_free(static_cast<pcre2_code*>(c));
      codes_.clear();
      throw file_error(source, "pre-tokenizer regex does not compile at offset " +
                                   std::to_string(off) + ": " + reinterpret_cast<const char*>(msg) +
                                   ": " + re);
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // failure just means the interpreter runs
    codes_.push_back(code);
  }
}

PreTokenizer::~PreTokenizer() {
  for (void* c : codes_) pcre2_code_free(static_cast<pcre2_code*>(c));
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& words) const {
  if (text.empty()) return;
  std::vector<std::string_view> cur{text}, next;
  for (void* vc : codes_) {
    auto* code = static_cast<pcre2_code*>(vc);
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
    next.clear();
    for (std::string_view piece : cur) {
      auto subj = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t pos = 0, start = 0;
      while (pos < piece.size()) {
        int rc = pcre2_match(code, subj, piece.size(), pos, 0, md, nullptr);
        if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)  // e.g. JIT stack exhausted: interpreter
          rc = pcre2_match(code, subj, piece.size(), pos, PCRE2_NO_JIT, md, nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          PCRE2_UCHAR msg[256];
          pcre2_get_error_message(rc, msg, sizeof msg);
          throw Error(std::string("pre-tokenizer regex failed: ") +
                      reinterpret_cast<const char*>(msg));
        }
        PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me <= ms) {  // empty match: step over one character
          pos = ms + utf8_seq_len(static_cast<unsigned char>(piece[ms]));
          continue;
        }
        if (ms > start) next.push_back(piece.substr(start, ms - start));
        next.push_back(piece.substr(ms, me - ms));
        start = pos = me;
      }
      if (start < piece.size()) next.push_back(piece.substr(start));
    }
    pcre2_match_data_free(md);
    cur.swap(next);
  }
  words.insert(words.end(), cur.begin(), cur.end());
}

}  // namespace rz::tok
