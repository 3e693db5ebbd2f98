// Hugging Face config.json → ModelConfig for LlamaForCausalLM, Qwen2ForCausalLM and
// MistralForCausalLM (model_type llama / qwen2 / mistral). Defaults follow transformers'
// LlamaConfig / Qwen2Config / MistralConfig for the optional keys (checked against transformers
// by tests/golden/make_hf_config_golden.py); the structural keys (hidden_size,
// num_hidden_layers, num_attention_heads, intermediate_size, vocab_size) are required. Rope
// settings come from "rope_parameters" (transformers 5) or rope_theta + "rope_scaling".
// sliding_window / use_sliding_window are ignored: rz attends over the whole context, which matches
// these models up to the window length (4096 for Mistral 7B v0.1).
#pragma once
#include <string>
#include <string_view>

#include "formats/model_config.hpp"

namespace rz {

// Reads and parses a config.json file. Throws rz::Error("PATH: cause") for a missing or
// malformed file, an unsupported model_type, missing keys or unsupported settings.
ModelConfig read_hf_config(const std::string& path);

// Parses config.json text; `where` names the source in error messages.
ModelConfig parse_hf_config(std::string_view json, const std::string& where);

// Whole file as a string; throws rz::Error("PATH: no such file" / "cannot read: ...").
std::string read_text_file(const std::string& path);

}  // namespace rz
