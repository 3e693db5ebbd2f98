// libFuzzer target: the chat templates (tokenizer/chat_template.cpp). The input's first byte
// picks a template family (tokenizer/chat_template.hpp: ChatTemplate::names()) or, when it is
// 0xFF, the rest is a Jinja source for from_jinja's recogniser. Otherwise the rest is a
// conversation: messages separated by NUL bytes, each message's first byte picking its role
// (system, user, assistant, or an unknown one), the remaining bytes its content, rendered with
// and without the generation prompt. A template may refuse a conversation (roles out of order,
// an unknown role, no messages) with rz::Error; nothing else may happen.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "formats/common.hpp"
#include "tokenizer/chat_template.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<std::string> names = rz::ChatTemplate::names();
  if (size < 1) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] == 0xFF) {
    try {
      const rz::ChatTemplate t = rz::ChatTemplate::from_jinja(rest, "<s>", "</s>");
      (void)t.apply({{"user", "hi"}}, true);
    } catch (const rz::Error&) {
    }
    return 0;
  }
  const rz::ChatTemplate t =
      rz::ChatTemplate::from_name(names[data[0] % names.size()], "<s>", "</s>");
  static const char* const kRoles[] = {"system", "user", "assistant", "tool"};
  std::vector<rz::ChatMessage> messages;
  std::size_t start = 0;
  while (start <= rest.size()) {
    std::size_t end = rest.find('\0', start);
    if (end == std::string_view::npos) end = rest.size();
    const std::string_view m = rest.substr(start, end - start);
    if (!m.empty())
      messages.push_back({kRoles[static_cast<unsigned char>(m[0]) % 4], std::string(m.substr(1))});
    start = end + 1;
  }
  for (bool prompt : {true, false}) {
    try {
      (void)t.apply(messages, prompt);
    } catch (const rz::Error&) {
    }
  }
  return 0;
}
