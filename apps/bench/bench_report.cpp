// rz bench's markdown tables (see bench_report.hpp).
#include "apps/bench/bench_report.hpp"

#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <filesystem>

#include "apps/bench/bench_figures.hpp"

namespace rz::bench {
namespace {

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  va_list ap, again;
  va_start(ap, f);
  va_copy(again, ap);
  const int n = std::vsnprintf(nullptr, 0, f, ap);
  va_end(ap);
  std::string out(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, f, again);
  va_end(again);
  return out;
}

std::string pct(double x) { return std::isnan(x) ? "n/a" : fmt("%.0f%%", 100 * x); }
std::string num(const char* f, double x) { return std::isnan(x) ? "n/a" : fmt(f, x); }
std::string bandwidth(double bytes_per_s) {
  if (!(bytes_per_s > 0)) return "unknown";
  return bytes_per_s >= 1e12 ? fmt("%.2f TB/s", bytes_per_s / 1e12)
                             : fmt("%.1f GB/s", bytes_per_s / 1e9);
}
std::string gib(double bytes) { return bytes > 0 ? fmt("%.2f GiB", bytes / (1 << 30)) : "n/a"; }

const Workload* find(const BenchRun& r, WorkloadKind k) {
  for (const auto& w : r.workloads)
    if (w.kind == k) return &w;
  return nullptr;
}

std::string cell(const Workload* w, double value) {
  if (!w) return "n/a";
  return w->ok() ? grouped(value) : "FAILED";
}

}  // namespace

std::string grouped(double x) {
  if (!(x >= 0)) return "n/a";
  char buf[64];
  if (x < 100) {
    std::snprintf(buf, sizeof buf, "%.1f", x);
    return buf;
  }
  std::snprintf(buf, sizeof buf, "%.0f", x);
  std::string s = buf, out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}

