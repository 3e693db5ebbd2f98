// Names and totals of rz bench's results (see bench_results.hpp).
#include "apps/bench/bench_results.hpp"

#include <algorithm>

namespace rz::bench {

const char* kind_name(WorkloadKind k) {
  switch (k) {
    case WorkloadKind::pp: return "pp";
    case WorkloadKind::tg: return "tg";
    case WorkloadKind::batched: return "batched";
  }
  return "?";
}

std::string Workload::name() const {
  switch (kind) {
    case WorkloadKind::pp: return "pp" + std::to_string(tokens);
    case WorkloadKind::tg: return "tg" + std::to_string(tokens);
    case WorkloadKind::batched: return "B=" + std::to_string(batch);
  }
  return "?";
}

bool BenchRun::ok() const {
  return std::all_of(workloads.begin(), workloads.end(), [](const Workload& w) { return w.ok(); });
}

uint64_t BenchRun::peak_mem_bytes() const {
  uint64_t m = 0;
  for (const auto& w : workloads) m = std::max(m, w.peak_mem_bytes);
  return m;
}

}  // namespace rz::bench
