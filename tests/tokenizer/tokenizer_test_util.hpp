// Helpers shared by the tokenizer tests: locating test data and reading the vocab test vectors
// (testdata/vocab/X.gguf.inp: inputs separated by "\n__ggml_vocab_test__\n"; X.gguf.out: one
// line of expected ids per input).
#pragma once
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "formats/gguf.hpp"
#include "tests/test_data.hpp"
#include "tokenizer/tokenizer.hpp"

namespace rz::test {

inline std::string vocab_dir() { return RZ_SOURCE_DIR "/../shared/testdata/vocab"; }
inline std::string smollm2_path() {
  return RZ_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

inline std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct VocabCase {
  std::string text;
  std::vector<int32_t> ids;
};

inline std::vector<VocabCase> read_vocab_cases(const std::string& gguf_path) {
  std::string inp = read_all(gguf_path + ".inp"), outp = read_all(gguf_path + ".out");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t start = 0;;) {
    size_t p = inp.find(sep, start);
    if (p == std::string::npos) {
      texts.push_back(inp.substr(start));
      break;
    }
    texts.push_back(inp.substr(start, p - start));
    start = p + sep.size();
  }
  std::vector<std::vector<int32_t>> ids;
  std::istringstream ls(outp);
  for (std::string line; std::getline(ls, line);) {
    std::istringstream is(line);
    std::vector<int32_t> v;
    for (long x; is >> x;) v.push_back(static_cast<int32_t>(x));
    ids.push_back(v);
  }
  // The file ends with a separator: the last piece is empty, as is the line after the last '\n'.
  while (ids.size() < texts.size()) ids.emplace_back();
  std::vector<VocabCase> out;
  for (size_t i = 0; i < texts.size(); ++i) out.push_back({texts[i], ids[i]});
  return out;
}

inline std::shared_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  auto f = GgufFile::open(path);
  return Tokenizer::from_gguf(*f);
}

// `s` as a JSON string literal (quotes, backslashes and control characters escaped), for tests
// that write JSON inputs.
inline std::string json_str(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace rz::test
