// BatchedDecodeState: the batcher's scheduling state and policy as plain data (no actors, no
// threads). It owns the waiting queue and the slot table, decides each step (plan), and applies
// each step's result (apply / fail_step) into per-request events. The gpu actor runs the plans on
// an Executor (model/executor.hpp); sched/driver.hpp runs the same loop synchronously.
//
//   submit ──▶ [ waiting queue, FIFO, bounded ] ──plan: prefill joins──▶ [ slots 0..max_slots-1 ]
//   cancel ──▶ marks; takes effect at the next step boundary        plan: decode all active ◀─┘
//                                                                   apply: tokens -> events,
//                                                                          finished slots freed
// One step at a time (sched/step.hpp implements release -> run -> apply/fail_step once,
// for the actors and sched/driver.hpp alike):
//
//   StepPlan p = s.plan();                 // a step boundary
//   deliver(p.events);                     // cancellations decided at this boundary
//   for (int slot : p.release) ex.release(slot);   // ALWAYS, whatever p.kind (idle included)
//   if (p.idle()) wait for submit/cancel;
//   tokens = p.kind == prefill ? ex.prefill(p.prefill) : ex.decode(p.decode);
//   deliver(s.apply(p, tokens));           // or, if the executor threw: deliver(s.fail_step(p,
//   msg))
//
// Executor-release responsibility: the state never touches the executor. Whenever it frees a
// slot whose executor slot may be active (a request finished, was cancelled after admission, or
// was in a failed step), it puts the slot on a release list, and the next plan() hands that list
// out in StepPlan::release, before any prefill that reuses the slot. So the caller releases
// exactly the slots in plan.release, nothing else, and must do so before running the step.
//
// Policy (documented choices):
// - Admission is strict FIFO: prefill takes queued requests from the head into the lowest free
//   slots, several per step, up to max_prefill_batch requests and max_prefill_tokens prompt
//   tokens; it stops at the first request that does not fit (no overtaking). A prompt longer
//   than max_prefill_tokens alone runs as a step of its own (the executor has no chunked prefill).
// - KV cache blocks (when kv_blocks > 0): a request reserves, at admission, the blocks for every
//   token it may ever hold, reserve = min(prompt + (max_tokens > 0 ? max_tokens : max_context -
//   prompt), max_context) tokens, i.e. ceil(reserve / kv_block_size) blocks, and holds them until
//   its slot is freed (finish, cancel, failure, abort_all). The head of the queue is admitted only
//   if a slot AND its blocks are free; otherwise admission stops there and the head waits for
//   blocks to come back (no overtaking, no failure; running requests never run out because their
//   blocks were taken up front). PrefillRequest::reserve_tokens carries `reserve`, so a paged
//   executor takes exactly these blocks. submit() refuses with context_length_exceeded a request
//   that needs more blocks than the whole cache has (it could never run). Blocks freed in one
//   plan() are reusable by that plan's prefill: the caller releases them (plan.release) first.
// - Prefill whenever the head of the queue is admissible (a slot and its KV blocks are free), but
//   never more than
//   max_consecutive_prefills prefill steps in a row while some slot could decode (default 1:
//   prefill and decode alternate under load, so a burst of arrivals delays running requests by
//   at most one step per decode step, and new requests join at every other boundary).
// - Decode runs every active slot in one step, in slot order.
// - A cancel that arrives before a step boundary always ends its request as `cancelled` at that
//   boundary, even if that step produced a token (dropped, not delivered) or failed.
// - A failed step (the executor threw) fails every request in that step with ErrorCode::internal;
//   requests outside the step are untouched. A decode step holds every active slot, so a failed
//   decode fails all running requests; a failed prefill fails only the requests joining in it.
// - The sequence never exceeds max_context tokens: a request ends with `length` when
//   prompt + generated == max_context, so its last token could still be appended.
// - Finish checks, in order: end-of-generation (unless ignore_eos) -> stop; max_tokens or
//   context full -> length. The eog token is delivered as a Token event with eog = true.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/executor.hpp"
#include "sched/types.hpp"

