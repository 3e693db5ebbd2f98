// The step function (sched/step.hpp).
#include "sched/step.hpp"

#include <chrono>
#include <exception>

namespace rz {

void release_slots(Executor& ex, std::span<const int> slots) {
  for (int s : slots) {
    try {
      ex.release(s);
    } catch (...) {
      // Only an out-of-range slot throws; the scheduler never lists one.
    }
  }
}

StepResult execute_step(Executor& ex, const ExecutorStep& step) {
  StepResult r;
  r.step = step.step;
  release_slots(ex, step.release);
  if (step.idle()) return r;
  const size_t n = step.sampled();
  const auto t0 = std::chrono::steady_clock::now();
  try {
    r.tokens = ex.step(step.seqs);
    const std::span<const TokenLogprobs> lps = ex.step_logprobs();
    r.logprobs.assign(lps.begin(), lps.end());
    if (r.tokens.size() != n)
      r.error = "the executor returned " + std::to_string(r.tokens.size()) + " tokens for " +
                std::to_string(n) + " sampling entries";
  } catch (const std::exception& e) {
    r.error = e.what();
    if (r.error.empty()) r.error = "the executor failed";
  } catch (...) {
    r.error = "the executor failed with an unknown exception";
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!r.ok()) r.tokens.clear(), r.logprobs.clear();
  return r;
}

std::vector<SchedEvent> apply_step_result(BatchedDecodeState& state, const StepPlan& plan,
                                          const StepResult& result) {
  if (result.ok()) {
    try {
      return state.apply(plan, result.tokens, result.logprobs);
    } catch (const std::exception& e) {
      return state.fail_step(plan, e.what());
    }
  }
  return state.fail_step(plan, result.error);
}

}  // namespace rz
