// JSON writers for every protocol frame (see serialize.hpp for the key order).
#include "proto/serialize.hpp"

#include "proto/json_writer.hpp"

namespace rz::proto {
namespace {

void key(std::string& out, std::string_view k) {  // ,"k":  (the caller writes the opening brace)
  if (out.back() != '{') out.push_back(',');
  out.push_back('"');
  out.append(k);
  out.append("\":");
}

void key_string(std::string& out, std::string_view k, std::string_view v) {
  key(out, k);
  append_json_string(out, v);
}

void key_choice(std::string& out, const std::optional<int>& choice) {
  if (!choice) return;
  key(out, "choice");
  append_int(out, *choice);
}

// {"token":id,"text":"...","bytes":[...],"logprob":x} without the closing brace.
template <class T>
void open_logprob(std::string& out, const T& t) {
  out.append("{\"token\":");
  append_int(out, t.token);
  key_string(out, "text", t.text);
  key(out, "bytes");
  append_byte_array(out, t.text);
  key(out, "logprob");
  append_logprob(out, t.logprob);
}

}  // namespace

void append_json(std::string& out, const TokenFrame& f) {
  out.append("{\"type\":\"token\"");
  key_string(out, "id", f.id);
  key_choice(out, f.choice);
  key_string(out, "text", f.text);
  key(out, "tokens");
  out.push_back('[');
  for (std::size_t i = 0; i < f.tokens.size(); ++i) {
    if (i) out.push_back(',');
    append_int(out, f.tokens[i]);
  }
  out.push_back(']');
  key(out, "index");
  append_uint(out, f.index);
  if (!f.logprobs.empty()) {
    key(out, "logprobs");
    out.push_back('[');
    for (std::size_t i = 0; i < f.logprobs.size(); ++i) {
      if (i) out.push_back(',');
      open_logprob(out, f.logprobs[i]);
      key(out, "top_logprobs");
      out.push_back('[');
      for (std::size_t j = 0; j < f.logprobs[i].top.size(); ++j) {
        if (j) out.push_back(',');
        open_logprob(out, f.logprobs[i].top[j]);
        out.push_back('}');
      }
      out.append("]}");
    }
    out.push_back(']');
  }
  out.push_back('}');
}

void append_json(std::string& out, const DoneFrame& f) {
  out.append("{\"type\":\"done\"");
  key_string(out, "id", f.id);
  key_choice(out, f.choice);
  key_string(out, "finish_reason", to_string(f.finish_reason));
  key(out, "usage");
  out.append("{\"prompt_tokens\":");
  append_uint(out, f.usage.prompt_tokens);
  out.append(",\"completion_tokens\":");
  append_uint(out, f.usage.completion_tokens);
  out.append(",\"cached_tokens\":");
  append_uint(out, f.usage.cached_tokens);
  out.push_back('}');
  key(out, "timings");
  out.append("{\"ttft_ms\":");
  if (f.timings.ttft_ms)
    append_ms(out, *f.timings.ttft_ms);
  else
    out.append("null");
  out.append(",\"total_ms\":");
  append_ms(out, f.timings.total_ms);
  out.append("}}");
}

void append_json(std::string& out, const ErrorFrame& f) {
  out.append("{\"type\":\"error\"");
  if (f.id) key_string(out, "id", *f.id);
  key_choice(out, f.choice);
  key_string(out, "code", to_string(f.code));
  key_string(out, "message", f.message);
  out.push_back('}');
}

void append_json(std::string& out, const PongFrame&) { out.append("{\"type\":\"pong\"}"); }

void append_json(std::string& out, const ServerFrame& f) {
  std::visit([&](const auto& v) { append_json(out, v); }, f);
}

void append_json(std::string& out, const GenerateRequest& r) {
  out.append("{\"type\":\"generate\"");
  key_string(out, "id", r.id);
  if (r.prompt) {
    key_string(out, "prompt", *r.prompt);
  } else {
    key(out, "messages");
    out.push_back('[');
    for (std::size_t i = 0; i < r.messages.size(); ++i) {
      if (i) out.push_back(',');
      out.push_back('{');
      key_string(out, "role", r.messages[i].role);
      key_string(out, "content", r.messages[i].content);
      out.push_back('}');
    }
    out.push_back(']');
  }
  key(out, "max_tokens");
  append_int(out, r.max_tokens);
  const Sampling& s = r.sampling;
  key(out, "temperature");
  append_float(out, s.temperature);
  key(out, "top_k");
  append_int(out, s.top_k);
  key(out, "top_p");
  append_float(out, s.top_p);
  key(out, "min_p");
  append_float(out, s.min_p);
  key(out, "repetition_penalty");
  append_float(out, s.repetition_penalty);
  if (s.seed) {
    key(out, "seed");
    append_uint(out, *s.seed);
  }
  if (s.presence_penalty != 0.0f) {
    key(out, "presence_penalty");
    append_float(out, s.presence_penalty);
  }
  if (s.frequency_penalty != 0.0f) {
    key(out, "frequency_penalty");
    append_float(out, s.frequency_penalty);
  }
  if (r.n != 1) {
    key(out, "n");
    append_int(out, r.n);
  }
  if (r.logprobs >= 0) {
    key(out, "logprobs");
    append_int(out, r.logprobs);
  }
  if (r.timeout_ms > 0) {
    key(out, "timeout_ms");
    append_uint(out, r.timeout_ms);
  }
  key(out, "stop");
  out.push_back('[');
  for (std::size_t i = 0; i < r.stop.size(); ++i) {
    if (i) out.push_back(',');
    append_json_string(out, r.stop[i]);
  }
  out.push_back(']');
  key(out, "ignore_eos");
  out.append(r.ignore_eos ? "true" : "false");
  out.push_back('}');
}

void append_json(std::string& out, const CancelRequest& r) {
  out.append("{\"type\":\"cancel\"");
  key_string(out, "id", r.id);
  out.push_back('}');
}

void append_json(std::string& out, const PingRequest&) { out.append("{\"type\":\"ping\"}"); }

void append_json(std::string& out, const ClientMessage& m) {
  std::visit([&](const auto& v) { append_json(out, v); }, m);
}

}  // namespace rz::proto
