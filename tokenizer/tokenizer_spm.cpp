// SentencePiece BPE with byte fallback (tokenizer.ggml.model = "llama"): spaces become "▁"
// (U+2581), a "▁" is prefixed at the start of the text and after each special token when
// add_space_prefix is set; the text's characters are symbols, and the adjacent pair whose
// concatenation is the vocabulary entry with the highest score merges first (leftmost on ties).
// A final symbol that is no vocabulary entry becomes its bytes' <0xNN> tokens.
#include <algorithm>
#include <array>
#include <cstdio>

#include "formats/common.hpp"
#include "tokenizer/tokenizer_impl.hpp"

namespace rz::tok {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

class SpmTokenizer final : public VocabTokenizer {
 public:
  explicit SpmTokenizer(VocabData d) : VocabTokenizer(std::move(d)) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      byte_token_[b] = find_token(name);
    }
  }

  bool add_space_prefix() const override { return d_.add_space_prefix; }

  std::string token_to_piece(int32_t id, bool skip_special) const override {
    check_id(id);
    const std::string& t = d_.tokens[id];
    switch (d_.types[id]) {
      case TokenType::Control:
      case TokenType::Unknown: return skip_special ? std::string() : t;
      case TokenType::UserDefined: return t;
      case TokenType::Unused: return {};
      case TokenType::Byte:
        if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') {
          unsigned v = 0;
          if (std::sscanf(t.c_str() + 3, "%2x", &v) == 1)
            return std::string(1, static_cast<char>(v));
        }
        return t;
      default: break;
    }
    std::string out;
    out.reserve(t.size());
    for (size_t i = 0; i < t.size();) {
      if (t.compare(i, kSpace.size(), kSpace) == 0) {
        out += ' ';
        i += kSpace.size();
      } else {
        out += t[i++];
      }
    }
    return out;
  }

 protected:
  void encode_text(std::string_view text, bool after_special,
                   std::vector<int32_t>& out) const override {
    if (text.empty()) return;
    std::string s;
    s.reserve(text.size() + 3 * 8);
    if (d_.add_space_prefix && after_special) s += kSpace;
    for (char c : text) {
      if (c == ' ')
        s += kSpace;
      else
        s += c;
    }

    // Symbols: one per character (an invalid byte is a character of its own).
    struct Sym {
      int start, len;  // bytes of s; len 0 once merged into its left neighbour
      int prev, next;
    };
    struct Cand {
      float score;
      int left, right, len;
    };
    std::vector<Sym> syms;
    for (size_t i = 0; i < s.size();) {
      Utf8Step st = utf8_step(s, i);
      int len = static_cast<int>(st.kind == Utf8Step::Valid ? st.len : 1);
      int k = static_cast<int>(syms.size());
      syms.push_back({static_cast<int>(i), len, k - 1, -1});
      if (k > 0) syms[k - 1].next = k;
      i += len;
    }
    std::vector<Cand> heap;
    auto worse = [](const Cand& a, const Cand& b) {  // max-heap on score, then leftmost
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    };
    auto consider = [&](int l, int r) {
      if (l < 0 || r < 0) return;
      int len = syms[l].len + syms[r].len;
      int32_t id = find_token(std::string_view(s).substr(syms[l].start, len));
      if (id < 0) return;
      heap.push_back({d_.scores[id], l, r, len});
      std::push_heap(heap.begin(), heap.end(), worse);
    };
    for (size_t i = 0; i + 1 < syms.size(); ++i)
      consider(static_cast<int>(i), static_cast<int>(i) + 1);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), worse);
      Cand c = heap.back();
      heap.pop_back();
      Sym& L = syms[c.left];
      Sym& R = syms[c.right];
      if (L.len == 0 || R.len == 0 || L.next != c.right || L.len + R.len != c.len) continue;
      L.len += R.len;
      R.len = 0;
      L.next = R.next;
      if (R.next >= 0) syms[R.next].prev = c.left;
      consider(L.prev, c.left);
      consider(c.left, L.next);
    }
    for (int i = 0; i >= 0 && !syms.empty(); i = syms[i].next) {
      std::string_view piece = std::string_view(s).substr(syms[i].start, syms[i].len);
      int32_t id = find_token(piece);
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
      for (unsigned char b : piece) {
        int32_t bid = byte_token_[b] >= 0 ? byte_token_[b] : d_.unk;
        if (bid >= 0) out.push_back(bid);
      }
    }
  }

 private:
  std::array<int32_t, 256> byte_token_{};
};

}  // namespace

std::shared_ptr<Tokenizer> make_spm_tokenizer(VocabData d) {
  return std::make_shared<SpmTokenizer>(std::move(d));
}

}  // namespace rz::tok
