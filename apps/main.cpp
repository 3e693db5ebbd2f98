// rz: the single binary. `rz SUB [flags]`; `rz --help` lists the subcommands and
// `rz SUB --help` every flag of one. User errors print one line and exit non-zero.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "apps/commands.hpp"
#include "formats/common.hpp"

namespace {

struct Sub {
  const char* name;
  int (*run)(int, char**);
  const char* summary;
};

const Sub kSubs[] = {
    {"generate", rz::cmd::generate, "generate text from a prompt on the CPU, streamed to stdout"},
    {"tokenize", rz::cmd::tokenize, "turn text into token ids with a model's tokenizer"},
    {"info", rz::cmd::info, "show a model file's architecture, tensors, tokenizer, template"},
    {"serve", rz::cmd::serve, "serve the model over WebSocket and HTTP (browser page, metrics)"},
    {"synth", rz::cmd::synth, "write a GGUF model with random weights in a real model's shape"},
    {"bench", rz::cmd::bench, "measure prefill and decode throughput (tokens/s, MBU, TFLOP/s)"},
};

void usage(FILE* out) {
  std::fprintf(out, "usage: rz SUBCOMMAND [flags]\n\nsubcommands:\n");
  for (const auto& s : kSubs) std::fprintf(out, "  %-10s %s\n", s.name, s.summary);
  std::fprintf(out, "\n`rz SUBCOMMAND --help` lists every flag of a subcommand.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  std::string sub = argv[1];
  if (sub == "--help" || sub == "-h" || sub == "help") {
    usage(stdout);
    return 0;
  }
  for (const auto& s : kSubs) {
    if (sub == s.name) {
      try {
        return s.run(argc - 2, argv + 2);
      } catch (const rz::Error& e) {
        std::fprintf(stderr, "rz %s: error: %s\n", s.name, e.what());
        return 1;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rz %s: internal error: %s\n", s.name, e.what());
        return 3;
      }
    }
  }
  std::fprintf(stderr, "rz: unknown subcommand '%s'\n", sub.c_str());
  usage(stderr);
  return 2;
}
