// The step function (sched/step.hpp).
#include "sched/step.hpp"

#include <algorithm>
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

StepRunner::StepRunner(int max_slots) : last_(static_cast<size_t>(std::max(max_slots, 0)), -1) {}

StepResult StepRunner::run(Executor& ex, ExecutorStep step) {
  const auto in_range = [&](int slot) {
    return slot >= 0 && slot < static_cast<int>(last_.size());
  };
  for (int s : step.release)
    if (in_range(s)) last_[static_cast<size_t>(s)] = -1;
  std::string missing;
  for (StepSeq& e : step.seqs) {
    if (e.tokens.size() != 1 || e.tokens[0] != kTokenOfLastStep) continue;
    const int32_t t = in_range(e.slot) ? last_[static_cast<size_t>(e.slot)] : -1;
    if (t < 0 && missing.empty())
      missing = "step " + std::to_string(step.step) + ": slot " + std::to_string(e.slot) +
                " has no token from the step before (that step failed)";
    e.tokens[0] = t;
  }
  StepResult r;
  if (!missing.empty()) {
    release_slots(ex, step.release);
    r.step = step.step;
    r.error = missing;
  } else {
    r = execute_step(ex, step);
  }
  size_t k = 0;
  for (const StepSeq& e : step.seqs) {
    if (!in_range(e.slot)) continue;
    int32_t& last = last_[static_cast<size_t>(e.slot)];
    last = -1;
    if (e.sample && r.ok()) last = r.tokens[k++];
  }
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
