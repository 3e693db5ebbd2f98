// What the rz subcommands share when they load a model: the model file with its tokenizer and the
// model's chat template. The executor comes from apps/executor_factory.hpp, the default context
// length from model/executor.hpp.
#pragma once
#include <memory>
#include <string>

#include "formats/model_file.hpp"
#include "tokenizer/chat_template.hpp"
#include "tokenizer/tokenizer.hpp"

namespace rz::cmd {

struct LoadedModel {
  std::shared_ptr<const ModelFile> file;
  std::shared_ptr<Tokenizer> tokenizer;  // from the GGUF, or tokenizer.json beside safetensors
};

// Opens a model and its tokenizer; throws rz::Error naming the file and the cause.
LoadedModel load_model(const std::string& path);

// The model's Jinja chat template: GGUF metadata, or tokenizer_config.json beside a safetensors
// model (a string, or a list of {name, template} of which "default" is taken). "" when none.
std::string chat_template_source(const ModelFile& m);

// The text of a token id, or "" when the id is out of range (absent BOS/EOS).
std::string token_text_or_empty(const Tokenizer& tok, int32_t id);

// The chat family a file without a template of this architecture uses (the architecture's one
// format: gemma3 "gemma", phi3 "phi3"); "" when it has none.
std::string default_chat_family(Arch arch);

// The model's chat template family, or the family `forced_name` names when not empty (else, for
// a file without a template, default_chat_family). Throws rz::Error when the model has none or it
// is not recognised.
ChatTemplate chat_template_for(const ModelFile& m, const Tokenizer& tok,
                               const std::string& forced_name = "");

}  // namespace rz::cmd
