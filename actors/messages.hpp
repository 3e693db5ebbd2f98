// The CAF message vocabulary of the engine's actors (actors/session.cpp, actors/batcher.cpp,
// actors/gpu_actor.cpp): atoms, the submit messages, and the inspect overloads of every message
// type, the scheduler's plain ExecutorStep and StepResult (sched/step.hpp) included. Only
// the actor sources include this header; the public actors/engine.hpp stays free of CAF.
//
//   session ──(submit_atom, SubmitMsg, session)──▶ batcher ──(subres_atom, SubmitReply)──▶ session
//   session ──(cancel_atom, uint64_t id)─────────▶ batcher ──(events_atom, EventBatch)───▶ session
//   batcher ──(step_atom, ExecutorStep)──▶ gpu ──reply StepResult──▶ batcher
//   batcher ──(release_atom, std::vector<int>)──▶ gpu         (idle boundary: release only)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "model/executor.hpp"
#include "proto/messages.hpp"
#include "sched/step.hpp"
#include "sched/types.hpp"

namespace rz::engine {

// Session handle -> session actor.
using generate_atom = caf::atom_constant<caf::atom("generate")>;
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;  // also session -> batcher
using ping_atom = caf::atom_constant<caf::atom("ping")>;
using slow_atom = caf::atom_constant<caf::atom("slowcons")>;  // slow_consumer()
using close_atom = caf::atom_constant<caf::atom("close")>;
using orphan_atom = caf::atom_constant<caf::atom("orphan")>;      // the last handle was dropped
using estop_atom = caf::atom_constant<caf::atom("estop")>;        // engine shutdown: end and stop
using rtimeout_atom = caf::atom_constant<caf::atom("rtimeout")>;  // a request's time bound
// Session <-> batcher.
using submit_atom = caf::atom_constant<caf::atom("submit")>;
using subres_atom = caf::atom_constant<caf::atom("subres")>;
using events_atom = caf::atom_constant<caf::atom("events")>;
// Batcher <-> gpu actor; stop_atom also engine -> batcher.
using step_atom = caf::atom_constant<caf::atom("step")>;
using release_atom = caf::atom_constant<caf::atom("release")>;
using stop_atom = caf::atom_constant<caf::atom("stop")>;

struct SubmitMsg {
  BatchRequest req;
};

struct SubmitReply {
  uint64_t id = 0;
  SubmitStatus status = SubmitStatus::accepted;
  std::string message;
};

// Scheduler events for one session, in the order the scheduler made them.
struct EventBatch {
  std::vector<SchedEvent> events;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SubmitMsg& x) {
  return f(caf::meta::type_name("SubmitMsg"), x.req.ref.id, x.req.ref.owner, x.req.prompt,
           x.req.sampling.temperature, x.req.sampling.top_k, x.req.sampling.top_p,
           x.req.sampling.min_p, x.req.sampling.repetition_penalty,
           x.req.sampling.repetition_last_n, x.req.sampling.presence_penalty,
           x.req.sampling.frequency_penalty, x.req.sampling.logprobs, x.req.sampling.seed,
           x.req.max_tokens, x.req.ignore_eos);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SubmitReply& x) {
  return f(caf::meta::type_name("SubmitReply"), x.id, x.status, x.message);
}

}  // namespace rz::engine

namespace rz {
// The step messages of the gpu actor (sched/step.hpp) and the executor's request structs
// inside them. Enum fields travel as their underlying integer (CAF 0.17's default for enums).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ExecutorStep& x) {
  return f(caf::meta::type_name("ExecutorStep"), x.step, x.release, x.seqs);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, StepResult& x) {
  return f(caf::meta::type_name("StepResult"), x.step, x.tokens, x.logprobs, x.error, x.seconds);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, TokenLogprobs& x) {
  return f(caf::meta::type_name("TokenLogprobs"), x.present, x.logprob, x.top_ids, x.top_logprobs);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, LogitBias& x) {
  return f(caf::meta::type_name("LogitBias"), x.id, x.bias);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SamplingParams& x) {
  return f(caf::meta::type_name("SamplingParams"), x.temperature, x.top_k, x.top_p, x.min_p,
           x.repetition_penalty, x.repetition_last_n, x.presence_penalty, x.frequency_penalty,
           x.logit_bias, x.logprobs, x.seed);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, StepSeq& x) {
  return f(caf::meta::type_name("StepSeq"), x.slot, x.begin, x.sampling, x.cached, x.start,
           x.tokens, x.blocks, x.sample);
}
}  // namespace rz

// Local-only messages holding std::variant / std::optional fields that CAF 0.17 cannot inspect.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(rz::engine::EventBatch)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(rz::proto::GenerateRequest)
