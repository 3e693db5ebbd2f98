// What one `rz bench` run measured, as plain data: bench_runner.cpp fills it, bench_report.cpp
// (markdown tables) and bench_json.cpp (one JSON object) print it, through the same figures
// (bench_figures.hpp), so the tables and the JSON always agree.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "apps/bench/bench_cost.hpp"
#include "apps/bench/bench_options.hpp"
#include "formats/model_config.hpp"

namespace rz::bench {

// The limits the figures are taken against (bench_limits.hpp finds them); 0 where none is known.
struct Limits {
  double bandwidth = 0;          // bytes/s
  std::string bandwidth_source;  // "NVIDIA H200 table: measured device-to-device copy ...", ...
  double peak_flops = 0;         // FLOP/s
  std::string peak_flops_source;
};

enum class WorkloadKind { pp, tg, batched };
const char* kind_name(WorkloadKind k);  // "pp", "tg", "batched"

// One measured workload. `seconds` is the median of the timed runs of its timed part: the prefill
// for pp; the decode steps for tg (after an untimed 1-token prompt) and batched (whose prefill of
// the B prompts in one step is timed apart, `prefill_seconds`).
struct Workload {
  WorkloadKind kind = WorkloadKind::pp;
  int batch = 1;                 // sequences
  int tokens = 0;                // pp: prompt tokens; tg, batched: decode steps
  int prompt = 0;                // tg, batched: tokens in each slot before the first decode step
  double seconds = -1;           // median of the timed runs; <= 0 when not measured
  double flops = 0;              // of the timed part (bench_cost.hpp)
  double bytes_per_step = 0;     // tg, batched: weights + mean KV read per decode step
  double kv_bytes_per_step = 0;  // tg, batched: the KV part of it
  double prefill_seconds = -1;   // batched: the B prompts in one step
  double prefill_flops = 0;      // batched
  uint64_t peak_mem_bytes = 0;   // memory in use after the workload (bench_device.hpp); 0: unknown
  std::string error;             // not empty: the workload failed and its figures are unset

  bool ok() const { return error.empty() && seconds > 0; }
  std::string name() const;  // "pp512", "tg128", "B=16"
};

struct BenchRun {
  BenchOptions options;     // as run: batches resolved, label set
  std::string device;       // "cpu" or "cuda"
  std::string device_name;  // "NVIDIA H200", the CPU's model name
  std::string executor;     // the executor factory's description ("cpu, 2 threads", ...)
  std::string memory_plan;  // cuda: the last executor's memory plan; "" on the cpu
  std::string memory_kind;  // what peak_mem_bytes counts: "device memory in use" or "peak RSS"
  std::string commit;       // apps/build_info.hpp; "" when unknown
  ModelConfig config;       // the model's dimensions
  ModelCost cost;
  Limits limits;
  std::vector<Workload> workloads;  // pp, tg, then batched in --batches order
  double total_seconds = 0;

  bool ok() const;                  // every workload measured
  uint64_t peak_mem_bytes() const;  // the largest of the workloads'
};

}  // namespace rz::bench
