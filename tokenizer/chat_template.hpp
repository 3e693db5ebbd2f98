// Chat templates: rz recognises the family of a model's tokenizer.chat_template (Jinja) and
// renders it in C++: ChatML, Llama 3, Llama 2, Mistral, Phi-3 at least.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace rz {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

class ChatTemplate {
 public:
  // Recognises the family of a Jinja template. Throws rz::Error("unrecognised chat template ...")
  // when it cannot; the caller then asks for --template NAME.
  static ChatTemplate from_jinja(std::string_view source, std::string bos_token,
                                 std::string eos_token);
  // By family name (see names()). Throws rz::Error for an unknown name, listing the known ones.
  static ChatTemplate from_name(std::string_view name, std::string bos_token,
                                std::string eos_token);
  static std::vector<std::string> names();

  const std::string& name() const { return name_; }
  // The prompt text, to be encoded with special-token parsing on and without adding BOS (the
  // rendered text carries the BOS text where the model's template puts it).
  std::string apply(const std::vector<ChatMessage>& messages,
                    bool add_generation_prompt = true) const;

 private:
  std::string name_;
  std::string bos_, eos_;
  std::string default_system_;  // system prompt the template inserts when none is given
  int variant_ = 0;             // which template of the family (see chat_template.cpp)
  std::string preamble_;        // fixed text a template puts before the system prompt
};

}  // namespace rz
