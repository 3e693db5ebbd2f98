// rz bench's measuring (see bench_runner.hpp).
#include "apps/bench/bench_runner.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "apps/bench/bench_device.hpp"
#include "apps/bench/bench_figures.hpp"
#include "apps/bench/bench_limits.hpp"
#include "apps/build_info.hpp"
#include "apps/executor_factory.hpp"
#include "formats/common.hpp"
#include "model/model_weights.hpp"
#include "sched/slot_runner.hpp"

namespace rz::bench {
namespace {

using Clock = std::chrono::steady_clock;

double secs(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// ", MBU 71.2%" when the bandwidth is known, else "".
std::string mbu_note(const Workload& w, const Limits& lim) {
  const Figures f = figures(w, lim);
  if (std::isnan(f.mbu)) return "";
  char buf[48];
  std::snprintf(buf, sizeof buf, ", MBU %.1f%%", 100 * f.mbu);
  return buf;
}

Workload workload(WorkloadKind kind, int batch, int tokens, int prompt) {
  Workload w;
  w.kind = kind;
  w.batch = batch;
  w.tokens = tokens;
  w.prompt = prompt;
  return w;
}

class Bench {
 public:
  Bench(const BenchOptions& o, std::string device, std::shared_ptr<const ModelFile> file,
        BenchRun& run, std::FILE* log)
      : o_(o),
        device_(std::move(device)),
        file_(std::move(file)),
        run_(run),
        log_(log),
        rng_(static_cast<uint32_t>(o.seed)) {}

  // Makes (or keeps) the executor for `slots` slots and at least `context` tokens each.
  void executor(int slots, int context) {
    if (o_.context > 0) {
      if (o_.context < context)
        throw Error("--context " + std::to_string(o_.context) + " is below the " +
                    std::to_string(context) + " tokens this workload needs");
      context = o_.context;
    }
    if (ex_ && ex_->max_slots() == slots && ex_->max_context() >= context) return;
    runner_.reset();
    ex_.reset();  // free the memory first
    const int ctx = o_.context > 0 ? o_.context : (context + 63) / 64 * 64;
    const auto t0 = Clock::now();
    BuiltExecutor b = make_executor(device_, file_,
                                    {.slots = slots,
                                     .max_context = ctx,
                                     .threads = o_.threads,
                                     .gpu = o_.gpu,
                                     .int8_activations = o_.int8,
                                     .fp8_weights = o_.fp8,
                                     .cuda_graphs = o_.cuda_graphs,
                                     .qmm = o_.qmm,
                                     .fp16_copies = o_.fp16_copies,
                                     .fused_input_forms = o_.fused_forms,
                                     .tune_gemm = o_.tune_gemm});
    ex_ = std::move(b.executor);
    runner_ = std::make_unique<SlotRunner>(*ex_);
    run_.executor = b.description;
    run_.memory_plan = b.memory_plan;
    std::fprintf(log_, "executor: %d slots, context %d, loaded in %.1f s: %s%s%s\n", slots, ctx,
                 secs(t0, Clock::now()), b.description.c_str(), b.memory_plan.empty() ? "" : "; ",
                 b.memory_plan.c_str());
    std::fflush(log_);
  }

  std::vector<int32_t> prompt(int n) {
    std::uniform_int_distribution<int32_t> d(0, ex_->config().n_vocab - 1);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = d(rng_);
    return t;
  }

  void release_all() {
    if (!ex_) return;
    for (int s = 0; s < ex_->max_slots(); ++s) runner_->release(s);
  }

  // Prefill of B prompts of `len` tokens in one step; returns the seconds it took.
  double prefill(int b, int len, std::vector<int32_t>& toks) {
    std::vector<PrefillRequest> reqs(static_cast<size_t>(b));
    for (int s = 0; s < b; ++s) {
      reqs[s].slot = s;
      reqs[s].tokens = prompt(len);
    }
    const auto t0 = Clock::now();
    toks = runner_->prefill(reqs);
    return secs(t0, Clock::now());
  }

  // `steps` greedy decode steps over slots 0..B-1; returns the seconds they took.
  double decode(int b, int steps, std::vector<int32_t>& toks) {
    std::vector<DecodeRequest> d(static_cast<size_t>(b));
    const auto t0 = Clock::now();
    for (int i = 0; i < steps; ++i) {
      for (int s = 0; s < b; ++s) d[s] = {s, toks[s]};
      toks = runner_->decode(d);
    }
    return secs(t0, Clock::now());
  }

  int single_context() const { return std::max(o_.pp + o_.tg, o_.prompt + o_.gen + 1); }

  Workload pp() {
    Workload w = workload(WorkloadKind::pp, 1, o_.pp, 0);
    w.flops = prefill_flops(run_.cost, o_.pp);
    measure(w, [&] {
      std::vector<int32_t> toks;
      executor(1, single_context());
      prefill(1, o_.pp, toks);  // warm-up
      release_all();
      std::vector<double> t;
      for (int rep = 0; rep < o_.reps; ++rep) {
        t.push_back(prefill(1, o_.pp, toks));
        release_all();
      }
      w.seconds = median(t);
      const Figures f = figures(w, run_.limits);
      std::fprintf(log_, "%s: %.2f ms (median of %d) = %.1f tokens/s, %.2f TFLOP/s\n",
                   w.name().c_str(), w.seconds * 1e3, o_.reps, f.tokens_per_s, f.tflops);
    });
    return w;
  }

  Workload tg() {
    Workload w = workload(WorkloadKind::tg, 1, o_.tg, 1);
    w.flops = decode_flops(run_.cost, 1, 1, o_.tg);
    w.bytes_per_step = decode_bytes_per_step(run_.cost, 1, 1, o_.tg);
    w.kv_bytes_per_step = w.bytes_per_step - run_.cost.weight_bytes;
    measure(w, [&] {
      std::vector<int32_t> toks;
      executor(1, single_context());
      prefill(1, 1, toks);  // warm-up
      decode(1, std::min(o_.tg, 16), toks);
      release_all();
      std::vector<double> t;
      for (int rep = 0; rep < o_.reps; ++rep) {
        prefill(1, 1, toks);
        t.push_back(decode(1, o_.tg, toks));
        release_all();
      }
      w.seconds = median(t);
      const Figures f = figures(w, run_.limits);
      std::fprintf(log_, "%s: %.3f ms/token (median of %d) = %.1f tokens/s%s\n", w.name().c_str(),
                   f.step_ms, o_.reps, f.tokens_per_s, mbu_note(w, run_.limits).c_str());
    });
    return w;
  }

  Workload batched(int b) {
    Workload w = workload(WorkloadKind::batched, b, o_.gen, o_.prompt);
    w.flops = decode_flops(run_.cost, b, o_.prompt, o_.gen);
    w.bytes_per_step = decode_bytes_per_step(run_.cost, b, o_.prompt, o_.gen);
    w.kv_bytes_per_step = w.bytes_per_step - run_.cost.weight_bytes;
    w.prefill_flops = b * prefill_flops(run_.cost, o_.prompt);
    measure(w, [&] {
      std::vector<int32_t> toks;
      // Slot count 1 keeps the single-stream executor (its context covers prompt + gen + 1).
      executor(b, o_.prompt + o_.gen + 1);
      prefill(b, o_.prompt, toks);  // warm-up
      decode(b, std::min(o_.gen, 8), toks);
      release_all();
      std::vector<double> tp, td;
      for (int rep = 0; rep < o_.reps; ++rep) {
        tp.push_back(prefill(b, o_.prompt, toks));
        td.push_back(decode(b, o_.gen, toks));
        release_all();
      }
      w.prefill_seconds = median(tp);
      w.seconds = median(td);
      const Figures f = figures(w, run_.limits);
      std::fprintf(log_,
                   "%s: prefill %.1f ms (%.0f tokens/s), decode %.3f ms/step, S_TG %.1f "
                   "tokens/s%s\n",
                   w.name().c_str(), w.prefill_seconds * 1e3, f.prefill_tokens_per_s, f.step_ms,
                   f.tokens_per_s, mbu_note(w, run_.limits).c_str());
    });
    return w;
  }

  void drop() {
    runner_.reset();
    ex_.reset();
  }

 private:
  // Runs `body`, which sets w.seconds; records a failure as the workload's error, and the memory
  // in use after it either way (while the executor is alive).
  template <class Body>
  void measure(Workload& w, Body body) {
    try {
      body();
    } catch (const std::exception& e) {
      w.error = e.what();
      w.seconds = -1;
      std::fprintf(log_, "%s: FAILED: %s\n", w.name().c_str(), e.what());
      try {
        release_all();
      } catch (const std::exception&) {
        drop();  // the executor is in no state to reuse
      }
    }
    w.peak_mem_bytes = memory_in_use(device_, o_.gpu);
    std::fflush(log_);
  }

  const BenchOptions& o_;
  std::string device_;
  std::shared_ptr<const ModelFile> file_;
  BenchRun& run_;
  std::FILE* log_;
  std::unique_ptr<Executor> ex_;
  std::unique_ptr<SlotRunner> runner_;  // over *ex_: the block tables
  std::mt19937 rng_;
};

}  // namespace

BenchRun run_bench(const BenchOptions& o, const std::string& device,
                   std::shared_ptr<const ModelFile> file, std::FILE* log) {
  const auto t0 = Clock::now();
  BenchRun run;
  run.options = o;
  if (!run.options.batches) run.options.batches = default_batches(device);
  run.device = device;
  run.device_name = device_name(device, o.gpu);
  run.memory_kind = memory_kind(device);
  run.commit = build_commit();
  run.config = file->config();
  const ModelWeights weights = ModelWeights::load(*file);
  run.cost =
      model_cost(file->config(), double(weights.matrix_bytes(o.fp8)), kv_element_bytes(device));
  if (device == "cuda") {
    run.limits = gpu_limits(run.device_name, o.bandwidth, o.peak_flops);
    set_programmatic_launch(o.pdl);
  } else {
    run.limits = cpu_limits(0, o.bandwidth, o.peak_flops);  // measured after the workloads
  }

  {
    Bench bench(run.options, device, std::move(file), run, log);
    if (o.pp > 0) run.workloads.push_back(bench.pp());
    if (o.tg > 0) run.workloads.push_back(bench.tg());
    // Ascending B: B=1 reuses the single-stream executor; each later executor replaces the last.
    std::vector<int> order = *run.options.batches;
    std::sort(order.begin(), order.end());
    order.erase(std::unique(order.begin(), order.end()), order.end());
    std::map<int, Workload> by_b;
    for (int b : order) by_b[b] = bench.batched(b);
    for (int b : *run.options.batches) run.workloads.push_back(by_b[b]);
    bench.drop();
  }
  if (device == "cpu" && o.bandwidth <= 0) {
    run.limits = cpu_limits(memcpy_bandwidth(), 0, o.peak_flops);
    std::fprintf(log, "bandwidth: %s\n", run.limits.bandwidth_source.c_str());
  }
  run.total_seconds = secs(t0, Clock::now());
  return run;
}

}  // namespace rz::bench
