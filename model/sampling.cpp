// Token sampling: turns one row of logits into a token id for one slot. Runs after the executor's
// step, before detokenising; each slot owns a Sampler (its settings and its random stream).
//
// Order of the stages (each one optional, as SamplingParams says):
//   1. penalties           per id, in one entry (PenaltyEntry): the repetition penalty for ids
//                          seen in the last `repetition_last_n` history tokens (a positive logit
//                          is divided by it, a negative one multiplied: llama.cpp / Hugging
//                          Face), then presence + frequency * occurrences subtracted for ids the
//                          generated tokens hold (OpenAI / vLLM) and the request's logit bias
//                          added for its ids (OpenAI's logit_bias); this edits `logits` in place
//   2. greedy              temperature <= 0: argmax, ties to the lowest id, one pass; stop here
//   3. top-k               keep the k largest logits (one scan with a k-sized heap, no full sort)
//   4. temperature         logit / temperature on the candidates
//   5. softmax             over the candidates (float64 sum)
//   6. top-p               candidates in descending order; keep the smallest prefix whose mass
//                          reaches top_p (at least one); without top-k only a growing prefix
//                          is sorted
//   7. min-p               drop candidates whose probability < min_p * the largest probability
//                          (the code filters before top-p's sort: the kept set is the same)
//   8. draw                u in [0, 1) from the top 53 bits of one mt19937_64 output, walked over
//                          the kept candidates' cumulative mass
// Candidates are ordered by (logit descending, id ascending) whenever they are sorted, so equal
// logits never make the result depend on the sort. std::mt19937_64 is specified exactly by the C++
// standard, and nothing here uses the implementation-defined <random> distributions, so a seed
// gives the same tokens with every standard library.
#include "model/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace rz {
namespace {

using Candidate = std::pair<float, int32_t>;  // (logit, then probability; token id)

// Larger logit first; equal logits: lower id first. NaN never reaches here (see below).
bool before(const Candidate& a, const Candidate& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

float finite_or_lowest(float x) {
  return std::isnan(x) ? -std::numeric_limits<float>::infinity() : x;
}

// The k best (logit, id) pairs in ranked order, by one scan with a k-sized heap whose top is the
// worst kept candidate (an equal logit met later has a higher id and never displaces it).
void select_top_k(std::span<const float> logits, size_t k, std::vector<Candidate>& out) {
  out.clear();
  out.reserve(k);
  for (size_t i = 0; i < logits.size(); ++i) {
    Candidate c{finite_or_lowest(logits[i]), int32_t(i)};
    if (out.size() < k) {
      out.push_back(c);
      std::push_heap(out.begin(), out.end(), before);
    } else if (c.first > out.front().first) {
      std::pop_heap(out.begin(), out.end(), before);
      out.back() = c;
      std::push_heap(out.begin(), out.end(), before);
    }
  }
  std::sort_heap(out.begin(), out.end(), before);
}

bool repetition_active(const SamplingParams& p) {
  return p.repetition_penalty != 1.0f && p.repetition_penalty > 0.0f && p.repetition_last_n != 0;
}

// The last n tokens of `history`, sorted (ids outside [0, n_vocab) dropped).
void sorted_tail(std::span<const int32_t> history, size_t n, int n_vocab,
                 std::vector<int32_t>& out) {
  out.clear();
  for (int32_t t : history.subspan(history.size() - std::min(n, history.size())))
    if (t >= 0 && t < n_vocab) out.push_back(t);
  std::sort(out.begin(), out.end());
}

}  // namespace

bool penalty_active(const SamplingParams& p) {
  return repetition_active(p) || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f ||
         !p.logit_bias.empty();
}

void penalty_entries(const SamplingParams& p, std::span<const int32_t> history, size_t generated,
                     int n_vocab, std::vector<PenaltyEntry>& out) {
  out.clear();
  std::vector<int32_t> window, gen;
  if (repetition_active(p)) {
    const int last_n = p.repetition_last_n;
    sorted_tail(history, last_n < 0 ? history.size() : size_t(last_n), n_vocab, window);
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f)
    sorted_tail(history, generated, n_vocab, gen);
  // The logit bias's ids in range (sorted and distinct already: SamplingParams::logit_bias).
  std::span<const LogitBias> bias(p.logit_bias);
  while (!bias.empty() && bias.front().id < 0) bias = bias.subspan(1);
  while (!bias.empty() && bias.back().id >= n_vocab) bias = bias.first(bias.size() - 1);
  // Merge the three sorted lists: one entry per distinct id.
  constexpr int32_t kEnd = std::numeric_limits<int32_t>::max();
  size_t i = 0, j = 0, b = 0;
  while (i < window.size() || j < gen.size() || b < bias.size()) {
    const int32_t id =
        std::min({i < window.size() ? window[i] : kEnd, j < gen.size() ? gen[j] : kEnd,
                  b < bias.size() ? bias[b].id : kEnd});
    PenaltyEntry e{id, 1.0f, 0.0f};
    if (i < window.size() && window[i] == id) {
      e.repeat = p.repetition_penalty;
      while (i < window.size() && window[i] == id) ++i;
    }
    int count = 0;
    while (j < gen.size() && gen[j] == id) ++j, ++count;
    if (count > 0) e.subtract = p.presence_penalty + p.frequency_penalty * float(count);
    if (b < bias.size() && bias[b].id == id) e.subtract -= bias[b++].bias;
    out.push_back(e);
  }
}

void token_logprobs(std::span<const float> raw, int32_t chosen, int top_n, TokenLogprobs& out) {
  out.present = true;
  out.top_ids.clear();
  out.top_logprobs.clear();
  float max_x = -std::numeric_limits<float>::infinity();
  for (float x : raw) max_x = std::max(max_x, finite_or_lowest(x));
  double lse = max_x;
  if (std::isfinite(max_x)) {
    double sum = 0.0;
    for (float x : raw) sum += std::exp(double(finite_or_lowest(x)) - double(max_x));
    lse = double(max_x) + std::log(sum);
  }
  auto logprob = [&](int32_t id) {
    const double v = double(finite_or_lowest(raw[size_t(id)])) - lse;
    return std::isnan(v) ? -std::numeric_limits<float>::infinity() : float(v);
  };
  out.logprob = chosen >= 0 && size_t(chosen) < raw.size()
                    ? logprob(chosen)
                    : -std::numeric_limits<float>::infinity();
  const size_t k = std::min(raw.size(), size_t(std::clamp(top_n, 0, kMaxLogprobs)));
  if (k == 0) return;
  std::vector<Candidate> top;
  select_top_k(raw, k, top);
  for (const Candidate& c : top) {
    out.top_ids.push_back(c.second);
    out.top_logprobs.push_back(logprob(c.second));
  }
}

double uniform_draw(std::mt19937_64& rng) { return double(rng() >> 11) * 0x1.0p-53; }

int32_t argmax(std::span<const float> logits) {
  int32_t best = logits.empty() ? -1 : 0;
  float best_v = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] > best_v) {  // strict: a tie keeps the lower id; NaN never compares greater
      best_v = logits[i];
      best = int32_t(i);
    }
  }
  return best;
}

