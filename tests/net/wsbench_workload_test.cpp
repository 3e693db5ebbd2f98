// Tests of bench/wsbench_workload.hpp: the Poisson arrival process against the exponential
// distribution's known moments and CDF (within 5 standard errors), determinism per seed, the
// unbiased integer draw, and the requests (read back with the server's own parser).
#include "bench/wsbench_workload.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <sstream>
#include <variant>

#include "proto/parse.hpp"
#include "proto/serialize.hpp"

namespace rz::wsbench {
namespace {

TEST(WsbenchWorkload, PoissonGapsHaveTheExponentialMeanVarianceAndCdf) {
  for (double rate : {0.5, 5.0, 200.0}) {
    for (uint64_t seed : {0ull, 1ull, 987654321ull}) {
      PoissonArrivals arrivals(rate, seed);
      constexpr int n = 200000;
      double prev = 0, sum = 0, sum2 = 0;
      int below_mean = 0, below_median = 0;
      const double mean = 1.0 / rate;
      for (int i = 0; i < n; ++i) {
        const double t = arrivals.next();
        const double g = t - prev;
        ASSERT_GT(g, 0.0);
        prev = t;
        sum += g;
        sum2 += g * g;
        below_mean += g < mean;
        below_median += g < mean * std::log(2.0);
      }
      const double m = sum / n;
      const double var = sum2 / n - m * m;
      // mean: standard error mean/sqrt(n); variance (= mean^2): standard error mean^2*sqrt(8/n)
      EXPECT_NEAR(m, mean, 5 * mean / std::sqrt(n)) << "rate " << rate << " seed " << seed;
      EXPECT_NEAR(var, mean * mean, 5 * mean * mean * std::sqrt(8.0 / n));
      // CDF: P(g < mean) = 1 - 1/e, P(g < mean ln 2) = 1/2; binomial standard errors
      const double p1 = 1 - std::exp(-1.0);
      EXPECT_NEAR(below_mean / double(n), p1, 5 * std::sqrt(p1 * (1 - p1) / n));
      EXPECT_NEAR(below_median / double(n), 0.5, 5 * std::sqrt(0.25 / n));
    }
  }
}

TEST(WsbenchWorkload, PoissonCountInAWindow) {
  // Arrivals in [0, T) at rate r: Poisson(rT), standard deviation sqrt(rT). Counted over 20 seeds.
  const double rate = 8.0, T = 500.0;
  double total = 0;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    PoissonArrivals a(rate, seed);
    int count = 0;
    while (a.next() < T) ++count;
    EXPECT_NEAR(count, rate * T, 5 * std::sqrt(rate * T)) << "seed " << seed;
    total += count;
  }
  EXPECT_NEAR(total, 20 * rate * T, 5 * std::sqrt(20 * rate * T));
}

TEST(WsbenchWorkload, PoissonIsDeterministicPerSeed) {
  PoissonArrivals a(3.0, 42), b(3.0, 42), c(3.0, 43);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const double x = a.next();
    EXPECT_EQ(x, b.next());
    differs |= x != c.next();
  }
  EXPECT_TRUE(differs);
}

TEST(WsbenchWorkload, UniformIntCoversTheRangeWithoutBias) {
  SplitMix64 rng(7);
  constexpr int n = 70000;
  int counts[7] = {};
  for (int i = 0; i < n; ++i) {
    const int64_t x = rng.uniform_int(3, 9);
    ASSERT_GE(x, 3);
    ASSERT_LE(x, 9);
    ++counts[x - 3];
  }
  for (int c : counts) EXPECT_NEAR(c, n / 7.0, 5 * std::sqrt(n * (1 / 7.0) * (6 / 7.0)));
  EXPECT_EQ(rng.uniform_int(5, 5), 5);
  for (int i = 0; i < 1000; ++i) {
    const double u = rng.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
}

int count_words(const std::string& s) {
  std::istringstream in(s);
  std::string w;
  int n = 0;
  while (in >> w) ++n;
  return n;
}

TEST(WsbenchWorkload, RequestsAreValidDeterministicAndWithinTheRanges) {
  Options o;
  o.prompt_tokens = {5, 20};
  o.max_tokens = {2, 9};
  o.seed = 11;
  std::set<int64_t> lengths, maxes;
  std::set<std::string> prompts;
  for (uint64_t i = 0; i < 300; ++i) {
    const proto::GenerateRequest r = make_request(o, i);
    const std::string json = proto::to_json(r);
    EXPECT_EQ(json, proto::to_json(make_request(o, i)));  // a pure function of (seed, index)
    // The server's parser accepts it and reads back what was meant.
    const proto::ParseResult parsed = proto::parse_client_message(json);
    ASSERT_TRUE(std::holds_alternative<proto::GenerateRequest>(parsed)) << json;
    const auto& g = std::get<proto::GenerateRequest>(parsed);
    EXPECT_EQ(g.id, "r" + std::to_string(i));
    ASSERT_TRUE(g.prompt.has_value());
    const int words = count_words(*g.prompt);
    EXPECT_GE(words, 5);
    EXPECT_LE(words, 20);
    EXPECT_GE(g.max_tokens, 2);
    EXPECT_LE(g.max_tokens, 9);
    EXPECT_EQ(g.sampling.temperature, 0.0f);
    EXPECT_TRUE(g.ignore_eos);
    EXPECT_TRUE(g.sampling.seed.has_value());
    lengths.insert(words);
    maxes.insert(g.max_tokens);
    prompts.insert(*g.prompt);
  }
  EXPECT_EQ(lengths.size(), 16u);  // every length of 5..20 drawn at least once in 300 draws
  EXPECT_EQ(maxes.size(), 8u);
  EXPECT_EQ(prompts.size(), 300u);

  Options other = o;
  other.seed = 12;
  EXPECT_NE(proto::to_json(make_request(o, 0)), proto::to_json(make_request(other, 0)));
}

TEST(WsbenchWorkload, FixedLengthsChatAndFlags) {
  Options o;
  o.prompt_tokens = {64, 64};
  o.max_tokens = {32, 32};
  o.chat = true;
  o.ignore_eos = false;
  o.temperature = 0.5f;
  const auto parsed = proto::parse_client_message(proto::to_json(make_request(o, 3)));
  ASSERT_TRUE(std::holds_alternative<proto::GenerateRequest>(parsed));
  const auto& g = std::get<proto::GenerateRequest>(parsed);
  ASSERT_TRUE(g.is_chat());
  ASSERT_EQ(g.messages.size(), 1u);
  EXPECT_EQ(g.messages[0].role, "user");
  EXPECT_EQ(count_words(g.messages[0].content), 64);
  EXPECT_EQ(g.max_tokens, 32);
  EXPECT_FALSE(g.ignore_eos);
  EXPECT_EQ(g.sampling.temperature, 0.5f);
}

TEST(WsbenchWorkload, WordListHasNoDuplicatesOrSpaces) {
  std::set<std::string_view> seen;
  for (std::string_view w : kWords) {
    EXPECT_FALSE(w.empty());
    EXPECT_EQ(w.find(' '), std::string_view::npos) << w;
    EXPECT_TRUE(seen.insert(w).second) << "duplicate " << w;
  }
}

}  // namespace
}  // namespace rz::wsbench
