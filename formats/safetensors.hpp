// safetensors reader: memory-maps one .safetensors file, parses its JSON header (simdjson DOM)
// and validates every tensor's dtype, shape and byte range. Also the Hugging Face → GGUF tensor
// name mapping, the shard list of a model directory, and a small writer for tests and tools.
//
// File layout: u64 header_len (little-endian) | header_len bytes of JSON | data.
// The JSON maps each tensor name to {"dtype", "shape": [d0, ..., dn-1] (row-major, dn-1
// contiguous), "data_offsets": [begin, end)} relative to the start of the data; the optional
// "__metadata__" entry (string → string) is ignored. Tensor data need not be aligned.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/gguf.hpp"  // MappedFile
#include "formats/model_config.hpp"
#include "formats/tensor.hpp"

namespace rz {

class SafetensorsFile {
 public:
  // Opens and validates. Throws rz::Error("PATH: cause") for a missing/short file, bad JSON,
  // dtypes other than F32/F16/BF16, more than 4 dimensions, sizes that do not match the shape,
  // and byte ranges that overlap or run past the end of the file.
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);

  const std::string& path() const { return file_->path(); }
  size_t data_offset() const { return data_offset_; }  // 8 + header length
  // Tensors under the names in the file, in header order, shapes presented in GGUF order
  // (ne[0] = the last safetensors dimension).
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* find_tensor(std::string_view name) const;

 private:
  SafetensorsFile() = default;
  std::unique_ptr<MappedFile> file_;
  size_t data_offset_ = 0;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
};

// Hugging Face Llama-family name → GGUF name ("model.layers.3.mlp.up_proj.weight" →
// "blk.3.ffn_up.weight"); nullopt for names without a GGUF counterpart.
std::optional<std::string> hf_to_gguf_name(std::string_view hf_name, Arch arch = Arch::Llama);

// The shards of a model directory: the files named by model.safetensors.index.json (with its
// weight_map, tensor name → file name) when present, otherwise every *.safetensors file in the
// directory, sorted by name. Throws rz::Error naming the directory when there are none.
struct SafetensorsShards {
  std::vector<std::string> files;                 // full paths
  std::map<std::string, std::string> weight_map;  // empty without an index file
};
SafetensorsShards find_safetensors_shards(const std::string& dir);

// ---- writing (tests, synthetic models) --------------------------------------------------------
struct SafetensorsEntry {
  std::string name;
  std::string dtype;           // "F32", "F16", "BF16" (any string is written as given)
  std::vector<int64_t> shape;  // safetensors order (row-major)
  std::vector<uint8_t> data;
};
// A complete file: header (padded with spaces to a multiple of 8 bytes) then the data of each
// entry in order.
std::vector<uint8_t> safetensors_bytes(const std::vector<SafetensorsEntry>& entries,
                                       const std::map<std::string, std::string>& metadata = {});
void write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& entries,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace rz
