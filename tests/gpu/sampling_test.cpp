// GPU token sampling (kernels/sampling.cu) against the CPU Sampler (model/sampling.cpp): the
// same logits, settings and seed must give the same token id. The host draws each row's u from
// a std::mt19937_64 seeded like the CPU Sampler's (the first draw of a fresh Sampler).
//
// The GPU computes probabilities as float(exp(double)) and sums in a different order, so a draw
// whose decision sits within rounding of a boundary may legitimately differ. To know which draws
// those are, simulate() restates the CPU algorithm on the host (full sorts, sequential double
// sums) once with the CPU's expf and once with the GPU's exp, and flags any comparison (top-p
// prefix, draw) within 1e-9 of the total of its boundary. A draw is compared with the CPU only
// when neither simulation is near a boundary and both agree; the rest are counted and must stay
// under 2 % (in practice they are ~0). The simulation itself must reproduce rz::Sampler
// exactly (checked on every row), so it cannot drift from the reference unnoticed.
// Penalties (repetition, presence, frequency) must match bit for bit, and rows that ask for
// log-probabilities must report rz::token_logprobs' top ids exactly and its values within 1e-6
// (the log-sum-exp is summed in another order).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gpu/test_support.hpp"
#include "kernels/sampling.hpp"
#include "model/sampling.hpp"
#include "tests/gpu/elem_test_util.hpp"

