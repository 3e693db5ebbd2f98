// Chat templates in C++: recognises the family (and the variant within it) of a model's Jinja
// tokenizer.chat_template and renders conversations the way transformers renders that template
// (jinja2 with trim_blocks/lstrip_blocks). Sits between the request (messages) and the tokenizer
// (the prompt text is encoded with special-token parsing on).
//
// Families and the variants told apart (golden tests: tests/golden/chat_templates/*.jinja):
//   chatml   <|im_start|>role\ncontent<|im_end|>\n ... ; a default system prompt the template
//            writes when the first message is not a system one is read from the template text
//            (SmolLM2, Qwen2/2.5); content is not trimmed.
//   llama3   Llama 3: BOS, then <|start_header_id|>role<|end_header_id|>\n\n content|trim
//            <|eot_id|>. Llama 3.1: a system block is always written, starting with
//            "Cutting Knowledge Date: ...\nToday Date: ...\n\n" (both read from the template);
//            Llama 3.2 templates that call strftime_now get today's date, as transformers does.
//   llama2   <s>[INST] <<SYS>>\nsys\n<</SYS>>\n\nuser [/INST] assistant </s> ... (strip()).
//   mistral  v1 (Mistral-7B-Instruct-v0.1, Mixtral-8x7B-Instruct-v0.1): "[INST] u [/INST]a</s>",
//            no system role; v3 (Mistral-7B-Instruct-v0.3): "[INST] u[/INST] a</s>", the system
//            prompt goes before the LAST user message; v7 (Mistral Small 2501, "Tekken"):
//            "[SYSTEM_PROMPT]s[/SYSTEM_PROMPT][INST]u[/INST]a</s>". --template mistral means v3
//            (the one with a system prompt and the most used 7B); mistral-v1/-v3/-v7 pick one.
//   phi3     Phi-3-mini (2024-05) / Phi-3.5: <|role|>\ncontent<|end|>\n, then <|assistant|>\n or
//            EOS; Phi-3.5 drops an empty system message; the first Phi-3-mini template (2024-04)
//            ignores system messages and add_generation_prompt.
//   gemma    Gemma 3: BOS, <start_of_turn>role\ncontent|trim<end_of_turn>\n with "assistant"
//            written "model"; a first system message goes, untrimmed plus "\n\n", in front of
//            the first turn's content; the turns after it must alternate user/assistant.
// Templates outside these shapes (tool calls, message content lists) are not interpreted: a
// template without a known family marker is an rz::Error asking for --template NAME. Roles the
// templates raise_exception() on (alternation, unsupported roles) throw rz::Error.
#include "tokenizer/chat_template.hpp"

#include <array>
#include <cstdint>
#include <ctime>

#include "formats/common.hpp"

