// libFuzzer target: the WebSocket protocol's parser and validator (proto/parse.cpp) on whole
// frames, and the OpenAI API's request parser (proto/openai_parse.cpp) on whole bodies, both
// kinds. Besides "no crash, no leak, no undefined behaviour" it checks two properties:
//   - a frame that parses as a request serializes (proto/serialize.cpp) to a frame that parses
//     again, and serializing that gives the same bytes (the writer and the parser agree);
//   - an accepted OpenAI request converts to engine requests within the protocol's limits, and a
//     refused one has a 4xx/5xx status and a message.
// Built with -DRZ_FUZZ=ON (clang; scripts/fuzz.sh); seeds in tests/fuzz/corpus/protocol/.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>

#include "proto/openai.hpp"
#include "proto/parse.hpp"
#include "proto/serialize.hpp"

namespace {

using namespace rz::proto;

[[noreturn]] void broken(const char* what, std::string_view a, std::string_view b = {}) {
  std::fprintf(stderr, "protocol_fuzz: %s\n  first:  %.*s\n  second: %.*s\n", what,
               static_cast<int>(a.size()), a.data(), static_cast<int>(b.size()), b.data());
  std::abort();
}

// The request of a successful parse, serialized; nothing for an error.
std::optional<std::string> serialized(const ParseResult& r) {
  return std::visit(
      [](const auto& v) -> std::optional<std::string> {
        if constexpr (std::is_same_v<std::decay_t<decltype(v)>, ProtocolError>)
          return std::nullopt;
        else
          return to_json(ClientMessage(v));
      },
      r);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  ProtocolLimits limits;
  limits.max_frame_bytes = 64 << 10;
  if (const std::optional<std::string> once = serialized(parse_client_message(text, limits))) {
    ProtocolLimits roomy = limits;  // escaping may lengthen the frame; the other bounds stay
    roomy.max_frame_bytes = 1u << 30;
    const std::optional<std::string> twice = serialized(parse_client_message(*once, roomy));
    if (!twice) broken("a serialized request does not parse", text, *once);
    if (*twice != *once) broken("serialize(parse(serialize(x))) != serialize(x)", *once, *twice);
  }
  for (ApiKind kind : {ApiKind::chat, ApiKind::completion}) {
    const OpenAiParse p = parse_openai_request(kind, text, limits);
    if (const auto* req = std::get_if<OpenAiRequest>(&p)) {
      for (const GenerateRequest& g : to_generate_requests(*req, limits)) {
        if (g.max_tokens < 1 || g.max_tokens > limits.max_tokens)
          broken("an accepted OpenAI request has max_tokens out of range", text);
        if (g.n < 1 || g.n > kMaxChoices)
          broken("an accepted OpenAI request has n out of range", text);
        if (g.stop.size() > limits.max_stop) broken("too many stop strings accepted", text);
      }
    } else {
      const ApiError& e = std::get<ApiError>(p);
      if (e.status < 400 || e.status > 599 || e.message.empty())
        broken("an OpenAI parse error without a 4xx/5xx status or a message", text);
    }
  }
  return 0;
}
