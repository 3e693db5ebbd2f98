// One OpenAI API request's response (see openai_exchange.hpp).
#include "net/openai_exchange.hpp"

#include <charconv>

#include "proto/json_writer.hpp"

namespace rz::net {

OpenAiExchange::OpenAiExchange(proto::OpenAiRequest req, proto::ResponseMeta meta)
    : req_(std::move(req)),
      meta_(std::move(meta)),
      prompts_(req_.kind == proto::ApiKind::chat ? std::size_t{1} : req_.prompts.size()) {
  meta_.kind = req_.kind;
  choices_.resize(prompts_.size() * static_cast<std::size_t>(req_.n));
}

int OpenAiExchange::total() const { return static_cast<int>(choices_.size()); }

int OpenAiExchange::choice_of(std::string_view id, const std::optional<int>& choice) const {
  const int p = prompt_of(id);
  const int c = choice.value_or(0);
  return p >= 0 && c >= 0 && c < req_.n ? p * req_.n + c : -1;
}

int OpenAiExchange::prompt_of(std::string_view id) const {
  int p = -1;
  const char* end = id.data() + id.size();
  const auto [at, ec] = std::from_chars(id.data(), end, p);
  return ec == std::errc{} && at == end && p >= 0 && p < static_cast<int>(prompts_.size()) ? p : -1;
}

void OpenAiExchange::start_stream(Output& out) {
  if (head_sent_) return;
  head_sent_ = true;
  out.status = 200;
  out.content_type = "text/event-stream";
  out.event_stream = true;
  if (req_.kind != proto::ApiKind::chat) return;
  for (int i = 0; i < total(); ++i)
    proto::append_sse(
        out.body, proto::chunk_json(meta_, i, "assistant", "", std::nullopt, req_.include_usage));
}

void OpenAiExchange::finish(Output& out) {
  ended_ = true;
  out.end = true;
  usage_.prompt_tokens = usage_.cached_tokens = 0;
  for (const PromptUsage& p : prompts_) {
    usage_.prompt_tokens += p.prompt_tokens;
    usage_.cached_tokens += p.cached_tokens;
  }
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
  if (++done_ == total()) finish(out);
}

OpenAiExchange::Output OpenAiExchange::on_frame(const proto::ServerFrame& f) {
  Output out;
  if (ended_) return out;
  if (const auto* e = std::get_if<proto::ErrorFrame>(&f)) {
    const int i = choice_of(e->id ? std::string_view(*e->id) : std::string_view(), e->choice);
    if (e->code != proto::ErrorCode::timeout || !e->choice || i < 0) return on_error(*e);
    if (choices_[i].finish_reason) return out;
    if (++timed_out_empty_ == total() && !head_sent_) return on_error(*e);
    end_choice(out, i, std::string(proto::to_string(proto::FinishReason::timeout)));
    return out;
  }
  if (const auto* t = std::get_if<proto::TokenFrame>(&f)) {
    const int i = choice_of(t->id, t->choice);
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
    const int i = choice_of(d->id, d->choice);
    if (i < 0 || choices_[i].finish_reason) return out;
    // Each prompt is counted once, as its choice 0 saw it (a later choice may find it cached).
    PromptUsage& p = prompts_[static_cast<std::size_t>(i / req_.n)];
    if (!p.set || i % req_.n == 0) {
      p.prompt_tokens = d->usage.prompt_tokens;
      p.cached_tokens = d->usage.cached_tokens;
      p.set = true;
    }
    usage_.completion_tokens += d->usage.completion_tokens;
    end_choice(out, i, std::string(proto::to_string(d->finish_reason)));
    return out;
  }
  return out;  // pong: not used here
}

}  // namespace rz::net