namespace rz {
namespace {

enum Variant : int {
  kChatml = 0,
  kLlama3 = 10,
  kLlama31 = 11,
  kLlama32 = 12,
  kLlama2 = 20,
  kMistralV1 = 30,         // "... [/INST]" + content + eos + ' '  (Mistral-7B-Instruct-v0.1)
  kMistralV1NoSpace = 31,  // same without the trailing space     (Mixtral-8x7B-Instruct-v0.1)
  kMistralV3 = 32,
  kMistralV7 = 33,
  kPhi3 = 40,
  kPhi35 = 41,
  kPhi3First = 42,
  kPhi3FirstNoBos = 43,
  kGemma = 50,
};

const std::array<const char*, 6> kFamilies = {"chatml",  "llama3", "llama2",
                                              "mistral", "phi3",   "gemma"};

bool contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

// Decodes one UTF-8 code point starting at s[i]; returns its length (1 for a malformed byte).
size_t utf8_at(std::string_view s, size_t i, uint32_t& cp) {
  auto b = static_cast<unsigned char>(s[i]);
  size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 1;
  if (i + n > s.size()) n = 1;
  if (n == 1) {
    cp = b;
    return 1;
  }
  cp = b & (0x7f >> n);
  for (size_t k = 1; k < n; ++k) {
    auto c = static_cast<unsigned char>(s[i + k]);
    if ((c & 0xc0) != 0x80) {
      cp = b;
      return 1;
    }
    cp = (cp << 6) | (c & 0x3f);
  }
  return n;
}

// Python's str.isspace(), which str.strip() and Jinja's trim filter use.
bool py_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
         c == 0x205f || c == 0x3000;
}

// Python's str.strip() without arguments, on UTF-8 text.
std::string py_strip(std::string_view s) {
  size_t b = 0;
  while (b < s.size()) {
    uint32_t cp;
    size_t n = utf8_at(s, b, cp);
    if (!py_space(cp)) break;
    b += n;
  }
  size_t e = s.size();
  while (e > b) {
    size_t start = e - 1;  // back up to the lead byte of the last code point
    while (start > b && (static_cast<unsigned char>(s[start]) & 0xc0) == 0x80 && e - start < 4)
      --start;
    uint32_t cp;
    size_t n = utf8_at(s, start, cp);
    if (start + n != e) {
      start = e - 1;
      cp = static_cast<unsigned char>(s[start]);
    }
    if (!py_space(cp)) break;
    e = start;
  }
  return std::string(s.substr(b, e - b));
}

// Reads Jinja string-literal text from src[pos] until `end` appears; escapes (\n, \', ...) are
// decoded. Returns false when the literal closes (an unescaped quote) or the text ends first.
bool read_literal_until(std::string_view src, size_t pos, std::string_view end, std::string& out) {
  out.clear();
  while (pos < src.size()) {
    if (src.substr(pos).starts_with(end)) return true;
    char c = src[pos];
    if (c == '\'' || c == '"') return false;
    if (c == '\\' && pos + 1 < src.size()) {
      char e = src[pos + 1];
      out += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
      pos += 2;
      continue;
    }
    out += c;
    ++pos;
  }
  return false;
}

// The ChatML default system prompt: a literal "<|im_start|>system\nTEXT<|im_end|>" in the
// template (the newline written as a Jinja escape or as a real newline).
std::string chatml_default_system(std::string_view src) {
  const std::string_view head = "<|im_start|>system";
  for (size_t at = src.find(head); at != std::string_view::npos; at = src.find(head, at + 1)) {
    size_t p = at + head.size();
    if (src.substr(p).starts_with("\\n"))
      p += 2;
    else if (src.substr(p).starts_with("\n"))
      p += 1;
    else
      continue;
    std::string text;
    if (read_literal_until(src, p, "<|im_end|>", text) && !text.empty()) return text;
  }
  return {};
}

// The text of the first string literal that follows `key` (e.g. `date_string = "26 Jul 2024"`).
std::string literal_after(std::string_view src, std::string_view key) {
  size_t at = src.find(key);
  if (at == std::string_view::npos) return {};
  size_t q = src.find_first_of("'\"", at + key.size());
  if (q == std::string_view::npos) return {};
  size_t e = src.find(src[q], q + 1);
  if (e == std::string_view::npos) return {};
  return std::string(src.substr(q + 1, e - q - 1));
}

// The template with every double quote turned into a single quote, so that fragments can be
// matched whichever quotes the template's author used.
std::string single_quoted(std::string_view src) {
  std::string s(src);
  for (char& c : s)
    if (c == '"') c = '\'';
  return s;
}

std::string today_dd_mon_yyyy() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%d %b %Y", &tm);
  return buf;
}

std::string known_names() {
  std::string s;
  for (const char* f : kFamilies) s += (s.empty() ? "" : "|") + std::string(f);
  return s;
}

Error unrecognised(const std::string& why) {
  return Error("unrecognised chat template (" + why + "); choose a family with --template " +
               known_names());
}

}  // namespace

std::vector<std::string> ChatTemplate::names() {
  return std::vector<std::string>(kFamilies.begin(), kFamilies.end());
}

ChatTemplate ChatTemplate::from_name(std::string_view name, std::string bos_token,
                                     std::string eos_token) {
  ChatTemplate t;
  t.bos_ = std::move(bos_token);
  t.eos_ = std::move(eos_token);
  if (name == "chatml") {
    t.variant_ = kChatml;
  } else if (name == "llama3") {
    t.variant_ = kLlama3;
  } else if (name == "llama2") {
    t.variant_ = kLlama2;
  } else if (name == "mistral" || name == "mistral-v3") {
    t.variant_ = kMistralV3;
  } else if (name == "mistral-v1") {
    t.variant_ = kMistralV1;
  } else if (name == "mistral-v7") {
    t.variant_ = kMistralV7;
  } else if (name == "phi3") {
    t.variant_ = kPhi3;
  } else if (name == "gemma") {
    t.variant_ = kGemma;
  } else {
    throw Error("unknown chat template '" + std::string(name) + "'; known: " + known_names() +
                " (and mistral-v1, mistral-v3, mistral-v7)");
  }
  std::string n(name);
  t.name_ = n.starts_with("mistral") ? "mistral" : n;
  return t;
}

