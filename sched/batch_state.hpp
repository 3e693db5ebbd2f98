// BatchedDecodeState: the batcher's scheduling state and policy as plain data (no actors, no
// threads). Three parts: capacity (the slot table and the KV cache's KvBlockManager, which it
// owns), the planner (plan: what the next step computes, within a token budget) and the stop
// check (sched/stop_check.hpp). apply / fail_step turn a step's result into per-request events.
// The gpu actor runs the plans on an Executor (model/executor.hpp); sched/driver.hpp runs the
// same loop synchronously.
//
//   submit ──▶ [ waiting queue, FIFO per owner ] ──admit: slot + KV blocks + prefix──▶ [ slots ]
//   cancel ──▶ marks; takes effect at the next step boundary
//   plan:  budget = max_step_tokens (idle_step_tokens if more and the step has no decodes)
//          1. every decoding slot: its last sampled token            (1 token each)
//          2. slots part-way through their prompt, in admission order (a chunk each)
//          3. waiting requests, owners running fewest first, while a slot, its KV blocks and
//             budget remain (a chunk of prompt each)
//   apply: tokens -> events; full blocks registered in the prefix cache; finished slots freed
//
// One step at a time (sched/step.hpp implements release -> run -> apply/fail_step once,
// for the actors and sched/driver.hpp alike), or one more planned ahead (below):
//
//   StepPlan p = s.plan();                 // a step boundary
//   deliver(p.events);                     // cancellations decided at this boundary
//   for (int slot : p.release) ex.release(slot);   // ALWAYS, whatever the plan (idle included)
//   if (p.idle()) wait for submit/cancel;
//   tokens = ex.step(p.seqs);
//   deliver(s.apply(p, tokens));           // or, if the executor threw: s.fail_step(p, msg)
//
// Planning ahead (plan_ahead): while step N is in flight, the batcher may plan step N+1 at once,
// so that the executor starts it the moment N ends instead of after N's result has been applied
// and the next step planned (the host's time between steps). The same planner, as if N had run:
// a request N samples for decodes with the token N samples (kTokenOfLastStep; the gpu actor
// fills it in, sched/step.hpp), a prompt N computed part of continues after N's chunk, waiting
// requests are admitted into free slots. Not while a cancel is pending (it takes effect at an
// ordinary plan, with nothing in flight). A request that N ends by length gets no entry; one
// that N ends by an end-of-generation token (or a cancel) has an entry all the same: its request
// ends at apply(N), its slot is freed there (on the release list of the next step planned, which
// runs after N+1), and apply(N+1) / fail_step(N+1) skip that entry. The freed blocks may go to
// other requests' entries of that next step, which releases the slot first; the skipped entry's
// writes (one KV row past the ended sequence's last) come before it in the executor's order and
// are never read. When N fails, its requests fail and N+1's entries of them are skipped the same
// way (the StepRunner leaves them out of what the executor runs).
//
// Executor-release responsibility: the state never touches the executor. Whenever it frees a
// slot whose executor slot may be active, it puts the slot on a release list, and the next plan()
// hands that list out in StepPlan::release, before any entry that reuses the slot. So the caller
// releases exactly the slots in plan.release, and must do so before running the step.
//
// Policy (documented choices):
// - Token budget: a step holds at most max_step_tokens tokens, decodes first (every decoding
//   slot, one token each; max_step_tokens >= max_slots so they always fit), then prompt chunks.
//   A prompt longer than what is left runs in chunks over several steps (chunked prefill), so a
//   long prompt delays running streams by at most one budget's worth of compute per step. A step
//   with no decodes (no stream waits on it for its next token: prompts into an idle server) may
//   hold idle_step_tokens instead, when that is more, so a small budget for the streams' sake
//   does not slow the first prompts down.
// - Admission is FIFO per owner (a session: one connection, or one API request) and fair across
//   owners: the next request admitted is the oldest waiting one of the owner that runs the fewest
//   requests now, so a connection that sends a burst does not queue a quiet one behind it. It
//   takes the lowest free slot when a slot and its KV blocks are free; while its KV blocks are
//   not, nothing overtakes it. With one owner this is strict FIFO. Several requests can join in
//   one step.
// - KV cache: a request reserves at admission every block it may ever need,
//   reserve = min(prompt + (max_tokens > 0 ? max_tokens : max_context - prompt), max_context)
//   tokens, less the blocks of its cached prefix. Blocks are taken from the manager as the
//   sequence grows, and the reservation guarantees they are there: a running request never runs
//   out, and nothing is preempted. The head waits while its reservation does not fit. submit()
//   refuses with context_length_exceeded a request whose reservation exceeds the whole cache.
// - Prefix cache (prefix_cache): at admission the request reuses the longest run of cached full
//   blocks that starts its prompt (at most (prompt - 1) / block_size blocks, so at least one
//   token is computed and sampled from) and computes only the rest. Every block that becomes full
//   of computed KV (prompt or generated tokens) is registered; a finished request's blocks stay
//   cached until evicted (least recently released first) for new blocks.
// - Queue bound: submit() refuses with `overloaded` only when the live requests (running and
//   waiting) already fill every slot and max_queue more: a burst of up to max_slots requests
//   into an idle server is never refused.
// - A cancel that arrives before a step boundary always ends its request as `cancelled` at that
//   boundary, even if that step produced a token (dropped, not delivered) or failed.
// - A failed step (the executor threw) fails every request with an entry in that step with
//   ErrorCode::internal; requests outside the step are untouched.
// - The sequence never exceeds max_context tokens: a request ends with `length` when
//   prompt + generated == max_context, so its last token could still be appended.
#pragma once
#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/executor.hpp"
#include "sched/kv_block_manager.hpp"
#include "sched/types.hpp"

