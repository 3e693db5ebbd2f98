// gpu_verify fp8: what `--weights fp8` (GpuExecutorOptions::fp8_weights) changes, measured on
// one F16/BF16 model file: the GPU executor with the stored weights runs the prompts greedily, the
// GPU executor with FP8 weights runs them teacher-forced on those tokens, and every step's logits
// compare position by position. Per prompt and overall: the share of steps whose greedy picks
// agree, the first step where they differ, max |dlogit| relative to the row's max |logit|, and
// the RMS of dlogit relative to the RMS of the row (averaged over rows). The case passes when the
// agreement is at least --min-agree and the max relative error at most --tol. The defaults (0.3,
// 0.75) catch a broken conversion (a wrong scale or layout gives agreement near 1 / vocab and
// errors of the row's size), not FP8's own error: on random-weight models that is large and
// grows with depth (docs/gpu.md "FP8 measurements": qwen2.5-1.5b's shape 0.48 agreement, rms
// 0.27), so the figures are the measurement, printed for every run.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "formats/common.hpp"
#include "tests/gpu_verify/verify_commands.hpp"
#include "tests/gpu_verify/verify_common.hpp"

namespace rz::verify {

int cmd_fp8(int argc, char** argv) {
  Args a(argc, argv, {"model", "prompts", "tokens", "seed", "tol", "min-agree"}, {"text"});
  const std::string path = a.require("model");
  const int n = static_cast<int>(a.integer("prompts", 8));
  const int tokens = static_cast<int>(a.integer("tokens", 32));
  const uint64_t seed = static_cast<uint64_t>(a.integer("seed", 1));
  const double tol = a.real("tol", 0.75);
  const double min_agree = a.real("min-agree", 0.3);
  if (n < 1 || tokens < 1) throw Error("--prompts and --tokens must be at least 1");
  std::string why;
  if (!gpu_available(&why)) throw Error("fp8 needs a CUDA device (" + why + ")");

  auto file = ModelFile::open(path);
  const auto prompts =
      a.has("text") ? text_prompts(*file, n) : random_prompts(n, file->config().n_vocab, seed);
  int ctx = 0;
  for (const auto& p : prompts) ctx = std::max(ctx, static_cast<int>(p.size()) + tokens);
  ctx = (ctx + 63) / 64 * 64;
  std::printf(
      "fp8 %s: %d %s prompts x %d tokens, reference gpu with stored weights, tested gpu with "
      "--weights fp8 (teacher-forced), pass: agreement >= %s and max rel |dlogit| <= %s\n",
      path.c_str(), n, a.has("text") ? "text" : "random-id", tokens, fmt(min_agree).c_str(),
      fmt(tol).c_str());
  std::fflush(stdout);

  GreedyRun ref, test;
  {
    auto ex = make_gpu_executor(file, n, ctx);
    ref = run_greedy(*ex, prompts, tokens);
  }
  {
    auto ex = make_gpu_executor(file, n, ctx, /*fp8=*/true);
    test = run_forced(*ex, prompts, tokens, ref.tokens);
  }

  const std::string model = basename_of(path);
  Report rep("fp8 " + model + (a.has("text") ? " (text)" : ""));
  int agree_all = 0;
  double worst_rel = 0, rms_sum = 0;
  for (int p = 0; p < n; ++p) {
    int agree = 0, first = -1;
    double prompt_worst = 0, prompt_rms = 0;
    for (int s = 0; s < tokens; ++s) {
      const auto& r = ref.logits[p][s];
      const auto& t = test.logits[p][s];
      if (ref.tokens[p][s] == test.tokens[p][s])
        ++agree;
      else if (first < 0)
        first = s;
      double max_ref = 0, max_d = 0, sq_d = 0, sq_r = 0;
      for (size_t i = 0; i < r.size(); ++i) {
        const double d = double(t[i]) - double(r[i]);
        max_ref = std::max(max_ref, std::fabs(double(r[i])));
        if (!(std::fabs(d) <= max_d)) max_d = std::fabs(d);  // NaN sticks
        sq_d += d * d;
        sq_r += double(r[i]) * double(r[i]);
      }
      const double rel = max_d / std::max(max_ref, 1e-30);
      if (!(rel <= prompt_worst)) prompt_worst = rel;
      prompt_rms += std::sqrt(sq_d / std::max(sq_r, 1e-300));
    }
    prompt_rms /= tokens;
    agree_all += agree;
    rms_sum += prompt_rms;
    if (!(prompt_worst <= worst_rel)) worst_rel = prompt_worst;
    rep.add({model + " prompt " + std::to_string(p), prompt_worst <= tol,
             "len " + std::to_string(prompts[p].size()) + ", picks agree " + std::to_string(agree) +
                 "/" + std::to_string(tokens) + ", first difference " +
                 (first < 0 ? std::string("none") : "step " + std::to_string(first)) +
                 ", max rel |dlogit| " + fmt(prompt_worst) + ", rms rel " + fmt(prompt_rms)});
  }
  const double agreement = double(agree_all) / double(n * tokens);
  rep.add({model + " agreement", agreement >= min_agree,
           fmt(agreement) + " of " + std::to_string(n * tokens) + " greedy picks"});
  char extra[256];
  std::snprintf(extra, sizeof extra,
                "agreement %s, max rel |dlogit| %s, mean rms rel %s, stored %.1f s, fp8 %.1f s",
                fmt(agreement).c_str(), fmt(worst_rel).c_str(), fmt(rms_sum / n).c_str(),
                ref.seconds, test.seconds);
  return rep.finish(extra);
}

}  // namespace rz::verify
