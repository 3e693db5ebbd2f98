// rz bench's human output: markdown tables in the layout of its predecessor gpu_decode_bench, which
// scripts/gpu_bench.sh and docs/performance.md read (a "## rz CUDA executor: LABEL on DEVICE"
// heading; tables whose headers start "| shape, format | pp", "| shape, format | B=" and
// "| shape, format | weight bytes"), plus the prefill's TFLOP/s and the peak memory.
#pragma once
#include <string>

#include "apps/bench/bench_results.hpp"

namespace rz::bench {

std::string markdown_report(const BenchRun& run);

// 25325.4 -> "25,325"; values under 100 keep one decimal; NaN or negative -> "n/a".
std::string grouped(double x);

}  // namespace rz::bench
