// Sampling: greedy and its ties, the repetition, presence and frequency penalties, top-k/top-p/
// min-p cut sets, the drawn frequencies against the renormalised probabilities (empirically, with
// a binomial bound), and log-probabilities against a long-double log-softmax.
#include "model/sampling.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

namespace {

// Logits whose softmax is exactly `probs` (log of each).
std::vector<float> logits_for(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(p > 0 ? float(std::log(p)) : -INFINITY);
  return l;
}

std::vector<float> random_logits(size_t n, uint64_t seed, float scale = 4.0f) {
  std::mt19937_64 g(seed);
  std::vector<float> l(n);
  for (float& x : l) x = scale * (float(g() >> 40) / float(1 << 24) - 0.5f);
  return l;
}

// Draws `n` tokens from the same logits and counts them.
std::vector<int> histogram(const rz::SamplingParams& p, const std::vector<float>& logits, int n) {
  rz::Sampler s(p);
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < n; ++i) {
    std::vector<float> l = logits;
    int32_t t = s.sample(l, {});
    EXPECT_GE(t, 0);
    EXPECT_LT(t, int32_t(logits.size()));
    if (t >= 0 && t < int32_t(logits.size())) ++counts[t];
  }
  return counts;
}

// Every frequency within 5 binomial standard deviations (plus a hair) of its expected probability;
// probability 0 means the token must never appear.
void expect_frequencies(const std::vector<int>& counts, const std::vector<double>& expected,
                        int n) {
  ASSERT_EQ(counts.size(), expected.size());
  double total = std::accumulate(expected.begin(), expected.end(), 0.0);
  ASSERT_NEAR(total, 1.0, 1e-9);
  for (size_t i = 0; i < counts.size(); ++i) {
    double p = expected[i];
    if (p == 0.0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " is outside the kept set";
      continue;
    }
    double f = double(counts[i]) / n;
    double bound = 5.0 * std::sqrt(p * (1 - p) / n) + 1e-4;
    EXPECT_NEAR(f, p, bound) << "token " << i;
  }
}

const std::vector<double> kProbs = {0.5, 0.25, 0.125, 0.0625, 0.0625};
constexpr int kDraws = 40000;

TEST(Argmax, PicksLargestAndLowestIdOnTies) {
  std::vector<float> l = {0.1f, 3.0f, -2.0f, 3.0f, 2.9f};
  EXPECT_EQ(rz::argmax(l), 1);
  std::vector<float> all_same(7, 1.5f);
  EXPECT_EQ(rz::argmax(all_same), 0);
  std::vector<float> with_nan = {1.0f, NAN, 2.0f, NAN};
  EXPECT_EQ(rz::argmax(with_nan), 2);
  std::vector<float> neg_inf = {-INFINITY, -INFINITY, -1e30f};
  EXPECT_EQ(rz::argmax(neg_inf), 2);
  EXPECT_EQ(rz::argmax(std::vector<float>{}), -1);
}

TEST(Sampler, GreedyIsArgmaxWhateverTheOtherSettings) {
  rz::SamplingParams p;
  p.temperature = 0.0f;
  p.top_k = 3;
  p.top_p = 0.5f;
  p.min_p = 0.3f;
  p.seed = 42;
  rz::Sampler s(p);
  for (uint64_t seed = 0; seed < 50; ++seed) {
    std::vector<float> l = random_logits(1000, seed);
    int32_t want = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
    EXPECT_EQ(s.sample(l, {}), want);
  }
  std::vector<float> tie = {0.0f, 5.0f, 5.0f};
  EXPECT_EQ(s.sample(tie, {}), 1);
  p.temperature = -1.0f;
  rz::Sampler neg(p);
  std::vector<float> tie2 = {5.0f, 1.0f, 5.0f};
  EXPECT_EQ(neg.sample(tie2, {}), 0);
}