namespace rz {

// The token budget of a step when none is asked for: kDefaultStepTokens, or max_slots +
// kDefaultPromptRoom when more (every running request decodes in each step, and a request that
// takes a freed slot beside a full batch still gets that many prompt tokens a step); a step
// without decodes may take kDefaultIdleStepTokens. See docs/engine.md for how they were chosen.
inline constexpr int kDefaultStepTokens = 128;
inline constexpr int kDefaultPromptRoom = 64;
inline constexpr int kDefaultIdleStepTokens = 2048;
inline int default_max_step_tokens(int max_slots) {
  return std::max(kDefaultStepTokens, max_slots + kDefaultPromptRoom);
}

struct BatchConfig {
  int max_slots = 1;    // <= the executor's max_slots()
  int max_context = 2;  // tokens per slot, prompt + generated; <= executor's
  int max_queue = 64;   // waiting requests beyond the slots (see the policy above)
  int max_step_tokens = kDefaultStepTokens;  // tokens in one step, decode + prefill; >= max_slots
  // Tokens of a step that has no decodes, where more than max_step_tokens (0: max_step_tokens).
  int idle_step_tokens = 0;
  int n_vocab = 0;  // > 0: prompt tokens outside [0, n_vocab) are refused
  // The KV cache: kv_blocks blocks of kv_block_size tokens (the executor's, see check_fits in
  // sched/driver.hpp). kv_blocks == 0: one full context per slot, max_slots * ceil(max_context /
  // kv_block_size).
  int kv_block_size = kDefaultKvBlockSize;
  int64_t kv_blocks = 0;
  bool prefix_cache = true;
  std::function<bool(int32_t)> is_eog;          // end-of-generation ids; empty: none
  std::function<SchedClock::time_point()> now;  // empty: SchedClock::now (tests inject)

  void validate() const;  // throws rz::Error("batch config: cause")

  // The block count in use: kv_blocks, or its default.
  int64_t kv_block_count() const;
  // Tokens of KV cache a request reserves at admission (the policy above); prompt >= 1.
  int64_t kv_reserve_tokens(int64_t prompt, int max_tokens) const;
  // Blocks that hold `tokens` tokens: ceil(tokens / kv_block_size).
  int64_t kv_blocks_for(int64_t tokens) const;
};

// The state of one slot. A request occupies its slot from admission until its final event, made
// in the same call that frees the slot.
struct BatchSlot {
  enum class Phase {
    free,
    prefilling,  // admitted; part of its prompt is still to be computed
    decoding,    // its prompt is computed; its last sampled token waits to be appended
  };
  Phase phase = Phase::free;
  RequestRef request;
  SamplingParams sampling;
  std::vector<int32_t> tokens;  // prompt, then every generated token
  int prompt_len = 0;
  int computed = 0;       // tokens whose KV is in the cache (a prefix of `tokens`)
  int cached_tokens = 0;  // prompt tokens reused from the prefix cache at admission
  bool started = false;   // an entry of this request has run (the executor slot is begun)
  // Its entry in the newest step planned: that step's number, whether the entry samples, and
  // the sequence length after it (plan_ahead continues from there).
  uint64_t planned_step = 0;
  bool planned_sample = false;
  int planned_end = 0;
  int generated = 0;   // tokens delivered so far
  int max_tokens = 0;  // 0: until the context is full
  bool ignore_eos = false;
  bool cancel_requested = false;
  std::vector<int32_t> blocks;  // block table: token p's KV is in blocks[p / kv_block_size]
  int64_t reserved_blocks = 0;  // blocks this request may hold at most (its reservation)
  size_t registered = 0;        // leading blocks registered in (or taken from) the prefix cache
  uint64_t admission = 0;       // admission order (prompt chunks continue in this order)
  RequestTimings timings;
  bool busy() const { return phase != Phase::free; }
};

// One step, as plain data: the executor step (step number, release list, entries;
// sched/types.hpp) and what the state needs back.
struct StepPlan : ExecutorStep {
  std::vector<RequestRef> requests;  // the request of each entry, same order
  std::vector<SchedEvent> events;    // final events decided at this boundary: deliver them
  size_t size() const { return requests.size(); }
};

// Totals since construction, for metrics.
struct BatchCounters {
  uint64_t submitted = 0;  // accepted by submit()
  uint64_t rejected_overloaded = 0;
  uint64_t rejected_invalid = 0;  // context_length_exceeded and invalid_request
  uint64_t admitted = 0;          // given a slot
  uint64_t finished = 0;          // FinishedEvent with stop or length
  uint64_t cancelled = 0;         // FinishedEvent with cancelled
  uint64_t failed = 0;            // FailedEvent
  uint64_t prompt_tokens = 0;     // prompt tokens of admitted requests
  uint64_t tokens_generated = 0;  // TokenEvents
  uint64_t steps = 0;             // applied or failed
  uint64_t steps_ahead = 0;       // steps planned ahead (plan_ahead)
  uint64_t failed_steps = 0;
  uint64_t decode_tokens = 0;      // tokens of decode entries in applied steps
  uint64_t prefill_tokens = 0;     // prompt tokens computed in applied steps
  uint64_t prefix_lookups = 0;     // admissions that looked up the prefix cache
  uint64_t prefix_hit_tokens = 0;  // prompt tokens those admissions reused
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