Sampler::Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> history, size_t generated,
                        TokenLogprobs* lp) {
  if (logits.empty()) return -1;
  const bool want_lp = lp && p_.logprobs >= 0;
  if (want_lp) raw_.assign(logits.begin(), logits.end());
  const int32_t t = choose(logits, history, generated);
  if (want_lp) token_logprobs(raw_, t, p_.logprobs, *lp);
  return t;
}

int32_t Sampler::choose(std::span<float> logits, std::span<const int32_t> history,
                        size_t generated) {
  if (penalty_active(p_)) {
    penalty_entries(p_, history, generated, int(std::min<size_t>(logits.size(), INT32_MAX)),
                    penalties_);
    for (const PenaltyEntry& e : penalties_) {
      float& l = logits[size_t(e.id)];
      if (e.repeat != 1.0f) l = l > 0 ? l / e.repeat : l * e.repeat;
      l -= e.subtract;
    }
  }
  if (p_.temperature <= 0.0f) return argmax(logits);

  const size_t n = logits.size();
  const bool use_top_k = p_.top_k > 0 && size_t(p_.top_k) < n;
  const bool use_top_p = p_.top_p < 1.0f;
  size_t count = n;
  bool sorted = false;
  if (use_top_k) {
    count = size_t(p_.top_k);
    select_top_k(logits, count, scratch_);
    sorted = true;
  } else {
    scratch_.resize(n);
    for (size_t i = 0; i < n; ++i) scratch_[i] = {finite_or_lowest(logits[i]), int32_t(i)};
  }

  // temperature and softmax over scratch_[0, count)
  const float inv_t = 1.0f / p_.temperature;
  float max_l = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < count; ++i) {
    scratch_[i].first *= inv_t;
    max_l = std::max(max_l, scratch_[i].first);
  }
  if (!std::isfinite(max_l)) {  // every candidate is -inf (or overflowed): fall back to greedy
    return sorted ? scratch_[0].second : argmax(logits);
  }
  double sum = 0.0;
  float max_p = 0.0f;
  for (size_t i = 0; i < count; ++i) {
    float e = std::exp(scratch_[i].first - max_l);
    scratch_[i].first = e;
    sum += e;
    max_p = std::max(max_p, e);
  }

  // min-p: probabilities relative to the largest; the normalisation cancels out. It runs before
  // top-p here because that keeps the same set (both keep a prefix of the descending order, so
  // together they keep the shorter one: top-p still measures against the full mass) and leaves
  // top-p fewer candidates to sort.
  if (p_.min_p > 0.0f) {
    const float threshold = p_.min_p * max_p;
    size_t kept = 0;
    for (size_t i = 0; i < count; ++i) {
      if (scratch_[i].first >= threshold) scratch_[kept++] = scratch_[i];
    }
    count = std::max<size_t>(kept, 1);  // the largest always passes; guard anyway
  }
  // top-p: the smallest prefix (in descending order) whose probability reaches top_p. Without
  // top-k the candidates are unsorted: sort a growing prefix (256, 1024, ...) until it holds
  // enough mass, which for a peaked distribution is far cheaper than sorting the vocabulary.
  if (use_top_p) {
    const double target = double(p_.top_p) * sum;
    size_t sorted_len = sorted ? count : std::min<size_t>(256, count);
    for (;;) {
      if (!sorted && sorted_len == count) {
        std::sort(scratch_.begin(), scratch_.begin() + count, before);
      } else if (!sorted) {
        std::partial_sort(scratch_.begin(), scratch_.begin() + sorted_len, scratch_.begin() + count,
                          before);
      }
      double cum = 0.0;
      size_t keep = 0;
      while (keep < sorted_len && cum < target) cum += scratch_[keep++].first;
      if (cum >= target || sorted_len == count) {
        count = std::max<size_t>(keep, 1);
        break;
      }
      sorted_len = sorted_len * 4 > count / 8 ? count : sorted_len * 4;  // big: sort it all
    }
  }

  double mass = 0.0;
  for (size_t i = 0; i < count; ++i) mass += scratch_[i].first;

  // draw: u in [0, 1) with 53 random bits, scaled to the kept mass
  const double u = uniform_draw(rng_);
  const double target = u * mass;
  double cum = 0.0;
  for (size_t i = 0; i < count; ++i) {
    cum += scratch_[i].first;
    if (target < cum) return scratch_[i].second;
  }
  return scratch_[count - 1].second;  // rounding left target at the very end
}

}  // namespace rz
