// Token frames of one request (actors/session_stream.hpp).
#include "actors/session_stream.hpp"

#include <utility>

namespace rz::engine {

TokenStream::TokenStream(const Tokenizer& tok, std::string id, std::vector<std::string> stops)
    : detok_(tok), stop_(std::move(stops)), id_(std::move(id)) {}

std::optional<proto::TokenFrame> TokenStream::push(int32_t token) {
  if (finished_ || stop_.stopped()) return std::nullopt;
  pending_.push_back(token);
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
  sent_ += f.tokens.size();
  text_.clear();
  pending_.clear();
  return f;
}

}  // namespace rz::engine
