// gpu_verify: end-to-end correctness checks of the CUDA executor (tests/gpu_verify/README.md).
//   gpu_verify compare --model FILE [--prompts 8] [--tokens 32] [--seed S] [--tol X] [--text]
//                      [--ties-ok] [--max-excused F] [--min-margin R] [--pool K] [--cpu-vs-cpu]
//   gpu_verify hf --model DIR --golden FILE.json [--tol X] [--ties-ok] [--max-excused F] [--cpu]
//   gpu_verify batch --model FILE [--n 16] [--tokens 32] [--slots 6] [--step-tokens 64]
//                    [--seed S] [--tol X] [--text] [--ties-ok] [--max-excused F]
//                    [--min-margin R] [--pool K] [--cpu] [--fp8]
//   gpu_verify fp8 --model FILE [--prompts 8] [--tokens 32] [--seed S] [--text] [--tol X]
//                  [--min-agree F]
// Exit code: 0 every case passed, 1 a case failed, 2 bad usage or an error before any case ran.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "formats/common.hpp"
#include "tests/gpu_verify/verify_commands.hpp"

namespace {

void usage(FILE* to) {
  std::fputs(
      "usage: gpu_verify SUBCOMMAND [flags]\n"
      "  compare --model FILE [--prompts 8] [--tokens 32] [--seed S] [--tol X] [--text]\n"
      "          [--ties-ok] [--max-excused F] [--min-margin R] [--pool K] [--cpu-vs-cpu]\n"
      "      GPU executor (teacher-forced on the CPU's tokens) vs CPU executor: same greedy "
      "picks,\n"
      "      logits within tol (relative to the row's max |cpu logit|; default 3 x the H200\n"
      "      measurement for the model's shape and format). --cpu-vs-cpu: a second CPU executor\n"
      "      instead of the GPU, bit-identical.\n"
      "  hf --model DIR --golden FILE.json [--tol X] [--ties-ok] [--max-excused F] [--cpu]\n"
      "      GPU (or --cpu) executor vs transformers' greedy tokens from hf_reference.py\n"
      "  batch --model FILE [--n 16] [--tokens 32] [--slots 6] [--step-tokens 64] [--seed S]\n"
      "        [--tol X] [--text] [--ties-ok] [--max-excused F] [--min-margin R] [--pool K] "
      "[--cpu] [--fp8]\n"
      "      batch invariance: all through BatchedDecodeState (--step-tokens per step: prompts in\n"
      "      chunks, mixed with decodes) with staggered joins and slot recycling, then each\n"
      "      alone forced on its batched tokens: same tokens, logits\n"
      "      bit-identical where the same kernels ran, within tol elsewhere (GPU, or --cpu;\n"
      "      --fp8: the GPU with --weights fp8)\n"
      "  fp8 --model FILE [--prompts 8] [--tokens 32] [--seed S] [--text] [--tol X] "
      "[--min-agree F]\n"
      "      --weights fp8 vs the stored F16/BF16 weights, both on the GPU (fp8 teacher-forced):\n"
      "      greedy agreement >= F and max |dlogit| <= X of the row's max |logit|\n"
      "  --ties-ok: a divergence where the reference's top-2 margin is below the |dlogit|\n"
      "      measured on that row does not fail the case; --max-excused F (default 0.01): the\n"
      "      largest share of steps with such excused divergences over the run\n"
      "  --min-margin R --pool K: run K candidate prompts on the reference first and keep those\n"
      "      whose every step has a top-2 margin >= R x the row's max |logit|\n",
      to);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  try {
    if (cmd == "compare") return rz::verify::cmd_compare(argc - 2, argv + 2);
    if (cmd == "hf") return rz::verify::cmd_hf(argc - 2, argv + 2);
    if (cmd == "batch") return rz::verify::cmd_batch(argc - 2, argv + 2);
    if (cmd == "fp8") return rz::verify::cmd_fp8(argc - 2, argv + 2);
    std::fprintf(stderr, "gpu_verify: unknown subcommand '%s'\n", cmd.c_str());
    usage(stderr);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_verify %s: error: %s\n", cmd.c_str(), e.what());
    return 2;
  }
}
