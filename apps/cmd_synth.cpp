// rz synth: a GGUF model with random weights in a real model's exact shape (benchmarks, tests).
//   rz synth --shape NAME --format FMT --out FILE.gguf [--pure] [--seed S] [--vocab FILE.gguf]
//            [--threads N]
// Shapes, formats (f16, bf16 and llama-quantize's presets), value distribution and vocabulary
// padding: apps/synth/synth.hpp. Without --vocab
// the tokenizer comes from ../shared/testdata/vocab/ggml-vocab-gpt-2.gguf relative to the
// repository root (looked up from the working directory and from the binary's build directory);
// when that is absent the file has no tokenizer. A summary goes to stderr.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "apps/cli.hpp"
#include "apps/commands.hpp"
#include "apps/synth/synth.hpp"
#include "formats/common.hpp"

namespace rz::cmd {
namespace {

namespace fs = std::filesystem;

// The default vocabulary file: repository root = the working directory, or the parent of the
// directory holding the rz binary (build-*/rz).
std::string default_vocab() {
  std::error_code ec;
  std::vector<fs::path> roots = {fs::current_path(ec)};
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0)
    roots.push_back(fs::path(std::string(exe, static_cast<size_t>(n))).parent_path().parent_path());
  for (const auto& r : roots) {
    fs::path p = r / kSynthDefaultVocab;
    if (fs::exists(p, ec)) return p.lexically_normal().string();
  }
  return {};
}

std::string human(uint64_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f GB (%.2f MiB)", n / 1e9, n / double(1 << 20));
  return buf;
}

}  // namespace

int synth(int argc, char** argv) {
  cli::Flags flags("synth", "write a GGUF model with random weights in a real model's shape");
  flags.opt("shape", "NAME", "tiny, qwen2.5-1.5b or llama3.1-8b")
      .opt("format", "FMT",
           synth_format_list() + " (llama-quantize's presets, its per-tensor types)")
      .sw("pure", "every matrix in the format's one type (llama-quantize --pure)")
      .opt("out", "FILE", "output .gguf file")
      .opt("seed", "S", "random seed (same seed, same bytes)", "0")
      .opt("vocab", "FILE",
           "GGUF file whose tokenizer is copied (padded to the shape's vocabulary)",
           kSynthDefaultVocab)
      .opt("threads", "N", "generator threads (0: all cores; does not change the output)", "0");
  int rc = 0;
  if (!flags.parse(argc, argv, rc)) return rc;
  for (const char* f : {"shape", "format", "out"})
    if (!flags.has(f)) throw Error(std::string("--") + f + " is required");

  SynthOptions opt;
  opt.shape = flags.str("shape");
  opt.format = parse_synth_format(flags.str("format"));
  opt.pure = flags.has("pure");
  opt.out = flags.str("out");
  const long long seed = flags.integer("seed");
  if (seed < 0) throw Error("--seed: expected a non-negative integer");
  opt.seed = static_cast<uint64_t>(seed);
  opt.threads = static_cast<int>(flags.integer("threads"));
  if (flags.has("vocab")) {
    opt.vocab = flags.str("vocab");
  } else {
    opt.vocab = default_vocab();
    if (opt.vocab.empty())
      std::fprintf(stderr, "rz synth: note: %s not found, writing no tokenizer\n",
                   kSynthDefaultVocab);
  }
  synth_shape(opt.shape, 0);  // an unknown shape fails before any work

  const SynthSummary s = synth_write(opt);
  std::fprintf(stderr, "rz synth: %s: %s %s, %d tensors, data %s, file %s\n", opt.out.c_str(),
               opt.shape.c_str(), synth_format_name(opt.format), s.tensors,
               human(s.data_bytes).c_str(), human(s.file_bytes).c_str());
  for (auto [type, n] : s.type_counts)
    std::fprintf(stderr, "  %-5s %d tensors\n", std::string(type_traits(type).name).c_str(), n);
  if (!opt.vocab.empty()) std::fprintf(stderr, "  tokenizer from %s\n", opt.vocab.c_str());
  return 0;
}

}  // namespace rz::cmd
