// Runs a BatchedDecodeState against an Executor synchronously, one step per run_step call: the
// same plan -> execute_step -> apply_step_result sequence (sched/step.hpp) that the batcher
// and gpu actors split between them. Used by tests and by tools that need no actors.
#pragma once
#include <cstdint>
#include <functional>

#include "model/executor.hpp"
#include "sched/batch_state.hpp"

namespace rz {

// Receives every event in order. It may call submit() and cancel() on the state (events are
// delivered at step boundaries, or while the planned step has not run yet).
using SchedEventSink = std::function<void(const SchedEvent&)>;

// Throws rz::Error when the config asks for more slots or context than the executor has, or
// for more KV blocks, or blocks of another size.
void check_fits(const BatchConfig& cfg, const Executor& ex);

// One step boundary and, unless the plan is idle, one executor step:
//   plan(); deliver plan.events; execute_step (release plan.release, run the entries);
//   apply_step_result (apply() the tokens, or fail_step() if the executor threw or returned the
//   wrong count).
// Returns false when the plan was idle (nothing ran).
bool run_step(BatchedDecodeState& state, Executor& ex, const SchedEventSink& sink);

// Calls run_step until a plan is idle and the state has no work left. Returns the number of
// executor steps run.
uint64_t run_until_idle(BatchedDecodeState& state, Executor& ex, const SchedEventSink& sink);

// The same with the batcher's planning ahead (actors/batcher.hpp), in one thread: after each
// ordinary plan, and after each step's result while a step planned ahead is still to run, the
// state is asked for the step after the one in flight (BatchedDecodeState::plan_ahead); steps run
// in order through a StepRunner, which fills in the tokens planned ahead. Returns the number of
// executor steps run.
uint64_t run_until_idle_ahead(BatchedDecodeState& state, Executor& ex, const SchedEventSink& sink);

}  // namespace rz