namespace rz {

struct BatchConfig {
  int max_slots = 1;                 // <= the executor's max_slots()
  int max_context = 2;               // tokens per slot, prompt + generated; <= executor's
  int max_queue = 64;                // waiting requests beyond this are refused (overloaded)
  int max_prefill_batch = 8;         // requests joining in one prefill step
  int max_prefill_tokens = 8192;     // prompt tokens in one prefill step (see the policy above)
  int max_consecutive_prefills = 1;  // prefill steps in a row while some slot could decode
  int n_vocab = 0;                   // > 0: prompt tokens outside [0, n_vocab) are refused
  // The KV cache shared by all slots: kv_blocks blocks of kv_block_size tokens each (see the
  // policy above; Executor::kv_block_size()/kv_blocks()). kv_blocks == 0: unlimited, no
  // accounting; kv_blocks > 0 needs kv_block_size >= 1.
  int kv_block_size = 0;
  int64_t kv_blocks = 0;
  std::function<bool(int32_t)> is_eog;          // end-of-generation ids; empty: none
  std::function<SchedClock::time_point()> now;  // empty: SchedClock::now (tests inject)

  void validate() const;  // throws rz::Error("batch config: cause")

  bool kv_limited() const { return kv_blocks > 0; }
  // Tokens of KV cache a request reserves at admission (the policy above); prompt >= 1.
  int64_t kv_reserve_tokens(int64_t prompt, int max_tokens) const;
  // Blocks that hold `tokens` tokens: ceil(tokens / kv_block_size); 0 when not kv_limited().
  int64_t kv_blocks_for(int64_t tokens) const;
};

// The state of one slot. A request occupies its slot from admission (plan() puts it in a
// prefill step) until its final event, made in the same call that frees the slot: there is no
// lingering "done" slot, the FinishedEvent/FailedEvent carries the outcome.
struct BatchSlot {
  enum class Phase {
    free,
    prefilling,  // admitted into the prefill step in flight
    decoding,    // prefilled; its last token waits to be appended by the next decode
  };
  Phase phase = Phase::free;
  RequestRef request;
  SamplingParams sampling;
  int prompt_len = 0;
  int position = 0;         // tokens in the executor's KV cache: prompt_len + generated - 1
  int32_t last_token = -1;  // sampled last; the next decode appends it
  int generated = 0;        // tokens delivered so far
  int max_tokens = 0;       // 0: until the context is full
  bool ignore_eos = false;
  bool cancel_requested = false;
  int64_t kv_blocks = 0;  // KV blocks reserved for this request (0 when not kv_limited)
  RequestTimings timings;
  bool busy() const { return phase != Phase::free; }
};

// One step, as plain data: the executor step (kind, step number, release list, the requests ready
// to pass to Executor::prefill/decode; sched/types.hpp) and what the state needs back.
struct StepPlan : ExecutorStep {
  std::vector<RequestRef> requests;  // the request of each prefill/decode entry, same order
  std::vector<SchedEvent> events;    // final events decided at this boundary: deliver them
  size_t size() const { return requests.size(); }
};

// Totals since construction, for metrics.
struct BatchCounters {
  uint64_t submitted = 0;  // accepted by submit()
  uint64_t rejected_overloaded = 0;
  uint64_t rejected_invalid = 0;  // context_length_exceeded and invalid_request
  uint64_t admitted = 0;          // put into a prefill step
  uint64_t finished = 0;          // FinishedEvent with stop or length
  uint64_t cancelled = 0;         // FinishedEvent with cancelled
  uint64_t failed = 0;            // FailedEvent
  uint64_t prompt_tokens = 0;     // prompt tokens of admitted requests
  uint64_t tokens_generated = 0;  // TokenEvents
  uint64_t prefill_steps = 0;     // applied or failed, by kind
  uint64_t decode_steps = 0;
  uint64_t failed_steps = 0;
};

class BatchedDecodeState {
 public:
  explicit BatchedDecodeState(BatchConfig cfg);  // throws rz::Error on a bad config

