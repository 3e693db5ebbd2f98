// The gpu actor: the one owner of an Executor (the CPU or the CUDA one). One message = one step:
// its StepRunner (sched/step.hpp) fills in the tokens of a step planned ahead from the step
// before's result, releases the step's slots, runs its prefill or decode, and the actor answers
// with the step's tokens (or the executor's error) and its duration. A step planned ahead waits
// in the mailbox while the one before runs, and starts as soon as that one has answered. It runs
// detached (its own thread), since a step blocks; its mailbox serialises every executor call. See
// actors/batcher.hpp for the caller.
#pragma once
#include <memory>

#include <caf/fwd.hpp>

#include "model/executor.hpp"

namespace rz::engine {

class MetricsRegistry;

// Spawns the detached gpu actor, which takes ownership of the executor. It answers
// (step_atom, ExecutorStep) with a StepResult, handles (release_atom, std::vector<int>) and quits
// on (stop_atom); the executor is destroyed with the actor. With `metrics`, the executor's own
// counters (Executor::counters) go there after each step.
caf::actor spawn_gpu_actor(caf::actor_system& sys, std::unique_ptr<Executor> ex,
                           std::shared_ptr<MetricsRegistry> metrics = nullptr);

}  // namespace rz::engine
