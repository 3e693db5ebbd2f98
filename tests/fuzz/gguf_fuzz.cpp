// libFuzzer target: the GGUF reader (formats/gguf.cpp) on whole files: header, metadata of every
// value type, tensor infos, alignment and bounds. A file that opens then goes through what rz
// does next with a model file's metadata: every value shown (rz info), the model configuration
// read (formats/model_config.cpp), and the tokenizer built from it (tokenizer/). Each of these
// may refuse the file with rz::Error; nothing else may happen. Every tensor of a file that opens
// is read through (one byte past the file's pages would fault).
#include <cstdint>
#include <string>

#include "formats/common.hpp"
#include "formats/gguf.hpp"
#include "formats/model_config.hpp"
#include "tests/fuzz/fuzz_file.hpp"
#include "tokenizer/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = rz_fuzz::write_input(data, size, ".gguf");
  std::shared_ptr<rz::GgufFile> g;
  try {
    g = rz::GgufFile::open(path);
  } catch (const rz::Error&) {
    return 0;
  }
  std::size_t shown = 0;
  for (const std::string& key : g->metadata_keys()) shown += g->find(key)->to_display().size();
  for (const rz::TensorView& t : g->tensors()) {  // every byte inside the mapping
    for (size_t i = 0; i < t.nbytes; ++i) shown += t.data[i];
    shown += t.name.size();
  }
  try {
    (void)rz::config_from_gguf(*g);
  } catch (const rz::Error&) {
  }
  try {
    auto tok = rz::Tokenizer::from_gguf(*g);
    (void)tok->encode("Hello, world! 12345 \xC3\xA9", true, true);
  } catch (const rz::Error&) {
  }
  return shown == static_cast<std::size_t>(-1);
}
