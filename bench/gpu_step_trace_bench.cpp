// The timeline of real decode steps on the CUDA executor (a benchmark, not a test): B sequences
// decode N steps as `rz bench` runs them (CUDA graphs and programmatic dependent launch as
// configured), while CUPTI records every kernel's start and end on the device, graph-launched
// ones included. Per step: the host's wall time, the device span from the first kernel's start to
// the last one's end, the sum of kernel durations, the busy time (their union: with PDL a kernel
// may start before its predecessor ends), the idle gaps, and the host's time before the first
// kernel starts (building the step, uploads, the launch) and after the last ends (the wake-up
// and the tokens' read-back). Per kernel kind: launches per step,
// mean duration, and the mean idle gap before it (the device waiting for that launch), which is
// what a step would save by fusing it away. ncu serializes kernels and says nothing of the gaps
// (docs/performance.md, "Kernels per decode step").
//
//   gpu_step_trace_bench --model FILE [--batch 1] [--steps 32] [--prompt 1] [--context 1024]
//                        [--join C] [--join-at O] [--no-graphs] [--no-pdl] [--top 20]
//                        [--by-grid] [--no-side-attention]
//
// --join C makes every traced step a mixed one, as a server's steps are when requests keep
// arriving: beside the B decodes a new C-token prompt (random ids) in one more slot, computed in
// that step and sampled from, its slot released after it.
// --join-at O makes that C-token piece a chunk in the middle of a long prompt, at positions
// O .. O + C - 1, as when a long prompt is prefilled in chunks beside running decodes (issue 9):
// the prompt's first O tokens (random ids) are computed once before the trace, and every traced
// step's chunk continues them (as a prefix-cache hit does) and rewrites the same positions.
//
// CUPTI's activity records slow the host's launches down: the host times here (and the gaps of
// steps launched kernel by kernel) are above an untraced run's. An H200 run (2026-11-27): a B = 1
// step's graph launch showed 0.44 ms before its first kernel, cut into 4 graphs 0.15 ms, while
// `rz bench`'s untraced step took the device span alike either way (1.397 / 1.398 ms).
//
// --no-side-attention sets GpuExecutorOptions::attention_side_by_side to false (A/B in one
// binary).
//
// --by-grid lists kernels per (kind, grid), which tells apart the calls of one kernel on
// matrices of different shapes (a qmm kernel's grid is its row tiles x splits).
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "formats/common.hpp"
#include "formats/model_file.hpp"
#include "gpu/gpu_executor.hpp"
#include "kernels/launch.hpp"
#include "model/executor.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string model;
  int batch = 1, steps = 32, prompt = 1, context = 1024, top = 20, join = 0, join_at = 0;
  bool graphs = true, pdl = true, by_grid = false, side = true;
};

struct KernelRecord {
  uint64_t start = 0, end = 0;
  std::string name;
  unsigned grid[3] = {0, 0, 0};
};

std::vector<KernelRecord>& records() {
  static std::vector<KernelRecord> r;
  return r;
}

void check_cupti(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* msg = nullptr;
  cuptiGetResultString(r, &msg);
  throw rz::Error(std::string(what) + ": " + (msg ? msg : "CUPTI error"));
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  constexpr size_t kBytes = size_t{8} << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBytes));
  *size = kBytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
        rec->kind != CUPTI_ACTIVITY_KIND_KERNEL)
      continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
    records().push_back({k->start,
                         k->end,
                         k->name ? k->name : "?",
                         {unsigned(k->gridX), unsigned(k->gridY), unsigned(k->gridZ)}});
  }
  std::free(buffer);
}

// A kernel's name without its namespaces' noise and argument list: "gemv_kernel<Q45K<false>, 1,
// 1, 16>" from the mangled name CUPTI gives.
std::string kind_of(const std::string& mangled) {
  int status = 0;
  char* d = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  const std::string name = status == 0 && d ? d : mangled;
  std::free(d);
  std::string s = name;
  for (const char* drop :
       {"void ", "rz::gpu::", "gemv_detail::", "qmm_detail::", "(anonymous namespace)::"})
    for (size_t p; (p = s.find(drop)) != std::string::npos;) s.erase(p, std::strlen(drop));
  return s.substr(0, s.find('('));  // the argument list
}