namespace rz::gpu {
namespace {

using namespace elem_test;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr double kNearTol = 1e-9;  // relative to the total a boundary is measured against

// The first uniform a fresh CPU Sampler with this seed draws (model/sampling.cpp).
double first_uniform(uint64_t seed) {
  std::mt19937_64 g(seed);
  return double(g() >> 11) * 0x1.0p-53;
}

int32_t argmax_ref(const std::vector<float>& l) {  // sampling.cpp's argmax rules
  int32_t best = 0;
  float bv = -kInf;
  for (size_t i = 0; i < l.size(); ++i)
    if (l[i] > bv) bv = l[i], best = int32_t(i);
  return best;
}

// A row's settings: the GPU row plus the penalties the host turns into entries.
struct Setting : SampleRow {
  float penalty = 1.0f;  // repetition
  float presence = 0.0f;
  float frequency = 0.0f;
  bool penalised() const { return penalty != 1.0f || presence != 0.0f || frequency != 0.0f; }
};

using Cand = std::pair<float, int32_t>;
bool before(const Cand& a, const Cand& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

struct Sim {
  int32_t id = -1;
  bool near = false;  // some decision within kNearTol of its boundary
};

// The CPU Sampler's steps 2..8 on already penalised logits, with full sorts; gpu_exp picks
// float(exp(double)) instead of expf.
Sim simulate(const std::vector<float>& l, const SampleRow& p, bool gpu_exp) {
  Sim out;
  if (p.temperature <= 0.0f) return {argmax_ref(l), false};
  const size_t n = l.size();
  const bool use_top_k = p.top_k > 0 && size_t(p.top_k) < n;
  const bool use_top_p = p.top_p < 1.0f;
  std::vector<Cand> c(n);
  for (size_t i = 0; i < n; ++i) c[i] = {std::isnan(l[i]) ? -kInf : l[i], int32_t(i)};
  size_t count = n;
  bool sorted = false;
  if (use_top_k) {
    std::sort(c.begin(), c.end(), before);
    count = size_t(p.top_k);
    c.resize(count);
    sorted = true;
  }
  const float inv_t = 1.0f / p.temperature;
  for (size_t i = 0; i < count; ++i) c[i].first *= inv_t;  // stored: no fused multiply-add below
  float max_l = -kInf;
  for (size_t i = 0; i < count; ++i) max_l = std::max(max_l, c[i].first);
  if (!std::isfinite(max_l)) return {sorted ? c[0].second : argmax_ref(l), false};
  double sum = 0.0;
  float max_p = 0.0f;
  for (size_t i = 0; i < count; ++i) {
    const float d = c[i].first - max_l;
    const float e = gpu_exp ? float(std::exp(double(d))) : std::exp(d);
    c[i].first = e;
    sum += e;
    max_p = std::max(max_p, e);
  }
  if (p.min_p > 0.0f) {
    const float thr = p.min_p * max_p;
    size_t kept = 0;
    for (size_t i = 0; i < count; ++i)
      if (c[i].first >= thr) c[kept++] = c[i];
    count = std::max<size_t>(kept, 1);
  }
  if (use_top_p) {
    const double target = double(p.top_p) * sum;
    if (!sorted) std::sort(c.begin(), c.begin() + count, before);
    double cum = 0.0;
    size_t keep = 0;
    while (keep < count && cum < target) {
      cum += c[keep++].first;
      if (std::fabs(cum - target) <= kNearTol * sum) out.near = true;
    }
    count = std::max<size_t>(keep, 1);
  }
  double mass = 0.0;
  for (size_t i = 0; i < count; ++i) mass += c[i].first;
  const double target = p.u * mass;
  double cum = 0.0;
  for (size_t i = 0; i < count; ++i) {
    cum += c[i].first;
    if (std::fabs(target - cum) <= kNearTol * mass) out.near = true;
    if (target < cum) {
      out.id = c[i].second;
      return out;
    }
  }
  out.id = c[count - 1].second;
  return out;
}

std::string describe(const Setting& p) {
  std::ostringstream os;
  os.precision(17);
  os << "{temperature " << p.temperature << ", top_k " << p.top_k << ", top_p " << p.top_p
     << ", min_p " << p.min_p << ", penalty " << p.penalty << ", presence " << p.presence
     << ", frequency " << p.frequency << ", logprobs " << p.logprobs << ", u " << p.u << "}";
  return os.str();
}

SamplingParams params_of(const Setting& p, uint64_t seed) {
  SamplingParams sp;
  sp.temperature = p.temperature;
  sp.top_k = p.top_k;
  sp.top_p = p.top_p;
  sp.min_p = p.min_p;
  sp.repetition_penalty = p.penalty;
  sp.repetition_last_n = -1;  // the whole history
  sp.presence_penalty = p.presence;
  sp.frequency_penalty = p.frequency;
  sp.logprobs = p.logprobs;
  sp.seed = seed;
  return sp;
}

struct Tally {
  int compared = 0, skipped = 0;
};

// One launch over rows [n_rows, n] with per-row settings, histories (duplicates and
// out-of-range ids allowed; the second half counts as generated, for presence and frequency)
// and seeds, the penalty entries made by rz::penalty_entries as the executor makes them; every
// row compared with a fresh CPU Sampler.
void run_batch(const std::vector<float>& logits, int n, std::vector<Setting> rows,
               const std::vector<std::vector<int32_t>>& histories,
               const std::vector<uint64_t>& seeds, const std::string& what, Tally& tally) {
  const int n_rows = int(rows.size());
  ASSERT_EQ(logits.size(), size_t(n_rows) * n);
  std::vector<PenaltyEntry> entries, one;  // the rows' entries, back to back
  std::vector<SampleRow> gpu_rows;
  bool any_lp = false;
  for (int r = 0; r < n_rows; ++r) {
    const SamplingParams sp = params_of(rows[r], seeds[r]);
    penalty_entries(sp, histories[r], histories[r].size() / 2, n, one);
    rows[r].penalty_begin = int(entries.size());
    entries.insert(entries.end(), one.begin(), one.end());
    rows[r].penalty_end = int(entries.size());
    rows[r].u = first_uniform(seeds[r]);
    gpu_rows.push_back(rows[r]);
    any_lp = any_lp || rows[r].logprobs >= 0;
  }
  auto d_logits = to_device(logits);
  auto d_rows = to_device(gpu_rows);
  auto d_entries = to_device(entries);
  auto d_raw = poisoned<float>(std::max<size_t>(entries.size(), 1));
  auto d_out = poisoned<int32_t>(size_t(n_rows));
  auto d_lp = poisoned<LogprobsRow>(size_t(n_rows));
  auto d_ws = poisoned<uint8_t>(sample_rows_workspace_bytes(n_rows, n));
  sample_rows(d_logits.get(), n_rows, n, d_rows.get(), entries.empty() ? nullptr : d_entries.get(),
              any_lp ? d_raw.get() : nullptr, d_out.get(), any_lp ? d_lp.get() : nullptr,
              d_ws.get(), d_ws.bytes(), nullptr);
  RZ_CUDA_CHECK(cudaDeviceSynchronize());
  const auto got = d_out.download();
  const auto got_logits = d_logits.download();
  const auto got_lp = d_lp.download();

  for (int r = 0; r < n_rows; ++r) {
    const Setting& p = rows[r];
    Sampler cpu(params_of(p, seeds[r]));
    std::vector<float> l(logits.begin() + size_t(r) * n, logits.begin() + size_t(r + 1) * n);
    const std::vector<float> raw = l;
    const int32_t want = cpu.sample(l, histories[r], histories[r].size() / 2);  // l penalised
    const std::string where =
        what + ", n " + std::to_string(n) + ", row " + std::to_string(r) + " " + describe(p);

    // the penalty, bit for bit (NaN stays NaN)
    for (int i = 0; i < n; ++i) {
      const float g = got_logits[size_t(r) * n + i];
      if (std::isnan(g) && std::isnan(l[i])) continue;
      if (bits_of(g) != bits_of(l[i])) {
        ADD_FAILURE() << where << ": penalised logit " << i << " is " << g << ", CPU " << l[i];
        return;
      }
    }

    if (p.logprobs >= 0 && got[r] >= 0 && got[r] < n) {
      TokenLogprobs lp;
      token_logprobs(raw, got[r], p.logprobs, lp);
      const LogprobsRow& g = got_lp[size_t(r)];
      ASSERT_EQ(g.n_top, int(lp.top_ids.size())) << where;
      auto near = [](float a, float b) {
        return (std::isinf(a) && a == b) ||
               std::fabs(a - b) <= 1e-6f * std::max(1.0f, std::fabs(b));
      };
      EXPECT_TRUE(near(g.logprob, lp.logprob))
          << where << ": chosen logprob " << g.logprob << ", CPU " << lp.logprob;
      for (int i = 0; i < g.n_top; ++i) {
        ASSERT_EQ(g.top_ids[i], lp.top_ids[size_t(i)]) << where << ": top " << i;
        EXPECT_TRUE(near(g.top_logprobs[i], lp.top_logprobs[size_t(i)]))
            << where << ": top " << i << " logprob " << g.top_logprobs[i] << ", CPU "
            << lp.top_logprobs[size_t(i)];
      }
    }

    const Sim sc = simulate(l, p, false), sg = simulate(l, p, true);
    ASSERT_EQ(sc.id, want) << where << ": the test's simulation disagrees with rz::Sampler";
    ASSERT_TRUE(got[r] >= 0 && got[r] < n) << where << ": GPU id " << got[r] << " out of range";
    auto detail = [&] {
      std::ostringstream os;
      os.precision(9);
      os << where << ": GPU id " << got[r] << " (logit " << l[got[r]] << "), CPU id " << want
         << " (logit " << l[want] << "); simulation with GPU exp " << sg.id
         << (sg.near ? " (near a boundary)" : "");
      return os.str();
    };
    const bool ambiguous = sc.near || sg.near || sc.id != sg.id;
    if (ambiguous) {
      ++tally.skipped;
      if (!sg.near) {
        ASSERT_EQ(got[r], sg.id) << detail();
      }
      continue;
    }
    ++tally.compared;
    ASSERT_EQ(got[r], want) << detail();
  }
}

void expect_few_skipped(const Tally& t) {
  const int total = t.compared + t.skipped;
  std::cout << "[ sampling ] " << t.compared << " draws compared exactly, " << t.skipped
            << " within rounding of a boundary (skipped)\n";
  EXPECT_LE(t.skipped, std::max(2, total / 50)) << "too many draws near a boundary";
}

// Settings cycling over the stages and their combinations; `k` picks one. Every third setting
// asks for log-probabilities (0, 5 or 20 alternatives).
Setting settings(int k, int n) {
  Setting p;
  p.temperature = 1.0f;
  if (k % 3 == 1) p.logprobs = (k / 3) % 3 == 0 ? 0 : ((k / 3) % 3 == 1 ? 5 : kMaxLogprobs);
  switch (k % 23) {
    case 0: p.temperature = 0.0f; break;                    // greedy
    case 1: p.temperature = 0.0f, p.penalty = 1.3f; break;  // greedy + penalty
    case 2: break;                                          // plain softmax
    case 3: p.temperature = 0.8f, p.top_k = 40; break;
    case 4: p.top_p = 0.9f; break;
    case 5: p.min_p = 0.05f; break;
    case 6: p.top_k = 50, p.top_p = 0.95f, p.min_p = 0.02f, p.penalty = 1.2f; break;
    case 7: p.temperature = 0.7f, p.top_p = 0.5f, p.min_p = 0.1f; break;
    case 8: p.temperature = 1e-3f, p.top_p = 0.95f; break;               // sharp
    case 9: p.temperature = 100.0f, p.top_p = 0.999f; break;             // flat, big nucleus
    case 10: p.temperature = 2.0f, p.top_k = std::max(1, n - 1); break;  // large k
    case 11: p.top_k = 1; break;
    case 12: p.top_k = n, p.top_p = 1.0f, p.min_p = 0.0f; break;  // k = n: off
    case 13: p.temperature = 1.5f, p.top_p = 0.3f, p.penalty = 0.8f; break;
    case 14: p.temperature = 1e-39f; break;                // 1/T = inf: falls back to greedy
    case 15: p.min_p = 1.5f, p.top_p = 0.9f; break;        // keeps nothing: the CPU takes id 0
    case 16: p.top_p = 0.0f, p.temperature = 0.5f; break;  // keeps one
    case 17: p.temperature = 1e4f, p.min_p = 0.9999f; break;
    case 18: p.min_p = 1.5f, p.top_k = 10; break;  // keeps nothing, top-k: the best id
    case 19: p.temperature = 0.3f, p.top_k = 20, p.min_p = 0.2f, p.penalty = 1.5f; break;
    case 20: p.temperature = 0.0f, p.presence = 0.8f, p.frequency = 0.3f; break;  // greedy
    case 21: p.presence = 1.5f, p.frequency = -0.5f, p.penalty = 1.1f, p.top_p = 0.9f; break;
    case 22: p.temperature = 0.7f, p.frequency = 2.0f, p.top_k = 40; break;
  }
  return p;
}

// Random logits [rows, n] ~ N(0, sigma) with sigma varying per row, one spike on odd rows.
std::vector<float> random_logits(std::mt19937_64& rng, int rows, int n) {
  std::vector<float> x(size_t(rows) * n);
  for (int r = 0; r < rows; ++r) {
    std::normal_distribution<float> nd(0.0f, 1.0f + float(r % 4));
    float* row = &x[size_t(r) * n];
    for (int i = 0; i < n; ++i) row[i] = nd(rng);
    if (r % 2) row[rng() % n] += 8.0f;
  }
  return x;
}

std::vector<int32_t> random_history(std::mt19937_64& rng, int n, int len) {
  std::vector<int32_t> h(len);
  for (auto& t : h) t = int32_t(rng() % (n + 4)) - 2;  // a few out of range
  return h;
}

TEST(Sampling, RandomRowsMatchTheCpuSampler) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  Tally tally;
  for (int n : {1, 7, 1000, 4097, 49152, 151936}) {
    const int reps = n <= 4097 ? 12 : 3;
    for (int rep = 0; rep < reps; ++rep) {
      const int rows = 20;
      const auto x = random_logits(rng, rows, n);
      std::vector<Setting> ps;
      std::vector<std::vector<int32_t>> hs;
      std::vector<uint64_t> seeds;
      for (int r = 0; r < rows; ++r) {
        ps.push_back(settings(r + rep, n));
        hs.push_back(ps.back().penalised() ? random_history(rng, n, 64) : std::vector<int32_t>{});
        seeds.push_back(rng());
      }
      run_batch(x, n, ps, hs, seeds, "random rep " + std::to_string(rep), tally);
      if (HasFatalFailure() || HasFailure()) return;
    }
  }
  expect_few_skipped(tally);
}

// Many draws from one distribution: the draw walks to many different positions.
TEST(Sampling, ManySeedsOverOneRow) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  Tally tally;
  const int n = 49152, rows = 128;
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> one(n);
  for (auto& v : one) v = nd(rng);
  std::vector<float> x;
  for (int r = 0; r < rows; ++r) x.insert(x.end(), one.begin(), one.end());
  for (int k : {2, 3, 4, 5, 7, 9, 13}) {
    std::vector<Setting> ps(rows, settings(k, n));
    std::vector<std::vector<int32_t>> hs(rows);
    std::vector<uint64_t> seeds;
    for (int r = 0; r < rows; ++r) seeds.push_back(rng());
    if (settings(k, n).penalised())
      for (auto& h : hs) h = random_history(rng, n, 64);
    run_batch(x, n, ps, hs, seeds, "settings " + std::to_string(k), tally);
    if (HasFatalFailure() || HasFailure()) return;
  }
  expect_few_skipped(tally);
}

// Ties (coarse values, all equal, distinct logits with one probability), NaN, +-inf, -0.
TEST(Sampling, TiesNaNAndInfinities) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  Tally tally;
  for (int n : {7, 1000, 49152}) {
    for (int rep = 0; rep < 4; ++rep) {
      const int rows = 40;
      std::vector<float> x(size_t(rows) * n);
      std::normal_distribution<float> nd(0.0f, 2.0f);
      for (int r = 0; r < rows; ++r) {
        float* row = &x[size_t(r) * n];
        for (int i = 0; i < n; ++i) row[i] = nd(rng);
        auto at = [&] { return int(rng() % n); };
        switch ((r / 20) % 2 == 0 ? r % 10 : (r + rep) % 10) {
          case 0:  // coarse values: many exact ties
            for (int i = 0; i < n; ++i) row[i] = std::round(row[i] * 2.0f) / 2.0f;
            break;
          case 1: std::fill(row, row + n, 0.5f); break;  // all equal
          case 2:  // distinct logits just below the max round to one probability
            for (int i = 0; i < n; ++i)
              row[i] = 0.25f - float(rng() % 8) * 0x1.0p-26f - (rng() % 4 == 0 ? 1.0f : 0.0f);
            break;
          case 3:  // NaNs and -infs sprinkled
            for (int k = 0; k < 1 + n / 5; ++k) row[at()] = (k % 2) ? kNaN : -kInf;
            break;
          case 4: std::fill(row, row + n, -kInf); break;  // all -inf: greedy fallback
          case 5: std::fill(row, row + n, kNaN); break;   // all NaN: id 0
          case 6: row[at()] = kInf; break;                // +inf: greedy fallback
          case 7:                                         // -0 and +0 ties, the rest below
            for (int i = 0; i < n; ++i)
              row[i] = (i % 3 == 0) ? -0.0f : (i % 3 == 1 ? 0.0f : -1.0f - float(i % 5));
            break;
          case 8:  // only a few finite values
            for (int i = 0; i < n; ++i) row[i] = (rng() % 50 == 0) ? nd(rng) : -kInf;
            row[at()] = 1.0f;
            break;
          case 9:  // quantised to 1/8 with a spike tie
            for (int i = 0; i < n; ++i) row[i] = std::round(row[i] * 8.0f) / 8.0f;
            row[at()] = 9.0f, row[at()] = 9.0f;
            break;
        }
      }
      std::vector<Setting> ps;
      std::vector<std::vector<int32_t>> hs;
      std::vector<uint64_t> seeds;
      for (int r = 0; r < rows; ++r) {
        ps.push_back(settings(r * 7 + rep, n));
        hs.push_back(ps.back().penalised() ? random_history(rng, n, 64) : std::vector<int32_t>{});
        seeds.push_back(rng());
      }
      run_batch(x, n, ps, hs, seeds, "ties/nan rep " + std::to_string(rep), tally);
      if (HasFatalFailure() || HasFailure()) return;
    }
  }
  expect_few_skipped(tally);
}

