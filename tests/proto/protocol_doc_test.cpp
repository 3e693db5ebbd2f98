// Keeps docs/protocol.md honest: every JSON example in it is read back. Client examples must parse
// without error; server examples must be exactly what proto/serialize.cpp writes for the same
// fields (key order, number format, escaping).
#include <gtest/gtest.h>
#include <simdjson.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "proto/parse.hpp"
#include "proto/serialize.hpp"

namespace rz::proto {
namespace {

// The contents of the ```json blocks of a Markdown file.
std::vector<std::string> json_blocks(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> blocks;
  std::string line, cur;
  bool inside = false;
  while (std::getline(in, line)) {
    if (!inside && line == "```json") {
      inside = true;
      cur.clear();
      continue;
    }
    if (inside && line == "```") {
      inside = false;
      blocks.push_back(cur);
      continue;
    }
    if (inside) cur += line + "\n";
  }
  return blocks;
}

std::string str(simdjson::dom::element e, const char* key) {
  return std::string(e[key].get_string().value());
}

// Rebuilds the server frame from its JSON with simdjson and writes it again with our writer.
std::string rewrite_server_frame(simdjson::dom::element e) {
  std::string type = str(e, "type");
  if (type == "token") {
    TokenFrame f{
        str(e, "id"), str(e, "text"), {}, e["index"].get_uint64().value(), std::nullopt, {}};
    simdjson::dom::array tokens;
    EXPECT_EQ(e["tokens"].get_array().get(tokens), simdjson::SUCCESS);
    for (simdjson::dom::element t : tokens) f.tokens.push_back(int32_t(t.get_int64().value()));
    int64_t choice = 0;
    if (!e["choice"].get_int64().get(choice)) f.choice = int(choice);
    simdjson::dom::array lps;
    if (!e["logprobs"].get_array().get(lps)) {
      for (simdjson::dom::element l : lps) {
        TokenLogprob t{int32_t(l["token"].get_int64().value()),
                       str(l, "text"),
                       float(l["logprob"].get_double().value()),
                       {}};
        simdjson::dom::array top;
        EXPECT_EQ(l["top_logprobs"].get_array().get(top), simdjson::SUCCESS);
        for (simdjson::dom::element a : top)
          t.top.push_back({int32_t(a["token"].get_int64().value()), str(a, "text"),
                           float(a["logprob"].get_double().value())});
        f.logprobs.push_back(std::move(t));
      }
    }
    return to_json(f);
  }
  if (type == "done") {
    DoneFrame f;
    f.id = str(e, "id");
    std::string r = str(e, "finish_reason");
    f.finish_reason = r == "stop"     ? FinishReason::stop
                      : r == "length" ? FinishReason::length
                                      : FinishReason::cancelled;
    f.usage.prompt_tokens = e["usage"]["prompt_tokens"].get_uint64().value();
    f.usage.completion_tokens = e["usage"]["completion_tokens"].get_uint64().value();
    f.usage.cached_tokens = e["usage"]["cached_tokens"].get_uint64().value();
    if (!e["timings"]["ttft_ms"].is_null())
      f.timings.ttft_ms = e["timings"]["ttft_ms"].get_double().value();
    f.timings.total_ms = e["timings"]["total_ms"].get_double().value();
    return to_json(f);
  }
  if (type == "error") {
    ErrorFrame f;
    auto code = error_code_from_string(str(e, "code"));
    EXPECT_TRUE(code.has_value()) << str(e, "code");
    f.code = code.value_or(ErrorCode::internal);
    f.message = str(e, "message");
    std::string_view id;
    if (!e["id"].get_string().get(id)) f.id = std::string(id);
    return to_json(f);
  }
  if (type == "pong") return to_json(PongFrame{});
  ADD_FAILURE() << "unexpected server frame type " << type;
  return "";
}

TEST(ProtoDoc, EveryJsonExampleIsAccurate) {
  const std::string path = RZ_SOURCE_DIR "/docs/protocol.md";
  std::vector<std::string> blocks = json_blocks(path);
  ASSERT_GE(blocks.size(), 8u) << path;
  int client = 0, server = 0;
  for (const std::string& block : blocks) {
    simdjson::dom::parser parser;
    simdjson::padded_string padded(block);
    simdjson::dom::document_stream docs;
    ASSERT_EQ(parser.parse_many(padded).get(docs), simdjson::SUCCESS) << block;
    for (auto it = docs.begin(); it != docs.end(); ++it) {
      simdjson::dom::element e;
      ASSERT_EQ((*it).get(e), simdjson::SUCCESS) << block;
      std::string text(it.source());
      while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
        text.pop_back();
      std::string type = str(e, "type");
      if (type == "generate" || type == "cancel" || type == "ping") {
        ++client;
        ParseResult r = parse_client_message(text);
        EXPECT_FALSE(is_error(r)) << text << "\n-> " << std::get<ProtocolError>(r).message;
      } else {
        ++server;
        EXPECT_EQ(rewrite_server_frame(e), text);
      }
    }
  }
  EXPECT_GE(client, 4);
  EXPECT_GE(server, 5);
}

}  // namespace
}  // namespace rz::proto
