// The vocabulary of the engine's scheduler (sched/batch_state.hpp): what a generation request
// is, what submitting one can answer, what one executor step is, and the events a step produces
// for its owner (a token, a normal finish, a failure). Plain data: the batcher actor routes these
// events to sessions by RequestRef::owner and sends ExecutorSteps to the gpu actor; nothing here
// knows about actors, threads or JSON.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "model/executor.hpp"
#include "model/sampling.hpp"

namespace rz {

using SchedClock = std::chrono::steady_clock;

// Who a request is. `id` is unique among the live (queued or running) requests of one state;
// `owner` is opaque to the scheduler: the batcher uses it to find the session to deliver to.
struct RequestRef {
  uint64_t id = 0;
  uint64_t owner = 0;
  friend bool operator==(const RequestRef&, const RequestRef&) = default;
};

// One generation: a tokenized prompt, how to sample, when to stop.
struct BatchRequest {
  RequestRef ref;
  std::vector<int32_t> prompt;  // at least one token; prompt.size() + 1 <= max_context
  SamplingParams sampling;
  int max_tokens = 0;       // > 0: at most this many generated tokens; 0: until the context is full
  bool ignore_eos = false;  // keep generating past end-of-generation tokens
};

enum class SubmitStatus {
  accepted,
  overloaded,  // every slot is taken and the queue beyond them is full; try again later
  context_length_exceeded,  // prompt + 1 token does not fit in max_context, or the request's
                            // KV reserve needs more blocks than the whole cache has
  invalid_request,          // empty prompt, a token outside the vocabulary, a live duplicate id,
                            // negative max_tokens
};
const char* submit_status_name(SubmitStatus s);  // "accepted", "overloaded", ...

struct SubmitResult {
  SubmitStatus status = SubmitStatus::accepted;
  std::string message;  // one line for the client when not accepted
  bool ok() const { return status == SubmitStatus::accepted; }
};

enum class FinishReason {
  stop,       // an end-of-generation token (delivered as the last Token event, eog = true)
  length,     // max_tokens reached, or prompt + generated tokens filled max_context
  cancelled,  // cancel() took effect at a step boundary
};
const char* finish_reason_name(FinishReason r);  // "stop", "length", "cancelled"

enum class ErrorCode {
  internal,  // the executor threw while running a step that held this request
};
const char* error_code_name(ErrorCode c);  // "internal"

// The one token of a decode entry in a step planned ahead (BatchedDecodeState::plan_ahead): the
// token its slot's previous step sampled, not yet known when the step was planned. The executor
// never sees it: sched/step.hpp's StepRunner puts the sampled token in its place first.
inline constexpr int32_t kTokenOfLastStep = -1;

// One executor step as plain data: release the listed slots (always, idle included), then run
// the entries (model/executor.hpp: decode tokens and prefill chunks mixed). The scheduler's
// StepPlan is one of these plus its bookkeeping (sched/batch_state.hpp); the gpu actor receives
// exactly this (actors/messages.hpp), and sched/step.hpp runs it.
struct ExecutorStep {
  uint64_t step = 0;          // sequence number (apply/fail_step check it)
  std::vector<int> release;   // Executor::release() these first, idle or not
  std::vector<StepSeq> seqs;  // decodes (slot order), then prefill chunks (admission order)
  // Planned ahead, while the step before it was in flight (BatchedDecodeState::plan_ahead): its
  // decodes of the requests that step sampled for hold kTokenOfLastStep.
  bool ahead = false;
  bool idle() const { return seqs.empty(); }
  // Entries that sample: one token is expected back for each.
  size_t sampled() const {
    size_t n = 0;
    for (const StepSeq& s : seqs) n += s.sample ? 1 : 0;
    return n;
  }
};

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;  // tokens delivered as Token events (the final eog token included)
  int cached_tokens = 0;      // prompt tokens whose KV came from the prefix cache
};

// Wall-clock marks of one request (BatchConfig::now), plus how many executor steps it was
// part of. A mark that was never reached holds the epoch (time_since_epoch() == 0).
struct RequestTimings {
  SchedClock::time_point enqueued;     // submit() accepted it
  SchedClock::time_point admitted;     // plan() gave it a slot (its first prompt chunk)
  SchedClock::time_point first_token;  // its first token was applied
  SchedClock::time_point finished;     // its final event was made
  int steps = 0;                       // executor steps it took part in
  double queue_ms() const;             // enqueued -> admitted (0 if never admitted)
  double ttft_ms() const;              // enqueued -> first_token (0 if no token)
  double total_ms() const;             // enqueued -> finished
};

struct TokenEvent {
  RequestRef request;
  int slot = -1;
  int32_t token = 0;
  int index = 0;     // 0, 1, 2, ... per request, without gaps
  bool eog = false;  // this end-of-generation token ends the request (FinishReason::stop follows)
  int cached_tokens = 0;   // the request's prompt tokens reused from the prefix cache
  TokenLogprobs logprobs;  // present when the request's sampling asked for them
};

struct FinishedEvent {
  RequestRef request;
  int slot = -1;  // -1: it was cancelled while still queued
  FinishReason reason = FinishReason::stop;
  Usage usage;
  RequestTimings timings;
};

struct FailedEvent {
  RequestRef request;
  int slot = -1;
  ErrorCode code = ErrorCode::internal;
  std::string message;
  Usage usage;
  RequestTimings timings;
};

// Every accepted request gets zero or more TokenEvents followed by exactly one FinishedEvent or
// FailedEvent, and nothing after it. A rejected submit gets no events (SubmitResult says why).
using SchedEvent = std::variant<TokenEvent, FinishedEvent, FailedEvent>;

const RequestRef& event_request(const SchedEvent& e);
int event_slot(const SchedEvent& e);
bool is_final(const SchedEvent& e);  // FinishedEvent or FailedEvent

}  // namespace rz
