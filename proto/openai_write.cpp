// OpenAI response JSON (see openai_write.hpp).
#include "proto/openai_write.hpp"

#include "proto/json_writer.hpp"

namespace rz::proto {
namespace {

void open_object(std::string& out, const ResponseMeta& m, bool chunk) {
  out.append("{\"id\":");
  append_json_string(out, m.id);
  out.append(",\"object\":");
  if (m.kind == ApiKind::chat)
    out.append(chunk ? "\"chat.completion.chunk\"" : "\"chat.completion\"");
  else
    out.append("\"text_completion\"");
  out.append(",\"created\":");
  append_int(out, m.created);
  out.append(",\"model\":");
  append_json_string(out, m.model);
}

void append_string_or_null(std::string& out, std::optional<std::string_view> s) {
  if (s)
    append_json_string(out, *s);
  else
    out.append("null");
}

void append_usage(std::string& out, const ApiUsage& u) {
  out.append("{\"prompt_tokens\":");
  append_uint(out, u.prompt_tokens);
  out.append(",\"completion_tokens\":");
  append_uint(out, u.completion_tokens);
  out.append(",\"total_tokens\":");
  append_uint(out, u.prompt_tokens + u.completion_tokens);
  out.append(",\"prompt_tokens_details\":{\"cached_tokens\":");
  append_uint(out, u.cached_tokens);
  out.append("}}");
}

void append_top_entry(std::string& out, const TopLogprob& t) {
  out.append("{\"token\":");
  append_json_string(out, t.text);
  out.append(",\"logprob\":");
  append_logprob(out, t.logprob);
  out.append(",\"bytes\":");
  append_byte_array(out, t.text);
}

void append_logprobs(std::string& out, ApiKind kind, const LogprobsPart& lp) {
  if (!lp.items) {
    out.append("null");
    return;
  }
  const std::vector<TokenLogprob>& items = *lp.items;
  if (kind == ApiKind::chat) {
    out.append("{\"content\":[");
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (i) out.push_back(',');
      append_top_entry(out, TopLogprob{items[i].token, items[i].text, items[i].logprob});
      out.append(",\"top_logprobs\":[");
      for (std::size_t j = 0; j < items[i].top.size(); ++j) {
        if (j) out.push_back(',');
        append_top_entry(out, items[i].top[j]);
        out.push_back('}');
      }
      out.append("]}");
    }
    out.append("],\"refusal\":null}");
    return;
  }
  out.append("{\"tokens\":[");
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out.push_back(',');
    append_json_string(out, items[i].text);
  }
  out.append("],\"token_logprobs\":[");
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out.push_back(',');
    append_logprob(out, items[i].logprob);
  }
  out.append("],\"top_logprobs\":[");
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out.push_back(',');
    out.push_back('{');
    for (std::size_t j = 0; j < items[i].top.size(); ++j) {
      if (j) out.push_back(',');
      append_json_string(out, items[i].top[j].text);
      out.push_back(':');
      append_logprob(out, items[i].top[j].logprob);
    }
    out.push_back('}');
  }
  out.append("],\"text_offset\":[");
  uint64_t offset = lp.text_offset;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out.push_back(',');
    append_uint(out, offset);
    offset += utf8_char_count(items[i].text);
  }
  out.append("]}");
}

}  // namespace

std::string error_json(const ApiError& e) {
  std::string out = "{\"error\":{\"message\":";
  append_json_string(out, e.message);
  out.append(",\"type\":");
  append_json_string(out, e.type);
  out.append(",\"param\":");
  append_string_or_null(out,
                        e.param.empty() ? std::nullopt : std::optional<std::string_view>(e.param));
  out.append(",\"code\":");
  append_string_or_null(out,
                        e.code.empty() ? std::nullopt : std::optional<std::string_view>(e.code));
  out.append("}}");
  return out;
}

void append_sse(std::string& out, std::string_view json) {
  out.append("data: ");
  out.append(json);
  out.append("\n\n");
}

std::string chunk_json(const ResponseMeta& m, int index, std::optional<std::string_view> role,
                       std::optional<std::string_view> content,
                       std::optional<std::string_view> finish_reason, bool with_usage_null,
                       const LogprobsPart& logprobs) {
  std::string out;
  open_object(out, m, true);
  out.append(",\"choices\":[{\"index\":");
  append_int(out, index);
  if (m.kind == ApiKind::chat) {
    out.append(",\"delta\":{");
    if (role) {
      out.append("\"role\":");
      append_json_string(out, *role);
    }
    if (content) {
      if (role) out.push_back(',');
      out.append("\"content\":");
      append_json_string(out, *content);
    }
    out.push_back('}');
  } else {
    out.append(",\"text\":");
    append_json_string(out, content.value_or(""));
  }
  out.append(",\"logprobs\":");
  append_logprobs(out, m.kind, logprobs);
  out.append(",\"finish_reason\":");
  append_string_or_null(out, finish_reason);
  out.append("}]");
  if (with_usage_null) out.append(",\"usage\":null");
  out.push_back('}');
  return out;
}

std::string usage_chunk_json(const ResponseMeta& m, const ApiUsage& u) {
  std::string out;
  open_object(out, m, true);
  out.append(",\"choices\":[],\"usage\":");
  append_usage(out, u);
  out.push_back('}');
  return out;
}

std::string response_json(const ResponseMeta& m, const std::vector<ChoiceResult>& choices,
                          const ApiUsage& u) {
  std::string out;
  open_object(out, m, false);
  out.append(",\"choices\":[");
  for (std::size_t i = 0; i < choices.size(); ++i) {
    if (i) out.push_back(',');
    out.append("{\"index\":");
    append_uint(out, i);
    if (m.kind == ApiKind::chat) {
      out.append(",\"message\":{\"role\":\"assistant\",\"content\":");
      append_json_string(out, choices[i].text);
      out.push_back('}');
    } else {
      out.append(",\"text\":");
      append_json_string(out, choices[i].text);
    }
    out.append(",\"logprobs\":");
    append_logprobs(out, m.kind,
                    LogprobsPart{choices[i].logprobs ? &*choices[i].logprobs : nullptr, 0});
    out.append(",\"finish_reason\":");
    append_json_string(out, choices[i].finish_reason);
    out.push_back('}');
  }
  out.append("],\"usage\":");
  append_usage(out, u);
  out.push_back('}');
  return out;
}

std::string model_json(std::string_view model, int64_t created) {
  std::string out = "{\"id\":";
  append_json_string(out, model);
  out.append(",\"object\":\"model\",\"created\":");
  append_int(out, created);
  out.append(",\"owned_by\":\"rz\"}");
  return out;
}

std::string models_json(std::string_view model, int64_t created) {
  return "{\"object\":\"list\",\"data\":[" + model_json(model, created) + "]}";
}

}  // namespace rz::proto
