// Conversion of a request's sampling fields (proto::Sampling, whose defaults are the CLI's) into
// the executor's rz::SamplingParams (model/sampling.hpp, whose defaults mean "off"). Header-only,
// so rz_proto does not link the CPU executor; only the SamplingParams struct is used.
#pragma once
#include <cstdint>

#include "model/sampling.hpp"
#include "proto/messages.hpp"

namespace rz::proto {

static_assert(kMaxLogitBiasEntries == kMaxLogitBias, "one bound for the request and the executor");

// `random_seed` is used when the request gave no seed (the caller draws it, e.g. from
// std::random_device, so that this stays deterministic and testable). repetition_last_n keeps
// SamplingParams' default: the protocol does not expose it.
inline SamplingParams to_sampling_params(const Sampling& s, uint64_t random_seed) {
  SamplingParams p;
  p.temperature = s.temperature;
  p.top_k = s.top_k;
  p.top_p = s.top_p;
  p.min_p = s.min_p;
  p.repetition_penalty = s.repetition_penalty;
  p.presence_penalty = s.presence_penalty;
  p.frequency_penalty = s.frequency_penalty;
  p.seed = s.seed.value_or(random_seed);
  p.logit_bias.reserve(s.logit_bias.size());
  for (const auto& [id, bias] : s.logit_bias) p.logit_bias.push_back({id, bias});
  return p;
}

}  // namespace rz::proto