struct Step {
  double host_ms = 0;
  uint64_t t0 = 0, t1 = 0;  // CUPTI timestamps around the step
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--no-graphs") {
      o.graphs = false;
      continue;
    }
    if (a == "--no-pdl") {
      o.pdl = false;
      continue;
    }
    if (a == "--by-grid") {
      o.by_grid = true;
      continue;
    }
    if (a == "--no-side-attention") {
      o.side = false;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "gpu_step_trace_bench: %s needs a value\n", a.c_str());
      return 2;
    }
    const std::string v = argv[++i];
    if (a == "--model")
      o.model = v;
    else if (a == "--batch")
      o.batch = std::atoi(v.c_str());
    else if (a == "--steps")
      o.steps = std::atoi(v.c_str());
    else if (a == "--prompt")
      o.prompt = std::atoi(v.c_str());
    else if (a == "--context")
      o.context = std::atoi(v.c_str());
    else if (a == "--top")
      o.top = std::atoi(v.c_str());
    else if (a == "--join")
      o.join = std::atoi(v.c_str());
    else if (a == "--join-at")
      o.join_at = std::atoi(v.c_str());
    else {
      std::fprintf(stderr, "gpu_step_trace_bench: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (o.model.empty() || o.batch < 1 || o.steps < 1 || o.prompt < 1 || o.join < 0 ||
      o.join_at < 0 || o.prompt + o.steps + 8 > o.context || o.join_at + o.join >= o.context) {
    std::fprintf(stderr,
                 "usage: gpu_step_trace_bench --model FILE [--batch 1] [--steps 32] [--prompt 1] "
                 "[--context 1024] [--join C] [--join-at O] [--no-graphs] [--no-pdl] [--top 20] "
                 "[--by-grid] [--no-side-attention] (prompt + steps + 8 <= context, "
                 "join-at + join < context)\n");
    return 2;
  }
  try {
    rz::gpu::set_programmatic_launch(o.pdl);
    auto mf = rz::ModelFile::open(o.model);
    rz::gpu::GpuExecutorOptions g;
    g.slots = o.batch + (o.join > 0 ? 1 : 0);  // the joining prompts' slot: o.batch
    g.max_context = o.context;
    g.cuda_graphs = o.graphs;
    g.attention_side_by_side = o.side;
    rz::gpu::GpuExecutor ex(mf, g);
    const int per_slot = (o.context + ex.kv_block_size() - 1) / ex.kv_block_size();
    std::mt19937 rng(1);
    auto entry = [&](int slot, bool begin, std::vector<int32_t> tokens) {
      rz::StepSeq e;
      e.slot = slot;
      e.begin = begin;
      e.start = begin ? 0 : ex.slot_length(slot);
      e.tokens = std::move(tokens);
      e.sample = true;
      for (int b = 0; b < per_slot; ++b) e.blocks.push_back(slot * per_slot + b);
      return e;
    };
    auto random_tokens = [&](int n) {
      std::vector<int32_t> t(static_cast<size_t>(n));
      for (auto& x : t) x = static_cast<int32_t>(rng() % uint32_t(ex.config().n_vocab));
      return t;
    };
    std::vector<rz::StepSeq> first;
    for (int s = 0; s < o.batch; ++s) first.push_back(entry(s, true, random_tokens(o.prompt)));
    std::vector<int32_t> last = ex.step(first);
    std::vector<int32_t> join_prefix;  // --join-at: the long prompt's first join_at tokens
    if (o.join > 0 && o.join_at > 0) {
      rz::StepSeq head = entry(o.batch, true, random_tokens(o.join_at));
      head.sample = false;
      join_prefix = head.tokens;
      ex.step(std::span<const rz::StepSeq>(&head, 1));
      ex.release(o.batch);
    }
    auto decode = [&] {
      std::vector<rz::StepSeq> s;
      for (int i = 0; i < o.batch; ++i) s.push_back(entry(i, false, {last[size_t(i)]}));
      if (o.join > 0) {
        rz::StepSeq j = entry(o.batch, true, random_tokens(o.join));
        j.cached = join_prefix;
        j.start = o.join_at;
        s.push_back(std::move(j));
      }
      last = ex.step(s);
      if (o.join > 0) ex.release(o.batch);
    };
    for (int w = 0; w < 4; ++w) decode();  // graphs captured, caches warm

    check_cupti(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed),
                "cuptiActivityRegisterCallbacks");
    check_cupti(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityEnable");
    std::vector<Step> steps;
    for (int i = 0; i < o.steps; ++i) {
      Step st;
      cuptiGetTimestamp(&st.t0);
      const auto h0 = Clock::now();
      decode();  // returns after the device's sampled tokens are back
      st.host_ms = std::chrono::duration<double, std::milli>(Clock::now() - h0).count();
      cuptiGetTimestamp(&st.t1);
      steps.push_back(st);
    }
    check_cupti(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
    check_cupti(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL),
                "cuptiActivityDisable");

    auto& recs = records();
    std::sort(recs.begin(), recs.end(),
              [](const KernelRecord& a, const KernelRecord& b) { return a.start < b.start; });
    struct Kind {
      int launches = 0;
      double dur_us = 0, gap_us = 0;
    };
    std::map<std::string, Kind> kinds;
    std::vector<double> host, span, sum, busy, gaps, pre, post;
    std::vector<int> counts;
    size_t k = 0;
    for (const Step& st : steps) {
      while (k < recs.size() && recs[k].start < st.t0) ++k;
      uint64_t first_start = 0, last_end = 0, busy_ns = 0, sum_ns = 0, gap_ns = 0, frontier = 0;
      int n = 0;
      for (; k < recs.size() && recs[k].start <= st.t1; ++k) {
        const KernelRecord& r = recs[k];
        if (n == 0) first_start = frontier = r.start;
        const uint64_t gap = r.start > frontier ? r.start - frontier : 0;
        const uint64_t from = std::max(r.start, frontier);
        if (r.end > from) busy_ns += r.end - from;
        frontier = std::max(frontier, r.end);
        last_end = std::max(last_end, r.end);
        sum_ns += r.end - r.start;
        gap_ns += gap;
        std::string key = kind_of(r.name);
        if (o.by_grid)
          key += " [" + std::to_string(r.grid[0]) + "," + std::to_string(r.grid[1]) + "," +
                 std::to_string(r.grid[2]) + "]";
        Kind& kd = kinds[key];
        ++kd.launches;
        kd.dur_us += (r.end - r.start) / 1e3;
        kd.gap_us += gap / 1e3;
        ++n;
      }
      host.push_back(st.host_ms);
      counts.push_back(n);
      span.push_back((last_end - first_start) / 1e6);
      sum.push_back(sum_ns / 1e6);
      busy.push_back(busy_ns / 1e6);
      gaps.push_back(gap_ns / 1e6);
      pre.push_back(n > 0 && first_start > st.t0 ? (first_start - st.t0) / 1e6 : 0.0);
      post.push_back(n > 0 && st.t1 > last_end ? (st.t1 - last_end) / 1e6 : 0.0);
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    std::vector<double> cnt(counts.begin(), counts.end());
    const double ns = double(steps.size());
    std::printf(
        "gpu_step_trace_bench: %s, B = %d, %d steps after a %d-token prompt, %d-token prompt "
        "chunk at position %d joining each step, graphs %s, PDL %s, %s\n",
        o.model.c_str(), o.batch, o.steps, o.prompt, o.join, o.join_at, o.graphs ? "on" : "off",
        o.pdl ? "on" : "off", ex.memory_plan().device_name.c_str());
    std::printf(
        "\n| per step (median) | value |\n| --- | ---: |\n| host wall ms | %.3f |\n| kernels | "
        "%.0f "
        "|\n| device span ms (first start to last end) | %.3f |\n| kernel time ms (sum) | %.3f "
        "|\n| busy ms (union of kernels) | %.3f |\n| idle gaps ms | %.3f |\n| host before the "
        "first "
        "kernel ms | %.3f |\n| host after the last kernel ms | %.3f |\n",
        median(host), median(cnt), median(span), median(sum), median(busy), median(gaps),
        median(pre), median(post));
    std::vector<std::pair<std::string, Kind>> sorted(kinds.begin(), kinds.end());
    std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
      return a.second.dur_us + a.second.gap_us > b.second.dur_us + b.second.gap_us;
    });
    std::printf(
        "\n| kernel | per step | mean us | us per step | idle gap before it, us per step |\n"
        "| --- | ---: | ---: | ---: | ---: |\n");
    int shown = 0;
    for (const auto& [name, kd] : sorted) {
      if (shown++ >= o.top) break;
      std::printf("| %s | %.1f | %.2f | %.1f | %.1f |\n", name.c_str(), kd.launches / ns,
                  kd.dur_us / kd.launches, kd.dur_us / ns, kd.gap_us / ns);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_step_trace_bench: %s\n", e.what());
    return 1;
  }
}
