// rz tokenize: text → token ids with a model's tokenizer (only the tokenizer is loaded).
//   rz tokenize --model FILE --jsonl [--special] [--add-special]
//       stdin: one JSON object per line, {"text": "..."}; stdout: {"ids": [...]} per line, in
//       order, flushed after each. A malformed line stops with "line N: ..." on stderr, exit 1.
//   rz tokenize --model FILE --text TEXT [--pieces]
//       ids space-separated on one line; with --pieces one "ID PIECE" line per token.
#include <simdjson.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "apps/cli.hpp"
#include "apps/commands.hpp"
#include "formats/common.hpp"
#include "formats/gguf.hpp"
#include "tokenizer/tokenizer.hpp"

namespace rz::cmd {
namespace {

std::shared_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) return Tokenizer::from_hf_dir(path);
  if (!fs::exists(path, ec)) throw file_error(path, "no such file");
  if (GgufFile::looks_like_gguf(path)) return Tokenizer::from_gguf(*GgufFile::open(path));
  if (fs::path(path).extension() == ".safetensors") {
    std::string dir = fs::path(path).parent_path().string();
    return Tokenizer::from_hf_dir(dir.empty() ? "." : dir);
  }
  throw file_error(path, "not a GGUF file, a .safetensors file or a model directory");
}

// A piece shown as a JSON string; bytes that are not UTF-8 appear as \xNN escapes.
std::string quote_piece(const std::string& s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = s[i];
    char buf[8];
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else if (c < 0x80) {
      out += static_cast<char>(c);
    } else {
      // copy a whole valid multi-byte character, escape anything else byte by byte
      size_t n = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
      bool ok = n > 0 && c < 0xF5 && i + n <= s.size();
      for (size_t k = 1; ok && k < n; ++k)
        ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
      if (ok) {
        out.append(s, i, n);
        i += n - 1;
      } else {
        std::snprintf(buf, sizeof buf, "\\x%02x", c);
        out += buf;
      }
    }
  }
  return out + "\"";
}

int run_jsonl(const Tokenizer& tok, bool add_special, bool parse_special) {
  simdjson::dom::parser parser;
  char* line = nullptr;
  size_t cap = 0;
  long lineno = 0;
  std::string out;
  int rc = 0;
  for (ssize_t n; (n = ::getline(&line, &cap, stdin)) >= 0;) {
    ++lineno;
    std::string_view sv(line, static_cast<size_t>(n));
    while (!sv.empty() && (sv.back() == '\n' || sv.back() == '\r')) sv.remove_suffix(1);
    if (sv.find_first_not_of(" \t") == std::string_view::npos) continue;  // blank line
    simdjson::dom::element doc;
    std::string_view text;
    auto err = parser.parse(sv.data(), sv.size(), true).get(doc);
    if (!err && !doc.is_object()) err = simdjson::INCORRECT_TYPE;
    if (!err) err = doc["text"].get_string().get(text);
    if (err) {
      std::fprintf(stderr, "rz tokenize: error: stdin line %ld: expected {\"text\": \"...\"}: %s\n",
                   lineno, simdjson::error_message(err));
      rc = 1;
      break;
    }
    auto ids = tok.encode(text, add_special, parse_special);
    out = "{\"ids\": [";
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) out += ", ";
      out += std::to_string(ids[i]);
    }
    out += "]}\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
  }
  std::free(line);
  return rc;
}

}  // namespace

int tokenize(int argc, char** argv) {
  cli::Flags f("tokenize",
               "Turn text into token ids with a model's tokenizer. By default no BOS/EOS is added "
               "and control-token text is encoded as plain text (user-defined tokens such as "
               "<think> are always matched, as the model's tokenizer does).");
  f.opt("model", "FILE", "model file (.gguf; .safetensors or a directory: tokenizer.json)")
      .sw("jsonl",
          "read {\"text\": ...} lines on stdin, write {\"ids\": [...]} lines "
          "(blank lines are skipped)")
      .opt("text", "TEXT", "text to tokenize (without --jsonl)")
      .sw("pieces", "with --text: one line per token, its id and its text")
      .sw("special", "parse control-token text (<|im_start|>, </s>, ...) into those tokens")
      .sw("add-special", "add BOS/EOS as the model's metadata says");
  int code = 0;
  if (!f.parse(argc, argv, code)) return code;
  if (!f.has("model")) throw Error("--model FILE is required (see rz tokenize --help)");
  const bool parse_special = f.has("special"), add_special = f.has("add-special");
  auto tok = load_tokenizer(f.str("model"));

  if (f.has("jsonl")) {
    if (f.has("text")) throw Error("--text and --jsonl exclude each other");
    return run_jsonl(*tok, add_special, parse_special);
  }
  if (!f.has("text")) throw Error("give --text TEXT or --jsonl (see rz tokenize --help)");
  auto ids = tok->encode(f.str("text"), add_special, parse_special);
  std::string out;
  if (f.has("pieces")) {
    for (int32_t id : ids)
      out += std::to_string(id) + " " + quote_piece(tok->token_to_piece(id)) + "\n";
  } else {
    for (size_t i = 0; i < ids.size(); ++i) out += (i ? " " : "") + std::to_string(ids[i]);
    out += "\n";
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace rz::cmd