  // While exactly one step is in flight: the step after it (see "Planning ahead" above), now in
  // flight behind it. An idle plan (nothing added) when a cancel is pending or nothing would
  // run. It hands out the pending releases (slots freed since the last plan) but no events
  // (apply() hands those out).
  StepPlan plan_ahead();

  // Applies the result of the oldest step in flight: tokens[i] belongs to the i-th sampling
  // entry (entries of a step planned ahead whose request has ended take their token and drop it).
  // Returns the events, entry by entry in plan order (a request's TokenEvent before its final
  // event), after any cancellations of queued requests. Throws std::logic_error if `p` is not
  // the step in flight and std::invalid_argument if tokens.size() != p.sampled() (state
  // unchanged: call fail_step instead). `logprobs`, when not empty, holds the entries'
  // log-probabilities likewise (Executor::step_logprobs), copied into their TokenEvents.
  std::vector<SchedEvent> apply(const StepPlan& p, std::span<const int32_t> tokens,
                                std::span<const TokenLogprobs> logprobs = {});

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
  // KV blocks referenced by running requests (shared blocks count once). Cached blocks no
  // request references are not counted: they are free for new blocks.
  int64_t kv_blocks_used() const { return kv_.referenced_blocks(); }
  const KvBlockManager& kv() const { return kv_; }
  bool in_flight() const { return !flight_.empty(); }
  int steps_in_flight() const { return static_cast<int>(flight_.size()); }
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
  // What admitting the next waiting request (next_waiting()) would reuse and need.
  struct Admission {
    std::size_t index = 0;        // its place in the queue
    std::vector<int32_t> cached;  // prefix blocks to reuse
    int64_t reserve_blocks = 0;   // its whole reservation
    bool fits = false;
  };
  // The queue index of the request admission takes next: the first one whose owner runs the
  // fewest requests now (see the policy above). The queue must not be empty.
  std::size_t next_waiting() const;
  SchedClock::time_point now() const;
  void check_in_flight(const StepPlan& p, const char* what) const;
  void take_cancellations();  // running, not in flight, cancel requested
  Admission try_admission() const;
  void admit(const Admission& a, int slot);
  // An entry of n_tokens from position `start` (grows the block table first); a position not
  // yet in the slot's tokens (behind a step in flight) gets kTokenOfLastStep.
  void add_entry(StepPlan& p, int slot, int start, int n_tokens);
  // The planner: releases, decodes, prompt chunks and admissions within the budget, as after
  // step `behind` (in flight; 0: none) has run.
  void fill(StepPlan& p, uint64_t behind);
  void grow_blocks(BatchSlot& s, int tokens);  // the block table covers `tokens` tokens
  // Whether entry i of `p` (an in-flight step) still belongs to its request's slot; false for an
  // entry of a step planned ahead whose request ended before it (its result is dropped).
  bool holds(const StepPlan& p, size_t i) const;
  void register_full_blocks(BatchSlot& s);
  // Free a slot (blocks back, onto the release list) and make its final event.
  SchedEvent finish_slot(int i, FinishReason reason);
  SchedEvent fail_slot(int i, const std::string& message);
  void free_slot(int i);
  std::vector<SchedEvent> end_step();  // pending events; the oldest step leaves the flight

  BatchConfig cfg_;
  KvBlockManager kv_;
  std::vector<BatchSlot> slots_;
  std::deque<Queued> queue_;
  std::unordered_map<uint64_t, int> live_;  // id -> slot, or -1 while queued
  std::vector<int> pending_release_;
  std::vector<SchedEvent> pending_events_;
  int active_ = 0;
  std::deque<uint64_t> flight_;  // steps in flight, oldest first (at most two: plan_ahead)
  uint64_t step_ = 0;            // sequence number of the last plan that was not idle
  uint64_t admissions_ = 0;      // admission order
  int64_t promised_ = 0;         // blocks reserved by running requests and not yet taken
  BatchCounters counters_;
};

}  // namespace rz
