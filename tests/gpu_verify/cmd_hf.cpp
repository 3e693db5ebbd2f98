// gpu_verify hf: the GPU executor (or --cpu) on a Hugging Face safetensors directory against the
// greedy tokens transformers produced for it (tests/gpu_verify/hf_reference.py → golden.json):
// all golden prompts in one prefill, then decode steps teacher-forced on the golden tokens, so
// every step sees transformers' sequence. The executor's own pick must equal the golden token at
// every step (a divergence is excused only where the golden keeps that step's logits and its
// margin is below the measured |dlogit| there: the first and last step); the first and last
// step's logits must be within tol of transformers'.
#include <simdjson.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "formats/common.hpp"
#include "tests/gpu_verify/verify_commands.hpp"
#include "tests/gpu_verify/verify_common.hpp"

namespace rz::verify {
namespace {

struct GoldenPrompt {
  std::vector<int32_t> ids, greedy;
  std::vector<double> margins;  // per step: transformers' top-1 minus top-2 logit
  std::vector<float> logits_first, logits_last;
};

struct Golden {
  std::string model, architecture, dtype;
  int steps = 0;
  double margin_threshold = 0;
  std::vector<GoldenPrompt> prompts;
};

Golden load_golden(const std::string& path) {
  Golden g;
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (auto err = parser.load(path).get(doc))
    throw file_error(path, std::string("cannot read golden JSON: ") + simdjson::error_message(err));
  try {
    g.model = std::string(std::string_view(doc["model"]));
    g.architecture = std::string(std::string_view(doc["architecture"]));
    g.dtype = std::string(std::string_view(doc["stored_dtype"]));
    g.steps = static_cast<int>(int64_t(doc["steps"]));
    g.margin_threshold = double(doc["min_margin_threshold"]);
    for (simdjson::dom::element p : doc["prompts"].get_array()) {
      GoldenPrompt gp;
      for (int64_t t : p["ids"].get_array()) gp.ids.push_back(static_cast<int32_t>(t));
      for (int64_t t : p["greedy"].get_array()) gp.greedy.push_back(static_cast<int32_t>(t));
      for (double m : p["margins"].get_array()) gp.margins.push_back(m);
      for (double x : p["logits_first"].get_array())
        gp.logits_first.push_back(static_cast<float>(x));
      for (double x : p["logits_last"].get_array()) gp.logits_last.push_back(static_cast<float>(x));
      if (gp.ids.empty() || static_cast<int>(gp.greedy.size()) != g.steps ||
          static_cast<int>(gp.margins.size()) != g.steps)
        throw file_error(path, "a prompt has no ids, or greedy/margins are not `steps` long");
      g.prompts.push_back(std::move(gp));
    }
  } catch (const simdjson::simdjson_error& e) {
    throw file_error(path, std::string("unexpected golden JSON layout: ") + e.what());
  }
  if (g.prompts.empty() || g.steps < 1) throw file_error(path, "no prompts or no steps");
  return g;
}

}  // namespace

int cmd_hf(int argc, char** argv) {
  Args a(argc, argv, {"model", "golden", "tol", "max-excused"}, {"cpu", "ties-ok"});
  const std::string path = a.require("model"), golden_path = a.require("golden");
  const bool cpu = a.has("cpu"), ties_ok = a.has("ties-ok");
  const Golden g = load_golden(golden_path);
  std::string why;
  if (!cpu && !gpu_available(&why))
    throw Error("hf needs a CUDA device (" + why + "); --cpu runs the CPU executor instead");

  auto file = ModelFile::open(path);
  const Tolerance deftol = default_tolerance(*file);
  const double tol = a.real("tol", deftol.tol);
  ExcuseCap cap;
  cap.max_share = a.real("max-excused", 0.01);
  const int n = static_cast<int>(g.prompts.size());
  std::vector<std::vector<int32_t>> prompts;
  int ctx = 0;
  for (const auto& p : g.prompts) {
    prompts.push_back(p.ids);
    ctx = std::max(ctx, static_cast<int>(p.ids.size()) + g.steps);
  }
  ctx = (ctx + 63) / 64 * 64;
  const char* test_name = cpu ? "cpu" : "gpu";
  std::printf(
      "hf %s: %s (%s) vs transformers, %d prompts x %d tokens, golden margin threshold "
      "%s, teacher-forced on the golden tokens, tol %s of the row's max |logit| (%s)%s\n",
      path.c_str(), g.architecture.c_str(), g.dtype.c_str(), n, g.steps,
      fmt(g.margin_threshold).c_str(), fmt(tol).c_str(),
      a.has("tol") ? "--tol" : deftol.basis.c_str(),
      ties_ok ? ", excused divergences allowed up to the cap" : "");
  std::fflush(stdout);

  GreedyRun run;
  {
    auto ex = cpu ? make_cpu_executor(file, n, ctx) : make_gpu_executor(file, n, ctx);
    std::vector<std::vector<int32_t>> forced;
    for (const auto& p : g.prompts) forced.push_back(p.greedy);
    run = run_forced(*ex, prompts, g.steps, forced);
  }

  const std::string name = g.model.empty() ? basename_of(path) : g.model;
  Report rep("hf " + name);
  int equal = 0;
  double worst_rel = 0;
  const std::vector<float> none;
  for (int p = 0; p < n; ++p) {
    const GoldenPrompt& gp = g.prompts[p];
    StreamCompare c;
    for (int s = 0; s < g.steps; ++s) {
      const std::vector<float>& ref =
          s == 0 ? gp.logits_first : (s == g.steps - 1 ? gp.logits_last : none);
      c.step(gp.greedy[s], run.tokens[p][s], ref, run.logits[p][s], gp.margins[s]);
    }
    const Verdict v = judge(c, tol, ties_ok);
    cap.add(c, v);
    equal += c.equal_tokens();
    if (!(c.worst_rel() <= worst_rel)) worst_rel = c.worst_rel();
    std::string d = "len " + std::to_string(gp.ids.size()) + ", tokens equal " +
                    std::to_string(c.equal_tokens()) + "/" + std::to_string(g.steps) +
                    ", max |dlogit| " + fmt(c.worst_abs()) + " (rel " + fmt(c.worst_rel()) +
                    ") over " + std::to_string(c.compared()) + " steps, min golden margin " +
                    fmt(c.min_ref_margin());
    const std::string divs = describe_divergences(c, "transformers", test_name);
    if (!divs.empty()) d += "; " + divs;
    if (!v.why.empty()) d += "; " + v.why;
    rep.add({name + " prompt " + std::to_string(p), v.pass, d});
  }
  rep.add({name + " excused share", cap.ok(), cap.summary()});
  char extra[512];
  std::snprintf(extra, sizeof extra,
                "tokens equal %d/%d, max rel |dlogit| %s (tol %s, %s x the reference measurement "
                "%s), %s, %s %.1f s",
                equal, n * g.steps, fmt(worst_rel).c_str(), fmt(tol).c_str(),
                fmt(worst_rel / deftol.measured, 2).c_str(), fmt(deftol.measured).c_str(),
                cap.summary().c_str(), test_name, run.seconds);
  return rep.finish(extra);
}

}  // namespace rz::verify
