// What a mixed step costs on the CUDA executor (a benchmark, not a test): B sequences decoding
// beside one long prompt that is computed in chunks of C tokens (docs/engine.md, the token
// budget). Times, each the median of --reps steps:
//
//   decode        the B decode tokens alone (the decode path: paged decode attention, CUDA graph)
//   decode+1      the B decode tokens and 1 prompt token (the packed path, no graph): what the
//                 packed path costs the decodes
//   chunk C       C prompt tokens alone, at a context of --offset tokens and growing
//   decode+C      the B decode tokens and C prompt tokens in one step
//
// and `decode+C - decode - chunk C`: what mixing costs beyond doing both apart.
//
//   gpu_mixed_step_bench --model FILE [--batch 32] [--chunks 16,64,224,480] [--offset 1024]
//                        [--reps 9] [--row-chunk N] [--profile C] [--no-side-attention] [--cpu]
// --row-chunk N: GpuExecutorOptions::row_chunk (prompt chunks of at most N tokens attend as
// decode-attention rows; default 16, the executor's).
// --no-side-attention: the decode rows' and the packed chunk's attentions one after the other
// (GpuExecutorOptions::attention_side_by_side false), for an A/B in one binary.
// --profile C: at the end, one decode + C step between cudaProfilerStart and Stop, so that
// `ncu --profile-from-start off --metrics gpu__time_duration.sum --csv gpu_mixed_step_bench ...`
// lists that step's kernels and their times (their sum against the step's wall time says how
// much of the step is launch and host time).
#include <cuda_profiler_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "cpu/cpu_executor.hpp"
#include "formats/common.hpp"
#include "formats/model_file.hpp"
#include "gpu/gpu_executor.hpp"
#include "model/executor.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string model;
  int batch = 32, offset = 1024, reps = 7, context = 8192,
      row_chunk = rz::gpu::GpuExecutorOptions{}.row_chunk,
      row_chunk_keys = rz::gpu::GpuExecutorOptions{}.row_chunk_keys, profile = 0;
  std::vector<int> chunks = {16, 64, 224, 480};
  bool cpu = false;
  bool fused_forms = true;  // --no-fused-forms: GpuExecutorOptions::fused_input_forms off
  bool side = true;         // --no-side-attention: GpuExecutorOptions::attention_side_by_side off
};

// Drives slots 0..B-1 (decoding) and slot B (the long prompt) with fixed block tables: slot s
// owns blocks [s * per_slot, (s + 1) * per_slot).
class Mixed {
 public:
  Mixed(rz::Executor& ex, int batch) : ex_(ex), batch_(batch) {
    per_slot_ = (ex.max_context() + ex.kv_block_size() - 1) / ex.kv_block_size();
    if (int64_t{per_slot_} * (batch + 1) > ex.kv_blocks())
      throw rz::Error("the executor has too few KV blocks for " + std::to_string(batch + 1) +
                      " full contexts");
    last_.assign(static_cast<size_t>(batch), 0);
  }
  std::vector<int32_t> random_tokens(int n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = static_cast<int32_t>(rng_() % uint32_t(ex_.config().n_vocab));
    return t;
  }
  rz::StepSeq entry(int slot, bool begin, std::vector<int32_t> tokens, bool sample) {
    rz::StepSeq e;
    e.slot = slot;
    e.begin = begin;
    e.start = begin ? 0 : ex_.slot_length(slot);
    e.tokens = std::move(tokens);
    e.sample = sample;
    for (int b = 0; b < per_slot_; ++b) e.blocks.push_back(slot * per_slot_ + b);
    return e;
  }
  void start(int prompt, int offset) {
    std::vector<rz::StepSeq> s;
    for (int i = 0; i < batch_; ++i) s.push_back(entry(i, true, random_tokens(prompt), true));
    s.push_back(entry(batch_, true, random_tokens(offset), true));
    const auto out = ex_.step(s);
    std::copy(out.begin(), out.end(), last_.begin());
  }
  // One timed step: the B decodes (when `decodes`) and `chunk` prompt tokens of slot B.
  double step(bool decodes, int chunk) {
    std::vector<rz::StepSeq> s;
    if (decodes)
      for (int i = 0; i < batch_; ++i) s.push_back(entry(i, false, {last_[size_t(i)]}, true));
    // The chunk samples too: a step that samples nothing returns before the device is done.
    if (chunk > 0) s.push_back(entry(batch_, false, random_tokens(chunk), true));
    const auto t0 = Clock::now();
    const auto out = ex_.step(s);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (decodes) std::copy(out.begin(), out.begin() + batch_, last_.begin());  // decodes first
    return ms;
  }
  void reset_long(int offset) {
    ex_.release(batch_);
    ex_.step(std::vector<rz::StepSeq>{entry(batch_, true, random_tokens(offset), true)});
  }