  // Validates and queues a request. Never runs anything; the next plan() may admit it.
  SubmitResult submit(BatchRequest req);

  // Asks to end a live request. A queued one leaves the queue now; a running one keeps its slot
  // until the next step boundary (the end of the step in flight, or the next plan()). Either way
  // its FinishedEvent{cancelled} comes out of the next plan(), apply() or fail_step(), once.
  // Returns false (and does nothing) for an id that is not live or is already cancelling.
  bool cancel(uint64_t id);

  // The next step (a step boundary). Throws std::logic_error while a step is in flight.
  StepPlan plan();

  // Applies the result of the step in flight: tokens[i] belongs to plan.requests[i]. Returns
  // the events, request by request in plan order (a request's TokenEvent before its final
  // event), after any cancellations of queued requests. Throws std::logic_error if `p` is not
  // the step in flight and std::invalid_argument if tokens.size() != p.size() (state unchanged:
  // call fail_step instead).
  std::vector<SchedEvent> apply(const StepPlan& p, std::span<const int32_t> tokens);

  // The executor threw while running `p`: every request of that step fails (or ends cancelled
  // if its cancel was pending), its slot is freed and put on the release list.
  std::vector<SchedEvent> fail_step(const StepPlan& p, const std::string& message);

  // Ends every live request now, for when the executor is gone or the engine stops: queued and
  // running requests get FailedEvent{internal, message} (FinishedEvent{cancelled} where a cancel
  // was pending), the step in flight, if any, is dropped (applying it later is a logic_error),
  // and every held slot goes on the release list. Returns all the events not yet handed out.
  std::vector<SchedEvent> abort_all(const std::string& message);

  // Observation (tests, metrics).
  enum class Where { unknown, queued, running };
  Where where(uint64_t id) const;
  const BatchConfig& config() const { return cfg_; }
  const BatchSlot& slot(int i) const { return slots_.at(static_cast<size_t>(i)); }
  int queue_depth() const { return static_cast<int>(queue_.size()); }
  int active_slots() const { return active_; }
  int free_slots() const { return cfg_.max_slots - active_; }
  // KV blocks reserved by busy slots (the sum of their BatchSlot::kv_blocks); always 0 when the
  // config is not kv_limited(). Blocks of a freed slot come back at once (see the policy).
  int64_t kv_blocks_used() const { return kv_used_; }
  bool in_flight() const { return in_flight_; }
  // Slots freed here but not yet handed out in a plan's release list.
  const std::vector<int>& pending_releases() const { return pending_release_; }
  // False when plan() would return an idle plan with nothing to release or deliver.
  bool has_work() const;
  const BatchCounters& counters() const { return counters_; }

 private:
  struct Queued {
    BatchRequest req;
    SchedClock::time_point enqueued;
  };
  SchedClock::time_point now() const;
  void check_in_flight(const StepPlan& p, const char* what) const;
  void take_cancellations();     // running, not in flight, cancel requested
  bool head_admissible() const;  // a slot and the head's KV blocks are free
  void plan_prefill(StepPlan& p);
  void plan_decode(StepPlan& p);
  // Free a slot (onto the release list) and make its final event.
  SchedEvent finish_slot(int i, FinishReason reason);
  SchedEvent fail_slot(int i, const std::string& message);
  void free_slot(int i);
  std::vector<SchedEvent> end_step();  // pending events, in-flight flag cleared

  BatchConfig cfg_;
  std::vector<BatchSlot> slots_;
  std::deque<Queued> queue_;
  std::unordered_map<uint64_t, int> live_;  // id -> slot, or -1 while queued
  std::vector<int> pending_release_;
  std::vector<SchedEvent> pending_events_;
  int active_ = 0;
  bool in_flight_ = false;
  uint64_t step_ = 0;  // sequence number of the last plan that was not idle
  int prefills_in_row_ = 0;
  int64_t kv_used_ = 0;
  BatchCounters counters_;
};

}  // namespace rz