TEST(Sampler, RepetitionPenaltyDividesPositiveAndMultipliesNegativeOncePerId) {
  rz::SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.repetition_last_n = 64;
  rz::Sampler s(p);
  std::vector<float> l = {2.0f, -1.0f, 1.9f, 0.5f, 0.0f};
  std::vector<int32_t> history = {0, 1, 0, 0, 4, 99, -3};  // out-of-range ids are ignored
  EXPECT_EQ(s.sample(l, history), 2);                      // 2.0 -> 1.0 falls below 1.9
  EXPECT_FLOAT_EQ(l[0], 1.0f);                             // once, not 2.0 / 2^3
  EXPECT_FLOAT_EQ(l[1], -2.0f);
  EXPECT_FLOAT_EQ(l[2], 1.9f);
  EXPECT_FLOAT_EQ(l[3], 0.5f);
  EXPECT_FLOAT_EQ(l[4], 0.0f);

  // Only the last `repetition_last_n` tokens count.
  p.repetition_last_n = 2;
  rz::Sampler window(p);
  std::vector<float> w = {2.0f, 1.0f, 1.5f};
  std::vector<int32_t> old_then_recent = {0, 0, 2, 1};
  EXPECT_EQ(window.sample(w, old_then_recent), 0);
  EXPECT_FLOAT_EQ(w[0], 2.0f);
  EXPECT_FLOAT_EQ(w[1], 0.5f);
  EXPECT_FLOAT_EQ(w[2], 0.75f);

  // Penalty 1 is off.
  p.repetition_penalty = 1.0f;
  rz::Sampler off(p);
  std::vector<float> o = {2.0f, 1.0f};
  std::vector<int32_t> h = {0};
  EXPECT_EQ(off.sample(o, h), 0);
  EXPECT_FLOAT_EQ(o[0], 2.0f);
}

TEST(Sampler, TopKOneIsGreedy) {
  rz::SamplingParams p;
  p.temperature = 1.5f;
  p.top_k = 1;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    p.seed = seed;
    rz::Sampler s(p);
    std::vector<float> l = random_logits(5000, seed + 100);
    int32_t want = rz::argmax(l);
    for (int i = 0; i < 5; ++i) {
      std::vector<float> c = l;
      EXPECT_EQ(s.sample(c, {}), want);
    }
  }
  // Ties at the cut keep the lowest id.
  p.seed = 3;
  rz::Sampler s(p);
  std::vector<float> tie = {1.0f, 7.0f, 7.0f, 7.0f};
  for (int i = 0; i < 20; ++i) {
    std::vector<float> c = tie;
    EXPECT_EQ(s.sample(c, {}), 1);
  }
}

TEST(Sampler, PlainSamplingFollowsTheSoftmax) {
  rz::SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 1;
  expect_frequencies(histogram(p, logits_for(kProbs), kDraws), kProbs, kDraws);
}

TEST(Sampler, TemperatureSharpens) {
  rz::SamplingParams p;
  p.temperature = 0.5f;  // p^2 renormalised
  p.seed = 2;
  std::vector<double> want;
  double z = 0;
  for (double q : kProbs) z += q * q;
  for (double q : kProbs) want.push_back(q * q / z);
  expect_frequencies(histogram(p, logits_for(kProbs), kDraws), want, kDraws);
}

TEST(Sampler, TopKKeepsTheKLargest) {
  rz::SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 2;
  p.seed = 3;
  expect_frequencies(histogram(p, logits_for(kProbs), kDraws), {2.0 / 3, 1.0 / 3, 0, 0, 0}, kDraws);
}

TEST(Sampler, TopPKeepsTheSmallestSetReachingP) {
  rz::SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.7f;  // 0.5 < 0.7 <= 0.75: tokens 0 and 1
  p.seed = 4;
  expect_frequencies(histogram(p, logits_for(kProbs), kDraws), {2.0 / 3, 1.0 / 3, 0, 0, 0}, kDraws);
  p.top_p = 0.8f;  // 0.75 < 0.8 <= 0.875: tokens 0, 1, 2
  expect_frequencies(histogram(p, logits_for(kProbs), kDraws), {4.0 / 7, 2.0 / 7, 1.0 / 7, 0, 0},
                     kDraws);
  p.top_p = 0.01f;  // less than the largest: that one alone
  expect_frequencies(histogram(p, logits_for(kProbs), 2000), {1, 0, 0, 0, 0}, 2000);
}