// The penalty alone on greedy rows changes the argmax exactly as the CPU's does.
TEST(Sampling, PenaltyOnGreedyRows) {
  RZ_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  Tally tally;
  const int n = 32000, rows = 16;
  std::vector<float> x(size_t(rows) * n);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<Setting> ps(rows);
  std::vector<std::vector<int32_t>> hs(rows);
  std::vector<uint64_t> seeds(rows, 0);
  for (int r = 0; r < rows; ++r) {
    float* row = &x[size_t(r) * n];
    for (int i = 0; i < n; ++i) row[i] = nd(rng);
    const int a = int(rng() % n), b = int(rng() % n);
    row[a] = (r % 2) ? 5.0f : -0.5f;  // positive top (divided) or all-negative row (multiplied)
    row[b] = (r % 2) ? 4.5f : -0.6f;
    if (r % 2 == 0)
      for (int i = 0; i < n; ++i) row[i] = -std::fabs(row[i]) - 0.5f * (i != a && i != b);
    ps[r].temperature = 0.0f;
    ps[r].penalty = (r % 4 < 2) ? 1.3f : 0.7f;
    hs[r] = {a, a, b, -1, n, n + 7};  // duplicates and out-of-range ids
    if (r % 3 == 0) hs[r].push_back(int32_t(rng() % n));
  }
  run_batch(x, n, ps, hs, seeds, "penalty", tally);
}

