// The limits rz bench's figures are taken against (bench_figures.hpp): memory bandwidth for
// decode, dense fp16 tensor FLOP/s for prefill. On a GPU they come from a table by device name,
// on the CPU the bandwidth is a memcpy measured in the process; --bandwidth / --peak-tflops
// override either. Every Limits says where each figure came from.
#pragma once
#include <optional>
#include <string>

#include "apps/bench/bench_results.hpp"

namespace rz::bench {

// One row of the GPU table. `match` is one or more whole words of the name cudaGetDeviceProperties
// reports ("NVIDIA H200", "NVIDIA H100 80GB HBM3"); the first row whose words the name contains
// wins, so the more specific rows come first.
struct GpuSpec {
  const char* match;
  const char* model;          // what the row stands for, printed with the limit
  double spec_bandwidth;      // bytes/s, the data sheet's HBM figure
  double measured_bandwidth;  // bytes/s, a device-to-device copy measured on such a GPU; 0: none
  double dense_fp16_flops;    // FLOP/s, tensor cores, dense (no sparsity), fp32 accumulate
};

std::optional<GpuSpec> gpu_spec(const std::string& device_name);

// The limits on a GPU named `device_name`: the table's measured copy bandwidth where it has one,
// else its data-sheet figure; `override_*` (bytes/s, FLOP/s; 0 = none) win. A GPU missing from
// the table has no limits unless overridden.
Limits gpu_limits(const std::string& device_name, double override_bandwidth, double override_flops);

// The limits on the CPU: `override_bandwidth` or else `measured_bandwidth` (memcpy_bandwidth());
// FLOP/s only from `override_flops` (no peak is assumed for a CPU).
Limits cpu_limits(double measured_bandwidth, double override_bandwidth, double override_flops);

// Best of five single-threaded memcpy passes over 256 MiB, counting the bytes read and written
// (bytes/s), as bench/RESULTS-cpu.md's figures were taken. Allocates 512 MiB for the duration, so
// rz bench runs it after the workloads (their peak RSS stays theirs).
double memcpy_bandwidth();

}  // namespace rz::bench