std::string markdown_report(const BenchRun& r) {
  const BenchOptions& o = r.options;
  const Limits& lim = r.limits;
  const std::string& label = o.label;
  std::string s;
  s += fmt("\n## rz %s executor: %s on %s\n\n", r.device == "cuda" ? "CUDA" : "CPU", label.c_str(),
           r.device_name.c_str());
  s += fmt(
      "model file %s; weights a decode step reads %.3f GB (every matrix once); random prompt ids "
      "(seed %llu), greedy; median of %d runs after a warm-up; context %s; executor %s",
      std::filesystem::path(o.model).filename().string().c_str(), r.cost.weight_bytes / 1e9,
      static_cast<unsigned long long>(o.seed), o.reps,
      o.context > 0 ? std::to_string(o.context).c_str() : "the smallest that fits",
      r.executor.c_str());
  if (r.device == "cuda")
    s +=
        fmt("; CUDA graphs %s, qmm %s, int8 activations %s, weights %s, fp16 copies %s, PDL %s, "
            "fused input forms %s, GEMM tuning %s",
            o.cuda_graphs ? "on" : "off", o.qmm ? "on" : "off", o.int8 ? "on" : "off",
            o.fp8 ? "fp8" : "stored", o.fp16_copies ? "allowed" : "off", o.pdl ? "on" : "off",
            o.fused_forms ? "on" : "off", o.tune_gemm ? "on" : "off");
  s += fmt("; commit %s.\n", r.commit.empty() ? "unknown" : r.commit.c_str());
  s += fmt("Limits: bandwidth %s (%s); compute %s (%s).\n", bandwidth(lim.bandwidth).c_str(),
           lim.bandwidth_source.c_str(),
           lim.peak_flops > 0 ? fmt("%.0f TFLOP/s", lim.peak_flops / 1e12).c_str() : "unknown",
           lim.peak_flops_source.c_str());

  const Workload* pp = find(r, WorkloadKind::pp);
  const Workload* tg = find(r, WorkloadKind::tg);
  const Figures fpp = pp ? figures(*pp, lim) : Figures{};
  const Figures ftg = tg ? figures(*tg, lim) : Figures{};
  if (pp || tg) {
    s +=
        fmt("\nSingle stream (pp%d = prefill of %d tokens, tg%d = %d decode steps after a 1-token "
            "prompt):\n\n",
            o.pp, o.pp, o.tg, o.tg);
    s += fmt("| shape, format | pp%d tok/s | tg%d tok/s |\n| --- | ---: | ---: |\n", o.pp, o.tg);
    s += fmt("| %s | %s | %s |\n", label.c_str(), cell(pp, fpp.tokens_per_s).c_str(),
             cell(tg, ftg.tokens_per_s).c_str());
  }
  std::vector<const Workload*> bs;
  for (const auto& w : r.workloads)
    if (w.kind == WorkloadKind::batched) bs.push_back(&w);
  if (!bs.empty()) {
    s +=
        fmt("\nBatched decode (B sequences, each a %d-token prompt then %d generated tokens; "
            "S_TG = generated tokens per second over all sequences):\n\n",
            o.prompt, o.gen);
    std::string head = "| shape, format |", sep = "| --- |", row = "| " + label + " |";
    for (const Workload* w : bs) {
      head += fmt(" B=%d |", w->batch);
      sep += " ---: |";
      row += " " + cell(w, figures(*w, lim).tokens_per_s) + " |";
    }
    s += head + "\n" + sep + "\n" + row + "\n";
  }
  if (tg && tg->ok()) {
    const double wb = r.cost.weight_bytes;
    const double fastest = lim.bandwidth > 0 ? wb / lim.bandwidth : NAN;
    s += fmt("\nThe limit (weight bytes / %s; MBU also counts the KV cache):\n\n",
             bandwidth(lim.bandwidth).c_str());
    s +=
        fmt("| shape, format | weight bytes | fastest step | tokens/s ceiling at B=1 | rz share of "
            "it | rz MBU at tg%d |\n| --- | ---: | ---: | ---: | ---: | ---: |\n",
            o.tg);
    s += fmt("| %s | %.2f GB | %s | %s | %s | %s |\n", label.c_str(), wb / 1e9,
             num("%.3f ms", fastest * 1e3).c_str(),
             std::isnan(fastest) ? "n/a" : ("~" + grouped(1 / fastest)).c_str(),
             pct(ftg.tokens_per_s * fastest).c_str(), pct(ftg.mbu).c_str());
  }
  if (pp && pp->ok()) {
    s +=
        fmt("\nPrefill, compute (FLOPs = 2 x matrix params x tokens + 2 x n_vocab x n_embd + 2 x "
            "n_layer x n_head x head_dim x n(n+1); layer matrix params %.3f G):\n\n",
            r.cost.layer_params / 1e9);
    s += "| shape, format | tokens | GFLOP | ms | TFLOP/s | peak TFLOP/s | share of peak |\n"
         "| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n";
    s += fmt("| %s | %d | %.1f | %.2f | %.2f | %s | %s |\n", label.c_str(), pp->tokens,
             pp->flops / 1e9, fpp.step_ms, fpp.tflops,
             lim.peak_flops > 0 ? fmt("%.0f", lim.peak_flops / 1e12).c_str() : "n/a",
             pct(fpp.flops_share).c_str());
  }
  if (!bs.empty()) {
    s += fmt("\nBatched decode, details (%s):\n\n", label.c_str());
    s += "| B | prefill tok/s | step ms | S_TG tok/s | KV read/step | bytes/step | MBU | "
         "ceiling tok/s | peak memory |\n"
         "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
    for (const Workload* w : bs) {
      if (!w->ok()) {
        s += fmt("| %d | FAILED: %s | | | | | | | |\n", w->batch, w->error.c_str());
        continue;
      }
      const Figures f = figures(*w, lim);
      s += fmt("| %d | %s | %.3f | %s | %.1f MB | %.3f GB | %s | %s | %s |\n", w->batch,
               grouped(f.prefill_tokens_per_s).c_str(), f.step_ms, grouped(f.tokens_per_s).c_str(),
               w->kv_bytes_per_step / 1e6, w->bytes_per_step / 1e9, pct(f.mbu).c_str(),
               grouped(f.ceiling_tokens_per_s).c_str(), gib(double(w->peak_mem_bytes)).c_str());
    }
  }
  s += fmt("\nPeak memory (%s, after each workload):", r.memory_kind.c_str());
  for (const auto& w : r.workloads)
    s += fmt(" %s %s;", w.name().c_str(), gib(double(w.peak_mem_bytes)).c_str());
  s += fmt(" largest %s.\n", gib(double(r.peak_mem_bytes())).c_str());
  for (const auto& w : r.workloads)
    if (!w.error.empty()) s += fmt("%s FAILED: %s\n", w.name().c_str(), w.error.c_str());
  return s;
}

}  // namespace rz::bench
