// The gpu actor (actors/gpu_actor.hpp).
#include "actors/gpu_actor.hpp"

#include <utility>
#include <vector>

#include <caf/all.hpp>

#include "actors/messages.hpp"
#include "actors/metrics.hpp"
#include "sched/step.hpp"

namespace rz::engine {

namespace {

struct GpuState {
  std::shared_ptr<Executor> ex;
  std::unique_ptr<StepRunner> runner;        // fills in the tokens of steps planned ahead
  std::shared_ptr<MetricsRegistry> metrics;  // or null
  static inline const char* name = "rz.gpu";
};

caf::behavior gpu_actor(caf::stateful_actor<GpuState>* self, std::shared_ptr<Executor> ex,
                        std::shared_ptr<MetricsRegistry> metrics) {
  self->state.ex = std::move(ex);
  self->state.runner = std::make_unique<StepRunner>(self->state.ex->max_slots());
  self->state.metrics = std::move(metrics);
  return {
      [self](step_atom, ExecutorStep& s) -> StepResult {
        StepResult r = self->state.runner->run(*self->state.ex, std::move(s));
        if (self->state.metrics) self->state.metrics->executor_counters(self->state.ex->counters());
        return r;
      },
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

caf::actor spawn_gpu_actor(caf::actor_system& sys, std::unique_ptr<Executor> ex,
                           std::shared_ptr<MetricsRegistry> metrics) {
  std::shared_ptr<Executor> shared(std::move(ex));
  return sys.spawn<caf::detached>(gpu_actor, std::move(shared), std::move(metrics));
}

}  // namespace rz::engine
