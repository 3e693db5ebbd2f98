// The batcher actor (actors/batcher.hpp).
#include "actors/batcher.hpp"

#include <deque>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <caf/all.hpp>

#include "actors/messages.hpp"
#include "sched/step.hpp"
#include "sched/step_log.hpp"

namespace rz::engine {

namespace {

struct BatcherState {
  std::unique_ptr<BatchedDecodeState> sched;
  caf::actor gpu;
  std::shared_ptr<MetricsRegistry> metrics;
  std::unordered_map<uint64_t, caf::actor> route;      // live request id -> its session actor
  std::unordered_map<caf::actor_id, size_t> batch_of;  // route_events: session -> its batch
  std::deque<StepPlan> in_flight;  // oldest first; a second one only when planned ahead
  bool plan_ahead = true;          // plan the next step while one runs (BatchedDecodeState)
  bool stopping = false;
  std::optional<caf::response_promise> stop_promise;
  std::shared_ptr<StepLog> step_log;  // --step-log, or null
  static inline const char* name = "rz.batcher";
};

using Self = caf::stateful_actor<BatcherState>;

void update_gauges(Self* self) {
  auto& st = self->state;
  const BatchedDecodeState& s = *st.sched;
  st.metrics->scheduler(s.queue_depth(), s.active_slots(), s.kv_blocks_used());
  st.metrics->prefix_cache(s.counters().prefix_lookups, s.counters().prefix_hit_tokens,
                           s.kv().stats().evictions);
}

// Sends each session its events, one message per session, in the scheduler's order (sessions in
// the order of their first event). Grouped through a map from the session actor's id: a linear
// search per event was ~90 % of the batcher's work per step at 256 streams (perf, fake executor).
void route_events(Self* self, std::vector<SchedEvent> events) {
  if (events.empty()) return;
  auto& st = self->state;
  std::vector<std::pair<caf::actor, EventBatch>> batches;
  st.batch_of.clear();
  for (SchedEvent& e : events) {
    const uint64_t id = event_request(e).id;
    auto it = st.route.find(id);
    if (it == st.route.end()) continue;
    caf::actor dest = it->second;
    if (is_final(e)) st.route.erase(it);
    const auto [b, fresh] = st.batch_of.try_emplace(dest.id(), batches.size());
    if (fresh) batches.emplace_back(std::move(dest), EventBatch{});
    batches[b->second].second.events.push_back(std::move(e));
  }
  for (auto& [dest, batch] : batches) self->send(dest, events_atom::value, std::move(batch));
}

void maybe_finish_stop(Self* self) {
  auto& st = self->state;
  if (!st.stopping || !st.in_flight.empty() || st.sched->has_work() || !st.route.empty()) return;
  self->send(st.gpu, stop_atom::value);
  if (st.stop_promise) st.stop_promise->deliver(caf::unit);
  st.stop_promise.reset();
  self->quit();
}

void on_step_result(Self* self, const StepResult& r);

// Sends a planned step to the gpu actor; its result comes back to on_step_result (results come
// in the order of the steps: the gpu actor runs one message at a time).
void send_step(Self* self, StepPlan p) {
  auto& st = self->state;
  ExecutorStep step = p;  // the executor's part of the plan
  if (st.step_log) st.step_log->started(step);
  st.in_flight.push_back(std::move(p));
  self->request(st.gpu, caf::infinite, step_atom::value, std::move(step))
      .then([self](StepResult& r) { on_step_result(self, r); },
            [self](caf::error& err) {
              // The gpu actor is gone: nothing can run any more.
              StepResult r;
              r.step = self->state.in_flight.empty() ? 0 : self->state.in_flight.front().step;
              r.error = "the executor actor failed: " + self->system().render(err);
              on_step_result(self, r);
            });
}

// With one step in flight, the next one planned at once when the state allows it
// (BatchedDecodeState::plan_ahead: as if that step had run): the gpu actor then starts it as soon
// as the first has run, and applying, routing and planning overlap the executor's work instead of
// sitting between two steps.
void maybe_plan_ahead(Self* self) {
  auto& st = self->state;
  if (!st.plan_ahead || st.stopping || st.in_flight.size() != 1) return;
  StepPlan p = st.sched->plan_ahead();
  if (!p.idle()) send_step(self, std::move(p));
}

// A step boundary: plan and start its step (or just release slots), then route the events that
// came before it (`earlier`: the last step's tokens and ends) and the plan's own, in that order.
// Routing is a message per session (256 at 256 streams), so it runs while the executor works on
// the step rather than between two steps; a session still gets its events in order, and the
// step's result cannot be handled before this returns.
void kick(Self* self, std::vector<SchedEvent> earlier = {}) {
  auto& st = self->state;
  if (!st.in_flight.empty()) {
    route_events(self, std::move(earlier));
    return;
  }
  StepPlan p = st.sched->plan();
  std::vector<SchedEvent> planned = std::move(p.events);
  p.events.clear();
  if (p.idle()) {
    route_events(self, std::move(earlier));
    route_events(self, std::move(planned));
    if (!p.release.empty()) self->send(st.gpu, release_atom::value, std::move(p.release));
    update_gauges(self);
    maybe_finish_stop(self);
    return;
  }
  send_step(self, std::move(p));
  maybe_plan_ahead(self);
  route_events(self, std::move(earlier));
  route_events(self, std::move(planned));
  update_gauges(self);
}

void on_step_result(Self* self, const StepResult& r) {
  auto& st = self->state;
  if (st.in_flight.empty()) return;
  StepPlan p = std::move(st.in_flight.front());
  st.in_flight.pop_front();
  if (r.ok()) st.metrics->step(r.seconds);
  if (st.step_log) st.step_log->finished(r.step, r.seconds);
  std::vector<SchedEvent> events = apply_step_result(*st.sched, p, r);
  if (st.in_flight.empty()) {
    kick(self, std::move(events));
    return;
  }
  // The step planned ahead runs now: plan the one after it, then route.
  maybe_plan_ahead(self);
  route_events(self, std::move(events));
  update_gauges(self);
}

caf::behavior batcher_actor(Self* self, BatchConfig cfg, caf::actor gpu,
                            std::shared_ptr<MetricsRegistry> metrics,
                            std::shared_ptr<StepLog> step_log, bool plan_ahead) {
  auto& st = self->state;
  st.plan_ahead = plan_ahead;
  st.step_log = std::move(step_log);
  st.sched = std::make_unique<BatchedDecodeState>(std::move(cfg));
  st.gpu = std::move(gpu);
  st.metrics = std::move(metrics);
  return {
      [self](submit_atom, SubmitMsg& m, const caf::actor& session) {
        auto& st = self->state;
        const uint64_t id = m.req.ref.id;
        SubmitResult res;
        if (st.stopping)
          res = {SubmitStatus::overloaded, "the engine is shutting down"};
        else
          res = st.sched->submit(std::move(m.req));
        if (res.ok()) st.route[id] = session;
        self->send(session, subres_atom::value, SubmitReply{id, res.status, res.message});
        if (res.ok()) kick(self);
        update_gauges(self);
      },
      [self](cancel_atom, uint64_t id) {
        if (self->state.sched->cancel(id)) kick(self);
      },
      [self](stop_atom) -> caf::result<caf::unit_t> {
        auto& st = self->state;
        st.stopping = true;
        for (const auto& [id, session] : st.route) st.sched->cancel(id);
        auto promise = self->make_response_promise();
        st.stop_promise = promise;
        kick(self);
        return promise;
      },
  };
}

}  // namespace

// Detached: its own thread, blocked on its mailbox between messages, so that the gpu actor's step
// result wakes it at once (a CAF worker gone idle polls with 50 us sleeps and may wait that out
// at every step). Measured on an H200 (docs/performance.md, "Serving follows the engine?"): with
// routing after the send (kick), served / engine 0.94 / 0.95 / 0.90 / 0.82 -> 0.98 / 0.98 / 0.92 /
// 0.83 at 1 / 16 / 64 / 256 streams. (Detached with routing before the send lost at 64 and 256
// streams: its messages to the sessions, external enqueues, then sat between the steps.)
caf::actor spawn_batcher(caf::actor_system& sys, BatchConfig cfg, caf::actor gpu,
                         std::shared_ptr<MetricsRegistry> metrics,
                         std::shared_ptr<StepLog> step_log, bool plan_ahead) {
  return sys.spawn<caf::detached>(batcher_actor, std::move(cfg), std::move(gpu), std::move(metrics),
                                  std::move(step_log), plan_ahead);
}

}  // namespace rz::engine
