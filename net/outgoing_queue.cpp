// The bounded, coalescing queue of typed frames of one connection (see outgoing_queue.hpp).
#include "net/outgoing_queue.hpp"

#include <type_traits>
#include <variant>

namespace rz::net {

std::size_t estimated_bytes(const proto::ServerFrame& f) {
  // Fixed keys and punctuation, plus the variable parts (a token id is at most 11 characters
  // with its comma; text escapes can grow a byte up to 6, but model text is mostly plain).
  return std::visit(
      [](const auto& x) -> std::size_t {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, proto::TokenFrame>)
          return 64 + x.id.size() + x.text.size() + 12 * x.tokens.size();
        else if constexpr (std::is_same_v<T, proto::DoneFrame>)
          return 200 + x.id.size();
        else if constexpr (std::is_same_v<T, proto::ErrorFrame>)
          return 96 + (x.id ? x.id->size() : 0) + x.message.size();
        else
          return 16;
      },
      f);
}

OutgoingQueue::PushResult OutgoingQueue::push(proto::ServerFrame frame) {
  if (auto* tok = std::get_if<proto::TokenFrame>(&frame)) {
    auto it = last_token_.find(tok->id);
    if (it != last_token_.end()) {
      Entry& e = frames_[it->second - front_seq_];
      auto& into = std::get<proto::TokenFrame>(e.frame);
      into.text += tok->text;
      into.tokens.insert(into.tokens.end(), tok->tokens.begin(), tok->tokens.end());
      const std::size_t nb = estimated_bytes(e.frame);
      bytes_ = bytes_ - e.bytes + nb;
      e.bytes = nb;
      return {true, over_limit()};
    }
    last_token_[tok->id] = next_seq_;
  } else if (auto* done = std::get_if<proto::DoneFrame>(&frame)) {
    last_token_.erase(done->id);
  } else if (auto* err = std::get_if<proto::ErrorFrame>(&frame); err && err->id) {
    last_token_.erase(*err->id);
  }
  const std::size_t nb = estimated_bytes(frame);
  frames_.push_back(Entry{std::move(frame), nb, next_seq_++});
  bytes_ += nb;
  return {false, over_limit()};
}

std::optional<proto::ServerFrame> OutgoingQueue::pop() {
  if (frames_.empty()) return std::nullopt;
  Entry e = std::move(frames_.front());
  frames_.pop_front();
  ++front_seq_;
  bytes_ -= e.bytes;
  if (auto* tok = std::get_if<proto::TokenFrame>(&e.frame)) {
    auto it = last_token_.find(tok->id);
    if (it != last_token_.end() && it->second == e.seq) last_token_.erase(it);
  }
  return std::move(e.frame);
}

void OutgoingQueue::clear() {
  frames_.clear();
  last_token_.clear();
  bytes_ = 0;
  front_seq_ = next_seq_;
}

}  // namespace rz::net
