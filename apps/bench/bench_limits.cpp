// Device limits for rz bench (see bench_limits.hpp).
#include "apps/bench/bench_limits.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <utility>

namespace rz::bench {
namespace {

// Data-sheet figures of the SXM/NVL/PCIe parts (NVIDIA's H100 and H200 data sheets; the tensor
// figures there are with sparsity, the dense ones are half). The H200 copy rate is what this
// project measured on its H200 machines (bench/README-gpu.md) and what its MBU figures have used.
constexpr GpuSpec kGpus[] = {
    {"H200 NVL", "H200 NVL", 4.8e12, 0, 835e12}, {"H200", "H200 SXM", 4.8e12, 4.3e12, 989e12},
    {"H100 NVL", "H100 NVL", 3.9e12, 0, 835e12}, {"H100 PCIe", "H100 PCIe", 2.0e12, 0, 756e12},
    {"H100", "H100 SXM", 3.35e12, 0, 989e12},
};

std::string tb(double bytes_per_s) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f TB/s", bytes_per_s / 1e12);
  return buf;
}

std::string tflops(double flops) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.0f TFLOP/s", flops / 1e12);
  return buf;
}

}  // namespace

std::optional<GpuSpec> gpu_spec(const std::string& device_name) {
  const std::string name = " " + device_name + " ";  // whole words: "GH200" is not an H200
  for (const GpuSpec& g : kGpus)
    if (name.find(" " + std::string(g.match) + " ") != std::string::npos) return g;
  return std::nullopt;
}

Limits gpu_limits(const std::string& device_name, double override_bandwidth,
                  double override_flops) {
  Limits l;
  const auto spec = gpu_spec(device_name);
  if (override_bandwidth > 0) {
    l.bandwidth = override_bandwidth;
    l.bandwidth_source = "--bandwidth";
  } else if (spec && spec->measured_bandwidth > 0) {
    l.bandwidth = spec->measured_bandwidth;
    l.bandwidth_source = std::string(spec->model) + " table: measured device-to-device copy " +
                         tb(spec->measured_bandwidth) + " (HBM spec " + tb(spec->spec_bandwidth) +
                         ")";
  } else if (spec) {
    l.bandwidth = spec->spec_bandwidth;
    l.bandwidth_source = std::string(spec->model) + " table: HBM spec " + tb(spec->spec_bandwidth);
  } else {
    l.bandwidth_source = "none: '" + device_name + "' is not in the table (give --bandwidth)";
  }
  if (override_flops > 0) {
    l.peak_flops = override_flops;
    l.peak_flops_source = "--peak-tflops";
  } else if (spec) {
    l.peak_flops = spec->dense_fp16_flops;
    l.peak_flops_source = std::string(spec->model) + " table: dense fp16 tensor peak " +
                          tflops(spec->dense_fp16_flops);
  } else {
    l.peak_flops_source = "none: '" + device_name + "' is not in the table (give --peak-tflops)";
  }
  return l;
}

Limits cpu_limits(double measured_bandwidth, double override_bandwidth, double override_flops) {
  Limits l;
  if (override_bandwidth > 0) {
    l.bandwidth = override_bandwidth;
    l.bandwidth_source = "--bandwidth";
  } else {
    l.bandwidth = measured_bandwidth;
    char buf[128];
    std::snprintf(buf, sizeof buf, "memcpy measured here: %.1f GB/s (1 thread, read + write)",
                  measured_bandwidth / 1e9);
    l.bandwidth_source = buf;
  }
  if (override_flops > 0) {
    l.peak_flops = override_flops;
    l.peak_flops_source = "--peak-tflops";
  } else {
    l.peak_flops_source = "none for a CPU (give --peak-tflops)";
  }
  return l;
}

double memcpy_bandwidth() {
  using Clock = std::chrono::steady_clock;
  const size_t n = size_t(256) << 20;
  std::unique_ptr<char[]> a(new char[n]), b(new char[n]);
  std::memset(a.get(), 1, n);
  std::memset(b.get(), 2, n);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = Clock::now();
    std::memcpy(b.get(), a.get(), n);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (s > 0) best = std::max(best, 2.0 * n / s);
    std::swap(a, b);
  }
  volatile char sink = a[n - 1];  // the last copy is read
  (void)sink;
  return best;
}

}  // namespace rz::bench
