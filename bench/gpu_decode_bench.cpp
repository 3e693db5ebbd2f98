// Throughput of the CUDA executor (a benchmark, not a test) in the workloads of
// /work/shared/PERFORMANCE.md, printed as markdown tables in that file's layout:
//   single stream: pp = one prefill of --pp tokens (tokens/s), tg = --tg decode steps at B=1
//                  after a 1-token prompt (tokens/s), as llama-bench's pp512 / tg128;
//   batched:       for each B of --batches, B prompts of --prompt random tokens in one prefill
//                  call, then --gen greedy decode steps over all B slots (S_TG = B * gen / decode
//                  time), as llama-batched-bench; with the mean step time, the bytes a step must
//                  read (weights + the KV cache of every slot), MBU = those bytes / step time /
//                  4.3 TB/s, and the ceiling B / (bytes per step / 4.3 TB/s).
// Every figure is the median of --reps timed runs after a warm-up run; each timed call returns
// host tokens, so it ends with a device sync. One executor per slot count (slots = B, context =
// the largest need rounded up to 64), destroyed before the next is made; a SlotRunner
// (sched/slot_runner.hpp) drives it, each prompt in one step and each decode in one step, with
// the block tables it keeps.
//
//   gpu_decode_bench --model FILE [--label "qwen2.5-1.5b Q4_K_M"] [--pp 512] [--tg 128]
//                    [--batches 1,4,16,64] [--prompt 128] [--gen 128] [--reps 3] [--seed 1]
//                    [--context N] [--no-graphs] [--no-qmm] [--int8] [--no-pdl]
// --context N: every executor gets a context of N tokens (a server's setting) instead of the
// smallest that fits (decode attention is launched for the whole context when CUDA graphs are on);
// --no-graphs: decode steps as plain launches (GpuExecutorOptions::cuda_graphs = false).
// --no-pdl: kernels launched in plain stream order, without programmatic dependent launch
// (kernels/launch.cuh), for comparison.
// --int8: decode matmuls of 1-4 tokens on int8 activations (GpuExecutorOptions::int8_activations,
// opt-in: kernels/gemv_q8.hpp).
// --no-qmm: gemv up to 16 tokens and dequantize + cuBLAS beyond, never kernels/qmm
// (GpuExecutorOptions::qmm = false), the paths before qmm, for comparison.
// --pp 0 / --tg 0 skip those; --batches "" skips the batched part. --cpu runs the same on the CPU
// executor (weight bytes = its matrix bytes): only to test this program on a machine without a GPU.
// Exit status: 0 all measured, 1 some measurement failed (reported in its table cell), 2 bad
// arguments or no CUDA device.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cpu/cpu_executor.hpp"
#include "formats/common.hpp"
#include "formats/model_file.hpp"
#include "gpu/device.hpp"
#include "gpu/gpu_executor.hpp"
#include "kernels/launch.hpp"
#include "sched/slot_runner.hpp"