ChatTemplate ChatTemplate::from_jinja(std::string_view source, std::string bos_token,
                                      std::string eos_token) {
  ChatTemplate t;
  t.bos_ = std::move(bos_token);
  t.eos_ = std::move(eos_token);
  const std::string sq = single_quoted(source);
  if (contains(source, "<|im_start|>")) {
    t.name_ = "chatml";
    t.variant_ = kChatml;
    t.default_system_ = chatml_default_system(source);
  } else if (contains(source, "<|start_header_id|>")) {
    t.name_ = "llama3";
    t.variant_ = kLlama3;
    if (contains(source, "Cutting Knowledge Date:")) {
      std::string knowledge;
      size_t at = source.find("Cutting Knowledge Date:");
      size_t p = at + std::string_view("Cutting Knowledge Date:").size();
      while (p < source.size() && source[p] == ' ') ++p;
      while (p < source.size() && source[p] != '\\' && source[p] != '\n' && source[p] != '"' &&
             source[p] != '\'')
        knowledge += source[p++];
      t.preamble_ = "Cutting Knowledge Date: " + knowledge + "\n";
      if (contains(source, "strftime_now")) {
        t.variant_ = kLlama32;  // "Today Date: <today>\n\n" is added when rendering
      } else {
        std::string date = literal_after(source, "date_string =");
        if (date.empty()) throw unrecognised("Llama 3.1-style template without a date_string");
        t.variant_ = kLlama31;
        t.preamble_ += "Today Date: " + date + "\n\n";
      }
    }
  } else if (contains(source, "[INST]")) {
    if (contains(source, "<<SYS>>")) {
      if (!contains(sq, "'<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n'") ||
          !contains(sq, "'[INST] ' + content.strip() + ' [/INST]'"))
        throw unrecognised("a Llama 2-like template of an unknown shape");
      t.name_ = "llama2";
      t.variant_ = kLlama2;
    } else {
      t.name_ = "mistral";
      if (contains(sq, "'[INST]' + message['content'] + '[/INST]'") &&
          contains(source, "[SYSTEM_PROMPT]")) {
        if (contains(source, "default_system_message"))
          throw unrecognised("Mistral v7 template with a built-in dated system prompt");
        t.variant_ = kMistralV7;
      } else if (contains(sq, "'[INST] ' + message['content'] + '[/INST]'")) {
        t.variant_ = kMistralV3;
      } else if (contains(sq, "'[INST] ' + message['content'] + ' [/INST]'") &&
                 !contains(source, "system_message")) {
        t.variant_ = contains(sq, "eos_token + ' '") ? kMistralV1 : kMistralV1NoSpace;
      } else {
        throw unrecognised("a Mistral-like [INST] template of an unknown shape");
      }
    }
  } else if (contains(source, "<|user|>") && contains(source, "<|assistant|>") &&
             contains(source, "<|end|>")) {
    t.name_ = "phi3";
    if (!contains(source, "add_generation_prompt")) {
      t.variant_ = contains(source, "bos_token") ? kPhi3First : kPhi3FirstNoBos;
    } else if (contains(sq, "message['role'] == 'system' and message['content']")) {
      t.variant_ = kPhi35;
    } else {
      t.variant_ = kPhi3;
    }
  } else if (contains(source, "<start_of_turn>")) {
    if (!contains(sq, "'<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first"))
      throw unrecognised("a Gemma-like <start_of_turn> template of an unknown shape");
    t.name_ = "gemma";
    t.variant_ = kGemma;
  } else {
    throw unrecognised(
        "no <|im_start|>, <|start_header_id|>, [INST], <|user|> or <start_of_turn> markers");
  }
  return t;
}

