// gpu_verify compare: the GPU executor against the CPU executor on one model file. The CPU runs
// the prompts greedily (one prefill, then tokens-1 decode steps, each slot fed its own tokens);
// the GPU runs them teacher-forced on the CPU's tokens, so every step's logits compare position
// by position, and each step where the GPU's own pick differs is a divergence that fails unless
// excused (README.md). --cpu-vs-cpu: a second CPU executor must match bit for bit.
#include <cstdio>
#include <string>
#include <vector>

#include "formats/common.hpp"
#include "tests/gpu_verify/verify_commands.hpp"
#include "tests/gpu_verify/verify_common.hpp"

namespace rz::verify {

int cmd_compare(int argc, char** argv) {
  Args a(argc, argv,
         {"model", "prompts", "tokens", "seed", "tol", "min-margin", "pool", "max-excused"},
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
  // CPU against CPU: the same code on the same inputs, so bit-identical (tol 0, nothing excused).
  const Tolerance deftol = cpu2 ? Tolerance{0.0, 0.0, "exact: the same code on the same inputs"}
                                : default_tolerance(*file);
  if (cpu2 && a.has("tol")) throw Error("--cpu-vs-cpu is exact: --tol does not apply");
  const double tol = a.real("tol", deftol.tol);
  ExcuseCap cap;
  cap.max_share = a.real("max-excused", 0.01);
  const double min_margin = a.real("min-margin", 0.0);
  const int pool_n =
      static_cast<int>(a.integer("pool", min_margin > 0 ? (a.has("text") ? 32 : 4 * n) : n));
  if (pool_n < n) throw Error("--pool must be at least --prompts");
  const auto pool = a.has("text") ? text_prompts(*file, pool_n)
                                  : random_prompts(pool_n, file->config().n_vocab, seed);
  int ctx = 0;
  for (const auto& p : pool) ctx = std::max(ctx, static_cast<int>(p.size()) + tokens);
  ctx = (ctx + 63) / 64 * 64;
  const char* test_name = cpu2 ? "cpu2" : "gpu";
  std::printf(
      "compare %s: %d %s prompts x %d tokens, reference cpu, tested %s (teacher-forced "
      "on cpu's tokens), tol %s of the row's max |cpu logit| (%s)%s\n",
      path.c_str(), n, a.has("text") ? "text" : "random-id", tokens, test_name, fmt(tol).c_str(),
      a.has("tol") ? "--tol" : deftol.basis.c_str(),
      ties_ok ? ", excused divergences allowed up to the cap" : "");
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
    test = run_forced(*ex, prompts, tokens, ref.tokens);
  }

  const std::string model = basename_of(path);
  Report rep("compare " + model + (a.has("text") ? " (text)" : ""));
  int equal = 0;
  double worst_abs = 0, worst_rel = 0;
  for (int p = 0; p < n; ++p) {
    StreamCompare c;
    for (int s = 0; s < tokens; ++s)
      c.step(ref.tokens[p][s], test.tokens[p][s], ref.logits[p][s], test.logits[p][s]);
    const Verdict v = judge(c, tol, ties_ok && !cpu2);
    cap.add(c, v);
    equal += c.equal_tokens();
    if (!(c.worst_abs() <= worst_abs)) worst_abs = c.worst_abs();
    if (!(c.worst_rel() <= worst_rel)) worst_rel = c.worst_rel();
    std::string d = "len " + std::to_string(prompts[p].size()) + ", tokens equal " +
                    std::to_string(c.equal_tokens()) + "/" + std::to_string(tokens) +
                    ", max |dlogit| " + fmt(c.worst_abs()) + " (rel " + fmt(c.worst_rel()) +
                    ") over " + std::to_string(c.compared()) + " steps, min cpu margin " +
                    fmt(c.min_ref_margin());
    const std::string divs = describe_divergences(c, "cpu", test_name);
    if (!divs.empty()) d += "; " + divs;
    if (!v.why.empty()) d += "; " + v.why;
    rep.add({model + " prompt " + std::to_string(p), v.pass, d});
  }
  rep.add({model + " excused share", cap.ok(), cap.summary()});
  std::string measured = "max rel " + fmt(worst_rel) + " (tol " + fmt(tol);
  if (!cpu2 && deftol.measured > 0)
    measured += ", " + fmt(worst_rel / deftol.measured, 2) + " x the reference measurement " +
                fmt(deftol.measured);
  measured += ")";
  char extra[768];
  std::snprintf(extra, sizeof extra,
                "tokens equal %d/%d, max |dlogit| %s, %s, %s, cpu %.1f s, %s %.1f s%s%s", equal,
                n * tokens, fmt(worst_abs).c_str(), measured.c_str(), cap.summary().c_str(),
                ref.seconds, test_name, test.seconds, note.empty() ? "" : "; ", note.c_str());
  return rep.finish(extra);
}

}  // namespace rz::verify