namespace {

using Clock = std::chrono::steady_clock;
constexpr double kBandwidth = 4.3e12;  // bytes/s: a device-to-device copy on the H200 machines

double secs(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// 25325.4 -> "25,325"; values under 100 keep one decimal.
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

struct Options {
  std::string model, label;
  int pp = 512, tg = 128, prompt = 128, gen = 128, reps = 3;
  uint64_t seed = 1;
  bool cpu = false, graphs = true, qmm = true, int8 = false;
  int context = 0;
  std::vector<int> batches = {1, 4, 16, 64};
};

bool parse_int(const std::string& s, int& out, int lo) {
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v < lo || v > (1 << 20)) return false;
  out = static_cast<int>(v);
  return true;
}

int usage(const std::string& why) {
  std::fprintf(stderr,
               "gpu_decode_bench: %s\nusage: gpu_decode_bench --model FILE [--label TEXT] "
               "[--pp 512] [--tg 128] [--batches 1,4,16,64] [--prompt 128] [--gen 128] [--reps 3] "
               "[--seed 1] [--context N] [--no-graphs] [--no-qmm] [--int8] [--no-pdl] [--cpu]\n",
               why.c_str());
  return 2;
}

// Returns -1 when the arguments are good, else the exit status.
int parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h")
      return usage("CUDA executor throughput (see bench/README-gpu.md)");
    if (a == "--cpu") {
      o.cpu = true;
      continue;
    }
    if (a == "--no-graphs") {
      o.graphs = false;
      continue;
    }
    if (a == "--no-qmm") {
      o.qmm = false;
      continue;
    }
    if (a == "--int8") {
      o.int8 = true;
      continue;
    }
    if (a == "--no-pdl") {
      rz::gpu::set_programmatic_launch(false);
      continue;
    }
    if (i + 1 >= argc) return usage(a + " needs a value");
    const std::string v = argv[++i];
    bool ok = true;
    if (a == "--model")
      o.model = v;
    else if (a == "--label")
      o.label = v;
    else if (a == "--pp")
      ok = parse_int(v, o.pp, 0);
    else if (a == "--tg")
      ok = parse_int(v, o.tg, 0);
    else if (a == "--prompt")
      ok = parse_int(v, o.prompt, 1);
    else if (a == "--gen")
      ok = parse_int(v, o.gen, 1);
    else if (a == "--reps")
      ok = parse_int(v, o.reps, 1);
    else if (a == "--context")
      ok = parse_int(v, o.context, 1);
    else if (a == "--seed")
      o.seed = std::strtoull(v.c_str(), nullptr, 10);
    else if (a == "--batches") {
      o.batches.clear();
      for (size_t p = 0; p < v.size();) {
        size_t q = v.find(',', p);
        if (q == std::string::npos) q = v.size();
        int b = 0;
        if (!parse_int(v.substr(p, q - p), b, 1)) return usage("--batches: bad value '" + v + "'");
        o.batches.push_back(b);
        p = q + 1;
      }
    } else {
      return usage("unknown flag " + a);
    }
    if (!ok) return usage(std::string(a).append(": bad value '").append(v).append("'"));
  }
  if (o.model.empty()) return usage("--model is required");
  if (o.label.empty()) o.label = std::filesystem::path(o.model).stem().string();
  return -1;
}

struct SingleResult {
  double pp_tps = -1, tg_tps = -1, tg_step_s = -1, tg_bytes = 0;
  std::string pp_err, tg_err;
};

struct BatchResult {
  int b = 0;
  double prefill_s = -1, decode_s = -1, kv_bytes = 0, bytes = 0;
  std::string err;
};

class Bench {
 public:
  Bench(Options o, std::shared_ptr<const rz::ModelFile> file)
      : o_(std::move(o)), file_(std::move(file)), rng_(static_cast<uint32_t>(o_.seed)) {}

  // Makes (or keeps) the executor for `slots` slots.
  void executor(int slots, int context) {
    if (o_.context > 0) {
      if (o_.context < context)
        throw rz::Error("--context " + std::to_string(o_.context) + " is below the " +
                        std::to_string(context) + " tokens this part needs");
      context = o_.context;
    }
    if (!ex_ || ex_->max_slots() != slots || ex_->max_context() < context) {
      run_.reset();
      ex_.reset();  // free the device memory first
      const int ctx = o_.context > 0 ? o_.context : (context + 63) / 64 * 64;
      const auto t0 = Clock::now();
      if (o_.cpu) {
        auto cpu = std::make_unique<rz::CpuExecutor>(
            file_, rz::CpuExecutorOptions{.slots = slots, .max_context = ctx});
        plan_ = {};
        plan_.device_name = "CPU (--cpu: a test of this program)";
        plan_.weight_bytes = cpu->weights().matrix_bytes();
        ex_ = std::move(cpu);
      } else {
        auto gpu = std::make_unique<rz::gpu::GpuExecutor>(
            file_, rz::gpu::GpuExecutorOptions{.slots = slots,
                                               .max_context = ctx,
                                               .cuda_graphs = o_.graphs,
                                               .qmm = o_.qmm,
                                               .int8_activations = o_.int8});
        plan_ = gpu->memory_plan();
        ex_ = std::move(gpu);
      }
      run_ = std::make_unique<rz::SlotRunner>(*ex_);
      const auto& c = ex_->config();
      kv_per_token_ = 2.0 * c.n_layer * 2.0 * c.n_head_kv * c.head_dim;  // K and V, fp16
      const std::string what = o_.cpu ? plan_.device_name : plan_.summary();
      std::printf("executor: %d slots, context %d, loaded in %.1f s: %s\n", slots, ctx,
                  secs(t0, Clock::now()), what.c_str());
      std::fflush(stdout);
    }
  }