// Timing (not a test; run with --gtest_also_run_disabled_tests): microseconds per launch for
// 1 and 64 rows of a 151936-token vocabulary under typical settings.
TEST(Sampling, DISABLED_Bench) {
  RZ_REQUIRE_GPU();
  std::mt19937_64 rng(1);
  const int n = 151936;
  for (int rows : {1, 64}) {
    const auto x = random_logits(rng, rows, n);
    auto d_logits = to_device(x);
    auto d_out = poisoned<int32_t>(size_t(rows));
    auto d_ws = poisoned<uint8_t>(sample_rows_workspace_bytes(rows, n));
    for (int k : {0, 2, 3, 4, 6}) {
      std::vector<Setting> ps(rows, settings(k, n));
      std::vector<SampleRow> gpu_rows;
      for (auto& p : ps) p.penalty = 1.0f, p.u = 0.5, gpu_rows.push_back(p);
      auto d_rows = to_device(gpu_rows);
      cudaEvent_t a, b;
      RZ_CUDA_CHECK(cudaEventCreate(&a));
      RZ_CUDA_CHECK(cudaEventCreate(&b));
      const int iters = 20;
      sample_rows(d_logits.get(), rows, n, d_rows.get(), nullptr, nullptr, d_out.get(), nullptr,
                  d_ws.get(), d_ws.bytes(), nullptr);
      RZ_CUDA_CHECK(cudaEventRecord(a));
      for (int it = 0; it < iters; ++it)
        sample_rows(d_logits.get(), rows, n, d_rows.get(), nullptr, nullptr, d_out.get(), nullptr,
                    d_ws.get(), d_ws.bytes(), nullptr);
      RZ_CUDA_CHECK(cudaEventRecord(b));
      RZ_CUDA_CHECK(cudaEventSynchronize(b));
      float ms = 0;
      RZ_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
      std::cout << "[ sampling bench ] rows " << rows << " n " << n << " " << describe(ps[0])
                << ": " << 1000.0f * ms / iters << " us\n";
      cudaEventDestroy(a);
      cudaEventDestroy(b);
    }
  }
}

