// Byte-level BPE (GPT-2 family, tokenizer.ggml.model = "gpt2"): pre-tokenizer regexes cut the
// text into words; each word's bytes become GPT-2's printable stand-in characters, one symbol per
// byte; adjacent symbol pairs merge lowest merge rank first (leftmost on ties) until no pair of
// the merge list is left. Symbols are token ids, so a merge is one hash look-up of the id pair.
#include <algorithm>
#include <array>

#include "formats/common.hpp"
#include "tokenizer/tokenizer_impl.hpp"
#include "tokenizer/tokenizer_pretok.hpp"

namespace rz::tok {
namespace {

// GPT-2's byte ↔ unicode table: printable Latin-1 bytes stand for themselves, the other 68 bytes
// map in order to U+0100.. U+0143.
struct ByteMap {
  std::array<uint32_t, 256> to_cp{};
  std::array<int16_t, 0x144> to_byte{};  // -1 where a code point stands for no byte
  ByteMap() {
    to_byte.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      to_cp[b] = printable ? b : next++;
      to_byte[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

class BpeTokenizer final : public VocabTokenizer {
 public:
  explicit BpeTokenizer(VocabData d)
      : VocabTokenizer(std::move(d)),
        pre_(d_.pre_regexes.empty() ? PreTokenizer(d_.pre, d_.source)
                                    : PreTokenizer(d_.pre_regexes, d_.source)) {
    const ByteMap& bm = byte_map();
    for (int b = 0; b < 256; ++b) {
      std::string s;
      append_utf8(s, bm.to_cp[b]);
      byte_token_[b] = find_token(s);
    }
    if (d_.merge_pairs.empty()) {
      for (size_t r = 0; r < d_.merges.size(); ++r) {
        const std::string& m = d_.merges[r];
        size_t sp = m.find(' ', 1);
        if (sp == std::string::npos)
          throw file_error(d_.source, "malformed merge #" + std::to_string(r) + ": '" + m + "'");
        add_merge(std::string_view(m).substr(0, sp), std::string_view(m).substr(sp + 1), r);
      }
    } else {
      for (size_t r = 0; r < d_.merge_pairs.size(); ++r)
        add_merge(d_.merge_pairs[r].first, d_.merge_pairs[r].second, r);
    }
  }

  bool add_space_prefix() const override { return false; }

  std::string token_to_piece(int32_t id, bool skip_special) const override {
    check_id(id);
    switch (d_.types[id]) {
      case TokenType::Control:
      case TokenType::Unknown: return skip_special ? std::string() : d_.tokens[id];
      case TokenType::UserDefined: return d_.tokens[id];  // stored as plain text
      case TokenType::Unused: return {};
      default: break;
    }
    const std::string& t = d_.tokens[id];
    const ByteMap& bm = byte_map();
    std::string out;
    out.reserve(t.size());
    for (size_t i = 0; i < t.size();) {
      Utf8Step st = utf8_step(t, i);
      uint32_t cp = 0x110000;
      if (st.kind == Utf8Step::Valid) cp = decode_cp(std::string_view(t).substr(i, st.len));
      if (cp < bm.to_byte.size() && bm.to_byte[cp] >= 0)
        out += static_cast<char>(bm.to_byte[cp]);
      else
        out.append(t, i, st.len);  // not a byte stand-in: keep as is
      i += st.len;
    }
    return out;
  }

 protected:
  void encode_text(std::string_view text, bool, std::vector<int32_t>& out) const override {
    std::vector<std::string_view> words;
    pre_.split(text, words);
    for (std::string_view w : words) encode_word(w, out);
  }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  static uint32_t decode_cp(std::string_view s) {
    auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(s[k])); };
    switch (s.size()) {
      case 1: return b(0);
      case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
      case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
      default:
        return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
    }
  }

  void encode_word(std::string_view w, std::vector<int32_t>& out) const {
    const ByteMap& bm = byte_map();
    if (d_.ignore_merges) {
      std::string mapped;
      for (unsigned char c : w) append_utf8(mapped, bm.to_cp[c]);
      int32_t id = find_token(mapped);
      if (id >= 0) {
        out.push_back(id);
        return;
      }
    }
    const int n = static_cast<int>(w.size());
    if (n == 1) {
      push_id(byte_token_[static_cast<unsigned char>(w[0])], out);
      return;
    }
    // Symbols in a doubly linked list over the word's bytes; a merged-away symbol gets id -2.
    struct Sym {
      int32_t id;
      int prev, next;
    };
    struct Cand {
      int32_t rank;
      int left, right;
      int32_t lid, rid;
    };
    thread_local std::vector<Sym> syms;
    thread_local std::vector<Cand> heap;
    syms.resize(n);
    heap.clear();
    for (int i = 0; i < n; ++i)
      syms[i] = {byte_token_[static_cast<unsigned char>(w[i])], i - 1, i + 1 < n ? i + 1 : -1};
    auto worse = [](const Cand& a, const Cand& b) {  // min-heap on (rank, left)
      return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    };
    auto consider = [&](int l, int r) {
      if (l < 0 || r < 0) return;
      int32_t a = syms[l].id, b = syms[r].id;
      if (a < 0 || b < 0) return;
      auto it = merges_.find(key(a, b));
      if (it == merges_.end()) return;
      heap.push_back({it->second.rank, l, r, a, b});
      std::push_heap(heap.begin(), heap.end(), worse);
    };
    for (int i = 0; i + 1 < n; ++i) consider(i, i + 1);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), worse);
      Cand c = heap.back();
      heap.pop_back();
      Sym& L = syms[c.left];
      if (L.id != c.lid || L.next != c.right || syms[c.right].id != c.rid) continue;  // stale
      Sym& R = syms[c.right];
      L.id = merges_.find(key(c.lid, c.rid))->second.result;
      L.next = R.next;
      if (R.next >= 0) syms[R.next].prev = c.left;
      R.id = -2;
      consider(L.prev, c.left);
      consider(c.left, L.next);
    }
    for (int i = 0; i >= 0; i = syms[i].next) push_id(syms[i].id, out);
  }

  void add_merge(std::string_view l, std::string_view r, size_t rank) {
    int32_t a = find_token(l), b = find_token(r);
    if (a < 0 || b < 0) return;  // can never apply: symbols are always vocabulary tokens
    int32_t c = find_token(std::string(l) + std::string(r));
    if (c < 0) return;
    merges_.emplace(key(a, b), Merge{static_cast<int32_t>(rank), c});  // first rank wins
  }

  void push_id(int32_t id, std::vector<int32_t>& out) const {
    if (id >= 0)
      out.push_back(id);
    else if (d_.unk >= 0)
      out.push_back(d_.unk);  // a byte without a stand-in token in this vocabulary
  }

  PreTokenizer pre_;
  std::array<int32_t, 256> byte_token_{};
  std::unordered_map<uint64_t, Merge> merges_;
};

}  // namespace

std::shared_ptr<Tokenizer> make_bpe_tokenizer(VocabData d) {
  return std::make_shared<BpeTokenizer>(std::move(d));
}

}  // namespace rz::tok