  std::vector<int32_t> prompt(int n) {
    std::uniform_int_distribution<int32_t> d(0, ex_->config().n_vocab - 1);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = d(rng_);
    return t;
  }

  void release_all() {
    for (int s = 0; s < ex_->max_slots(); ++s) run_->release(s);
  }

  // Prefill of B prompts of `len` tokens in one step; returns the seconds it took.
  double prefill(int b, int len, std::vector<int32_t>& toks) {
    std::vector<rz::PrefillRequest> reqs(static_cast<size_t>(b));
    for (int s = 0; s < b; ++s) {
      reqs[s].slot = s;
      reqs[s].tokens = prompt(len);
    }
    const auto t0 = Clock::now();
    toks = run_->prefill(reqs);
    return secs(t0, Clock::now());
  }

  // `steps` greedy decode steps over slots 0..B-1; returns the seconds they took.
  double decode(int b, int steps, std::vector<int32_t>& toks) {
    std::vector<rz::DecodeRequest> d(static_cast<size_t>(b));
    const auto t0 = Clock::now();
    for (int i = 0; i < steps; ++i) {
      for (int s = 0; s < b; ++s) d[s] = {s, toks[s]};
      toks = run_->decode(d);
    }
    return secs(t0, Clock::now());
  }

  // Mean KV bytes a decode step reads: slot s holds len0 + i + 1 tokens at step i (0-based).
  double kv_bytes_per_step(int b, int len0, int steps) const {
    double tokens = 0;
    for (int i = 0; i < steps; ++i) tokens += double(b) * (len0 + i + 1);
    return tokens / steps * kv_per_token_;
  }

  SingleResult single() {
    SingleResult r;
    std::vector<int32_t> toks;
    if (o_.pp > 0) {
      try {
        executor(1, std::max(o_.pp + o_.tg, o_.prompt + o_.gen + 1));
        prefill(1, o_.pp, toks);  // warm-up
        release_all();
        std::vector<double> t;
        for (int rep = 0; rep < o_.reps; ++rep) {
          t.push_back(prefill(1, o_.pp, toks));
          release_all();
        }
        r.pp_tps = o_.pp / median(t);
        std::printf("pp%d: %.2f ms (median of %d) = %.1f tokens/s\n", o_.pp, median(t) * 1e3,
                    o_.reps, r.pp_tps);
      } catch (const std::exception& e) {
        r.pp_err = e.what();
        std::printf("pp%d: FAILED: %s\n", o_.pp, e.what());
        if (ex_) release_all();
      }
    }
    if (o_.tg > 0) {
      try {
        executor(1, std::max(o_.pp + o_.tg, o_.prompt + o_.gen + 1));
        prefill(1, 1, toks);  // warm-up
        decode(1, std::min(o_.tg, 16), toks);
        release_all();
        std::vector<double> t;
        for (int rep = 0; rep < o_.reps; ++rep) {
          prefill(1, 1, toks);
          t.push_back(decode(1, o_.tg, toks));
          release_all();
        }
        r.tg_tps = o_.tg / median(t);
        r.tg_step_s = median(t) / o_.tg;
        r.tg_bytes = double(plan_.weight_bytes) + kv_bytes_per_step(1, 1, o_.tg);
        std::printf("tg%d: %.3f ms/token (median of %d) = %.1f tokens/s, MBU %.1f%%\n", o_.tg,
                    r.tg_step_s * 1e3, o_.reps, r.tg_tps,
                    100 * r.tg_bytes / r.tg_step_s / kBandwidth);
      } catch (const std::exception& e) {
        r.tg_err = e.what();
        std::printf("tg%d: FAILED: %s\n", o_.tg, e.what());
        if (ex_) release_all();
      }
    }
    std::fflush(stdout);
    return r;
  }

