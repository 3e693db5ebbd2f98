// gpu_verify's logit tolerances, from the errors measured on the H200 or H100
// (tests/gpu_verify/README.md "Tolerances" lists where each number comes from). A tolerance is
// kMargin x the measured max relative |dlogit| (max |test - ref| / max |ref| of a row) for the
// model's shape and weight format; where nothing was measured for that pair, the largest
// measurement of that format (or of any format) stands in and the tool says so, and prints the
// measured value for the next run to fill in. Header-only so that tests/gpu/verify_harness_test.cpp
// checks the lookup.
#pragma once
#include <algorithm>
#include <string>
#include <string_view>

namespace rz::verify {

// The margin over a measured error that a tolerance allows.
inline constexpr double kToleranceMargin = 3.0;

struct MeasuredError {
  const char* shape;   // shape_name() of the model
  const char* format;  // dominant type of the layers' matrices (ggml name: "Q4_K", "F32", ...)
  double rel;          // measured max relative |dlogit| against the reference
  const char* source;  // where it was measured
  const char* device = "H200";
  // Whether models of other shapes may borrow it. Gemma 3's error is a property of that model (its
  // activations), not of its format, so it serves only itself.
  bool stand_in = true;
};

// H200, bench/gpu-runs/2026-11-22-h200-verify.log (commit 8ac345f): `compare` (8 prompts x 32
// tokens vs the CPU executor) for tiny and qwen2.5-1.5b synth models and SmolLM2, `hf` (8 x 64
// vs transformers) for the hf-tiny models. Batch (GPU alone vs batched) measurements of the same
// log are below these (tiny q4_k_m 7.68e-4 is 1.08 x its compare value; SmolLM2 1.69e-3, 1.02 x).
inline constexpr MeasuredError kMeasured[] = {
    {"tiny", "Q4_K", 7.11e-4, "compare tiny-q4_k_m"},
    {"tiny", "Q8_0", 7.36e-4, "compare tiny-q8_0"},
    {"tiny", "Q4_0", 6.23e-4, "compare tiny-q4_0"},
    {"tiny", "Q4_1", 7.60e-4, "compare tiny-q4_1"},
    {"tiny", "F16", 5.15e-4, "compare tiny-f16"},
    {"tiny", "BF16", 5.28e-4, "compare tiny-bf16"},
    {"qwen2.5-1.5b", "Q4_K", 3.21e-3, "compare qwen2.5-1.5b-q4_k_m"},
    {"qwen2.5-1.5b", "Q8_0", 2.99e-3, "compare qwen2.5-1.5b-q8_0"},
    {"qwen2.5-1.5b", "Q4_0", 3.66e-3, "compare qwen2.5-1.5b-q4_0"},
    {"qwen2.5-1.5b", "Q4_1", 2.95e-3, "compare qwen2.5-1.5b-q4_1"},
    {"qwen2.5-1.5b", "F16", 2.10e-3, "compare qwen2.5-1.5b-f16"},
    {"qwen2.5-1.5b", "BF16", 2.41e-3, "compare qwen2.5-1.5b-bf16"},
    {"hf-tiny", "F32", 2.24e-3, "hf llama 2.22e-3, hf qwen2 2.24e-3"},
    {"hf-tiny", "BF16", 2.74e-3, "hf mistral"},
    {"smollm2-135m", "Q4_1", 1.66e-3, "compare SmolLM2 text 1.66e-3, ids 1.64e-3"},
    // bench/gpu-runs/2026-11-26-h100-native-types-gemma.log: the real Gemma 3 270M Q4_K_M (Q5_0
    // holds most of its layers' elements: its 640-column rows are no multiple of 256). Random-id
    // prompts move its logits ~10x more than text (text 9.3e-4); tokens equal 256/256, and batch
    // (prefill vs decode kernels) 8.2e-3 with 386/386 tokens equal.
    {"gemma3-270m", "Q5_0", 1.13e-2, "compare gemma-3-270m-q4_k_m ids 1.13e-2", "H100", false},
};

// The shapes measured, by layer count and hidden size.
inline const char* shape_name(int n_layer, int n_embd) {
  if (n_layer == 2 && n_embd == 256) return "tiny";  // rz synth --shape tiny
  if (n_layer == 28 && n_embd == 1536) return "qwen2.5-1.5b";
  if (n_layer == 4 && n_embd == 256) return "hf-tiny";  // hf_reference.py
  if (n_layer == 30 && n_embd == 576) return "smollm2-135m";
  if (n_layer == 18 && n_embd == 640) return "gemma3-270m";
  return "";
}

struct Tolerance {
  double tol = 0;       // relative, kToleranceMargin x measured
  double measured = 0;  // the measurement it rests on
  std::string basis;    // which measurement, or why another one stands in
};

inline Tolerance tolerance_for(std::string_view shape, std::string_view format) {
  const MeasuredError* same_format = nullptr;
  const MeasuredError* any = nullptr;
  for (const MeasuredError& m : kMeasured) {
    if (m.shape == shape && m.format == format)
      return {
          kToleranceMargin * m.rel, m.rel,
          std::string(m.source) + " (" + m.device + "), x" + std::to_string(int(kToleranceMargin))};
    if (!m.stand_in) continue;
    if (m.format == format && (!same_format || m.rel > same_format->rel)) same_format = &m;
    if (!any || m.rel > any->rel) any = &m;
  }
  const MeasuredError* m = same_format ? same_format : any;
  std::string why =
      std::string("nothing measured for ") +
      (shape.empty() ? std::string("this shape") : std::string(shape)) + " " + std::string(format) +
      ": the largest " + (same_format ? std::string(format) + " " : std::string()) +
      "measurement stands in (" + m->source + "), x" + std::to_string(int(kToleranceMargin)) +
      "; add this run's measured value to kMeasured";
  return {kToleranceMargin * m->rel, m->rel, why};
}

}  // namespace rz::verify
