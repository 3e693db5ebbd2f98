// libFuzzer target: the safetensors reader (formats/safetensors.cpp) on whole files: the header
// length, the JSON header (dtypes, shapes, data offsets, __metadata__) and the byte ranges
// against the file. It may refuse a file with rz::Error; nothing else may happen. A file that
// opens has every tensor's bytes inside the mapping (each byte is read: one past the file's pages
// would fault), of the size its shape and type say.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "formats/common.hpp"
#include "formats/safetensors.hpp"
#include "tests/fuzz/fuzz_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = rz_fuzz::write_input(data, size, ".safetensors");
  std::shared_ptr<rz::SafetensorsFile> f;
  try {
    f = rz::SafetensorsFile::open(path);
  } catch (const rz::Error&) {
    return 0;
  }
  uint8_t x = 0;
  for (const rz::TensorView& t : f->tensors()) {
    if (t.nbytes != static_cast<size_t>(t.rows()) * t.row_bytes()) std::abort();
    for (size_t i = 0; i < t.nbytes; ++i) x ^= t.data[i];
    if (f->find_tensor(t.name) == nullptr) std::abort();
  }
  return x == 0x5A ? 0 : 0;  // the reads stay: x is used
}
