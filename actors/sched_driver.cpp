// The synchronous scheduler loop (actors/sched_driver.hpp).
#include "actors/sched_driver.hpp"

#include <exception>
#include <string>
#include <vector>

#include "model/common.hpp"

namespace rz {

void check_fits(const BatchConfig& cfg, const Executor& ex) {
  if (cfg.max_slots > ex.max_slots())
    throw Error("batch config: max_slots " + std::to_string(cfg.max_slots) +
                " exceeds the executor's " + std::to_string(ex.max_slots()));
  if (cfg.max_context > ex.max_context())
    throw Error("batch config: max_context " + std::to_string(cfg.max_context) +
                " exceeds the executor's " + std::to_string(ex.max_context()));
  // The state's block count must be the executor's, in blocks of the same size: the executor
  // takes ceil(reserve_tokens / its block size) blocks for each admitted request.
  if (cfg.kv_limited()) {
    if (cfg.kv_block_size != ex.kv_block_size())
      throw Error("batch config: kv_block_size " + std::to_string(cfg.kv_block_size) +
                  " differs from the executor's " + std::to_string(ex.kv_block_size()));
    if (cfg.kv_blocks > ex.kv_blocks())
      throw Error("batch config: kv_blocks " + std::to_string(cfg.kv_blocks) +
                  " exceeds the executor's " + std::to_string(ex.kv_blocks()));
  }
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
  for (int slot : p.release) ex.release(slot);
  if (p.idle()) return false;
  std::vector<int32_t> tokens;
  std::string error;
  try {
    tokens = p.kind == StepPlan::Kind::prefill ? ex.prefill(p.prefill) : ex.decode(p.decode);
    if (tokens.size() != p.size())
      error = "the executor returned " + std::to_string(tokens.size()) + " tokens for " +
              std::to_string(p.size()) + " requests";
  } catch (const std::exception& e) {
    error = e.what();
    if (error.empty()) error = "the executor failed";
  } catch (...) {
    error = "the executor failed with an unknown exception";
  }
  deliver(error.empty() ? state.apply(p, tokens) : state.fail_step(p, error), sink);
  return true;
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
