// rz bench's --json output: one JSON object with what ran (tool, commit when the build knows it,
// device, model, options, limits) and one entry per workload with the figures the tables show
// (bench_figures.hpp). Figures that do not apply or are unknown are null. Layout:
//
//   { "tool": "rz bench", "commit": "0123456789ab",            (absent when unknown)
//     "device": {"kind": "cuda", "name": "NVIDIA H200", "executor": "cuda: NVIDIA H200",
//                "memory_plan": "..."},
//     "model": {"path", "label", "arch", "n_layer", "n_embd", "n_head", "n_head_kv", "head_dim",
//               "n_ff", "n_vocab", "weight_bytes_per_step", "kv_bytes_per_token",
//               "layer_params", "output_params"},
//     "options": {"pp", "tg", "batches": [...], "prompt", "gen", "reps", "seed", "context"
//                 (null: the smallest that fits), "threads", "gpu", "cuda_graphs", "qmm",
//                 "int8_activations", "fp8_weights", "fp16_copies",
//                 "programmatic_launch"},
//     "limits": {"bandwidth_bytes_per_s", "bandwidth_source", "peak_flops", "peak_flops_source"},
//     "flops_formula": "...",
//     "memory_kind": "device memory in use" | "peak RSS", "peak_mem_bytes",
//     "workloads": [ {"name": "pp512" | "tg128" | "B=16", "kind": "pp" | "tg" | "batched",
//                     "batch", "tokens", "prompt", "ok", "error" (null when ok),
//                     "seconds", "tokens_per_s", "step_ms", "tflops", "flops",
//                     "bytes_per_step", "kv_bytes_per_step", "mbu",
//                     "limit": "bandwidth" | "compute", "limit_value", "limit_share",
//                     "ceiling_tokens_per_s", "prefill_seconds", "prefill_tokens_per_s",
//                     "prefill_tflops", "peak_mem_bytes"}, ... ],
//     "total_seconds", "ok" }
#pragma once
#include <string>

#include "apps/bench/bench_results.hpp"

namespace rz::bench {

std::string json_report(const BenchRun& run);

}  // namespace rz::bench
