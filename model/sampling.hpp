// Token sampling from logits: greedy, temperature, top-k, top-p, min-p, repetition penalty, and a
// per-slot seeded random stream (same seed, same settings, same logits: same tokens).
// Order: penalty -> (greedy) -> top-k -> temperature -> softmax -> top-p -> min-p -> draw; see
// model/sampling.cpp.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace rz {

struct SamplingParams {
  float temperature = 0.0f;         // <= 0: greedy (argmax; ties go to the lowest id)
  int top_k = 0;                    // 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off
  float repetition_penalty = 1.0f;  // 1: off; applied to ids in the recent history
  int repetition_last_n = 64;       // how many recent tokens (prompt included) the penalty sees
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p = {});
  const SamplingParams& params() const { return p_; }
  // Picks a token. `logits` is modified in place (penalty, temperature). `history` holds the
  // slot's tokens so far, oldest first.
  int32_t sample(std::span<float> logits, std::span<const int32_t> history);

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> scratch_;
};

int32_t argmax(std::span<const float> logits);

// The pieces of Sampler::sample that the GPU sampler (kernels/sampling.hpp) shares:
// whether p's repetition penalty is on (not 1, above 0, over a non-empty window);
bool penalty_active(const SamplingParams& p);
// the distinct ids it applies to: the last `last_n` history tokens (all when negative), sorted;
void penalty_ids(std::span<const int32_t> history, int last_n, std::vector<int32_t>& ids);
// the draw: u in [0, 1) from the top 53 bits of one output of the slot's stream.
double uniform_draw(std::mt19937_64& rng);

}  // namespace rz
