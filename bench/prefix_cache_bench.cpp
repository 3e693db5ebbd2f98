// Time to first token with and without the prefix cache (a benchmark, not a test): the engine's
// core, scheduler (sched/batch_state.hpp) and executor, driven synchronously (sched/driver.hpp),
// with no network. Two scenarios, each run with the cache on and off:
//
//   shared prefix: request A = P + a, then request B = P + b, where P is --prefix tokens (a shared
//     system prompt) and a, b are --suffix tokens each; B's TTFT is reported (median over --reps
//     distinct prefixes, so every repetition starts cold).
//   chat: --turns turns; each turn's prompt is the previous prompt, the previous answer
//     (--answer tokens, greedy) and --suffix new tokens; every turn's TTFT and cached tokens.
//
// Prompts are random token ids (the cost of a step does not depend on which ids they are).
//
//   prefix_cache_bench [--model FILE] [--device cpu|cuda] [--prefix 2000] [--suffix 32]
//                      [--reps 3] [--turns 4] [--answer 32] [--ctx 4096] [--step-tokens 128]
//                      [--idle-step-tokens 2048]
// --step-tokens and --idle-step-tokens: BatchConfig::max_step_tokens and idle_step_tokens, by
// default `rz serve`'s (a request into an idle server takes the idle budget; 0 turns it off).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "apps/executor_factory.hpp"
#include "formats/common.hpp"
#include "formats/model_file.hpp"
#include "sched/batch_state.hpp"
#include "sched/driver.hpp"

namespace {

struct Options {
  std::string model = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  std::string device = "cpu";
  int prefix = 2000, suffix = 32, reps = 3, turns = 4, answer = 32, ctx = 4096,
      step_tokens = rz::kDefaultStepTokens, idle_step_tokens = rz::kDefaultIdleStepTokens;
};

struct Outcome {
  double ttft_ms = 0;
  int cached = 0;
  std::vector<int32_t> tokens;
};

// Runs one request to its end on `state` and returns its TTFT, cached tokens and tokens.
Outcome run_one(rz::BatchedDecodeState& state, rz::Executor& ex, std::vector<int32_t> prompt,
                int max_tokens, uint64_t id) {
  rz::BatchRequest r;
  r.ref = {id, 0};
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  const rz::SubmitResult s = state.submit(std::move(r));
  if (!s.ok()) throw rz::Error("submit: " + s.message);
  Outcome o;
  rz::run_until_idle(state, ex, [&](const rz::SchedEvent& e) {
    if (const auto* t = std::get_if<rz::TokenEvent>(&e)) o.tokens.push_back(t->token);
    if (const auto* f = std::get_if<rz::FinishedEvent>(&e)) {
      o.ttft_ms = f->timings.ttft_ms();
      o.cached = f->usage.cached_tokens;
    }
    if (const auto* f = std::get_if<rz::FailedEvent>(&e)) throw rz::Error("failed: " + f->message);
  });
  return o;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model")
      o.model = v;
    else if (k == "--device")
      o.device = v;
    else if (k == "--prefix")
      o.prefix = std::atoi(v.c_str());
    else if (k == "--suffix")
      o.suffix = std::atoi(v.c_str());
    else if (k == "--reps")
      o.reps = std::atoi(v.c_str());
    else if (k == "--turns")
      o.turns = std::atoi(v.c_str());
    else if (k == "--answer")
      o.answer = std::atoi(v.c_str());
    else if (k == "--ctx")
      o.ctx = std::atoi(v.c_str());
    else if (k == "--step-tokens")
      o.step_tokens = std::atoi(v.c_str());
    else if (k == "--idle-step-tokens")
      o.idle_step_tokens = std::atoi(v.c_str());
    else {
      std::fprintf(stderr, "prefix_cache_bench: unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  try {
    auto mf = rz::ModelFile::open(o.model);
    rz::BuiltExecutor built =
        rz::make_executor(o.device, mf, {.slots = 1, .max_context = o.ctx, .threads = 0});
    rz::Executor& ex = *built.executor;
    const int n_vocab = mf->config().n_vocab;
    std::mt19937 rng(1234);
    auto random_tokens = [&](int n) {
      std::vector<int32_t> v(static_cast<size_t>(n));
      for (auto& t : v) t = int32_t(rng() % uint32_t(n_vocab));
      return v;
    };
    auto make_state = [&](bool cache) {
      rz::BatchConfig c;
      c.max_slots = 1;
      c.max_context = o.ctx;
      c.max_step_tokens = o.step_tokens;
      c.idle_step_tokens = o.idle_step_tokens;
      c.kv_block_size = ex.kv_block_size();
      c.kv_blocks = ex.kv_blocks();
      c.prefix_cache = cache;
      return rz::BatchedDecodeState(c);
    };
    std::printf(
        "prefix_cache_bench: %s on %s, prefix %d + suffix %d tokens, step budget %d (%d without "
        "decodes)\n",
        o.model.c_str(), built.description.c_str(), o.prefix, o.suffix, o.step_tokens,
        std::max(o.step_tokens, o.idle_step_tokens));

    // Shared prefix: the same prefixes with the cache on and off.
    std::vector<std::vector<int32_t>> prefixes;
    for (int r = 0; r < o.reps; ++r) prefixes.push_back(random_tokens(o.prefix));
    std::map<bool, double> ttft;
    uint64_t id = 1;
    for (bool cache : {false, true}) {
      rz::BatchedDecodeState state = make_state(cache);
      std::vector<double> t;
      for (const auto& p : prefixes) {
        std::vector<int32_t> a = p, b = p;
        const auto sa = random_tokens(o.suffix), sb = random_tokens(o.suffix);
        a.insert(a.end(), sa.begin(), sa.end());
        b.insert(b.end(), sb.begin(), sb.end());
        run_one(state, ex, a, 1, id++);
        const Outcome ob = run_one(state, ex, b, 1, id++);
        t.push_back(ob.ttft_ms);
        std::printf("  cache %-3s  B: TTFT %8.1f ms, cached %d of %zu prompt tokens\n",
                    cache ? "on" : "off", ob.ttft_ms, ob.cached, b.size());
      }
      ttft[cache] = median(t);
    }
    std::printf(
        "shared prefix: median TTFT of B %.1f ms without the cache, %.1f ms with it: "
        "%.1fx\n",
        ttft[false], ttft[true], ttft[true] > 0 ? ttft[false] / ttft[true] : 0.0);

    // Chat: each turn resends the whole history.
    for (bool cache : {false, true}) {
      rz::BatchedDecodeState state = make_state(cache);
      std::vector<int32_t> prompt = random_tokens(o.suffix);
      for (int turn = 1; turn <= o.turns; ++turn) {
        const Outcome out = run_one(state, ex, prompt, o.answer, id++);
        std::printf("  chat, cache %-3s turn %d: prompt %5zu tokens, cached %5d, TTFT %8.1f ms\n",
                    cache ? "on" : "off", turn, prompt.size(), out.cached, out.ttft_ms);
        prompt.insert(prompt.end(), out.tokens.begin(), out.tokens.end());
        const auto more = random_tokens(o.suffix);
        prompt.insert(prompt.end(), more.begin(), more.end());
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "prefix_cache_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
