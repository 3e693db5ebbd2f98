// What rz bench asks of the device it runs on, for either executor: its name (for the report and
// the limit table), the memory in use after each workload, and the CUDA launch switch --no-pdl
// sets. The CUDA parts are compiled only in a CUDA build; elsewhere they report nothing.
#pragma once
#include <cstdint>
#include <string>

namespace rz::bench {

// "cuda": the name of CUDA device `gpu` ("NVIDIA H200"); "cpu": the CPU's model name from
// /proc/cpuinfo, or "CPU" when it has none.
std::string device_name(const std::string& device, int gpu);

// The memory the process holds on `device`, sampled after a workload while its executor is
// alive. "cpu": the peak resident set size so far (getrusage ru_maxrss), which only grows; "cuda":
// the device's used memory (total - free from cudaMemGetInfo), which counts the CUDA context and
// any other process on the device too. 0 when it cannot be read.
uint64_t memory_in_use(const std::string& device, int gpu);

// What memory_in_use counts, for the report: "peak RSS" or "device memory in use".
const char* memory_kind(const std::string& device);

// Programmatic dependent launch for every kernel (kernels/launch.hpp); on by default. A no-op in
// a build without CUDA.
void set_programmatic_launch(bool on);

}  // namespace rz::bench
