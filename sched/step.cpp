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

StepRunner::StepRunner(int max_slots)
    : last_(static_cast<size_t>(std::max(max_slots, 0)), -1),
      failed_(static_cast<size_t>(std::max(max_slots, 0)), 0) {}

StepResult StepRunner::run(Executor& ex, ExecutorStep step) {
  const auto in_range = [&](int slot) {
    return slot >= 0 && slot < static_cast<int>(last_.size());
  };
  for (int s : step.release) {
    if (!in_range(s)) continue;
    last_[static_cast<size_t>(s)] = -1;
    failed_[static_cast<size_t>(s)] = 0;
  }
  // Entries of slots whose last step failed are left out (their requests failed with it).
  std::vector<char> skip(step.seqs.size(), 0);
  std::string missing;
  for (size_t i = 0; i < step.seqs.size(); ++i) {
    StepSeq& e = step.seqs[i];
    if (in_range(e.slot) && failed_[static_cast<size_t>(e.slot)] && !e.begin) {
      skip[i] = 1;
      continue;
    }
    if (e.tokens.empty() || e.tokens.back() != kTokenOfLastStep) continue;
    const int32_t t = in_range(e.slot) ? last_[static_cast<size_t>(e.slot)] : -1;
    if (t < 0 && missing.empty())
      missing = "step " + std::to_string(step.step) + ": slot " + std::to_string(e.slot) +
                " has no token from the step before";
    e.tokens.back() = t;
  }
  StepResult r;
  if (!missing.empty()) {
    release_slots(ex, step.release);
    r.step = step.step;
    r.error = missing;
  } else if (std::find(skip.begin(), skip.end(), 1) == skip.end()) {
    r = execute_step(ex, step);
  } else {
    ExecutorStep kept;
    kept.step = step.step;
    kept.release = step.release;
    kept.ahead = step.ahead;
    for (size_t i = 0; i < step.seqs.size(); ++i)
      if (!skip[i]) kept.seqs.push_back(step.seqs[i]);
    r = execute_step(ex, kept);
    if (r.ok()) {  // the left-out sampling entries' stand-in tokens, in entry order
      std::vector<int32_t> tokens;
      std::vector<TokenLogprobs> lps;
      size_t k = 0;
      for (size_t i = 0; i < step.seqs.size(); ++i) {
        if (!step.seqs[i].sample) continue;
        const bool mine = !skip[i];
        tokens.push_back(mine ? r.tokens[k] : 0);
        if (!r.logprobs.empty()) lps.push_back(mine ? r.logprobs[k] : TokenLogprobs{});
        k += mine ? 1 : 0;
      }
      r.tokens = std::move(tokens);
      r.logprobs = std::move(lps);
    }
  }
  size_t k = 0;
  for (size_t i = 0; i < step.seqs.size(); ++i) {
    const StepSeq& e = step.seqs[i];
    const int32_t t = e.sample && r.ok() ? r.tokens[k] : -1;
    k += e.sample && r.ok() ? 1 : 0;
    if (!in_range(e.slot) || skip[i]) continue;
    last_[static_cast<size_t>(e.slot)] = t;
    failed_[static_cast<size_t>(e.slot)] = r.ok() ? 0 : 1;
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
