// Token sampling from logits: greedy, temperature, top-k, top-p, min-p, the repetition, presence
// and frequency penalties, and a per-slot seeded random stream (same seed, same settings, same
// logits: same tokens); and the log-probabilities a request can ask for with each token.
// Order: penalties -> (greedy) -> top-k -> temperature -> softmax -> top-p -> min-p -> draw; see
// model/sampling.cpp.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace rz {

// One entry of OpenAI's logit_bias: `bias` added to the logit of token `id` before sampling.
struct LogitBias {
  int32_t id = 0;
  float bias = 0.0f;
};
inline constexpr int kMaxLogitBias = 1024;  // entries a request may give

struct SamplingParams {
  float temperature = 0.0f;         // <= 0: greedy (argmax; ties go to the lowest id)
  int top_k = 0;                    // 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off
  float repetition_penalty = 1.0f;  // 1: off; applied to ids in the recent history
  int repetition_last_n = 64;       // how many recent tokens (prompt included) the penalty sees
  // OpenAI's penalties, over the generated tokens only (not the prompt): the logit of each id
  // they hold loses presence_penalty once and frequency_penalty per occurrence. 0: off.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // OpenAI's logit_bias, sorted by id, each id once, at most kMaxLogitBias: added to those ids'
  // logits with the penalties (after the repetition penalty), before temperature and the rest.
  std::vector<LogitBias> logit_bias{};
  // < 0: no log-probabilities; k >= 0: the chosen token's and the k most likely tokens' (k at
  // most kMaxLogprobs), of the model's own distribution (see TokenLogprobs).
  int logprobs = -1;
  uint64_t seed = 0;
};

inline constexpr int kMaxLogprobs = 20;

// One id's penalties, as both samplers apply them to its logit l (repetition first, as Hugging
// Face and vLLM do):
//   l = l > 0 ? l / repeat : l * repeat     (repeat 1: no repetition penalty)
//   l = l - subtract                        (presence + frequency * occurrences - logit bias)
struct PenaltyEntry {
  int32_t id = 0;
  float repeat = 1.0f;
  float subtract = 0.0f;
};

// The log-probabilities of one sampled token: log-softmax of the raw logits, before penalties
// and temperature (the model's distribution, what vLLM reports by default), whatever the
// sampling settings made of them.
struct TokenLogprobs {
  bool present = false;             // the request asked for them
  float logprob = 0.0f;             // the chosen token's (-inf when its logit was -inf or NaN)
  std::vector<int32_t> top_ids;     // the most likely ids, best first (equal: lower id first)
  std::vector<float> top_logprobs;  // theirs
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p = {});
  const SamplingParams& params() const { return p_; }
  // Picks a token. `logits` is modified in place (penalties, temperature). `history` holds the
  // slot's tokens so far, oldest first, of which the last `generated` were generated (the rest
  // is the prompt). When the settings ask for log-probabilities and `lp` is given, fills it.
  int32_t sample(std::span<float> logits, std::span<const int32_t> history, size_t generated = 0,
                 TokenLogprobs* lp = nullptr);

 private:
  int32_t choose(std::span<float> logits, std::span<const int32_t> history, size_t generated);

  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> scratch_;
  std::vector<PenaltyEntry> penalties_;
  std::vector<float> raw_;  // the logits before the penalties (log-probabilities)
};

int32_t argmax(std::span<const float> logits);

// The pieces of Sampler::sample that the GPU sampler (kernels/sampling.hpp) shares:
// whether any of p's penalties is on (repetition: not 1, above 0, over a non-empty window;
// presence or frequency: not 0; a logit bias: any entry);
bool penalty_active(const SamplingParams& p);
// the entries they make, sorted by id, each id once, ids outside [0, n_vocab) left out: the
// repetition penalty for the distinct ids of the last repetition_last_n history tokens (all
// when negative), presence and frequency for those of the last `generated` ones, the logit
// bias for its ids;
void penalty_entries(const SamplingParams& p, std::span<const int32_t> history, size_t generated,
                     int n_vocab, std::vector<PenaltyEntry>& out);
// the log-probabilities of `chosen` and of the top_n most likely ids, from the raw logits:
// logprob(i) = float(double(x_i) - (max + log(sum_j exp(double(x_j) - max)))), NaN read as -inf;
void token_logprobs(std::span<const float> raw, int32_t chosen, int top_n, TokenLogprobs& out);
// the draw: u in [0, 1) from the top 53 bits of one output of the slot's stream.
double uniform_draw(std::mt19937_64& rng);

}  // namespace rz