TEST(Sampler, MinPDropsTokensBelowAFractionOfTheLargest) {
  rz::SamplingParams p;
  p.temperature = 1.0f;
  p.min_p = 0.2f;  // threshold 0.1: tokens 0, 1, 2
  p.seed = 5;
  expect_frequencies(histogram(p, logits_for(kProbs), kDraws), {4.0 / 7, 2.0 / 7, 1.0 / 7, 0, 0},
                     kDraws);
  p.min_p = 0.6f;  // threshold 0.3: token 0 alone
  expect_frequencies(histogram(p, logits_for(kProbs), 2000), {1, 0, 0, 0, 0}, 2000);
}

TEST(Sampler, StagesCombineInOrder) {
  // top-k 4 keeps {0.5, 0.25, 0.125, 0.0625} (the 0.0625 tie goes to the lower id, 3);
  // top-p 0.9 of the renormalised {8,4,2,1}/15 needs 8+4+2 = 14/15 >= 0.9: {0,1,2};
  // min-p 0.3 of the largest drops 2/15 < 0.3*8/15: {0, 1} -> {2/3, 1/3}.
  rz::SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 4;
  p.top_p = 0.9f;
  p.min_p = 0.3f;
  p.seed = 6;
  expect_frequencies(histogram(p, logits_for(kProbs), kDraws), {2.0 / 3, 1.0 / 3, 0, 0, 0}, kDraws);
}

TEST(Sampler, LargeVocabTopKDrawsOnlyFromTheTopK) {
  const size_t n = 151936;
  std::vector<float> l = random_logits(n, 77, 20.0f);
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
  std::vector<bool> in_top(n, false);
  for (int i = 0; i < 40; ++i) in_top[order[i]] = true;
  rz::SamplingParams p;
  p.temperature = 5.0f;  // flat enough that many of the 40 get drawn
  p.top_k = 40;
  p.seed = 8;
  rz::Sampler s(p);
  std::vector<bool> seen(n, false);
  int distinct = 0;
  for (int i = 0; i < 2000; ++i) {
    std::vector<float> c = l;
    int32_t t = s.sample(c, {});
    ASSERT_TRUE(t >= 0 && size_t(t) < n);
    ASSERT_TRUE(in_top[t]) << "token " << t << " is not among the top 40";
    if (!seen[t]) ++distinct, seen[t] = true;
  }
  EXPECT_GT(distinct, 10);
}

