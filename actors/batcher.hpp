// The batcher actor: owns the BatchedDecodeState (sched/batch_state.hpp) and follows its call
// protocol with exactly one step in flight at the gpu actor:
//
//   plan() ─▶ (idle: release-only message) | (step_atom, ExecutorStep) ─▶ gpu ─┐
//      ▲        then route the last step's events and plan.events to sessions  │
//      └──── apply()/fail_step() events ◀── StepResult (tokens or error) ◀──────┘
//
// The events of step N go out after step N+1 is sent, so the messages to the sessions overlap
// the executor's work instead of delaying the next step; each session still gets its events in
// order. With plan_ahead (the default) a second step may be in flight: right after sending a
// step, the batcher asks the state for the step after it (BatchedDecodeState::plan_ahead: as if
// the first one had run, its decodes taking the tokens the first one samples) and sends it too,
// so the gpu actor starts it the moment the first one answers; applying that answer, routing and
// planning the next step then run while the executor works:
//
//   send N, send N+1 (ahead) ─▶ N's result: apply, plan N+2 ahead, send, route ─▶ N+1's ...
//
// While a cancel is pending the next step waits for an ordinary plan, with nothing in flight. It
// runs on a thread of its own (caf::detached; spawn_batcher says why).
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

// step_log: where a line per step goes (sched/step_log.hpp), or null for none. plan_ahead: plan a
// step while the one before it runs, where the state allows it (false: one step at a time).
caf::actor spawn_batcher(caf::actor_system& sys, BatchConfig cfg, caf::actor gpu,
                         std::shared_ptr<MetricsRegistry> metrics,
                         std::shared_ptr<StepLog> step_log = nullptr, bool plan_ahead = true);

}  // namespace rz::engine
