// Tokenizer factory (GGUF metadata → VocabData → BPE or SentencePiece tokenizer), the shared
// vocabulary base (special-token splitting, BOS/EOS, end-of-generation set), whole-sequence
// decode and the UTF-8 helpers.
#include <algorithm>
#include <cctype>

#include "formats/common.hpp"
#include "formats/gguf.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/tokenizer_impl.hpp"

namespace rz {
namespace tok {

// ---- UTF-8 ----

Utf8Step utf8_step(std::string_view s, size_t i) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = b(i);
  if (c < 0x80) return {Utf8Step::Valid, 1};
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    need = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 3;
    if (c == 0xE0) lo = 0xA0;  // no overlong forms
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return {Utf8Step::Invalid, 1};
  }
  size_t k = 1;
  for (; k < need; ++k) {
    if (i + k >= s.size()) return {Utf8Step::Incomplete, k};
    unsigned char d = b(i + k);
    bool ok = k == 1 ? (d >= lo && d <= hi) : (d >= 0x80 && d <= 0xBF);
    if (!ok) return {Utf8Step::Invalid, k};
  }
  return {Utf8Step::Valid, need};
}

std::string utf8_sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    Utf8Step st = utf8_step(s, i);
    if (st.kind == Utf8Step::Valid)
      out.append(s.substr(i, st.len));
    else
      out += "\xEF\xBF\xBD";
    i += st.len;
  }
  return out;
}

// ---- shared vocabulary base ----

namespace {

const char* const kEogTexts[] = {"<|im_end|>",      "<|eot_id|>", "<|end|>",       "<|endoftext|>",
                                 "<|end_of_text|>", "</s>",       "<end_of_turn>", "<|eom_id|>"};

}  // namespace

VocabTokenizer::VocabTokenizer(VocabData d) : d_(std::move(d)) {
  const int32_t n = static_cast<int32_t>(d_.tokens.size());
  index_.reserve(d_.tokens.size());
  for (int32_t i = 0; i < n; ++i) index_.emplace(d_.tokens[i], i);  // first id wins

  for (int32_t i = 0; i < n; ++i) {
    TokenType t = d_.types[i];
    if ((t == TokenType::Control || t == TokenType::UserDefined || t == TokenType::Unknown) &&
        !d_.tokens[i].empty())
      specials_.push_back(i);
  }
  std::stable_sort(specials_.begin(), specials_.end(),
                   [&](int32_t a, int32_t b) { return d_.tokens[a].size() > d_.tokens[b].size(); });

  auto in_range = [&](int32_t id) { return id >= 0 && id < n; };
  for (int32_t id : {d_.eos, d_.eot, d_.eom})
    if (in_range(id)) eog_.push_back(id);
  for (const char* t : kEogTexts) {
    auto it = index_.find(std::string_view(t));
    if (it != index_.end() && d_.types[it->second] == TokenType::Control)
      eog_.push_back(it->second);
  }
  std::sort(eog_.begin(), eog_.end());
  eog_.erase(std::unique(eog_.begin(), eog_.end()), eog_.end());

  bos_ = in_range(d_.bos) ? d_.bos : -1;
  eos_ = in_range(d_.eos) ? d_.eos : -1;
  add_bos_ = d_.add_bos;
  add_eos_ = d_.add_eos;
}

void VocabTokenizer::check_id(int32_t id) const {
  if (id < 0 || id >= n_vocab())
    throw Error("token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                std::to_string(n_vocab() - 1) + ")");
}

const std::string& VocabTokenizer::token_text(int32_t id) const {
  check_id(id);
  return d_.tokens[id];
}

TokenType VocabTokenizer::token_type(int32_t id) const {
  check_id(id);
  return d_.types[id];
}

bool VocabTokenizer::is_eog(int32_t id) const {
  return std::binary_search(eog_.begin(), eog_.end(), id);
}

int32_t VocabTokenizer::find_token(std::string_view text) const {
  auto it = index_.find(text);
  return it == index_.end() ? -1 : it->second;
}

std::vector<int32_t> VocabTokenizer::encode(std::string_view text, bool add_special,
                                            bool parse_special) const {
  std::vector<int32_t> out;
  if (add_special && add_bos_ && bos_ >= 0) out.push_back(bos_);

  // Fragments of the input: plain text (token < 0) or one added token. Added tokens are taken
  // longest first: each one splits the plain fragments that remain (llama.cpp's
  // tokenizer_st_partition). User-defined tokens are always taken, control and unknown ones only
  // with parse_special.
  struct Frag {
    std::string_view text;
    int32_t token;
  };
  auto is_space = [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
  };
  std::vector<Frag> frags, next;
  if (!text.empty()) frags.push_back({text, -1});
  for (int32_t id : specials_) {
    if (!parse_special && d_.types[id] != TokenType::UserDefined) continue;
    const std::string& st = d_.tokens[id];
    if (text.find(st) == std::string_view::npos) continue;
    const uint8_t strip = d_.strip.empty() ? 0 : d_.strip[id];
    next.clear();
    for (const Frag& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t start = 0;
      for (size_t p; (p = f.text.find(st, start)) != std::string_view::npos;) {
        size_t left_end = p;
        if (strip & kStripLeft)
          while (left_end > start && is_space(f.text[left_end - 1])) --left_end;
        if (left_end > start) next.push_back({f.text.substr(start, left_end - start), -1});
        next.push_back({{}, id});
        start = p + st.size();
        if (strip & kStripRight)
          while (start < f.text.size() && is_space(f.text[start])) ++start;
      }
      if (start < f.text.size()) next.push_back({f.text.substr(start), -1});
    }
    frags.swap(next);
  }

  bool after_special = true;
  for (const Frag& f : frags) {
    if (f.token >= 0) {
      out.push_back(f.token);
      after_special = true;
    } else {
      encode_text(f.text, after_special, out);
      after_special = false;
    }
  }
  if (add_special && add_eos_ && eos_ >= 0) out.push_back(eos_);
  return out;
}

