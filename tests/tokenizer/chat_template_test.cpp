// Chat templates against jinja2's own rendering of real templates: tests/golden/chat_golden.json
// (written by tests/golden/make_chat_golden.py from tests/golden/chat_templates/*.jinja).
#include "tokenizer/chat_template.hpp"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "formats/common.hpp"
#include "formats/gguf.hpp"

namespace {

const std::string kGolden = RZ_SOURCE_DIR "/tests/golden/";

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct GoldenTemplate {
  std::string source, family, bos, eos;
};

struct GoldenCase {
  std::string template_name, conversation;
  std::vector<rz::ChatMessage> messages;
  bool add_generation_prompt = false;
  bool error = false;
  std::string output;
};

struct Golden {
  std::map<std::string, GoldenTemplate> templates;
  std::vector<GoldenCase> cases;
};

const Golden& golden() {
  static const Golden g = [] {
    Golden g;
    simdjson::dom::parser parser;
    simdjson::padded_string json = simdjson::padded_string::load(kGolden + "chat_golden.json");
    simdjson::dom::element root = parser.parse(json);
    for (auto [key, value] : root["templates"].get_object()) {
      GoldenTemplate t;
      t.source = read_file(kGolden + std::string(std::string_view(value["file"])));
      t.family = std::string(std::string_view(value["family"]));
      t.bos = std::string(std::string_view(value["bos_token"]));
      t.eos = std::string(std::string_view(value["eos_token"]));
      g.templates[std::string(key)] = t;
    }
    for (simdjson::dom::element c : root["cases"].get_array()) {
      GoldenCase gc;
      gc.template_name = std::string(std::string_view(c["template"]));
      gc.conversation = std::string(std::string_view(c["conversation"]));
      for (simdjson::dom::element m : c["messages"].get_array())
        gc.messages.push_back({std::string(std::string_view(m["role"])),
                               std::string(std::string_view(m["content"]))});
      gc.add_generation_prompt = bool(c["add_generation_prompt"]);
      gc.error = bool(c["error"]);
      if (!gc.error) gc.output = std::string(std::string_view(c["output"]));
      g.cases.push_back(std::move(gc));
    }
    return g;
  }();
  return g;
}

// Compares one template's rendering with every golden case of the golden template `golden_name`.
void expect_matches_golden(const rz::ChatTemplate& t, const std::string& golden_name,
                           bool skip_first_not_system = false) {
  int checked = 0;
  for (const GoldenCase& c : golden().cases) {
    if (c.template_name != golden_name) continue;
    if (skip_first_not_system && c.messages[0].role != "system") continue;
    SCOPED_TRACE(golden_name + "/" + c.conversation +
                 (c.add_generation_prompt ? " +gen" : " -gen") + " as " + t.name());
    ++checked;
    if (c.error) {
      EXPECT_THROW(t.apply(c.messages, c.add_generation_prompt), rz::Error);
    } else {
      std::string got;
      ASSERT_NO_THROW(got = t.apply(c.messages, c.add_generation_prompt));
      EXPECT_EQ(got, c.output);
    }
  }
  EXPECT_GT(checked, 0) << "no golden cases for " << golden_name;
}

TEST(ChatTemplate, GoldenFileCoversEveryFamily) {
  std::set<std::string> families;
  for (const auto& [name, t] : golden().templates) families.insert(t.family);
  for (const std::string& f : rz::ChatTemplate::names()) EXPECT_TRUE(families.count(f)) << f;
  EXPECT_GE(golden().cases.size(), 200u);
}

TEST(ChatTemplate, RecognisedTemplatesRenderLikeJinja) {
  for (const auto& [name, gt] : golden().templates) {
    SCOPED_TRACE(name);
    rz::ChatTemplate t = rz::ChatTemplate::from_jinja(gt.source, gt.bos, gt.eos);
    EXPECT_EQ(t.name(), gt.family);
    expect_matches_golden(t, name);
  }
}

// A forced family renders like the real template it stands for.
TEST(ChatTemplate, ForcedFamiliesRenderLikeTheirTemplates) {
  auto tok = [](const std::string& n) { return golden().templates.at(n); };
  auto forced = [&](const char* family, const std::string& golden_name) {
    return rz::ChatTemplate::from_name(family, tok(golden_name).bos, tok(golden_name).eos);
  };
  expect_matches_golden(forced("llama3", "llama3"), "llama3");
  expect_matches_golden(forced("llama2", "llama2"), "llama2");
  expect_matches_golden(forced("mistral", "mistral_v3"), "mistral_v3");
  expect_matches_golden(forced("mistral-v3", "mistral_v3"), "mistral_v3");
  expect_matches_golden(forced("mistral-v1", "mistral_v1"), "mistral_v1");
  expect_matches_golden(forced("mistral-v7", "mistral_v7"), "mistral_v7");
  expect_matches_golden(forced("phi3", "phi3"), "phi3");
  // Plain ChatML has no default system prompt, so it matches SmolLM2's template whenever the
  // conversation brings its own system message.
  expect_matches_golden(forced("chatml", "smollm2"), "smollm2", /*skip_first_not_system=*/true);
  EXPECT_EQ(forced("mistral-v1", "mistral_v1").name(), "mistral");
}

TEST(ChatTemplate, DefaultSystemPromptIsReadFromTheTemplate) {
  std::string src = golden().templates.at("smollm2").source;
  const std::string smol = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";
  size_t at = src.find(smol);
  ASSERT_NE(at, std::string::npos);
  src.replace(at, smol.size(), "You are Zed, it\\'s a test.\\nSecond line");
  rz::ChatTemplate t = rz::ChatTemplate::from_jinja(src, "", "");
  EXPECT_EQ(t.apply({{"user", "hi"}}, true),
            "<|im_start|>system\nYou are Zed, it's a test.\nSecond line<|im_end|>\n"
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(t.apply({{"system", "S"}, {"user", "hi"}}, false),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n");

  // A ChatML template that writes no default system prompt.
  const std::string plain =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
      "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
      "{{ '<|im_start|>assistant\\n' }}{% endif %}";
  EXPECT_EQ(rz::ChatTemplate::from_jinja(plain, "", "").apply({{"user", "hi"}}, true),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, UnknownTemplatesAndNamesAreClearErrors) {
  const std::string zephyr =
      "{% for message in messages %}{{ '<|' + message['role'] + '|>\\n' + message['content'] + "
      "eos_token }}{% endfor %}";
  try {
    rz::ChatTemplate::from_jinja(zephyr, "<s>", "</s>");
    FAIL() << "expected rz::Error";
  } catch (const rz::Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("unrecognised chat template"), std::string::npos) << what;
    EXPECT_NE(what.find("--template chatml|llama3|llama2|mistral|phi3|gemma"), std::string::npos)
        << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << "one line: " << what;
  }
  EXPECT_THROW(rz::ChatTemplate::from_jinja("", "", ""), rz::Error);
  EXPECT_THROW(rz::ChatTemplate::from_jinja("{{ '[INST]' }} something else", "", ""), rz::Error);
  EXPECT_THROW(rz::ChatTemplate::from_jinja("{{ '<start_of_turn>user' }}", "", ""), rz::Error);
  try {
    rz::ChatTemplate::from_name("vicuna", "", "");
    FAIL() << "expected rz::Error";
  } catch (const rz::Error& e) {
    EXPECT_NE(std::string(e.what()).find("chatml|llama3|llama2|mistral|phi3|gemma"),
              std::string::npos);
  }
  EXPECT_EQ(rz::ChatTemplate::names(),
            (std::vector<std::string>{"chatml", "llama3", "llama2", "mistral", "phi3", "gemma"}));
  EXPECT_THROW(rz::ChatTemplate::from_name("chatml", "", "").apply({}, true), rz::Error);
}

// Llama 3.2's template dates its system block with strftime_now; transformers defines that as
// today's date, so the rendering carries today's date in "%d %b %Y".
TEST(ChatTemplate, Llama32DatesTheSystemBlockToday) {
  std::string src = golden().templates.at("llama3_1").source;
  const std::string fixed = "{%- set date_string = \"26 Jul 2024\" %}";
  size_t at = src.find(fixed);
  ASSERT_NE(at, std::string::npos);
  src.replace(at, fixed.size(), "{%- set date_string = strftime_now(\"%d %b %Y\") %}");
  rz::ChatTemplate t = rz::ChatTemplate::from_jinja(src, "<|begin_of_text|>", "<|eot_id|>");
  const auto today = [] {
    std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char date[32];
    std::strftime(date, sizeof date, "%d %b %Y", &tm);
    return std::string(date);
  };
  const auto rendered = [](const std::string& date) {
    return "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
           "Cutting Knowledge Date: December 2023\nToday Date: " +
           date + "\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>";
  };
  const std::string before = today();
  const std::string got = t.apply({{"user", "hi"}}, false);
  const std::string after = today();  // the render may straddle midnight
  EXPECT_TRUE(got == rendered(before) || got == rendered(after)) << got;
}

TEST(ChatTemplate, SmolLM2GgufTemplate) {
  const std::string path = RZ_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) FAIL() << path << " missing: run scripts/setup.sh";
  auto f = rz::GgufFile::open(path);
  auto src = f->get_string("tokenizer.chat_template");
  ASSERT_TRUE(src.has_value());
  EXPECT_EQ(*src, golden().templates.at("smollm2").source);
  rz::ChatTemplate t = rz::ChatTemplate::from_jinja(*src, "<|im_start|>", "<|im_end|>");
  EXPECT_EQ(t.name(), "chatml");
  EXPECT_EQ(t.apply({{"user", "What is the capital of France?"}}, true),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
            "<|im_start|>assistant\n");
}

}  // namespace
