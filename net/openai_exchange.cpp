// One OpenAI API request's response (see openai_exchange.hpp).
#include "net/openai_exchange.hpp"

#include "proto/json_writer.hpp"

namespace rz::net {

OpenAiExchange::OpenAiExchange(proto::OpenAiRequest req, proto::ResponseMeta meta)
    : req_(std::move(req)), meta_(std::move(meta)), choices_(static_cast<std::size_t>(req_.n)) {
  meta_.kind = req_.kind;
}

int OpenAiExchange::choice_of(const std::optional<int>& choice) const {
  const int i = choice.value_or(0);
  return i >= 0 && i < static_cast<int>(choices_.size()) ? i : -1;
}

void OpenAiExchange::start_stream(Output& out) {
  if (head_sent_) return;
  head_sent_ = true;
  out.status = 200;
  out.content_type = "text/event-stream";
  out.event_stream = true;
  if (req_.kind != proto::ApiKind::chat) return;
  for (int i = 0; i < req_.n; ++i)
    proto::append_sse(
        out.body, proto::chunk_json(meta_, i, "assistant", "", std::nullopt, req_.include_usage));
}

void OpenAiExchange::finish(Output& out) {
  ended_ = true;
  out.end = true;
  if (req_.stream) {
    if (req_.include_usage) proto::append_sse(out.body, proto::usage_chunk_json(meta_, usage_));
    out.body.append(proto::kSseDone);
    return;
  }
  std::vector<proto::ChoiceResult> results;
  for (Choice& c : choices_) {
    results.push_back({std::move(c.text), c.finish_reason.value_or("stop"), std::nullopt});
    if (req_.logprobs) results.back().logprobs = std::move(c.logprobs);
  }
  out.status = 200;
  out.content_type = "application/json";
  out.body = proto::response_json(meta_, results, usage_);
}

OpenAiExchange::Output OpenAiExchange::on_error(const proto::ErrorFrame& e) {
  Output out;
  ended_ = true;
  out.end = true;
  const proto::ApiError a = proto::api_error_of(e);
  if (!head_sent_) {
    out.status = a.status;
    out.content_type = "application/json";
    out.body = proto::error_json(a);
    return out;
  }
  proto::append_sse(out.body, proto::error_json(a));
  out.body.append(proto::kSseDone);
  return out;
}

void OpenAiExchange::end_choice(Output& out, int i, std::string reason) {
  if (req_.stream) {
    start_stream(out);
    proto::append_sse(out.body, proto::chunk_json(meta_, i, std::nullopt,
                                                  req_.kind == proto::ApiKind::chat
                                                      ? std::nullopt
                                                      : std::optional<std::string_view>(""),
                                                  reason, req_.include_usage));
  }
  choices_[i].finish_reason = std::move(reason);
  if (++done_ == req_.n) finish(out);
}

OpenAiExchange::Output OpenAiExchange::on_frame(const proto::ServerFrame& f) {
  Output out;
  if (ended_) return out;
  if (const auto* e = std::get_if<proto::ErrorFrame>(&f)) {
    const int i = choice_of(e->choice);
    if (e->code != proto::ErrorCode::timeout || !e->choice || i < 0) return on_error(*e);
    if (choices_[i].finish_reason) return out;
    if (++timed_out_empty_ == req_.n && !head_sent_) return on_error(*e);
    end_choice(out, i, std::string(proto::to_string(proto::FinishReason::timeout)));
    return out;
  }
  if (const auto* t = std::get_if<proto::TokenFrame>(&f)) {
    const int i = choice_of(t->choice);
    if (i < 0 || choices_[i].finish_reason) return out;
    Choice& c = choices_[i];
    if (!req_.stream) {
      c.text += t->text;
      c.logprobs.insert(c.logprobs.end(), t->logprobs.begin(), t->logprobs.end());
      return out;
    }
    start_stream(out);
    if (!t->text.empty() || !t->logprobs.empty()) {
      const proto::LogprobsPart lp{req_.logprobs ? &t->logprobs : nullptr, c.text_offset};
      proto::append_sse(out.body, proto::chunk_json(meta_, i, std::nullopt, t->text, std::nullopt,
                                                    req_.include_usage, lp));
      for (const proto::TokenLogprob& l : t->logprobs)
        c.text_offset += proto::utf8_char_count(l.text);
    }
    return out;
  }
  if (const auto* d = std::get_if<proto::DoneFrame>(&f)) {
    const int i = choice_of(d->choice);
    if (i < 0 || choices_[i].finish_reason) return out;
    if (!usage_set_ || i == 0) {  // the prompt is counted once, as choice 0 saw it
      usage_.prompt_tokens = d->usage.prompt_tokens;
      usage_.cached_tokens = d->usage.cached_tokens;
      usage_set_ = true;
    }
    usage_.completion_tokens += d->usage.completion_tokens;
    end_choice(out, i, std::string(proto::to_string(d->finish_reason)));
    return out;
  }
  return out;  // pong: not used here
}

}  // namespace rz::net
