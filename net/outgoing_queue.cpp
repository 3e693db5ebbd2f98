// The bounded, coalescing queue of typed frames of one connection (see outgoing_queue.hpp).
#include "net/outgoing_queue.hpp"

#include <iterator>
#include <string>
#include <type_traits>
#include <variant>

namespace rz::net {

std::size_t estimated_bytes(const proto::ServerFrame& f) {
  // Fixed keys and punctuation, plus the variable parts (a token id is at most 11 characters
  // with its comma; text escapes can grow a byte up to 6, but model text is mostly plain).
  return std::visit(
      [](const auto& x) -> std::size_t {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, proto::TokenFrame>) {
          // A log-probability entry writes its text twice (as text and as a list of byte
          // values, up to 4 characters a byte) and a number, each alternative the same.
          std::size_t lp = 0;
          for (const proto::TokenLogprob& l : x.logprobs) {
            lp += 80 + 5 * l.text.size();
            for (const proto::TopLogprob& t : l.top) lp += 72 + 5 * t.text.size();
          }
          return 76 + x.id.size() + x.text.size() + 12 * x.tokens.size() + lp;
        }
        else if constexpr (std::is_same_v<T, proto::DoneFrame>)
          return 200 + x.id.size();
        else if constexpr (std::is_same_v<T, proto::ErrorFrame>)
          return 96 + (x.id ? x.id->size() : 0) + x.message.size();
        else
          return 16;
      },
      f);
}

std::string OutgoingQueue::stream_key(const std::string& id, const std::optional<int>& choice) {
  std::string k = id;
  k.push_back('\0');  // ids are JSON strings: a NUL may be in one, so the choice goes last
  k += choice ? std::to_string(*choice) : "-";
  return k;
}

OutgoingQueue::PushResult OutgoingQueue::push(proto::ServerFrame frame) {
  if (auto* tok = std::get_if<proto::TokenFrame>(&frame)) {
    const std::string key = stream_key(tok->id, tok->choice);
    auto it = last_token_.find(key);
    if (it != last_token_.end()) {
      Entry& e = frames_[it->second - front_seq_];
      auto& into = std::get<proto::TokenFrame>(e.frame);
      into.text += tok->text;
      into.tokens.insert(into.tokens.end(), tok->tokens.begin(), tok->tokens.end());
      into.logprobs.insert(into.logprobs.end(), std::make_move_iterator(tok->logprobs.begin()),
                           std::make_move_iterator(tok->logprobs.end()));
      const std::size_t nb = estimated_bytes(e.frame);
      bytes_ = bytes_ - e.bytes + nb;
      e.bytes = nb;
      return {true, over_limit()};
    }
    last_token_[key] = next_seq_;
  } else if (auto* done = std::get_if<proto::DoneFrame>(&frame)) {
    last_token_.erase(stream_key(done->id, done->choice));
  } else if (auto* err = std::get_if<proto::ErrorFrame>(&frame); err && err->id) {
    if (err->choice) {
      last_token_.erase(stream_key(*err->id, err->choice));
    } else {  // the whole request: every choice of it
      const std::string prefix = *err->id + '\0';
      for (auto i = last_token_.begin(); i != last_token_.end();)
        i = i->first.compare(0, prefix.size(), prefix) == 0 ? last_token_.erase(i) : std::next(i);
    }
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
    auto it = last_token_.find(stream_key(tok->id, tok->choice));
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
