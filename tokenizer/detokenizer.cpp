// StreamingDetokenizer: token ids in, whole UTF-8 characters out (the session actor streams its
// output to clients with it). Bytes of a character split across byte tokens wait in `pending_`
// until the token that completes them; bytes that can never form a character become U+FFFD.
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/tokenizer_impl.hpp"

namespace rz {

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tok, bool skip_special)
    : tok_(tok), skip_special_(skip_special) {}

std::string StreamingDetokenizer::push(int32_t id) {
  std::string piece = tok_.token_to_piece(id, skip_special_);
  // SentencePiece: the space the encoder put before the first word is not part of the text.
  if (first_ && tok_.add_space_prefix() && tok_.token_type(id) != TokenType::Control &&
      !piece.empty()) {
    if (piece[0] == ' ') piece.erase(0, 1);
    first_ = false;
  }
  pending_ += piece;

  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    tok::Utf8Step st = tok::utf8_step(pending_, i);
    if (st.kind == tok::Utf8Step::Incomplete) break;  // wait for the rest of the character
    if (st.kind == tok::Utf8Step::Valid)
      out.append(pending_, i, st.len);
    else
      out += "\xEF\xBF\xBD";
    i += st.len;
  }
  pending_.erase(0, i);
  return out;
}

std::string StreamingDetokenizer::flush() {
  std::string out = tok::utf8_sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace rz
