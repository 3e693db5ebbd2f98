// The batcher actor: owns the BatchedDecodeState (sched/batch_state.hpp) and follows its call
// protocol with exactly one step in flight at the gpu actor:
//
//   plan() ─▶ (idle: release-only message) | (step_atom, ExecutorStep) ─▶ gpu ─┐
//      ▲        then route the last step's events and plan.events to sessions  │
//      └──── apply()/fail_step() events ◀── StepResult (tokens or error) ◀──────┘
//
// The events of step N go out after step N+1 is sent, so the messages to the sessions overlap
// the executor's work instead of delaying the next step; each session still gets its events in
// order. It runs on a thread of its own (caf::detached; spawn_batcher says why).
//
// Submits and cancels are handled while a step is in flight (they take effect at the next step
// boundary); events go to the session actor that submitted each request (by RequestRef::id).
// When idle it waits for a submit or cancel.
//
// Messages: (submit_atom, SubmitMsg, caf::actor session) -> the session gets
// (subres_atom, SubmitReply); (cancel_atom, uint64_t id); (stop_atom) -> cancels every live
// request, refuses new ones (overloaded), and once the last event is routed and the slots are
// released, stops the gpu actor, answers with unit and quits.
#pragma once
#include <memory>

#include <caf/fwd.hpp>

#include "actors/metrics.hpp"
#include "sched/batch_state.hpp"
#include "sched/step_log.hpp"

namespace rz::engine {

// step_log: where a line per step goes (sched/step_log.hpp), or null for none.
caf::actor spawn_batcher(caf::actor_system& sys, BatchConfig cfg, caf::actor gpu,
                         std::shared_ptr<MetricsRegistry> metrics,
                         std::shared_ptr<StepLog> step_log = nullptr);

}  // namespace rz::engine