  BatchResult batched(int b) {
    BatchResult r;
    r.b = b;
    std::vector<int32_t> toks;
    try {
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
      r.prefill_s = median(tp);
      r.decode_s = median(td);
      r.kv_bytes = kv_bytes_per_step(b, o_.prompt, o_.gen);
      r.bytes = double(plan_.weight_bytes) + r.kv_bytes;
      const double step = r.decode_s / o_.gen;
      std::printf(
          "B=%d: prefill %.1f ms (%.0f tokens/s), decode %.3f ms/step, S_TG %.1f tokens/s, "
          "MBU %.1f%%\n",
          b, r.prefill_s * 1e3, b * o_.prompt / r.prefill_s, step * 1e3, b * o_.gen / r.decode_s,
          100 * r.bytes / step / kBandwidth);
    } catch (const std::exception& e) {
      r.err = e.what();
      std::printf("B=%d: FAILED: %s\n", b, e.what());
      if (ex_) release_all();
    }
    std::fflush(stdout);
    return r;
  }

  void report(const SingleResult& s, const std::vector<BatchResult>& bs) const {
    const double wb = double(plan_.weight_bytes);
    std::printf("\n## rz CUDA executor: %s on %s\n\n", o_.label.c_str(), plan_.device_name.c_str());
    std::printf(
        "model file %s; weights on the device %.3f GB; random prompt ids (seed %llu), "
        "greedy; median of %d runs after a warm-up; context %s; CUDA graphs %s; limit = "
        "bytes / %.1f TB/s.\n",
        std::filesystem::path(o_.model).filename().string().c_str(), wb / 1e9,
        static_cast<unsigned long long>(o_.seed), o_.reps,
        o_.context > 0 ? std::to_string(o_.context).c_str() : "the smallest that fits",
        o_.graphs ? "on" : "off", kBandwidth / 1e12);
    if (o_.pp > 0 || o_.tg > 0) {
      std::printf(
          "\nSingle stream (pp%d = prefill of %d tokens, tg%d = %d decode steps after a "
          "1-token prompt):\n\n",
          o_.pp, o_.pp, o_.tg, o_.tg);
      std::printf("| shape, format | pp%d tok/s | tg%d tok/s |\n| --- | ---: | ---: |\n", o_.pp,
                  o_.tg);
      std::printf("| %s | %s | %s |\n", o_.label.c_str(),
                  s.pp_err.empty() ? grouped(s.pp_tps).c_str() : "FAILED",
                  s.tg_err.empty() ? grouped(s.tg_tps).c_str() : "FAILED");
    }
    if (!bs.empty()) {
      std::printf(
          "\nBatched decode (B sequences, each a %d-token prompt then %d generated tokens; "
          "S_TG = generated tokens per second over all sequences):\n\n",
          o_.prompt, o_.gen);
      std::string head = "| shape, format |", sep = "| --- |", row = "| " + o_.label + " |";
      for (const auto& r : bs) {
        head.append(" B=").append(std::to_string(r.b)).append(" |");
        sep.append(" ---: |");
        row.append(" ")
            .append(r.err.empty() ? grouped(r.b * o_.gen / r.decode_s) : std::string("FAILED"))
            .append(" |");
      }
      std::printf("%s\n%s\n%s\n", head.c_str(), sep.c_str(), row.c_str());
    }
    if (o_.tg > 0 && s.tg_err.empty()) {
      const double fastest = wb / kBandwidth;
      std::printf("\nThe limit (weight bytes / %.1f TB/s; MBU also counts the KV cache):\n\n",
                  kBandwidth / 1e12);
      std::printf(
          "| shape, format | weight bytes | fastest step | tokens/s ceiling at B=1 | rz "
          "share of it | rz MBU at tg%d |\n| --- | ---: | ---: | ---: | ---: | ---: |\n",
          o_.tg);
      std::printf("| %s | %.2f GB | %.2f ms | ~%s | %.0f%% | %.0f%% |\n", o_.label.c_str(),
                  wb / 1e9, fastest * 1e3, grouped(1 / fastest).c_str(), 100 * s.tg_tps * fastest,
                  100 * s.tg_bytes / s.tg_step_s / kBandwidth);
    }
    if (!bs.empty()) {
      std::printf("\nBatched decode, details (%s):\n\n", o_.label.c_str());
      std::printf(
          "| B | prefill tok/s | step ms | S_TG tok/s | KV read/step | bytes/step | MBU | "
          "ceiling tok/s |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
      for (const auto& r : bs) {
        if (!r.err.empty()) {
          std::printf("| %d | FAILED: %s | | | | | | |\n", r.b, r.err.c_str());
          continue;
        }
        const double step = r.decode_s / o_.gen;
        std::printf("| %d | %s | %.3f | %s | %.1f MB | %.3f GB | %.0f%% | %s |\n", r.b,
                    grouped(r.b * o_.prompt / r.prefill_s).c_str(), step * 1e3,
                    grouped(r.b * o_.gen / r.decode_s).c_str(), r.kv_bytes / 1e6, r.bytes / 1e9,
                    100 * r.bytes / step / kBandwidth,
                    grouped(r.b / (r.bytes / kBandwidth)).c_str());
      }
    }
    std::fflush(stdout);
  }

  void drop() {
    run_.reset();
    ex_.reset();
  }

 private:
  Options o_;
  std::shared_ptr<const rz::ModelFile> file_;
  std::unique_ptr<rz::Executor> ex_;
  std::unique_ptr<rz::SlotRunner> run_;  // over *ex_: the block tables
  rz::gpu::GpuMemoryPlan plan_;
  double kv_per_token_ = 0;
  std::mt19937 rng_;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (int rc = parse(argc, argv, o); rc >= 0) return rc;
  std::string why;
  auto devs = rz::gpu::list_devices(&why);
  if (o.cpu) devs.assign(1, rz::gpu::DeviceInfo{.name = "CPU"});
  if (devs.empty()) {
    std::fprintf(stderr, "gpu_decode_bench: needs a CUDA device (%s)\n",
                 why.empty() ? "none found" : why.c_str());
    return 2;
  }
  try {
    std::printf("gpu_decode_bench: %s (%s) on %s\n", o.model.c_str(), o.label.c_str(),
                devs[0].name.c_str());
    const auto t0 = Clock::now();
    Bench bench(o, rz::ModelFile::open(o.model));
    SingleResult s;
    if (o.pp > 0 || o.tg > 0) s = bench.single();
    // Ascending B: B=1 reuses the single-stream executor; each later executor replaces the last.
    std::vector<int> order = o.batches;
    std::sort(order.begin(), order.end());
    order.erase(std::unique(order.begin(), order.end()), order.end());
    std::map<int, BatchResult> by_b;
    for (int b : order) by_b[b] = bench.batched(b);
    std::vector<BatchResult> bs;
    for (int b : o.batches) bs.push_back(by_b[b]);
    bench.report(s, bs);
    bench.drop();
    std::printf("\n(total %.1f s)\n", secs(t0, Clock::now()));
    bool failed = !s.pp_err.empty() || !s.tg_err.empty();
    for (const auto& r : bs) failed = failed || !r.err.empty();
    return failed ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_decode_bench: %s\n", e.what());
    return 1;
  }
}
