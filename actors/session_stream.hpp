// The token frames of one request: incremental detokenization (StreamingDetokenizer) followed by
// stop-string matching (StopMatcher), cut into protocol TokenFrames. The session actor keeps one
// per live request.
//
// Tokens wait (unsent) while their text is held back, either as an incomplete UTF-8 sequence or
// as a possible start of a stop string, and go out together with that text in one frame, so a
// frame never has to carry text without tokens. `index` counts the tokens sent before the frame.
// The end-of-generation token that ends a request is never pushed (neither sent nor counted).
// A token's log-probabilities, when the request asked for them, travel in the frame that carries
// the token, with each id's text.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "actors/session_stop.hpp"
#include "model/sampling.hpp"
#include "proto/messages.hpp"
#include "tokenizer/tokenizer.hpp"

namespace rz::engine {

class TokenStream {
 public:
  // `tok` must outlive the stream. `choice` is set for a choice of an n > 1 request.
  TokenStream(const Tokenizer& tok, std::string id, std::vector<std::string> stops,
              std::optional<int> choice = std::nullopt);

  // One generated token and its log-probabilities (if `lp` is present). Returns the frame to
  // send now, if any. When the token completes a stop string, stopped() turns true and the
  // returned frame (the pending tokens, this one included, with the text before the stop
  // string) is the request's last.
  std::optional<proto::TokenFrame> push(int32_t token, const TokenLogprobs& lp = {});
  // The request ends: the pending tokens with whatever text is left. Text left over with no token
  // to carry it (a trailing incomplete UTF-8 sequence whose tokens already went out) is dropped.
  // A stop string found in that last text also sets stopped().
  std::optional<proto::TokenFrame> finish();

  bool stopped() const { return stop_.stopped(); }
  uint64_t sent_tokens() const { return sent_; }

 private:
  std::optional<proto::TokenFrame> take();

  const Tokenizer& tok_;
  StreamingDetokenizer detok_;
  StopMatcher stop_;
  std::string id_;
  std::optional<int> choice_;
  std::vector<int32_t> pending_;                 // tokens not yet in a frame
  std::vector<proto::TokenLogprob> pending_lp_;  // theirs, when asked for
  std::string text_;                             // released text not yet in a frame
  uint64_t sent_ = 0;
  bool finished_ = false;
};

}  // namespace rz::engine