// Without top-k, top-p sorts a growing prefix of a large vocabulary: 1000 equally likely tokens
// (scattered ids) hold most of the mass, and top-p 0.45 keeps the `k` lowest ids of them, k being
// the smallest count whose mass reaches 0.45 (508 of them), which takes more than the first
// 256-long prefix.
TEST(Sampler, LargeVocabTopPKeepsTheNucleus) {
  const size_t n = 20000, high = 1000;
  std::vector<int32_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937_64 g(11);
  std::shuffle(ids.begin(), ids.end(), g);
  std::vector<float> l(n, -5.0f);
  std::vector<int32_t> high_ids(ids.begin(), ids.begin() + high);
  for (int32_t id : high_ids) l[id] = 0.0f;
  std::sort(high_ids.begin(), high_ids.end());
  const double z = high + (n - high) * std::exp(-5.0), top_p = 0.45;
  const int k = int(std::ceil(top_p * z));
  ASSERT_GT(k, 256);
  ASSERT_LT((k - 1) / z, top_p - 1e-4);  // no float rounding near the cut
  ASSERT_GE(k / z, top_p + 1e-4);
  std::vector<bool> nucleus(n, false);
  for (int i = 0; i < k; ++i) nucleus[high_ids[i]] = true;

  auto check = [&](rz::SamplingParams p, const std::vector<bool>& allowed, int want_distinct) {
    rz::Sampler s(p);
    std::vector<int> seen(n, 0);
    int distinct = 0;
    for (int i = 0; i < 4000; ++i) {
      std::vector<float> c = l;
      int32_t t = s.sample(c, {});
      ASSERT_TRUE(t >= 0 && size_t(t) < n);
      ASSERT_TRUE(allowed[t]) << "token " << t << " is outside the kept set";
      if (seen[t]++ == 0) ++distinct;
    }
    EXPECT_GE(distinct, want_distinct);  // uniform over the set: almost all of it shows up
  };
  rz::SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = float(top_p);
  p.seed = 12;
  check(p, nucleus, k - 20);

  // min-p 0.5 alone keeps the 1000 high tokens (e^-5 < 0.5); with top-p as well the shorter
  // of the two prefixes, the nucleus, remains.
  std::vector<bool> high_set(n, false);
  for (int32_t id : high_ids) high_set[id] = true;
  p.top_p = 1.0f;
  p.min_p = 0.5f;
  check(p, high_set, 950);
  p.top_p = float(top_p);
  check(p, nucleus, k - 20);
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDifferentTokens) {
  std::vector<float> l = random_logits(32000, 9, 3.0f);
  auto run = [&](uint64_t seed) {
    rz::SamplingParams p;
    p.temperature = 1.0f;
    p.top_k = 100;
    p.top_p = 0.95f;
    p.min_p = 0.01f;
    p.repetition_penalty = 1.1f;
    p.seed = seed;
    rz::Sampler s(p);
    std::vector<int32_t> out;
    for (int i = 0; i < 200; ++i) {
      std::vector<float> c = l;
      out.push_back(s.sample(c, out));
    }
    return out;
  };
  std::vector<int32_t> a = run(1234), b = run(1234), c = run(1235);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  int differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += a[i] != c[i];
  EXPECT_GT(differ, 50);
}

// The draw is documented as u = (top 53 bits of one mt19937_64 output) / 2^53, walked over the
// cumulative mass in candidate order: with four equally likely tokens the token is the output's
// top two bits. mt19937_64 is specified exactly by the standard, so this pins the stream.
TEST(Sampler, DrawUsesTheTopBitsOfTheSeededStream) {
  for (uint64_t seed = 0; seed < 64; ++seed) {
    rz::SamplingParams p;
    p.temperature = 1.0f;
    p.seed = seed;
    rz::Sampler s(p);
    std::mt19937_64 ref(seed);
    for (int i = 0; i < 8; ++i) {
      std::vector<float> l(4, 0.25f);
      EXPECT_EQ(s.sample(l, {}), int32_t(ref() >> 62)) << "seed " << seed << " draw " << i;
    }
  }
}

TEST(Sampler, AllMinusInfinityFallsBackToGreedy) {
  rz::SamplingParams p;
  p.temperature = 1.0f;
  rz::Sampler s(p);
  std::vector<float> l = {-INFINITY, -INFINITY, -INFINITY};
  EXPECT_EQ(s.sample(l, {}), 0);
  std::vector<float> one = {-INFINITY, 3.0f, -INFINITY};
  for (int i = 0; i < 10; ++i) {
    std::vector<float> c = one;
    EXPECT_EQ(s.sample(c, {}), 1);
  }
}

TEST(Sampler, PresenceAndFrequencyPenaliseGeneratedTokensOnly) {
  rz::SamplingParams p;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  rz::Sampler s(p);
  std::vector<float> l = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
  // prompt [0, 1, 1], generated [1, 3, 3, 3, 7] (7 is outside the vocabulary: ignored)
  const std::vector<int32_t> history = {0, 1, 1, 1, 3, 3, 3, 7};
  EXPECT_EQ(s.sample(l, history, 5), 0);       // greedy: ids 0, 2, 4 keep 1.0; the lowest wins
  EXPECT_FLOAT_EQ(l[0], 1.0f);                 // prompt only
  EXPECT_FLOAT_EQ(l[1], 1.0f - 0.5f - 0.25f);  // once among the generated
  EXPECT_FLOAT_EQ(l[2], 1.0f);
  EXPECT_FLOAT_EQ(l[3], 1.0f - 0.5f - 0.75f);  // three times
  EXPECT_FLOAT_EQ(l[4], 1.0f);

  // Negative values encourage repetition.
  p.presence_penalty = -1.0f;
  p.frequency_penalty = 0.0f;
  rz::Sampler neg(p);
  std::vector<float> m = {1.0f, 0.5f};
  EXPECT_EQ(neg.sample(m, std::vector<int32_t>{0, 1}, 1), 1);
  EXPECT_FLOAT_EQ(m[1], 1.5f);
}

