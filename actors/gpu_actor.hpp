// The gpu actor: the one owner of an Executor (CPU now, CUDA later). One message = one step:
// release the listed slots, then run the prefill or decode step, and answer with the step's
// tokens (or the executor's error) and its duration. It runs detached (its own thread), since a
// step blocks; its mailbox serialises every executor call. See actors/batcher.hpp for the caller.
#pragma once
#include <memory>

#include <caf/fwd.hpp>

#include "actors/messages.hpp"
#include "model/executor.hpp"

namespace rz::engine {

// The step itself, without actors: never throws; an executor exception, or a token count that
// does not match the step, becomes StepResult::error.
StepResult run_gpu_step(Executor& ex, const GpuStep& step);

// Spawns the detached gpu actor, which takes ownership of the executor. It answers
// (step_atom, GpuStep) with a StepResult, handles (release_atom, std::vector<int>) and quits on
// (stop_atom); the executor is destroyed with the actor.
caf::actor spawn_gpu_actor(caf::actor_system& sys, std::unique_ptr<Executor> ex);

}  // namespace rz::engine
