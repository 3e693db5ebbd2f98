// One model on disk, GGUF or safetensors, behind one interface: its config and its tensors under
// GGUF names ("token_embd.weight", "blk.7.attn_q.weight", "output_norm.weight", ...).
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "formats/model_config.hpp"
#include "formats/tensor.hpp"

namespace rz {

class GgufFile;

class ModelFile {
 public:
  virtual ~ModelFile() = default;
  // Opens a .gguf file, a .safetensors file (config.json beside it) or a directory holding
  // config.json and one or more *.safetensors files. Checks that every tensor the architecture
  // needs is present with the expected shape and a supported type. Throws rz::Error naming the
  // path and the cause.
  static std::shared_ptr<ModelFile> open(const std::string& path);

  virtual const std::string& path() const = 0;
  virtual std::string_view format() const = 0;  // "gguf" or "safetensors"
  virtual const ModelConfig& config() const = 0;
  virtual const std::vector<TensorView>& tensors() const = 0;
  // nullptr when absent.
  virtual const TensorView* find_tensor(std::string_view gguf_name) const = 0;
  // The GGUF file, or nullptr for safetensors models.
  virtual std::shared_ptr<const GgufFile> gguf() const { return nullptr; }
  // Directory holding tokenizer.json / tokenizer_config.json for safetensors models ("" for GGUF).
  virtual std::string hf_dir() const { return {}; }

  const TensorView& require(std::string_view gguf_name) const;  // throws rz::Error if absent
};

}  // namespace rz
