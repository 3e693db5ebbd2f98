// The synchronous scheduler loop (sched/driver.hpp).
#include "sched/driver.hpp"

#include <deque>
#include <string>
#include <vector>

#include "formats/common.hpp"
#include "sched/step.hpp"

namespace rz {

void check_fits(const BatchConfig& cfg, const Executor& ex) {
  if (cfg.max_slots > ex.max_slots())
    throw Error("batch config: max_slots " + std::to_string(cfg.max_slots) +
                " exceeds the executor's " + std::to_string(ex.max_slots()));
  if (cfg.max_context > ex.max_context())
    throw Error("batch config: max_context " + std::to_string(cfg.max_context) +
                " exceeds the executor's " + std::to_string(ex.max_context()));
  // The state hands out the executor's blocks, so they must exist and be of the same size.
  if (cfg.kv_block_size != ex.kv_block_size())
    throw Error("batch config: kv_block_size " + std::to_string(cfg.kv_block_size) +
                " differs from the executor's " + std::to_string(ex.kv_block_size()));
  if (cfg.kv_block_count() > ex.kv_blocks())
    throw Error("batch config: " + std::to_string(cfg.kv_block_count()) +
                " KV blocks exceed the executor's " + std::to_string(ex.kv_blocks()));
}

namespace {
void deliver(const std::vector<SchedEvent>& events, const SchedEventSink& sink) {
  if (!sink) return;
  for (const SchedEvent& e : events) sink(e);
}
}  // namespace

bool run_step(BatchedDecodeState& state, Executor& ex, const SchedEventSink& sink) {
  StepPlan p = state.plan();
  deliver(p.events, sink);
  const StepResult r = execute_step(ex, p);  // releases p.release, idle or not
  if (p.idle()) return false;
  deliver(apply_step_result(state, p, r), sink);
  return true;
}

uint64_t run_until_idle_ahead(BatchedDecodeState& state, Executor& ex, const SchedEventSink& sink) {
  StepRunner runner(ex.max_slots());
  std::deque<StepPlan> flight;
  uint64_t steps = 0;
  for (;;) {
    if (flight.empty()) {
      StepPlan p = state.plan();
      deliver(p.events, sink);
      if (p.idle()) {
        runner.run(ex, p);  // its releases
        if (!state.has_work()) return steps;
        continue;
      }
      flight.push_back(std::move(p));
    }
    if (flight.size() == 1) {
      StepPlan a = state.plan_ahead();
      if (!a.idle()) flight.push_back(std::move(a));
    }
    StepPlan p = std::move(flight.front());
    flight.pop_front();
    const StepResult r = runner.run(ex, p);
    ++steps;
    deliver(apply_step_result(state, p, r), sink);
  }
}

uint64_t run_until_idle(BatchedDecodeState& state, Executor& ex, const SchedEventSink& sink) {
  uint64_t steps = 0;
  for (;;) {
    if (run_step(state, ex, sink))
      ++steps;
    else if (!state.has_work())
      return steps;
  }
}

}  // namespace rz
