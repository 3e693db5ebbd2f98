// The gpu actor (actors/gpu_actor.hpp).
#include "actors/gpu_actor.hpp"

#include <chrono>
#include <exception>
#include <string>
#include <utility>

#include <caf/all.hpp>

namespace rz::engine {

namespace {

void release_slots(Executor& ex, const std::vector<int>& slots) {
  for (int s : slots) {
    try {
      ex.release(s);
    } catch (...) {
      // Only an out-of-range slot throws; the scheduler never lists one.
    }
  }
}

struct GpuState {
  std::shared_ptr<Executor> ex;
  static inline const char* name = "rz.gpu";
};

caf::behavior gpu_actor(caf::stateful_actor<GpuState>* self, std::shared_ptr<Executor> ex) {
  self->state.ex = std::move(ex);
  return {
      [self](step_atom, const GpuStep& s) -> StepResult { return run_gpu_step(*self->state.ex, s); },
      [self](release_atom, const std::vector<int>& slots) {
        release_slots(*self->state.ex, slots);
      },
      [self](stop_atom) {
        self->state.ex.reset();  // the executor goes now, on this thread
        self->quit();
      },
  };
}

}  // namespace

StepResult run_gpu_step(Executor& ex, const GpuStep& step) {
  StepResult r;
  r.step = step.step;
  release_slots(ex, step.release);
  if (step.kind == 0) return r;
  const size_t n = step.kind == 1 ? step.prefill.size() : step.decode.size();
  const auto t0 = std::chrono::steady_clock::now();
  try {
    r.tokens = step.kind == 1 ? ex.prefill(step.prefill) : ex.decode(step.decode);
    if (r.tokens.size() != n)
      r.error = "the executor returned " + std::to_string(r.tokens.size()) + " tokens for " +
                std::to_string(n) + " requests";
  } catch (const std::exception& e) {
    r.error = e.what();
    if (r.error.empty()) r.error = "the executor failed";
  } catch (...) {
    r.error = "the executor failed with an unknown exception";
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!r.error.empty()) r.tokens.clear();
  return r;
}

caf::actor spawn_gpu_actor(caf::actor_system& sys, std::unique_ptr<Executor> ex) {
  std::shared_ptr<Executor> shared(std::move(ex));
  return sys.spawn<caf::detached>(gpu_actor, std::move(shared));
}

}  // namespace rz::engine