 private:
  rz::Executor& ex_;
  int batch_, per_slot_ = 0;
  std::vector<int32_t> last_;
  std::mt19937 rng_{7};
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--cpu") {
      o.cpu = true;
      continue;
    }
    if (a == "--no-fused-forms") {
      o.fused_forms = false;
      continue;
    }
    if (a == "--no-side-attention") {
      o.side = false;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "gpu_mixed_step_bench: %s needs a value\n", a.c_str());
      return 2;
    }
    const std::string v = argv[++i];
    if (a == "--model") {
      o.model = v;
    } else if (a == "--batch") {
      o.batch = std::atoi(v.c_str());
    } else if (a == "--offset") {
      o.offset = std::atoi(v.c_str());
    } else if (a == "--reps") {
      o.reps = std::atoi(v.c_str());
    } else if (a == "--profile") {
      o.profile = std::atoi(v.c_str());
    } else if (a == "--row-chunk") {
      o.row_chunk = std::atoi(v.c_str());
    } else if (a == "--row-chunk-keys") {
      o.row_chunk_keys = std::atoi(v.c_str());
    } else if (a == "--chunks") {
      o.chunks.clear();
      for (size_t p = 0; p < v.size();) {
        const size_t q = std::min(v.find(',', p), v.size());
        o.chunks.push_back(std::atoi(v.substr(p, q - p).c_str()));
        p = q + 1;
      }
    } else {
      std::fprintf(stderr, "gpu_mixed_step_bench: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (o.model.empty() || o.batch < 1 || o.reps < 1 || o.offset < 1) {
    std::fprintf(stderr,
                 "usage: gpu_mixed_step_bench --model FILE [--batch 32] [--chunks 16,64,224,480] "
                 "[--offset 1024] [--reps 7] [--row-chunk N] [--row-chunk-keys K] [--profile C] "
                 "[--no-fused-forms] [--no-side-attention] [--cpu]\n");
    return 2;
  }
  try {
    auto mf = rz::ModelFile::open(o.model);
    std::unique_ptr<rz::Executor> ex;
    if (o.cpu) {
      ex = std::make_unique<rz::CpuExecutor>(
          mf, rz::CpuExecutorOptions{.slots = o.batch + 1, .max_context = o.context});
    } else {
      rz::gpu::GpuExecutorOptions g;
      g.slots = o.batch + 1;
      g.max_context = o.context;
      g.row_chunk = o.row_chunk;
      g.row_chunk_keys = o.row_chunk_keys;
      g.fused_input_forms = o.fused_forms;
      g.attention_side_by_side = o.side;
      ex = std::make_unique<rz::gpu::GpuExecutor>(mf, g);
    }
    Mixed m(*ex, o.batch);
    m.start(64, o.offset);
    for (int w = 0; w < 3; ++w) m.step(true, 0);  // graphs captured, caches warm
    std::vector<double> dec, dec1;
    for (int r = 0; r < o.reps; ++r) dec.push_back(m.step(true, 0));
    for (int r = 0; r < o.reps; ++r) dec1.push_back(m.step(true, 1));
    std::printf("gpu_mixed_step_bench: %s, B = %d decoding (context ~%d), long prompt from %d\n",
                o.model.c_str(), o.batch, 64 + 3 + 2 * o.reps, o.offset);
    std::printf("| step | ms (median of %d) |\n| --- | ---: |\n", o.reps);
    std::printf("| decode (B tokens, graph) | %.2f |\n| decode + 1 prompt token | %.2f |\n",
                median(dec), median(dec1));
    std::printf(
        "\n| C | chunk C alone ms | decode + C ms | decode + C - decode - chunk ms |\n"
        "| ---: | ---: | ---: | ---: |\n");
    for (int c : o.chunks) {
      if (o.offset + 2 * o.reps * c + 8 > o.context) {
        std::printf("| %d | (does not fit the context of %d) | | |\n", c, o.context);
        continue;
      }
      m.reset_long(o.offset);
      std::vector<double> alone, mixed;
      for (int r = 0; r < o.reps; ++r) {
        alone.push_back(m.step(false, c));
        mixed.push_back(m.step(true, c));
      }
      const double a = median(alone), x = median(mixed);
      std::printf("| %d | %.2f | %.2f | %+.2f |\n", c, a, x, x - median(dec) - a);
    }
    if (auto* gx = dynamic_cast<rz::gpu::GpuExecutor*>(ex.get()))
      std::printf("\n%s\n", gx->graph_stats().summary().c_str());
    if (o.profile > 0 && !o.cpu) {
      // One decode + C step between cudaProfilerStart/Stop, for
      // `ncu --profile-from-start off` (per-kernel times of exactly that step).
      m.reset_long(o.offset);
      m.step(true, o.profile);  // anything captured or planned for this shape, done
      cudaProfilerStart();
      const double ms = m.step(true, o.profile);
      cudaProfilerStop();
      std::printf("\nprofiled: decode + %d, %.2f ms\n", o.profile, ms);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_mixed_step_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
