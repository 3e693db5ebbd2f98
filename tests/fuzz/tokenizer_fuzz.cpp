// libFuzzer target: the tokenizers (tokenizer/) of the vocabularies in ../shared/testdata/vocab/
// (GPT-2 and StarCoder byte-level BPE, Llama SentencePiece, Phi-3), one per input chosen by its
// first byte. The rest of the input is
//   - text, encoded with and without special-token parsing (every pre-tokenizer of those
//     vocabularies), then decoded, whole and through the StreamingDetokenizer; for the byte-level
//     BPE vocabularies decode(encode(text)) must give valid UTF-8 text back byte for byte unless a
//     byte has no token of its own there (StarCoder lacks the lead bytes of planes 4 and up,
//     0xFE and 0xFF: they become its unknown token), and for all of them the streamed text must
//     equal the whole decode when that is valid UTF-8 (the streamer replaces invalid bytes with
//     U+FFFD, decode keeps them: an unknown token in place of a lead byte leaves its
//     continuation bytes alone);
//   - and read as token ids (4 bytes each, any value): decode and stream them (an id outside the
//     vocabulary may throw rz::Error; nothing else may happen).
// With bit 6 of the first byte set (and bit 7 clear) the rest is split by one of every known
// pre-tokenizer (tokenizer/tokenizer_pretok.hpp, chosen by the first byte): the words must be
// non-empty views into the text, in order, covering it exactly.
// The vocabulary folder: RZ_FUZZ_VOCAB_DIR, else the one beside the checkout.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "formats/common.hpp"
#include "formats/gguf.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/tokenizer_pretok.hpp"

namespace {

struct Vocab {
  std::shared_ptr<rz::Tokenizer> tok;
  bool byte_level = false;  // byte-level BPE: decode(encode(x)) == x for any bytes
};

std::vector<Vocab> load() {
  const char* env = std::getenv("RZ_FUZZ_VOCAB_DIR");
  const std::string dir = env ? env : RZ_SOURCE_DIR "/../shared/testdata/vocab";
  std::vector<Vocab> out;
  for (const char* name : {"gpt-2", "starcoder", "llama-spm", "phi-3"}) {
    const std::string path = dir + "/ggml-vocab-" + name + ".gguf";
    std::shared_ptr<rz::Tokenizer> tok = rz::Tokenizer::from_gguf(*rz::GgufFile::open(path));
    const bool byte_level = tok->model() == "gpt2";
    out.push_back({std::move(tok), byte_level});
  }
  return out;
}

bool valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (int k = 1; k < n; ++k) {
      const unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d >> 6) != 2) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += n;
  }
  return true;
}

std::string escaped(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    char buf[8];
    if (c >= 0x20 && c < 0x7F && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    }
  }
  return out;
}

[[noreturn]] void broken(const char* what, std::string_view text, std::string_view got) {
  std::fprintf(stderr, "tokenizer_fuzz: %s\n  text: %s\n  got:  %s\n", what,
               escaped(text).c_str(), escaped(got).c_str());
  std::abort();
}

std::string streamed(const rz::Tokenizer& tok, const std::vector<int32_t>& ids) {
  rz::StreamingDetokenizer d(tok, false);
  std::string s;
  for (int32_t id : ids) s += d.push(id);
  return s + d.flush();
}

}  // namespace

std::vector<std::unique_ptr<rz::tok::PreTokenizer>> pretokenizers() {
  std::vector<std::unique_ptr<rz::tok::PreTokenizer>> out;
  for (const std::string& name : rz::tok::PreTokenizer::known_names())
    out.push_back(std::make_unique<rz::tok::PreTokenizer>(name, "fuzz"));
  return out;
}

void check_split(const rz::tok::PreTokenizer& pre, std::string_view text) {
  std::vector<std::string_view> words;
  pre.split(text, words);
  const char* at = text.data();
  for (std::string_view w : words) {
    if (w.empty() || w.data() != at) broken("pre-tokenizer words do not tile the text", text, w);
    at += w.size();
  }
  if (at != text.data() + text.size()) broken("pre-tokenizer words end early", text, "");
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<Vocab> vocabs = load();
  static const auto pres = pretokenizers();
  if (size < 1) return 0;
  if ((data[0] & 0xC0) == 0x40) {
    check_split(*pres[data[0] % pres.size()],
                std::string_view(reinterpret_cast<const char*>(data + 1), size - 1));
    return 0;
  }
  const Vocab& v = vocabs[data[0] % vocabs.size()];
  const rz::Tokenizer& tok = *v.tok;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] & 0x80) {  // token ids
    std::vector<int32_t> ids(text.size() / 4);
    if (!ids.empty()) std::memcpy(ids.data(), text.data(), ids.size() * 4);
    for (int32_t& id : ids)  // mostly inside the vocabulary, now and then anything
      if ((id & 0x70000000) != 0x70000000) id = static_cast<int32_t>(uint32_t(id) % tok.n_vocab());
    try {
      (void)tok.decode(ids);
      (void)streamed(tok, ids);
    } catch (const rz::Error&) {
    }
    return 0;
  }
  const bool utf8 = valid_utf8(text);
  for (bool parse_special : {false, true}) {
    const std::vector<int32_t> ids = tok.encode(text, false, parse_special);
    for (int32_t id : ids)
      if (id < 0 || id >= tok.n_vocab())
        broken("encode gave an id outside the vocabulary", text, "");
    const std::string whole = tok.decode(ids);
    // A byte the vocabulary has no token for becomes its unknown token (StarCoder has none for
    // the lead bytes of planes 4 and up, nor for 0xFE and 0xFF): no round trip then.
    bool unknown = false;
    for (int32_t id : ids) {
      const rz::TokenType t = tok.token_type(id);
      unknown |= t == rz::TokenType::Unknown || t == rz::TokenType::Control;
    }
    if (v.byte_level && utf8 && !parse_special && !unknown && whole != text)
      broken("byte-level BPE: decode(encode(text)) != text", text, whole);
    if (valid_utf8(whole)) {  // the streamer replaces invalid bytes with U+FFFD; decode keeps them
      const std::string s = streamed(tok, ids);
      if (s != whole) broken("streamed text != whole decode", whole, s);
    }
  }
  (void)tok.encode(text, true, true);
  return 0;
}
