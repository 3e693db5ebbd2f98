// gpu_verify compare: the GPU executor against the CPU executor on one model file. Both run the
// same prompts (one prefill, then tokens-1 greedy decode steps, each slot fed its own tokens)
// with kept logits; every step's logits are compared while the two token streams agree.
#include <cstdio>
#include <string>
#include <vector>

#include "model/common.hpp"
#include "tests/gpu_verify/verify_commands.hpp"
#include "tests/gpu_verify/verify_common.hpp"

namespace rz::verify {

int cmd_compare(int argc, char** argv) {
  Args a(argc, argv, {"model", "prompts", "tokens", "seed", "tol", "min-margin", "pool"},
         {"text", "cpu-vs-cpu", "ties-ok"});
  const std::string path = a.require("model");
  const int n = static_cast<int>(a.integer("prompts", 8));
  const int tokens = static_cast<int>(a.integer("tokens", 32));
  const uint64_t seed = static_cast<uint64_t>(a.integer("seed", 1));
  const bool cpu2 = a.has("cpu-vs-cpu"), ties_ok = a.has("ties-ok");
  if (n < 1 || tokens < 1) throw Error("--prompts and --tokens must be at least 1");
  std::string why;
  if (!cpu2 && !gpu_available(&why))
    throw Error("compare needs a CUDA device (" + why +
                "); --cpu-vs-cpu compares the CPU executor with a second one instead");

  auto file = ModelFile::open(path);
  const double tol = a.real("tol", default_tol(*file));
  const double min_margin = a.real("min-margin", 0.0);
  const int pool_n = static_cast<int>(a.integer("pool", min_margin > 0 ? (a.has("text") ? 32 : 4 * n) : n));
  if (pool_n < n) throw Error("--pool must be at least --prompts");
  const auto pool = a.has("text") ? text_prompts(*file, pool_n)
                                  : random_prompts(pool_n, file->config().n_vocab, seed);
  int ctx = 0;
  for (const auto& p : pool) ctx = std::max(ctx, static_cast<int>(p.size()) + tokens);
  ctx = (ctx + 63) / 64 * 64;
  const char* test_name = cpu2 ? "cpu2" : "gpu";
  std::printf("compare %s: %d %s prompts x %d tokens, reference cpu, tested %s, tol %s of the "
              "row's max |cpu logit|%s\n",
              path.c_str(), n, a.has("text") ? "text" : "random-id", tokens, test_name,
              fmt(tol).c_str(), ties_ok ? ", near-tie divergences allowed" : "");
  std::fflush(stdout);

  GreedyRun ref, test;
  std::vector<std::vector<int32_t>> prompts;
  std::string note;
  {
    auto cpu = make_cpu_executor(file, n, ctx);
    prompts = select_by_margin(*cpu, pool, n, tokens, min_margin, &note);
    if (!note.empty()) std::printf("%s\n", note.c_str());
    ref = run_greedy(*cpu, prompts, tokens);
  }
  {
    auto ex = cpu2 ? make_cpu_executor(file, n, ctx) : make_gpu_executor(file, n, ctx);
    test = run_greedy(*ex, prompts, tokens);
  }

  const std::string model = basename_of(path);
  Report rep("compare " + model + (a.has("text") ? " (text)" : ""));
  int equal = 0, ties = 0;
  double worst_abs = 0, worst_rel = 0;
  for (int p = 0; p < n; ++p) {
    StreamCompare c;
    for (int s = 0; s < tokens; ++s)
      c.step(ref.tokens[p][s], test.tokens[p][s], ref.logits[p][s], test.logits[p][s]);
    const Verdict v = judge(c, tol, ties_ok);
    equal += c.equal_tokens();
    ties += v.tie ? 1 : 0;
    if (!(c.worst_abs() <= worst_abs)) worst_abs = c.worst_abs();
    if (!(c.worst_rel() <= worst_rel)) worst_rel = c.worst_rel();
    std::string d = "len " + std::to_string(prompts[p].size()) + ", tokens equal " +
                    std::to_string(c.equal_tokens()) + "/" + std::to_string(tokens) +
                    ", max |dlogit| " + fmt(c.worst_abs()) + " (rel " + fmt(c.worst_rel()) +
                    ") over " + std::to_string(c.compared()) + " steps, min cpu margin " +
                    fmt(c.min_ref_margin());
    if (!c.aligned()) d += "; " + describe_divergence(c.divergence(), "cpu", test_name);
    if (!v.why.empty()) d += "; " + v.why;
    rep.add({model + " prompt " + std::to_string(p), v.pass, d});
  }
  char extra[512];
  std::snprintf(extra, sizeof extra,
                "tokens equal %d/%d, max |dlogit| %s, max rel %s (tol %s), near-tie divergences "
                "%d, cpu %.1f s, %s %.1f s%s%s",
                equal, n * tokens, fmt(worst_abs).c_str(), fmt(worst_rel).c_str(),
                fmt(tol).c_str(), ties, ref.seconds, test_name, test.seconds, note.empty() ? "" : "; ",
                note.c_str());
  return rep.finish(extra);
}

}  // namespace rz::verify