// Shape and argument checks happen before any CUDA call, so this runs without a GPU too.
TEST(Sampling, RejectsBadArguments) {
  float* l = reinterpret_cast<float*>(16);
  const SampleRow* rows = reinterpret_cast<const SampleRow*>(16);
  int32_t* o = reinterpret_cast<int32_t*>(16);
  void* ws = reinterpret_cast<void*>(256);
  const size_t big = size_t(1) << 40;
  auto call = [&](float* lg, int rws, int n, const SampleRow* rw, int32_t* out, void* w,
                  size_t wb) {
    return [=] { sample_rows(lg, rws, n, rw, nullptr, nullptr, out, nullptr, w, wb, nullptr); };
  };
  EXPECT_TRUE(throws_shape_error(call(l, 1, 0, rows, o, ws, big), "bad shape"));
  EXPECT_TRUE(throws_shape_error(call(l, -1, 5, rows, o, ws, big), "bad shape"));
  EXPECT_TRUE(throws_shape_error(call(l, 1, -3, rows, o, ws, big), "bad shape"));
  EXPECT_TRUE(throws_shape_error(call(nullptr, 1, 5, rows, o, ws, big), "null"));
  EXPECT_TRUE(throws_shape_error(call(l, 1, 5, nullptr, o, ws, big), "null"));
  EXPECT_TRUE(throws_shape_error(call(l, 1, 5, rows, nullptr, ws, big), "null"));
  EXPECT_TRUE(throws_shape_error(call(l, 1, 5, rows, o, nullptr, big), "null"));
  const size_t need = sample_rows_workspace_bytes(3, 1000);
  EXPECT_GE(need, size_t(3) * 1000 * 2 * sizeof(int32_t));  // at least the two id buffers
  EXPECT_TRUE(throws_shape_error(call(l, 3, 1000, rows, o, ws, need - 1), "workspace"));
  EXPECT_TRUE(throws_shape_error([] { sample_rows_workspace_bytes(1, 0); }, "bad shape"));
  EXPECT_TRUE(throws_shape_error([] { sample_rows_workspace_bytes(-1, 10); }, "bad shape"));
  EXPECT_EQ(sample_rows_workspace_bytes(0, 10), 0u);
  EXPECT_NO_THROW(sample_rows(l, 0, 5, rows, nullptr, nullptr, o, nullptr, nullptr, 0, nullptr));
}

}  // namespace
}  // namespace rz::gpu