std::string ChatTemplate::apply(const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt) const {
  if (messages.empty()) throw Error("chat template " + name_ + ": no messages");
  auto fail = [&](const std::string& why) { return Error("chat template " + name_ + ": " + why); };
  const auto alternation = [&](const ChatMessage& m, size_t i) {
    if ((m.role == "user") != (i % 2 == 0))
      throw fail("conversation roles must alternate user/assistant/user/assistant/...");
  };
  std::string out;
  switch (variant_) {
    case kChatml: {
      for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (i == 0 && m.role != "system" && !default_system_.empty())
          out += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
        out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      }
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      break;
    }
    case kLlama3:
    case kLlama31:
    case kLlama32: {
      size_t first = 0;
      if (variant_ != kLlama3) {
        std::string system;
        if (messages[0].role == "system") {
          system = py_strip(messages[0].content);
          first = 1;
        }
        out += bos_ + "<|start_header_id|>system<|end_header_id|>\n\n" + preamble_;
        if (variant_ == kLlama32) out += "Today Date: " + today_dd_mon_yyyy() + "\n\n";
        out += system + "<|eot_id|>";
      }
      for (size_t i = first; i < messages.size(); ++i) {
        if (variant_ == kLlama3 && i == 0) out += bos_;
        out += "<|start_header_id|>" + messages[i].role + "<|end_header_id|>\n\n" +
               py_strip(messages[i].content) + "<|eot_id|>";
      }
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    }
    case kLlama2: {
      size_t first = messages[0].role == "system" ? 1 : 0;
      for (size_t i = first; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        alternation(m, i - first);
        std::string content = m.content;
        if (i == first && first == 1)
          content = "<<SYS>>\n" + messages[0].content + "\n<</SYS>>\n\n" + m.content;
        if (m.role == "user")
          out += bos_ + "[INST] " + py_strip(content) + " [/INST]";
        else if (m.role == "assistant")
          out += " " + py_strip(content) + " " + eos_;
      }
      break;  // this template has no generation prompt: "[/INST]" already ends the prompt
    }
    case kMistralV1:
    case kMistralV1NoSpace: {
      out += bos_;
      for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        alternation(m, i);
        if (m.role == "user")
          out += "[INST] " + m.content + " [/INST]";
        else if (m.role == "assistant")
          out += m.content + eos_ + (variant_ == kMistralV1 ? " " : "");
        else
          throw fail("only user and assistant roles are supported");
      }
      break;
    }
    case kMistralV3: {
      size_t first = messages[0].role == "system" ? 1 : 0;
      for (size_t i = first; i < messages.size(); ++i) alternation(messages[i], i - first);
      out += bos_;
      for (size_t i = first; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == "user") {
          if (i + 1 == messages.size() && first == 1)
            out += "[INST] " + messages[0].content + "\n\n" + m.content + "[/INST]";
          else
            out += "[INST] " + m.content + "[/INST]";
        } else if (m.role == "assistant") {
          out += " " + py_strip(m.content) + eos_;
        } else {
          throw fail(
              "only user and assistant roles are supported, with the exception of an "
              "initial optional system message");
        }
      }
      break;
    }
    case kMistralV7: {
      out += bos_;
      for (const ChatMessage& m : messages) {
        if (m.role == "user")
          out += "[INST]" + m.content + "[/INST]";
        else if (m.role == "system")
          out += "[SYSTEM_PROMPT]" + m.content + "[/SYSTEM_PROMPT]";
        else if (m.role == "assistant")
          out += m.content + eos_;
        else
          throw fail("only user, system and assistant roles are supported");
      }
      break;
    }
    case kPhi3:
    case kPhi35: {
      for (const ChatMessage& m : messages) {
        if (m.role == "system") {
          if (variant_ == kPhi35 && m.content.empty()) continue;
          out += "<|system|>\n" + m.content + "<|end|>\n";
        } else if (m.role == "user") {
          out += "<|user|>\n" + m.content + "<|end|>\n";
        } else if (m.role == "assistant") {
          out += "<|assistant|>\n" + m.content + "<|end|>\n";
        }
      }
      out += add_generation_prompt ? std::string("<|assistant|>\n") : eos_;
      break;
    }
    case kGemma: {
      size_t first = 0;
      std::string prefix;
      if (messages[0].role == "system") {
        prefix = messages[0].content + "\n\n";
        first = 1;
      }
      out += bos_;
      for (size_t i = first; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        alternation(m, i - first);
        out += "<start_of_turn>" + (m.role == "assistant" ? std::string("model") : m.role) + "\n" +
               (i == first ? prefix : std::string()) + py_strip(m.content) + "<end_of_turn>\n";
      }
      if (add_generation_prompt) out += "<start_of_turn>model\n";
      break;
    }
    case kPhi3First:
    case kPhi3FirstNoBos: {
      if (variant_ == kPhi3First) out += bos_;
      for (const ChatMessage& m : messages) {
        if (m.role == "user")
          out += "<|user|>\n" + m.content + "<|end|>\n<|assistant|>\n";
        else if (m.role == "assistant")
          out += m.content + "<|end|>\n";
      }
      break;  // every user turn already ends with "<|assistant|>\n"
    }
    default: throw fail("internal: unknown variant");
  }
  return out;
}

}  // namespace rz
