// rz bench's options: the flags it declares (one place, so `rz bench --help` lists them all) and
// their checked values. apps/cmd_bench.cpp parses argv with bench_flags() and turns the result
// into BenchOptions here; the measuring (bench_runner.hpp) reads only BenchOptions.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "apps/cli.hpp"

namespace rz::bench {

struct BenchOptions {
  std::string model;
  std::string label;            // the table's row name; default: the model file's stem
  std::string device = "auto";  // auto|cpu|cuda as given (resolve_device makes it cpu or cuda)
  int gpu = 0;                  // cuda: device index
  int threads = 0;              // cpu: worker threads; 0: all cores
  int pp = 512;                 // one prefill of this many tokens; 0: skip
  int tg = 128;                 // decode steps at B=1 after a 1-token prompt; 0: skip
  std::optional<std::vector<int>> batches;  // batched decode; unset: default_batches(device)
  int prompt = 128;                         // batched: prompt tokens per sequence
  int gen = 128;                            // batched: decode steps
  int reps = 3;                             // timed runs per figure (the median is reported)
  uint64_t seed = 1;                        // prompt token ids
  int context = 0;          // > 0: every executor gets this context (else the smallest fit)
  bool cuda_graphs = true;  // cuda: --no-graphs turns them off
  bool qmm = true;          // cuda: --no-qmm
  bool int8 = false;        // cuda: --int8
  bool fp8 = false;         // cuda: --weights fp8
  bool fp16_copies = true;  // cuda: --no-fp16-copies
  bool pdl = true;          // cuda: --no-pdl
  bool fused_forms = true;  // cuda: --no-fused-forms
  bool tune_gemm = true;    // cuda: --no-gemm-tune
  double bandwidth = 0;     // bytes/s from --bandwidth (given in GB/s); 0: table or measured
  double peak_flops = 0;    // FLOP/s from --peak-tflops; 0: table (cuda) or none
  bool json = false;        // print one JSON object instead of the tables
  std::string json_out;     // also write the JSON object to this file
};

// The flags of `rz bench`.
cli::Flags bench_flags();

// The options a parsed bench_flags() holds. Throws rz::Error("--flag: ...") for a missing
// --model and for malformed or out-of-range values.
BenchOptions bench_options(const cli::Flags& f);

// "1,4,16" -> {1, 4, 16}; "" -> {} (no batched part). Throws rz::Error naming --batches for an
// entry that is not an integer in [1, 4096].
std::vector<int> parse_batches(const std::string& list);

// The batch sizes when --batches is not given: 1,4,16,64,256 on cuda, 1,8 on the cpu.
std::vector<int> default_batches(const std::string& device);

// The file name without directories and extension ("/tmp/q.gguf" -> "q").
std::string model_stem(const std::string& path);

}  // namespace rz::bench
