// Tokenizer::from_hf_dir: a byte-level BPE tokenizer from a Hugging Face tokenizer.json (and
// tokenizer_config.json when present), for safetensors models. Supported: model BPE without
// byte fallback, no normalizer, pre-tokenizers built from ByteLevel, Split (Isolated, regex or
// string) and Digits, possibly in a Sequence. Anything else is an rz::Error naming the file.
// added_tokens: "special": true ones become control tokens, the others user-defined tokens
// (matched in any text); their lstrip/rstrip flags are kept, single_word is not applied.
#include <simdjson.h>

#include <filesystem>
#include <map>

#include "formats/common.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/tokenizer_impl.hpp"
#include "tokenizer/tokenizer_pretok.hpp"

namespace rz {
namespace tok {
namespace {

using simdjson::dom::element;

std::string str_or(element e, const char* key, std::string def = "") {
  std::string_view v;
  if (e[key].get_string().get(v)) return def;
  return std::string(v);
}

bool bool_or(element e, const char* key, bool def) {
  bool v;
  if (e[key].get_bool().get(v)) return def;
  return v;
}

// Escapes a literal string for PCRE2.
std::string quote_regex(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}/-").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

// Appends the regex sequence one pre-tokenizer node stands for.
void pretok_regexes(element node, const std::string& src, std::vector<std::string>& out,
                    bool& byte_level) {
  std::string type = str_or(node, "type");
  auto unsupported = [&](const std::string& what) {
    return file_error(src, "unsupported pre-tokenizer " + what + " (not supported yet)");
  };
  if (type == "Sequence") {
    simdjson::dom::array arr;
    if (node["pretokenizers"].get_array().get(arr)) throw unsupported("Sequence without a list");
    for (element e : arr) pretok_regexes(e, src, out, byte_level);
  } else if (type == "ByteLevel") {
    bool prefix = bool_or(node, "add_prefix_space", false);
    bool use_regex = bool_or(node, "use_regex", true);
    if (prefix) throw unsupported("ByteLevel with add_prefix_space");
    if (use_regex) out.emplace_back(PreTokenizer::gpt2_regex());
    byte_level = true;
  } else if (type == "Digits") {
    bool individual = bool_or(node, "individual_digits", false);
    out.emplace_back(individual ? R"(\p{N})" : R"(\p{N}+)");
  } else if (type == "Split") {
    std::string behavior = str_or(node, "behavior");
    bool invert = bool_or(node, "invert", false);
    if (behavior != "Isolated" || invert) throw unsupported("Split with behavior " + behavior);
    std::string_view re;
    if (!node["pattern"]["Regex"].get_string().get(re)) {
      out.emplace_back(re);
    } else if (!node["pattern"]["String"].get_string().get(re)) {
      out.push_back(quote_regex(re));
    } else {
      throw unsupported("Split without a pattern");
    }
  } else {
    throw unsupported("'" + type + "'");
  }
}

// "bos_token": "<s>" or {"content": "<s>", ...}
std::string special_text(element cfg, const char* key) {
  element v;
  if (cfg[key].get(v)) return {};
  std::string_view s;
  if (!v.get_string().get(s)) return std::string(s);
  return str_or(v, "content");
}

VocabData vocab_from_hf(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string path = (fs::path(dir) / "tokenizer.json").string();
  if (!fs::exists(path)) throw file_error(path, "no tokenizer.json in the model directory");
  simdjson::dom::parser parser;
  element doc;
  if (auto err = parser.load(path).get(doc))
    throw file_error(path, std::string("not valid JSON: ") + simdjson::error_message(err));

  VocabData d;
  d.source = path;
  d.model = "gpt2";
  element model;
  if (doc["model"].get(model) || str_or(model, "type") != "BPE")
    throw file_error(path, "tokenizer model '" + str_or(model, "type") +
                               "' is not supported yet (only byte-level BPE)");
  if (bool_or(model, "byte_fallback", false))
    throw file_error(path, "BPE with byte_fallback (SentencePiece-style) is not supported yet");
  d.ignore_merges = bool_or(model, "ignore_merges", false);
  element norm;
  if (!doc["normalizer"].get(norm) && !norm.is_null())
    throw file_error(path, "normalizer '" + str_or(norm, "type") + "' is not supported yet");

  // vocabulary: model.vocab plus added_tokens
  struct Entry {
    std::string text;
    TokenType type;
    uint8_t strip;
  };
  std::map<int64_t, Entry> by_id;
  simdjson::dom::object vocab;
  if (model["vocab"].get_object().get(vocab)) throw file_error(path, "model.vocab is missing");
  for (auto kv : vocab) {
    int64_t id;
    if (kv.value.get_int64().get(id) || id < 0 || id > (1 << 24))
      throw file_error(path, "bad id for token '" + std::string(kv.key) + "'");
    by_id[id] = {std::string(kv.key), TokenType::Normal, 0};
  }
  simdjson::dom::array added;
  bool has_strip = false;
  if (!doc["added_tokens"].get_array().get(added)) {
    for (element t : added) {
      int64_t id;
      if (t["id"].get_int64().get(id) || id < 0 || id > (1 << 24))
        throw file_error(path, "added token without a valid id");
      // "special": false is a user-defined token, matched in any text; "special": true a control
      // token, matched only with special parsing. lstrip/rstrip: the token swallows the
      // whitespace before/after it. (single_word is not applied.)
      bool special = bool_or(t, "special", false);
      uint8_t strip = (bool_or(t, "lstrip", false) ? kStripLeft : 0) |
                      (bool_or(t, "rstrip", false) ? kStripRight : 0);
      by_id[id] = {str_or(t, "content"), special ? TokenType::Control : TokenType::UserDefined,
                   strip};
      has_strip = has_strip || strip != 0;
    }
  }
  if (by_id.empty()) throw file_error(path, "empty vocabulary");
  const size_t n = static_cast<size_t>(by_id.rbegin()->first) + 1;
  d.tokens.resize(n);
  d.types.assign(n, TokenType::Unused);
  for (size_t i = 0; i < n; ++i) d.tokens[i] = "<rz_unused_" + std::to_string(i) + ">";
  if (has_strip) d.strip.assign(n, 0);
  for (auto& [id, e] : by_id) {
    d.tokens[id] = std::move(e.text);
    d.types[id] = e.type;
    if (has_strip) d.strip[id] = e.strip;
  }

  simdjson::dom::array merges;
  if (model["merges"].get_array().get(merges)) throw file_error(path, "model.merges is missing");
  for (element m : merges) {
    std::string_view s;
    if (!m.get_string().get(s)) {
      size_t sp = s.find(' ', 1);
      if (sp == std::string_view::npos)
        throw file_error(path, "malformed merge '" + std::string(s) + "'");
      d.merge_pairs.emplace_back(std::string(s.substr(0, sp)), std::string(s.substr(sp + 1)));
      continue;
    }
    simdjson::dom::array pair;
    std::string_view a, b;
    if (m.get_array().get(pair) || pair.size() != 2 || pair.at(0).get_string().get(a) ||
        pair.at(1).get_string().get(b))
      throw file_error(path, "malformed merge entry");
    d.merge_pairs.emplace_back(std::string(a), std::string(b));
  }

  bool byte_level = false;
  element pre;
  if (!doc["pre_tokenizer"].get(pre) && !pre.is_null())
    pretok_regexes(pre, path, d.pre_regexes, byte_level);
  element dec;
  if (!doc["decoder"].get(dec) && !dec.is_null() && str_or(dec, "type") == "ByteLevel")
    byte_level = true;
  if (!byte_level)
    throw file_error(path, "only byte-level BPE tokenizers are supported (no ByteLevel found)");
  d.pre = "tokenizer.json";
  for (const auto& name : PreTokenizer::known_names())
    if (PreTokenizer::regexes_for(name) == d.pre_regexes) {
      d.pre = name;
      break;
    }
  if (d.pre_regexes.empty()) d.pre_regexes.push_back("(?s).+");  // no splitting at all

  // BOS/EOS from tokenizer_config.json; BOS is also added when the post-processor's template
  // starts with a special token.
  auto id_of = [&](const std::string& text) -> int32_t {
    if (text.empty()) return -1;
    for (size_t i = 0; i < n; ++i)
      if (d.tokens[i] == text) return static_cast<int32_t>(i);
    return -1;
  };
  element post;
  if (!doc["post_processor"].get(post) && !post.is_null() &&
      str_or(post, "type") == "TemplateProcessing") {
    simdjson::dom::array single;
    std::string_view first;
    if (!post["single"].get_array().get(single) && single.size() > 0 &&
        !single.at(0)["SpecialToken"]["id"].get_string().get(first)) {
      d.bos = id_of(std::string(first));
      d.add_bos = d.bos >= 0;
    }
  }
  const std::string cfg_path = (fs::path(dir) / "tokenizer_config.json").string();
  if (fs::exists(cfg_path)) {
    simdjson::dom::parser p2;
    element cfg;
    if (auto err = p2.load(cfg_path).get(cfg))
      throw file_error(cfg_path, std::string("not valid JSON: ") + simdjson::error_message(err));
    int32_t b = id_of(special_text(cfg, "bos_token")), e = id_of(special_text(cfg, "eos_token"));
    if (b >= 0) d.bos = b;
    if (e >= 0) d.eos = e;
    bool flag;
    if (!cfg["add_bos_token"].get_bool().get(flag)) d.add_bos = flag && d.bos >= 0;
    if (!cfg["add_eos_token"].get_bool().get(flag)) d.add_eos = flag && d.eos >= 0;
  }
  return d;
}

}  // namespace
}  // namespace tok

std::shared_ptr<Tokenizer> Tokenizer::from_hf_dir(const std::string& dir) {
  return tok::make_bpe_tokenizer(tok::vocab_from_hf(dir));
}

}  // namespace rz
