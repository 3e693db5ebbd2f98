// For the fuzz targets that read model files: the input bytes written to one file of this
// process (in /dev/shm when it exists: the readers memory-map a real file, as rz does), so that
// GgufFile::open and SafetensorsFile::open run exactly as on a file from disk.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace rz_fuzz {

inline const std::string& input_path(const char* suffix) {
  static const std::string path = [&] {
    const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    return std::string(dir) + "/rz-fuzz-" + std::to_string(getpid()) + suffix;
  }();
  return path;
}

// Writes the bytes to input_path(suffix) and returns that path.
inline const std::string& write_input(const uint8_t* data, size_t size, const char* suffix) {
  const std::string& path = input_path(suffix);
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || (size && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
  return path;
}

}  // namespace rz_fuzz
