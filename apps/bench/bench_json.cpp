// rz bench's JSON object (see bench_json.hpp).
#include "apps/bench/bench_json.hpp"

#include "apps/bench/bench_figures.hpp"
#include "apps/bench/json_builder.hpp"
#include "formats/model_config.hpp"

namespace rz::bench {
namespace {

constexpr const char* kFlopsFormula =
    "2 * layer_params * tokens + 2 * output_params * sampled tokens + 4 * n_layer * n_head * "
    "head_dim * (query, key) pairs; a prefill of n tokens: 2 * layer_params * n + 2 * "
    "output_params + 2 * n_layer * n_head * head_dim * n * (n + 1)";

// A positive figure, or null (0 and below mean "not measured" in the results).
void positive_or_null(JsonBuilder& j, double x) {
  if (x > 0)
    j.value(x);
  else
    j.null();
}

}  // namespace

std::string json_report(const BenchRun& r) {
  const BenchOptions& o = r.options;
  JsonBuilder j;
  j.begin_object();
  j.key("tool").value("rz bench");
  if (!r.commit.empty()) j.key("commit").value(r.commit);

  j.key("device").begin_object();
  j.key("kind").value(r.device);
  j.key("name").value(r.device_name);
  j.key("executor").value(r.executor);
  if (!r.memory_plan.empty()) j.key("memory_plan").value(r.memory_plan);
  j.end_object();

  j.key("model").begin_object();
  j.key("path").value(o.model);
  j.key("label").value(o.label);
  j.key("arch").value(arch_name(r.config.arch));
  j.key("n_layer").value(r.config.n_layer);
  j.key("n_embd").value(r.config.n_embd);
  j.key("n_head").value(r.config.n_head);
  j.key("n_head_kv").value(r.config.n_head_kv);
  j.key("head_dim").value(r.config.head_dim);
  j.key("n_ff").value(r.config.n_ff);
  j.key("n_vocab").value(r.config.n_vocab);
  j.key("weight_bytes_per_step").value(r.cost.weight_bytes);
  j.key("kv_bytes_per_token").value(r.cost.kv_bytes_per_token);
  j.key("layer_params").value(r.cost.layer_params);
  j.key("output_params").value(r.cost.output_params);
  j.end_object();

  j.key("options").begin_object();
  j.key("pp").value(o.pp);
  j.key("tg").value(o.tg);
  j.key("batches").begin_array();
  if (o.batches)
    for (int b : *o.batches) j.value(b);
  j.end_array();
  j.key("prompt").value(o.prompt);
  j.key("gen").value(o.gen);
  j.key("reps").value(o.reps);
  j.key("seed").value(static_cast<uint64_t>(o.seed));
  j.key("context");
  if (o.context > 0)
    j.value(o.context);
  else
    j.null();
  j.key("threads").value(o.threads);
  j.key("gpu").value(o.gpu);
  j.key("cuda_graphs").value(o.cuda_graphs);
  j.key("qmm").value(o.qmm);
  j.key("int8_activations").value(o.int8);
  j.key("fp8_weights").value(o.fp8);
  j.key("fp16_copies").value(o.fp16_copies);
  j.key("programmatic_launch").value(o.pdl);
  j.key("fused_input_forms").value(o.fused_forms);
  j.key("gemm_tuning").value(o.tune_gemm);
  j.end_object();

  j.key("limits").begin_object();
  j.key("bandwidth_bytes_per_s");
  positive_or_null(j, r.limits.bandwidth);
  j.key("bandwidth_source").value(r.limits.bandwidth_source);
  j.key("peak_flops");
  positive_or_null(j, r.limits.peak_flops);
  j.key("peak_flops_source").value(r.limits.peak_flops_source);
  j.end_object();
  j.key("flops_formula").value(kFlopsFormula);
  j.key("memory_kind").value(r.memory_kind);
  j.key("peak_mem_bytes").value(r.peak_mem_bytes());

  j.key("workloads").begin_array();
  for (const Workload& w : r.workloads) {
    const Figures f = figures(w, r.limits);
    const bool decode = w.kind != WorkloadKind::pp;
    j.begin_object();
    j.key("name").value(w.name());
    j.key("kind").value(kind_name(w.kind));
    j.key("batch").value(w.batch);
    j.key("tokens").value(w.tokens);
    j.key("prompt").value(w.prompt);
    j.key("ok").value(w.ok());
    j.key("error");
    if (w.error.empty())
      j.null();
    else
      j.value(w.error);
    j.key("seconds");
    positive_or_null(j, w.seconds);
    j.key("tokens_per_s").value(f.tokens_per_s);
    j.key("step_ms").value(f.step_ms);
    j.key("tflops").value(f.tflops);
    j.key("flops").value(w.flops);
    j.key("bytes_per_step");
    positive_or_null(j, decode ? w.bytes_per_step : 0);
    j.key("kv_bytes_per_step");
    positive_or_null(j, decode ? w.kv_bytes_per_step : 0);
    j.key("mbu").value(f.mbu);
    j.key("limit").value(f.bandwidth_bound ? "bandwidth" : "compute");
    j.key("limit_value");
    positive_or_null(j, f.bandwidth_bound ? r.limits.bandwidth : r.limits.peak_flops);
    j.key("limit_share").value(f.limit_share());
    j.key("ceiling_tokens_per_s").value(f.ceiling_tokens_per_s);
    if (w.kind == WorkloadKind::batched) {
      j.key("prefill_seconds");
      positive_or_null(j, w.prefill_seconds);
      j.key("prefill_tokens_per_s").value(f.prefill_tokens_per_s);
      j.key("prefill_tflops").value(f.prefill_tflops);
    }
    j.key("peak_mem_bytes");
    if (w.peak_mem_bytes > 0)
      j.value(w.peak_mem_bytes);
    else
      j.null();
    j.end_object();
  }
  j.end_array();
  j.key("total_seconds").value(r.total_seconds);
  j.key("ok").value(r.ok());
  j.end_object();
  return j.str() + "\n";
}

}  // namespace rz::bench