TEST(Sampler, PenaltyEntriesMergeTheRepetitionWindowWithTheGeneratedCounts) {
  rz::SamplingParams p;
  p.repetition_penalty = 1.3f;
  p.repetition_last_n = 3;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  const std::vector<int32_t> history = {9, 4, 2, 2, 6, 4, 4, -1, 50};
  std::vector<rz::PenaltyEntry> e;
  rz::penalty_entries(p, history, 6, 10, e);  // generated [2, 6, 4, 4, -1, 50]; window [4, -1, 50]
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0].id, 2);
  EXPECT_EQ(e[0].repeat, 1.0f);
  EXPECT_FLOAT_EQ(e[0].subtract, 0.75f);
  EXPECT_EQ(e[1].id, 4);
  EXPECT_EQ(e[1].repeat, 1.3f);
  EXPECT_FLOAT_EQ(e[1].subtract, 1.0f);
  EXPECT_EQ(e[2].id, 6);
  EXPECT_EQ(e[2].repeat, 1.0f);
  EXPECT_FLOAT_EQ(e[2].subtract, 0.75f);

  // Repetition alone over the whole history (last_n < 0); nothing generated counts nothing.
  p.presence_penalty = p.frequency_penalty = 0.0f;
  p.repetition_last_n = -1;
  rz::penalty_entries(p, history, 0, 10, e);
  std::vector<int32_t> ids;
  for (const auto& x : e) ids.push_back(x.id);
  EXPECT_EQ(ids, (std::vector<int32_t>{2, 4, 6, 9}));
  EXPECT_FALSE(rz::penalty_active(rz::SamplingParams{}));
}

// OpenAI's logit_bias: added to its ids' logits after the repetition penalty, with presence and
// frequency in one entry per id; ids outside the vocabulary left out; a bias alone turns the
// penalties on (and so the GPU's sampling path rather than its plain argmax).
TEST(Sampler, LogitBiasJoinsThePenaltyEntries) {
  rz::SamplingParams p;
  EXPECT_FALSE(rz::penalty_active(p));
  p.logit_bias = {{-3, 5.0f}, {1, 2.5f}, {3, -100.0f}, {4, 0.5f}, {12, 1.0f}};
  EXPECT_TRUE(rz::penalty_active(p));
  std::vector<rz::PenaltyEntry> e;
  rz::penalty_entries(p, std::vector<int32_t>{3, 3}, 1, 10, e);  // no penalty on: bias only
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0].id, 1);
  EXPECT_FLOAT_EQ(e[0].subtract, -2.5f);
  EXPECT_EQ(e[1].id, 3);
  EXPECT_FLOAT_EQ(e[1].subtract, 100.0f);
  EXPECT_EQ(e[2].id, 4);
  EXPECT_FLOAT_EQ(e[2].subtract, -0.5f);

  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  // history [3, 4, 3], the last two generated: id 3 once, id 4 once; window all three
  rz::penalty_entries(p, std::vector<int32_t>{3, 4, 3}, 2, 10, e);
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0].id, 1);
  EXPECT_EQ(e[0].repeat, 1.0f);
  EXPECT_FLOAT_EQ(e[0].subtract, -2.5f);
  EXPECT_EQ(e[1].id, 3);
  EXPECT_EQ(e[1].repeat, 2.0f);
  EXPECT_FLOAT_EQ(e[1].subtract, 0.5f + 100.0f);
  EXPECT_EQ(e[2].id, 4);
  EXPECT_FLOAT_EQ(e[2].subtract, 0.5f - 0.5f);

  // In the sampler: the bias moves the argmax, and -100 keeps a token out.
  rz::SamplingParams q;
  q.logit_bias = {{2, 3.0f}};
  rz::Sampler s(q);
  std::vector<float> l = {4.0f, 1.0f, 1.5f};
  EXPECT_EQ(s.sample(l, {}), 2);
  EXPECT_FLOAT_EQ(l[2], 4.5f);
  q.logit_bias = {{0, -100.0f}};
  q.temperature = 1.0f;
  q.seed = 7;
  rz::Sampler t(q);
  for (int i = 0; i < 50; ++i) {
    std::vector<float> m = {30.0f, 0.0f, 0.0f};
    EXPECT_NE(t.sample(m, {}), 0);
  }
}

