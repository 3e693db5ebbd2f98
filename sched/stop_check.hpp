// The stop conditions of a generation, in one pure function: after a token was sampled, does the
// request end, and why? The scheduler (sched/batch_state.cpp) calls it for every sampled token.
#pragma once
#include <optional>

#include "sched/types.hpp"

namespace rz {

struct StopInput {
  bool eog = false;    // the token is an end-of-generation token (and ignore_eos is off)
  int generated = 0;   // tokens generated so far, this one included
  int max_tokens = 0;  // 0: no limit but the context
  int prompt_tokens = 0;
  int max_context = 0;  // tokens the slot holds at most
};

// In order: end-of-generation -> stop; max_tokens reached, or prompt + generated tokens fill the
// context -> length; otherwise the request goes on (nullopt).
inline std::optional<FinishReason> stop_reason(const StopInput& in) {
  if (in.eog) return FinishReason::stop;
  if (in.max_tokens > 0 && in.generated >= in.max_tokens) return FinishReason::length;
  if (in.prompt_tokens + in.generated >= in.max_context) return FinishReason::length;
  return std::nullopt;
}

}  // namespace rz