// ---- GGUF loading ----

namespace {

// GGUF keeps no lstrip/rstrip flags of added tokens; llama.cpp restores the ones of the models
// that need them from the model name. Phi-3's tokenizer.json has rstrip on its chat tokens and on
// "</s>" (a user-defined token there), not on <unk>, <s> and <|endoftext|>.
void set_strip_by_model_name(VocabData& d, std::string name) {
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (name.find("phi-3") == std::string::npos && name.find("phi3") == std::string::npos) return;
  d.strip.assign(d.tokens.size(), 0);
  for (size_t i = 0; i < d.tokens.size(); ++i) {
    TokenType t = d.types[i];
    if (t == TokenType::Control || t == TokenType::UserDefined || t == TokenType::Unknown)
      d.strip[i] = kStripRight;
  }
  auto set = [&](std::string_view text, bool on) {
    for (size_t i = 0; i < d.tokens.size(); ++i)
      if (d.tokens[i] == text) d.strip[i] = on ? kStripRight : 0;
  };
  set("</s>", true);
  for (std::string_view t : {"<unk>", "<s>", "<|endoftext|>"}) set(t, false);
}

VocabData vocab_from_gguf(const GgufFile& f) {
  VocabData d;
  d.source = f.path();
  auto model = f.get_string("tokenizer.ggml.model");
  if (!model) throw file_error(d.source, "no tokenizer (metadata key tokenizer.ggml.model)");
  d.model = *model;
  if (d.model != "gpt2" && d.model != "llama")
    throw file_error(d.source,
                     "unsupported tokenizer model '" + d.model + "' (supported: gpt2, llama)");
  d.tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (d.tokens.empty()) throw file_error(d.source, "tokenizer.ggml.tokens is missing or empty");
  const size_t n = d.tokens.size();

  auto types = f.get_int_array("tokenizer.ggml.token_type");
  if (!types.empty() && types.size() != n)
    throw file_error(d.source, "tokenizer.ggml.token_type has " + std::to_string(types.size()) +
                                   " entries for " + std::to_string(n) + " tokens");
  d.types.assign(n, TokenType::Normal);
  for (size_t i = 0; i < types.size(); ++i)
    d.types[i] =
        (types[i] >= 0 && types[i] <= 6) ? static_cast<TokenType>(types[i]) : TokenType::Undefined;

  if (d.model == "llama") {
    d.scores = f.get_float_array("tokenizer.ggml.scores");
    if (d.scores.empty()) d.scores.assign(n, 0.0f);
    if (d.scores.size() != n)
      throw file_error(d.source, "tokenizer.ggml.scores has " + std::to_string(d.scores.size()) +
                                     " entries for " + std::to_string(n) + " tokens");
    d.pre = "default";
  } else {
    d.merges = f.get_string_array("tokenizer.ggml.merges");
    if (d.merges.empty())
      throw file_error(d.source, "byte-level BPE without merges (tokenizer.ggml.merges)");
    d.pre = f.get_string("tokenizer.ggml.pre").value_or("default");
  }

  auto id_key = [&](const char* key, int32_t def) -> int32_t {
    auto v = f.get_int(key);
    if (!v) return def;
    return (*v >= 0 && *v < static_cast<int64_t>(n)) ? static_cast<int32_t>(*v) : -1;
  };
  const bool spm = d.model == "llama";
  d.bos = id_key("tokenizer.ggml.bos_token_id", spm && n > 1 ? 1 : -1);
  d.eos = id_key("tokenizer.ggml.eos_token_id", spm && n > 2 ? 2 : -1);
  d.unk = id_key("tokenizer.ggml.unknown_token_id", spm ? 0 : -1);
  d.eot = id_key("tokenizer.ggml.eot_token_id", -1);
  d.eom = id_key("tokenizer.ggml.eom_token_id", -1);
  d.add_bos = f.get_bool("tokenizer.ggml.add_bos_token").value_or(spm);
  d.add_eos = f.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  d.add_space_prefix = spm && f.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);
  d.ignore_merges = d.pre == "llama-bpe" || d.pre == "llama3" || d.pre == "llama-v3";
  set_strip_by_model_name(d, f.get_string("general.name").value_or(""));
  return d;
}

}  // namespace
}  // namespace tok

std::shared_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile& f) {
  tok::VocabData d = tok::vocab_from_gguf(f);
  if (d.model == "llama") return tok::make_spm_tokenizer(std::move(d));
  return tok::make_bpe_tokenizer(std::move(d));
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  bool strip = add_space_prefix();
  for (int32_t id : ids) {
    std::string piece = token_to_piece(id, skip_special);
    if (strip && token_type(id) != TokenType::Control && !piece.empty()) {
      if (piece[0] == ' ') piece.erase(0, 1);
      strip = false;
    }
    out += piece;
  }
  return out;
}

}  // namespace rz
