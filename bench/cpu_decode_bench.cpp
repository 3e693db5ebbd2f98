// Decode throughput of the CPU executor (a benchmark, not a test): SmolLM2-135M by default, batch
// 1 and 8, after a prefill of a short prompt per slot. Prints tokens/s, ms per step and the
// achieved bandwidth of weight reads (every matrix is read once per step) next to a memory
// bandwidth ceiling measured here with a large memcpy.
//
//   cpu_decode_bench [--model FILE] [--steps N] [--threads N] [--batches 1,8] [--prompt-len N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <immintrin.h>
#include <sys/resource.h>

#include "cpu/cpu_executor.hpp"
#include "cpu/thread_pool.hpp"
#include "formats/common.hpp"
#include "formats/model_file.hpp"
#include "sched/slot_runner.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double secs(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// CPU seconds used by this process so far (all threads): shows how much of the machine the run
// got when other work competes for the cores.
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec * 1e-6;
}

// Best of several single-threaded memcpy passes over 256 MiB; counts bytes read + written.
double memcpy_gbps() {
  const size_t n = size_t(256) << 20;
  std::unique_ptr<char[]> a(new char[n]), b(new char[n]);
  std::memset(a.get(), 1, n);
  std::memset(b.get(), 2, n);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = Clock::now();
    std::memcpy(b.get(), a.get(), n);
    auto t1 = Clock::now();
    best = std::max(best, 2.0 * n / secs(t0, t1) / 1e9);
    std::swap(a, b);
  }
  return best;
}

// Best of several passes that only read 512 MiB with all threads (weights are only read, so
// this is the closer ceiling for a decode step; memcpy is the figure the brief asks for).
double read_gbps(int threads) {
  const size_t n = size_t(512) << 20;
  std::unique_ptr<float[]> a(new float[n / 4]);
  rz::ThreadPool pool(threads);
  pool.parallel_for(n / 4, 1 << 16, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) a[i] = float(i & 7);
  });
  std::vector<float> sink(pool.size(), 0);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = Clock::now();
    pool.parallel_for(n / 4, 1 << 16, [&](int64_t b, int64_t e, int t) {
      __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
      for (int64_t i = b; i + 32 <= e; i += 32) {
        s0 = _mm256_add_ps(s0, _mm256_loadu_ps(&a[i]));
        s1 = _mm256_add_ps(s1, _mm256_loadu_ps(&a[i + 8]));
        s2 = _mm256_add_ps(s2, _mm256_loadu_ps(&a[i + 16]));
        s3 = _mm256_add_ps(s3, _mm256_loadu_ps(&a[i + 24]));
      }
      float out[8];
      _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
      for (float v : out) sink[t] += v;
    });
    best = std::max(best, n / secs(t0, Clock::now()) / 1e9);
  }
  return sink[0] == -1 ? 0 : best;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "models/SmolLM2-135M-Instruct.Q4_1.gguf";  // run from the repo root
  int steps = 64, threads = 0, prompt_len = 16;
  std::vector<int> batches = {1, 8};
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--model")
      model = v;
    else if (a == "--steps")
      steps = std::atoi(v.c_str());
    else if (a == "--threads")
      threads = std::atoi(v.c_str());
    else if (a == "--prompt-len")
      prompt_len = std::atoi(v.c_str());
    else if (a == "--batches") {
      batches.clear();
      for (size_t p = 0; p < v.size();) {
        size_t q = v.find(',', p);
        if (q == std::string::npos) q = v.size();
        batches.push_back(std::atoi(v.substr(p, q - p).c_str()));
        p = q + 1;
      }
    } else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  try {
    auto mf = rz::ModelFile::open(model);
    const double mem = memcpy_gbps();
    std::printf("model %s\nmemcpy bandwidth (1 thread, read+write): %.1f GB/s\n", model.c_str(),
                mem);
    std::printf("read bandwidth (%d threads, read only): %.1f GB/s\n",
                threads > 0 ? threads : rz::ThreadPool(0).size(), read_gbps(threads));
    std::printf("\n%6s %10s %10s %12s %10s %12s %14s\n", "batch", "tokens/s", "ms/step",
                "weights MB", "GB/s", "% of memcpy", "cpu ms/step");
    for (int b : batches) {
      rz::CpuExecutor ex(mf,
                         {.slots = b, .max_context = prompt_len + steps + 16, .threads = threads});
      rz::SlotRunner run(ex);
      std::vector<rz::PrefillRequest> reqs;
      for (int s = 0; s < b; ++s) {
        rz::PrefillRequest r;
        r.slot = s;
        for (int i = 0; i < prompt_len; ++i) r.tokens.push_back(1000 + 37 * i + s);
        reqs.push_back(r);
      }
      auto toks = run.prefill(reqs);
      std::vector<rz::DecodeRequest> d(b);
      auto step = [&] {
        for (int s = 0; s < b; ++s) d[s] = {s, toks[s]};
        toks = run.decode(d);
      };
      for (int i = 0; i < 4; ++i) step();  // warm-up
      auto t0 = Clock::now();
      const double c0 = cpu_seconds();
      for (int i = 0; i < steps; ++i) step();
      const double t = secs(t0, Clock::now());
      const double cpu_ms = (cpu_seconds() - c0) / steps * 1e3;
      const double ms = t / steps * 1e3;
      const double bytes = double(ex.weights().matrix_bytes());
      const double gbps = bytes / (t / steps) / 1e9;
      std::printf("%6d %10.1f %10.2f %12.1f %10.2f %11.0f%% %14.2f\n", b, b * steps / t, ms,
                  bytes / 1e6, gbps, 100 * gbps / mem, cpu_ms);
    }
    // Prefill throughput for reference.
    {
      rz::CpuExecutor ex(mf, {.slots = 1, .max_context = 256, .threads = threads});
      rz::SlotRunner run(ex);
      rz::PrefillRequest r;
      for (int i = 0; i < 128; ++i) r.tokens.push_back(1000 + 37 * i);
      auto t0 = Clock::now();
      run.prefill(r);
      const double t = secs(t0, Clock::now());
      std::printf("\nprefill of 128 tokens: %.1f ms (%.0f tokens/s)\n", t * 1e3, 128 / t);
    }
  } catch (const rz::Error& e) {
    std::fprintf(stderr, "cpu_decode_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
