// Token frames of one request (actors/session_stream.hpp).
#include "actors/session_stream.hpp"

#include <exception>
#include <string>
#include <utility>

namespace rz::engine {

TokenStream::TokenStream(const Tokenizer& tok, std::string id, std::vector<std::string> stops,
                         std::optional<int> choice)
    : tok_(tok), detok_(tok), stop_(std::move(stops)), id_(std::move(id)), choice_(choice) {}

std::optional<proto::TokenFrame> TokenStream::push(int32_t token, const TokenLogprobs& lp) {
  if (finished_ || stop_.stopped()) return std::nullopt;
  pending_.push_back(token);
  if (lp.present) {
    // An id past the tokenizer's vocabulary (a model's padded rows) has no text.
    auto piece = [&](int32_t id) {
      try {
        return tok_.token_to_piece(id);
      } catch (const std::exception&) {
        return std::string();
      }
    };
    proto::TokenLogprob t{token, piece(token), lp.logprob, {}};
    for (std::size_t i = 0; i < lp.top_ids.size() && i < lp.top_logprobs.size(); ++i)
      t.top.push_back({lp.top_ids[i], piece(lp.top_ids[i]), lp.top_logprobs[i]});
    pending_lp_.push_back(std::move(t));
  }
  StopMatcher::Result r = stop_.push(detok_.push(token));
  text_ += r.text;
  if (r.stopped) {
    finished_ = true;
    return take();
  }
  // Send once text came out and nothing is held back behind it.
  if (!text_.empty() && !stop_.holding()) return take();
  return std::nullopt;
}

std::optional<proto::TokenFrame> TokenStream::finish() {
  if (finished_ || stop_.stopped()) return std::nullopt;
  finished_ = true;
  StopMatcher::Result r = stop_.push(detok_.flush());
  text_ += r.text;
  if (!r.stopped) text_ += stop_.flush();
  return take();
}

std::optional<proto::TokenFrame> TokenStream::take() {
  if (pending_.empty()) {
    text_.clear();
    return std::nullopt;
  }
  proto::TokenFrame f;
  f.id = id_;
  f.text = std::move(text_);
  f.tokens = std::move(pending_);
  f.index = sent_;
  f.choice = choice_;
  f.logprobs = std::move(pending_lp_);
  sent_ += f.tokens.size();
  text_.clear();
  pending_.clear();
  pending_lp_.clear();
  return f;
}

}  // namespace rz::engine
