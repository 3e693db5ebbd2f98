// rz generate: runs one prompt through the CPU or CUDA executor (apps/executor_factory.hpp) and
// streams the generated text to stdout as tokens arrive; a summary (token counts, prefill time,
// tokens/s, seed) goes to stderr.
//
// Defaults: temperature 0.7, top-k 40, top-p 0.95, min-p 0.05, no repetition penalty, 256 new
// tokens, a random seed (printed so that a run can be repeated with --seed). --temperature 0 is
// greedy. Generation stops at an end-of-generation token (not printed; --ignore-eos goes on), at
// --max-tokens, or when the context is full (a note on stderr).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "apps/cli.hpp"
#include "apps/commands.hpp"
#include "apps/executor_factory.hpp"
#include "apps/model_setup.hpp"
#include "formats/common.hpp"
#include "formats/gguf.hpp"
#include "formats/model_file.hpp"
#include "sched/slot_runner.hpp"
#include "tokenizer/chat_template.hpp"
#include "tokenizer/tokenizer.hpp"

namespace rz::cmd {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void write_out(const std::string& s) {
  if (s.empty()) return;
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

}  // namespace

int generate(int argc, char** argv) {
  cli::Flags f("generate",
               "Generate text from a prompt on the CPU or GPU; the text streams to "
               "stdout, a summary goes to stderr.");
  f.opt("model", "FILE", "model file (.gguf, .safetensors or a directory)")
      .opt("prompt", "TEXT", "the prompt")
      .sw("chat", "wrap the prompt as a user message in the model's chat template")
      .opt("template", "NAME", "chat template family instead of the model's (implies --chat)")
      .opt("max-tokens", "N", "most tokens to generate", "256")
      .opt("temperature", "T", "sampling temperature; 0 = greedy", "0.7")
      .opt("top-k", "K", "keep the K most likely tokens; 0 = off", "40")
      .opt("top-p", "P", "nucleus sampling mass; 1 = off", "0.95")
      .opt("min-p", "P", "drop tokens below P times the top probability; 0 = off", "0.05")
      .opt("repetition-penalty", "R", "penalty for recently seen tokens; 1 = off", "1.0")
      .opt("seed", "S", "random seed", "random, printed in the summary")
      .sw("ignore-eos", "keep generating past end-of-generation tokens")
      .opt("device", "auto|cpu|cuda", "executor; auto picks the GPU when one is present", "auto")
      .opt("threads", "N", "CPU threads", "all cores")
      .opt("weights", "stored|fp8", kWeightsHelp, "stored")
      .opt("ctx", "N", "context length (prompt + generated)", "min(training context, 4096)");
  int code = 0;
  if (!f.parse(argc, argv, code)) return code;
  if (!f.has("model")) throw Error("--model FILE is required (see rz generate --help)");
  if (!f.has("prompt")) throw Error("--prompt TEXT is required (see rz generate --help)");

  SamplingParams sp;
  sp.temperature = static_cast<float>(f.number("temperature"));
  sp.top_k = static_cast<int>(f.integer("top-k"));
  sp.top_p = static_cast<float>(f.number("top-p"));
  sp.min_p = static_cast<float>(f.number("min-p"));
  sp.repetition_penalty = static_cast<float>(f.number("repetition-penalty"));
  const long long max_tokens = f.integer("max-tokens");
  if (!(sp.temperature >= 0)) throw Error("--temperature: must be 0 or more");
  if (sp.top_k < 0) throw Error("--top-k: must be 0 or more");
  if (!(sp.top_p > 0 && sp.top_p <= 1)) throw Error("--top-p: must be in (0, 1]");
  if (!(sp.min_p >= 0 && sp.min_p <= 1)) throw Error("--min-p: must be in [0, 1]");
  if (!(sp.repetition_penalty > 0)) throw Error("--repetition-penalty: must be above 0");
  if (max_tokens < 0) throw Error("--max-tokens: must be 0 or more");
  sp.seed = f.has("seed") ? static_cast<uint64_t>(f.integer("seed"))
                          : (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  const long long threads = f.has("threads") ? f.integer("threads") : 0;
  if (threads < 0 || threads > 1024)
    throw Error("--threads: must be between 0 (all cores) and 1024");

  auto t_load = Clock::now();
  const LoadedModel lm = load_model(f.str("model"));
  const std::shared_ptr<const ModelFile>& mf = lm.file;
  const std::shared_ptr<Tokenizer>& tok = lm.tokenizer;
  long long ctx = default_context(mf->config());
  if (f.has("ctx")) {
    ctx = f.integer("ctx");
    if (ctx < 1 || ctx > (1 << 24)) throw Error("--ctx: must be between 1 and 16777216");
  }

  std::vector<int32_t> prompt;
  std::string template_name;
  if (f.has("chat") || f.has("template")) {
    const ChatTemplate tmpl = chat_template_for(*mf, *tok, f.str("template"));
    template_name = tmpl.name();
    prompt = tok->encode(tmpl.apply({{"user", f.str("prompt")}}), false, true);
  } else {
    prompt = tok->encode(f.str("prompt"), true, true);  // special-token text too, as rz serve
  }
  if (prompt.empty()) throw Error("the prompt encodes to no tokens");
  if (static_cast<long long>(prompt.size()) > ctx)
    throw Error("the prompt has " + std::to_string(prompt.size()) +
                " tokens, more than the context of " + std::to_string(ctx) + " tokens");

  const std::string device = resolve_device(f.str("device"));
  BuiltExecutor built = make_executor(device, mf,
                                      {.slots = 1,
                                       .max_context = static_cast<int>(ctx),
                                       .threads = static_cast<int>(threads),
                                       .fp8_weights = fp8_weights_flag(f.str("weights"))});
  const std::string& where = built.description;
  Executor& ex = *built.executor;
  SlotRunner run(ex);
  const double load_s = seconds_since(t_load);

  StreamingDetokenizer detok(*tok);
  long long generated = 0, decode_steps = 0;
  double prefill_s = 0, decode_s = 0;
  std::string stop = "max tokens";
  if (max_tokens > 0) {
    auto t0 = Clock::now();
    int32_t next = run.prefill(PrefillRequest{0, prompt, sp});
    prefill_s = seconds_since(t0);
    auto t1 = Clock::now();
    for (;;) {
      if (tok->is_eog(next) && !f.has("ignore-eos")) {
        stop = "end of generation";
        break;
      }
      write_out(detok.push(next));
      if (++generated >= max_tokens) break;
      if (ex.slot_length(0) >= ex.max_context()) {
        stop = "context full";
        std::fprintf(stderr, "\nrz generate: note: the context of %d tokens is full; stopping\n",
                     ex.max_context());
        break;
      }
      next = run.decode(0, next);
      ++decode_steps;
    }
    decode_s = seconds_since(t1);
  }
  write_out(detok.flush());
  if (isatty(fileno(stdout))) std::fputc('\n', stderr);

  std::fprintf(stderr,
               "rz generate: %zu prompt tokens, %lld generated (stop: %s)%s%s\n"
               "  load %.2f s, prefill %.1f ms (%.1f tokens/s), decode %.1f tokens/s "
               "(%lld steps in %.2f s), %s, context %lld, seed %llu\n",
               prompt.size(), generated, stop.c_str(),
               template_name.empty() ? "" : ", chat template ", template_name.c_str(), load_s,
               prefill_s * 1e3, prefill_s > 0 ? prompt.size() / prefill_s : 0.0,
               decode_s > 0 ? decode_steps / decode_s : 0.0, decode_steps, decode_s, where.c_str(),
               ctx, static_cast<unsigned long long>(sp.seed));
  return 0;
}

}  // namespace rz::cmd