// log-softmax in long double, the reference for token_logprobs.
std::vector<double> log_softmax(const std::vector<float>& l) {
  long double mx = -INFINITY, sum = 0;
  for (float x : l) mx = std::max<long double>(mx, x);
  for (float x : l) sum += std::exp((long double)x - mx);
  std::vector<double> out;
  for (float x : l) out.push_back(double((long double)x - mx - std::log(sum)));
  return out;
}

TEST(Sampler, LogprobsAreTheRawDistributionsWhateverTheSettings) {
  const std::vector<float> raw = random_logits(1000, 5, 12.0f);
  const std::vector<double> ref = log_softmax(raw);
  std::vector<int32_t> order(raw.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return raw[a] > raw[b]; });
  for (float t : {0.0f, 0.7f, 1.5f}) {
    rz::SamplingParams p;
    p.temperature = t;
    p.top_k = 40;
    p.repetition_penalty = 1.5f;
    p.presence_penalty = 2.0f;
    p.logprobs = 5;
    p.seed = 3;
    rz::Sampler s(p);
    std::vector<float> l = raw;
    rz::TokenLogprobs lp;
    // the top token penalised hard: the chosen one is something else, its logprob still raw
    const std::vector<int32_t> history = {order[0], order[0], order[1]};
    const int32_t tok = s.sample(l, history, 2, &lp);
    ASSERT_TRUE(lp.present);
    EXPECT_NEAR(lp.logprob, ref[size_t(tok)], 1e-5) << "temperature " << t;
    ASSERT_EQ(lp.top_ids.size(), 5u);
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_EQ(lp.top_ids[i], order[i]);
      EXPECT_NEAR(lp.top_logprobs[i], ref[size_t(order[i])], 1e-5);
    }
  }
  // Not asked (logprobs < 0, or no output given): nothing filled.
  rz::SamplingParams p;
  rz::Sampler s(p);
  std::vector<float> l = raw;
  rz::TokenLogprobs lp;
  s.sample(l, {}, 0, &lp);
  EXPECT_FALSE(lp.present);
}

TEST(Sampler, LogprobsTiesNaNAndInfinities) {
  rz::TokenLogprobs lp;
  // equal logits: lower ids first; log(1/4) each
  rz::token_logprobs(std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f}, 2, 3, lp);
  EXPECT_EQ(lp.top_ids, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_NEAR(lp.logprob, std::log(0.25), 1e-6);
  // NaN and -inf have probability 0: logprob -inf; top_n past the vocabulary is cut
  rz::token_logprobs(std::vector<float>{NAN, 1.0f, -INFINITY}, 0, 20, lp);
  EXPECT_EQ(lp.logprob, -INFINITY);
  EXPECT_EQ(lp.top_ids, (std::vector<int32_t>{1, 0, 2}));
  EXPECT_NEAR(lp.top_logprobs[0], 0.0f, 1e-7);
  EXPECT_EQ(lp.top_logprobs[1], -INFINITY);
  // at most kMaxLogprobs alternatives
  rz::token_logprobs(std::vector<float>(100, 0.0f), 0, 1000, lp);
  EXPECT_EQ(lp.top_ids.size(), size_t(rz::kMaxLogprobs));
}

}  // namespace
