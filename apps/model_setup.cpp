// Model loading shared by the rz subcommands (see model_setup.hpp).
#include "apps/model_setup.hpp"

#include <simdjson.h>

#include "formats/common.hpp"
#include "formats/gguf.hpp"

namespace rz::cmd {

LoadedModel load_model(const std::string& path) {
  LoadedModel lm;
  lm.file = ModelFile::open(path);
  lm.tokenizer = lm.file->gguf() ? Tokenizer::from_gguf(*lm.file->gguf())
                                 : Tokenizer::from_hf_dir(lm.file->hf_dir());
  return lm;
}

std::string chat_template_source(const ModelFile& m) {
  if (auto g = m.gguf()) return g->get_string("tokenizer.chat_template").value_or("");
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.load(m.hf_dir() + "/tokenizer_config.json").get(doc)) return {};
  std::string_view s;
  if (!doc["chat_template"].get_string().get(s)) return std::string(s);
  simdjson::dom::array list;
  if (!doc["chat_template"].get_array().get(list))
    for (auto item : list) {
      std::string_view name, tmpl;
      if (!item["name"].get_string().get(name) && name == "default" &&
          !item["template"].get_string().get(tmpl))
        return std::string(tmpl);
    }
  return {};
}

std::string token_text_or_empty(const Tokenizer& tok, int32_t id) {
  return id >= 0 && id < tok.n_vocab() ? tok.token_text(id) : std::string();
}

std::string default_chat_family(Arch arch) {
  switch (arch) {
    case Arch::Gemma3: return "gemma";
    case Arch::Phi3: return "phi3";
    default: return "";
  }
}

ChatTemplate chat_template_for(const ModelFile& m, const Tokenizer& tok,
                               const std::string& forced_name) {
  const std::string bos = token_text_or_empty(tok, tok.bos_id());
  const std::string eos = token_text_or_empty(tok, tok.eos_id());
  if (!forced_name.empty()) return ChatTemplate::from_name(forced_name, bos, eos);
  const std::string src = chat_template_source(m);
  if (src.empty()) {
    // A file without a template (some GGUF conversions drop it): its architecture's format.
    const std::string family = default_chat_family(m.config().arch);
    if (family.empty())
      throw file_error(m.path(), "the model has no chat template; choose one with --template");
    return ChatTemplate::from_name(family, bos, eos);
  }
  return ChatTemplate::from_jinja(src, bos, eos);
}

}  // namespace rz::cmd
