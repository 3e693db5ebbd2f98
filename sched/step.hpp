// The step function: runs one ExecutorStep (sched/types.hpp) on an Executor and hands its
// result back to the scheduling state. Written once here, in plain C++ (no actors): the gpu actor
// runs execute_step for each step message (actors/gpu_actor.hpp), the batcher applies the reply
// with apply_step_result (actors/batcher.cpp), and sched/driver.hpp does both in one loop.
//
//   ExecutorStep ──execute_step──▶ release slots ─▶ Executor::step(entries) | nothing ─▶ StepResult
//   StepResult ──apply_step_result──▶ state.apply(tokens, logprobs)  or  state.fail_step(error) ─▶
//   events
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/executor.hpp"
#include "sched/batch_state.hpp"
#include "sched/types.hpp"

namespace rz {

// What one step produced: one token per sampling entry of the step, or the error.
struct StepResult {
  uint64_t step = 0;                    // the ExecutorStep's sequence number
  std::vector<int32_t> tokens;          // empty when error is set
  std::vector<TokenLogprobs> logprobs;  // empty, or one per token (Executor::step_logprobs)
  std::string error;                    // non-empty: the step failed (the state calls fail_step)
  double seconds = 0.0;                 // executor time of the step (0 for an idle step)
  bool ok() const { return error.empty(); }
};

// Executor::release() for each slot. Only an out-of-range slot makes an executor throw, and the
// scheduler never lists one, so a throw is ignored here: it must not stop the slots after it.
void release_slots(Executor& ex, std::span<const int> slots);

// Releases step.release, then runs step.seqs (nothing more for an idle step). Never throws: an
// executor exception, or a token count that does not match the step's sampling entries, becomes
// StepResult::error, with the same messages for every caller.
StepResult execute_step(Executor& ex, const ExecutorStep& step);

// Runs steps for the one owner of an executor (the gpu actor), filling in the tokens of steps
// planned ahead: an entry whose one token is kTokenOfLastStep gets the token its slot's last step
// sampled (kept from the results this runner returned). A step planned ahead of a step that
// failed still holds entries of that step's slots, whose requests failed with it (the scheduler
// skips those entries' results): they are left out of what the executor runs, and a token 0
// stands in the result for each that samples, so that the step's other requests run. A token
// that is missing otherwise (a slot that sampled nothing) fails the step.
class StepRunner {
 public:
  explicit StepRunner(int max_slots);
  StepResult run(Executor& ex, ExecutorStep step);

 private:
  std::vector<int32_t> last_;  // per slot: the token its last step sampled, or -1
  std::vector<char> failed_;   // per slot: its last step failed (until released or begun again)
};

// Applies the result of `plan` (the state's oldest step in flight) and returns the events: apply()
// the tokens and their log-probabilities when the step succeeded, fail_step() with its error when
// it failed or when apply() refuses the tokens.
std::vector<SchedEvent> apply_step_result(BatchedDecodeState& state, const StepPlan& plan,
                                          const StepResult& result);

}  // namespace rz
