// rz bench's arithmetic: the bytes and FLOPs a step costs (apps/bench/bench_cost.hpp), the figures
// a measured time comes to against the limits (bench_figures.hpp: tokens/s, MBU, TFLOP/s,
// ceilings), and the limits themselves (bench_limits.hpp: the GPU table, overrides, the CPU).
// Every expected value is worked out by hand in the comments.
#include <gtest/gtest.h>

#include <cmath>

#include "apps/bench/bench_cost.hpp"
#include "apps/bench/bench_figures.hpp"
#include "apps/bench/bench_limits.hpp"

namespace rz::bench {
namespace {

// The tests' tiny shape: n_embd 64, 4 heads of 16, 2 KV heads, n_ff 96, 2 layers, vocab 40.
ModelConfig tiny() {
  ModelConfig c;
  c.n_vocab = 40;
  c.n_embd = 64;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_head_kv = 2;
  c.head_dim = 16;
  c.n_ff = 96;
  return c;
}

TEST(BenchCost, ModelCostCountsMatricesKvAndAttention) {
  const ModelCost m = model_cost(tiny(), 1000, 2);
  // q_dim 64, kv_dim 32: 64 x (64 + 64) + 64 x 64 + 3 x 64 x 96 = 8192 + 4096 + 18432 = 30720
  // per layer, two layers.
  EXPECT_DOUBLE_EQ(m.layer_params, 61440);
  EXPECT_DOUBLE_EQ(m.output_params, 40 * 64);
  EXPECT_DOUBLE_EQ(m.attn_flops_per_pair, 4 * 2 * 4 * 16);  // 512
  EXPECT_DOUBLE_EQ(m.kv_bytes_per_token, 2 * 2 * 32 * 2);   // layers x K,V x kv_dim x fp16
  EXPECT_DOUBLE_EQ(m.weight_bytes, 1000);
  EXPECT_DOUBLE_EQ(model_cost(tiny(), 0, 4).kv_bytes_per_token, 512);  // fp32 on the cpu
  EXPECT_EQ(kv_element_bytes("cuda"), 2);
  EXPECT_EQ(kv_element_bytes("cpu"), 4);
}

TEST(BenchCost, PrefillAndDecodeFlops) {
  const ModelCost m = model_cost(tiny(), 1000, 2);
  // 10 tokens: 2 x 61440 x 10 + 2 x 2560 x 1 + 512 x (1 + 2 + ... + 10 = 55)
  EXPECT_DOUBLE_EQ(prefill_flops(m, 10), 1228800 + 5120 + 28160);
  // Slots hold 10 tokens; 3 steps at 4 slots: each slot holds 11, 12, 13 -> mean 12, x 4 = 48.
  EXPECT_DOUBLE_EQ(mean_kv_tokens(4, 10, 3), 48);
  EXPECT_DOUBLE_EQ(mean_kv_tokens(1, 1, 128), 1 + 64.5);
  EXPECT_DOUBLE_EQ(mean_kv_tokens(4, 10, 0), 0);
  // 12 tokens computed and sampled, 48 x 3 = 144 (query, key) pairs.
  EXPECT_DOUBLE_EQ(decode_flops(m, 4, 10, 3), 2 * 61440.0 * 12 + 2 * 2560.0 * 12 + 512.0 * 144);
  // Weights + 48 tokens of 256 bytes.
  EXPECT_DOUBLE_EQ(decode_bytes_per_step(m, 4, 10, 3), 1000 + 48 * 256);
  EXPECT_DOUBLE_EQ(step_flops(m, 0, 0, 0), 0);
}

Workload decode_workload(WorkloadKind kind, int batch, int steps, double seconds, double bytes) {
  Workload w;
  w.kind = kind;
  w.batch = batch;
  w.tokens = steps;
  w.prompt = 128;
  w.seconds = seconds;
  w.bytes_per_step = bytes;
  w.flops = 1e12;
  return w;
}

TEST(BenchFigures, DecodeMbuAndCeiling) {
  Limits lim;
  lim.bandwidth = 4e12;
  // 100 steps in 0.5 s: 5 ms a step, 200 tokens/s; 4 GB a step at 4 TB/s takes 1 ms: MBU 20 %,
  // ceiling 1000 tokens/s.
  const Figures f = figures(decode_workload(WorkloadKind::tg, 1, 100, 0.5, 4e9), lim);
  EXPECT_TRUE(f.bandwidth_bound);
  EXPECT_DOUBLE_EQ(f.tokens_per_s, 200);
  EXPECT_DOUBLE_EQ(f.step_ms, 5);
  EXPECT_DOUBLE_EQ(f.mbu, 0.2);
  EXPECT_DOUBLE_EQ(f.limit_share(), 0.2);
  EXPECT_DOUBLE_EQ(f.ceiling_tokens_per_s, 1000);
  EXPECT_DOUBLE_EQ(f.tflops, 2);  // 1e12 FLOPs in 0.5 s
  EXPECT_TRUE(std::isnan(f.flops_share));
  EXPECT_TRUE(std::isnan(f.prefill_tokens_per_s));
}

TEST(BenchFigures, BatchedCountsEverySequence) {
  Limits lim;
  lim.bandwidth = 1e12;
  Workload w = decode_workload(WorkloadKind::batched, 4, 128, 1.28, 2e9);
  w.prefill_seconds = 0.5;
  w.prefill_flops = 1e12;
  const Figures f = figures(w, lim);
  EXPECT_DOUBLE_EQ(f.step_ms, 10);
  EXPECT_DOUBLE_EQ(f.tokens_per_s, 400);           // 4 x 128 / 1.28
  EXPECT_DOUBLE_EQ(f.mbu, 0.2);                    // 2 GB / 10 ms / 1 TB/s
  EXPECT_DOUBLE_EQ(f.ceiling_tokens_per_s, 2000);  // 4 / (2 GB / 1 TB/s)
  EXPECT_DOUBLE_EQ(f.prefill_tokens_per_s, 1024);  // 4 x 128 / 0.5
  EXPECT_DOUBLE_EQ(f.prefill_tflops, 2);
}

TEST(BenchFigures, PrefillTflopsAgainstThePeak) {
  Limits lim;
  lim.bandwidth = 4e12;
  lim.peak_flops = 1e15;
  Workload w;
  w.kind = WorkloadKind::pp;
  w.tokens = 512;
  w.seconds = 0.01;
  w.flops = 5e12;
  const Figures f = figures(w, lim);
  EXPECT_FALSE(f.bandwidth_bound);
  EXPECT_DOUBLE_EQ(f.tokens_per_s, 51200);
  EXPECT_DOUBLE_EQ(f.step_ms, 10);
  EXPECT_DOUBLE_EQ(f.tflops, 500);
  EXPECT_DOUBLE_EQ(f.flops_share, 0.5);
  EXPECT_DOUBLE_EQ(f.limit_share(), 0.5);
  EXPECT_DOUBLE_EQ(f.ceiling_tokens_per_s, 102400);  // 512 x 1e15 / 5e12
  EXPECT_TRUE(std::isnan(f.mbu));
}

TEST(BenchFigures, UnknownLimitsAndFailuresGiveNaN) {
  const Figures no_limit = figures(decode_workload(WorkloadKind::tg, 1, 100, 0.5, 4e9), Limits{});
  EXPECT_DOUBLE_EQ(no_limit.tokens_per_s, 200);
  EXPECT_TRUE(std::isnan(no_limit.mbu));
  EXPECT_TRUE(std::isnan(no_limit.ceiling_tokens_per_s));

  Limits lim;
  lim.bandwidth = 4e12;
  Workload failed = decode_workload(WorkloadKind::tg, 1, 100, 0.5, 4e9);
  failed.error = "out of memory";
  const Figures f = figures(failed, lim);
  EXPECT_FALSE(failed.ok());
  EXPECT_TRUE(std::isnan(f.tokens_per_s));
  EXPECT_TRUE(std::isnan(f.mbu));
  EXPECT_TRUE(std::isnan(f.tflops));
  Workload unmeasured = decode_workload(WorkloadKind::tg, 1, 100, -1, 4e9);
  EXPECT_FALSE(unmeasured.ok());
  EXPECT_TRUE(std::isnan(figures(unmeasured, lim).step_ms));
}

TEST(BenchWorkload, Names) {
  Workload w;
  w.kind = WorkloadKind::pp;
  w.tokens = 512;
  EXPECT_EQ(w.name(), "pp512");
  w.kind = WorkloadKind::tg;
  w.tokens = 128;
  EXPECT_EQ(w.name(), "tg128");
  w.kind = WorkloadKind::batched;
  w.batch = 16;
  EXPECT_EQ(w.name(), "B=16");
  EXPECT_STREQ(kind_name(WorkloadKind::batched), "batched");
}

TEST(BenchLimits, GpuTableByName) {
  const auto h200 = gpu_spec("NVIDIA H200");
  ASSERT_TRUE(h200);
  EXPECT_DOUBLE_EQ(h200->spec_bandwidth, 4.8e12);
  EXPECT_DOUBLE_EQ(h200->measured_bandwidth, 4.3e12);
  EXPECT_DOUBLE_EQ(h200->dense_fp16_flops, 989e12);
  const auto h100 = gpu_spec("NVIDIA H100 80GB HBM3");
  ASSERT_TRUE(h100);
  EXPECT_DOUBLE_EQ(h100->spec_bandwidth, 3.35e12);
  EXPECT_DOUBLE_EQ(h100->dense_fp16_flops, 989e12);
  ASSERT_TRUE(gpu_spec("NVIDIA H100 PCIe"));
  EXPECT_DOUBLE_EQ(gpu_spec("NVIDIA H100 PCIe")->spec_bandwidth, 2.0e12);
  ASSERT_TRUE(gpu_spec("NVIDIA H200 NVL"));
  EXPECT_STREQ(gpu_spec("NVIDIA H200 NVL")->model, "H200 NVL");
  EXPECT_FALSE(gpu_spec("NVIDIA GH200 480GB"));  // whole words only
  EXPECT_FALSE(gpu_spec("NVIDIA GeForce RTX 4090"));
}

TEST(BenchLimits, GpuLimitsPreferTheMeasuredCopyThenTheSpec) {
  const Limits h200 = gpu_limits("NVIDIA H200", 0, 0);
  EXPECT_DOUBLE_EQ(h200.bandwidth, 4.3e12);
  EXPECT_NE(h200.bandwidth_source.find("measured"), std::string::npos) << h200.bandwidth_source;
  EXPECT_NE(h200.bandwidth_source.find("4.80 TB/s"), std::string::npos) << h200.bandwidth_source;
  EXPECT_DOUBLE_EQ(h200.peak_flops, 989e12);
  const Limits h100 = gpu_limits("NVIDIA H100 80GB HBM3", 0, 0);
  EXPECT_DOUBLE_EQ(h100.bandwidth, 3.35e12);
  EXPECT_NE(h100.bandwidth_source.find("spec"), std::string::npos) << h100.bandwidth_source;
  const Limits over = gpu_limits("NVIDIA H200", 4e12, 500e12);
  EXPECT_DOUBLE_EQ(over.bandwidth, 4e12);
  EXPECT_EQ(over.bandwidth_source, "--bandwidth");
  EXPECT_DOUBLE_EQ(over.peak_flops, 500e12);
  EXPECT_EQ(over.peak_flops_source, "--peak-tflops");
  const Limits unknown = gpu_limits("NVIDIA L4", 0, 0);
  EXPECT_EQ(unknown.bandwidth, 0);
  EXPECT_EQ(unknown.peak_flops, 0);
  EXPECT_NE(unknown.bandwidth_source.find("--bandwidth"), std::string::npos);
}

TEST(BenchLimits, CpuLimitsUseTheMeasurementUnlessOverridden) {
  const Limits m = cpu_limits(25e9, 0, 0);
  EXPECT_DOUBLE_EQ(m.bandwidth, 25e9);
  EXPECT_NE(m.bandwidth_source.find("memcpy"), std::string::npos);
  EXPECT_EQ(m.peak_flops, 0);
  const Limits o = cpu_limits(25e9, 50e9, 2e12);
  EXPECT_DOUBLE_EQ(o.bandwidth, 50e9);
  EXPECT_DOUBLE_EQ(o.peak_flops, 2e12);
}

}  // namespace
}  // namespace rz::bench
