// A made-up rz bench result for the report tests (bench_json_test.cpp, bench_report_test.cpp):
// pp512, tg128 and batched B=1, 4 (B=4 failed) on an "NVIDIA H200" with known numbers.
#pragma once
#include "apps/bench/bench_results.hpp"

namespace rz::bench::test {

inline BenchRun sample_run() {
  BenchRun r;
  r.options.model = "/tmp/sbs-qwen2.5-1.5b-q4_k_m.gguf";
  r.options.label = "qwen2.5-1.5b-q4_k_m";
  r.options.batches = std::vector<int>{1, 4};
  r.device = "cuda";
  r.device_name = "NVIDIA H200";
  r.executor = "cuda: NVIDIA H200";
  r.memory_plan = "weights 0.98 GiB, scratch 0.2 GiB";
  r.memory_kind = "device memory in use";
  r.commit = "0123456789ab";
  r.config.n_layer = 28;
  r.config.n_embd = 1536;
  r.config.n_head = 12;
  r.config.n_head_kv = 2;
  r.config.head_dim = 128;
  r.config.n_ff = 8960;
  r.config.n_vocab = 151936;
  r.cost.weight_bytes = 1e9;
  r.cost.kv_bytes_per_token = 28672;
  r.limits.bandwidth = 4e12;
  r.limits.bandwidth_source = "test table";
  r.limits.peak_flops = 1e15;
  r.limits.peak_flops_source = "test peak";
  Workload pp;
  pp.kind = WorkloadKind::pp;
  pp.tokens = 512;
  pp.seconds = 0.01;
  pp.flops = 5e12;
  pp.peak_mem_bytes = 3ull << 30;
  Workload tg;
  tg.kind = WorkloadKind::tg;
  tg.tokens = 128;
  tg.prompt = 1;
  tg.seconds = 0.64;  // 5 ms a step: 200 tokens/s
  tg.bytes_per_step = 4e9;
  tg.kv_bytes_per_step = 2e6;
  tg.flops = 1e12;
  tg.peak_mem_bytes = 3ull << 30;
  Workload b1 = tg;
  b1.kind = WorkloadKind::batched;
  b1.prompt = 128;
  b1.prefill_seconds = 0.01;
  b1.prefill_flops = 1e11;
  Workload b4 = b1;
  b4.batch = 4;
  b4.seconds = -1;
  b4.error = "no free KV block";
  b4.peak_mem_bytes = 5ull << 30;
  r.workloads = {pp, tg, b1, b4};
  r.total_seconds = 12.5;
  return r;
}

}  // namespace rz::bench::test
