// BatchedDecodeState: admission, step planning, and applying step results (see the header for
// the policy and the executor-release contract).
#include "sched/batch_state.hpp"

#include <algorithm>
#include <stdexcept>

#include "formats/common.hpp"

namespace rz {

void BatchConfig::validate() const {
  auto need = [](bool ok, const std::string& cause) {
    if (!ok) throw Error("batch config: " + cause);
  };
  need(max_slots >= 1, "max_slots must be at least 1, got " + std::to_string(max_slots));
  need(max_context >= 2, "max_context must be at least 2, got " + std::to_string(max_context));
  need(max_queue >= 1, "max_queue must be at least 1, got " + std::to_string(max_queue));
  need(max_prefill_batch >= 1,
       "max_prefill_batch must be at least 1, got " + std::to_string(max_prefill_batch));
  need(max_prefill_tokens >= 1,
       "max_prefill_tokens must be at least 1, got " + std::to_string(max_prefill_tokens));
  need(max_consecutive_prefills >= 1, "max_consecutive_prefills must be at least 1, got " +
                                          std::to_string(max_consecutive_prefills));
  need(n_vocab >= 0, "n_vocab must not be negative, got " + std::to_string(n_vocab));
  need(kv_block_size >= 0,
       "kv_block_size must not be negative, got " + std::to_string(kv_block_size));
  need(kv_blocks >= 0, "kv_blocks must not be negative, got " + std::to_string(kv_blocks));
  need(kv_blocks == 0 || kv_block_size >= 1,
       "kv_blocks " + std::to_string(kv_blocks) + " needs a kv_block_size of at least 1");
}

int64_t BatchConfig::kv_reserve_tokens(int64_t prompt, int max_tokens) const {
  const int64_t want = prompt + (max_tokens > 0 ? max_tokens : max_context - prompt);
  return std::min<int64_t>(want, max_context);
}

int64_t BatchConfig::kv_blocks_for(int64_t tokens) const {
  if (!kv_limited()) return 0;
  return (tokens + kv_block_size - 1) / kv_block_size;
}

BatchedDecodeState::BatchedDecodeState(BatchConfig cfg) : cfg_(std::move(cfg)) {
  cfg_.validate();
  slots_.resize(static_cast<size_t>(cfg_.max_slots));
}

SchedClock::time_point BatchedDecodeState::now() const {
  return cfg_.now ? cfg_.now() : SchedClock::now();
}

SubmitResult BatchedDecodeState::submit(BatchRequest req) {
  auto refuse = [&](SubmitStatus st, std::string msg) {
    if (st == SubmitStatus::overloaded)
      ++counters_.rejected_overloaded;
    else
      ++counters_.rejected_invalid;
    return SubmitResult{st, std::move(msg)};
  };
  const auto n = static_cast<long long>(req.prompt.size());
  if (n == 0) return refuse(SubmitStatus::invalid_request, "the prompt is empty");
  if (req.max_tokens < 0)
    return refuse(SubmitStatus::invalid_request,
                  "max_tokens must not be negative, got " + std::to_string(req.max_tokens));
  if (cfg_.n_vocab > 0) {
    for (int32_t t : req.prompt)
      if (t < 0 || t >= cfg_.n_vocab)
        return refuse(SubmitStatus::invalid_request, "prompt token " + std::to_string(t) +
                                                         " is outside the vocabulary of " +
                                                         std::to_string(cfg_.n_vocab));
  }
  if (live_.count(req.ref.id))
    return refuse(SubmitStatus::invalid_request,
                  "request id " + std::to_string(req.ref.id) + " is already in use");
  if (n + 1 > cfg_.max_context)
    return refuse(SubmitStatus::context_length_exceeded, "the prompt has " + std::to_string(n) +
                                                             " tokens; with one generated token it "
                                                             "exceeds the context of " +
                                                             std::to_string(cfg_.max_context) +
                                                             " tokens");
  if (cfg_.kv_limited()) {
    const int64_t reserve = cfg_.kv_reserve_tokens(n, req.max_tokens);
    const int64_t blocks = cfg_.kv_blocks_for(reserve);
    if (blocks > cfg_.kv_blocks) {
      const std::string gen = req.max_tokens > 0 ? "max_tokens " + std::to_string(req.max_tokens)
                                                 : "generation up to the context of " +
                                                       std::to_string(cfg_.max_context) + " tokens";
      return refuse(SubmitStatus::context_length_exceeded,
                    "the prompt has " + std::to_string(n) + " tokens; with " + gen + " it needs " +
                        std::to_string(reserve) + " tokens of KV cache (" + std::to_string(blocks) +
                        " blocks of " + std::to_string(cfg_.kv_block_size) +
                        "), more than the whole cache of " + std::to_string(cfg_.kv_blocks) +
                        " blocks");
    }
  }
  if (static_cast<int>(queue_.size()) >= cfg_.max_queue)
    return refuse(SubmitStatus::overloaded,
                  "the server is busy: " + std::to_string(queue_.size()) + " requests wait");
  live_[req.ref.id] = -1;
  queue_.push_back(Queued{std::move(req), now()});
  ++counters_.submitted;
  return {};
}

bool BatchedDecodeState::cancel(uint64_t id) {
  auto it = live_.find(id);
  if (it == live_.end()) return false;
  if (it->second >= 0) {
    BatchSlot& s = slots_[static_cast<size_t>(it->second)];
    if (s.cancel_requested) return false;
    s.cancel_requested = true;
    return true;
  }
  auto q = std::find_if(queue_.begin(), queue_.end(),
                        [id](const Queued& e) { return e.req.ref.id == id; });
  if (q == queue_.end()) throw std::logic_error("BatchedDecodeState: queued id not in the queue");
  FinishedEvent ev;
  ev.request = q->req.ref;
  ev.slot = -1;
  ev.reason = FinishReason::cancelled;
  ev.usage.prompt_tokens = static_cast<int>(q->req.prompt.size());
  ev.timings.enqueued = q->enqueued;
  ev.timings.finished = now();
  pending_events_.push_back(ev);
  ++counters_.cancelled;
  queue_.erase(q);
  live_.erase(it);
  return true;
}

BatchedDecodeState::Where BatchedDecodeState::where(uint64_t id) const {
  auto it = live_.find(id);
  if (it == live_.end()) return Where::unknown;
  return it->second < 0 ? Where::queued : Where::running;
}

bool BatchedDecodeState::has_work() const {
  return in_flight_ || !queue_.empty() || active_ > 0 || !pending_release_.empty() ||
         !pending_events_.empty();
}

void BatchedDecodeState::free_slot(int i) {
  BatchSlot& s = slots_[static_cast<size_t>(i)];
  live_.erase(s.request.id);
  kv_used_ -= s.kv_blocks;
  s = BatchSlot{};
  --active_;
  // The executor slot may hold this request's KV cache (release of a free one is a no-op).
  pending_release_.push_back(i);
}

SchedEvent BatchedDecodeState::finish_slot(int i, FinishReason reason) {
  BatchSlot& s = slots_[static_cast<size_t>(i)];
  FinishedEvent ev;
  ev.request = s.request;
  ev.slot = i;
  ev.reason = reason;
  ev.usage = {s.prompt_len, s.generated};
  ev.timings = s.timings;
  ev.timings.finished = now();
  if (reason == FinishReason::cancelled)
    ++counters_.cancelled;
  else
    ++counters_.finished;
  free_slot(i);
  return ev;
}

SchedEvent BatchedDecodeState::fail_slot(int i, const std::string& message) {
  BatchSlot& s = slots_[static_cast<size_t>(i)];
  FailedEvent ev;
  ev.request = s.request;
  ev.slot = i;
  ev.code = ErrorCode::internal;
  ev.message = message;
  ev.usage = {s.prompt_len, s.generated};
  ev.timings = s.timings;
  ev.timings.finished = now();
  ++counters_.failed;
  free_slot(i);
  return ev;
}

void BatchedDecodeState::take_cancellations() {
  for (int i = 0; i < cfg_.max_slots; ++i)
    if (slots_[static_cast<size_t>(i)].busy() && slots_[static_cast<size_t>(i)].cancel_requested)
      pending_events_.push_back(finish_slot(i, FinishReason::cancelled));
}

StepPlan BatchedDecodeState::plan() {
  if (in_flight_) throw std::logic_error("BatchedDecodeState::plan: a step is in flight");
  take_cancellations();
  StepPlan p;
  p.release = std::move(pending_release_);
  pending_release_.clear();
  p.events = std::move(pending_events_);
  pending_events_.clear();

  // Outside a step every busy slot is decoding (prefilling lasts only while its step flies).
  const bool can_decode = active_ > 0;
  const bool can_prefill = head_admissible();
  if (can_prefill && (!can_decode || prefills_in_row_ < cfg_.max_consecutive_prefills))
    plan_prefill(p);
  else if (can_decode)
    plan_decode(p);
  if (!p.idle()) {
    p.step = ++step_;
    in_flight_ = true;
  }
  return p;
}

bool BatchedDecodeState::head_admissible() const {
  if (queue_.empty() || active_ >= cfg_.max_slots) return false;
  if (!cfg_.kv_limited()) return true;
  const Queued& q = queue_.front();
  const auto n = static_cast<int64_t>(q.req.prompt.size());
  return kv_used_ + cfg_.kv_blocks_for(cfg_.kv_reserve_tokens(n, q.req.max_tokens)) <=
         cfg_.kv_blocks;
}

void BatchedDecodeState::plan_prefill(StepPlan& p) {
  p.kind = StepKind::prefill;
  ++prefills_in_row_;
  const auto at = now();
  long long tokens = 0;
  int next_free = 0;
  // Strict FIFO: a head without a free slot or enough free KV blocks stops admission here; it
  // waits for the next step rather than being overtaken.
  while (static_cast<int>(p.prefill.size()) < cfg_.max_prefill_batch && head_admissible()) {
    Queued& q = queue_.front();
    const auto n = static_cast<long long>(q.req.prompt.size());
    // Only a head that alone exceeds the prompt-token budget runs alone (it would never fit
    // otherwise).
    if (!p.prefill.empty() && tokens + n > cfg_.max_prefill_tokens) break;
    const int64_t reserve = cfg_.kv_reserve_tokens(n, q.req.max_tokens);
    while (slots_[static_cast<size_t>(next_free)].busy()) ++next_free;
    BatchSlot& s = slots_[static_cast<size_t>(next_free)];
    s.phase = BatchSlot::Phase::prefilling;
    s.request = q.req.ref;
    s.sampling = q.req.sampling;
    s.prompt_len = static_cast<int>(n);
    s.max_tokens = q.req.max_tokens;
    s.ignore_eos = q.req.ignore_eos;
    s.kv_blocks = cfg_.kv_blocks_for(reserve);
    kv_used_ += s.kv_blocks;
    s.timings.enqueued = q.enqueued;
    s.timings.admitted = at;
    live_[q.req.ref.id] = next_free;
    ++active_;
    ++counters_.admitted;
    counters_.prompt_tokens += static_cast<uint64_t>(n);
    tokens += n;
    p.requests.push_back(q.req.ref);
    p.prefill.push_back(PrefillRequest{next_free, std::move(q.req.prompt), q.req.sampling,
                                       static_cast<int>(reserve)});
    queue_.pop_front();
  }
}

void BatchedDecodeState::plan_decode(StepPlan& p) {
  p.kind = StepKind::decode;
  prefills_in_row_ = 0;
  for (int i = 0; i < cfg_.max_slots; ++i) {
    const BatchSlot& s = slots_[static_cast<size_t>(i)];
    if (s.phase != BatchSlot::Phase::decoding) continue;
    p.decode.push_back(DecodeRequest{i, s.last_token});
    p.requests.push_back(s.request);
  }
}

void BatchedDecodeState::check_in_flight(const StepPlan& p, const char* what) const {
  const auto fail = [what](const char* cause) {
    throw std::logic_error(std::string("BatchedDecodeState::") + what + ": " + cause);
  };
  if (!in_flight_) fail("no step is in flight");
  if (p.idle() || p.step != step_) fail("the plan is not the step in flight");
  const size_t n = p.kind == StepKind::prefill ? p.prefill.size() : p.decode.size();
  if (n != p.requests.size()) fail("the plan's entries and requests differ in number");
  const auto want =
      p.kind == StepKind::prefill ? BatchSlot::Phase::prefilling : BatchSlot::Phase::decoding;
  for (size_t i = 0; i < n; ++i) {
    const int slot = p.kind == StepKind::prefill ? p.prefill[i].slot : p.decode[i].slot;
    if (slot < 0 || slot >= cfg_.max_slots) fail("a slot of the plan is out of range");
    const BatchSlot& s = slots_[static_cast<size_t>(slot)];
    if (s.phase != want || !(s.request == p.requests[i]))
      fail("a slot of the plan no longer holds its request");
  }
}

std::vector<SchedEvent> BatchedDecodeState::end_step() {
  in_flight_ = false;
  std::vector<SchedEvent> out = std::move(pending_events_);
  pending_events_.clear();
  return out;
}

std::vector<SchedEvent> BatchedDecodeState::apply(const StepPlan& p,
                                                  std::span<const int32_t> tokens) {
  check_in_flight(p, "apply");
  if (tokens.size() != p.size())
    throw std::invalid_argument("BatchedDecodeState::apply: " + std::to_string(tokens.size()) +
                                " tokens for a step of " + std::to_string(p.size()) + " requests");
  const bool prefill = p.kind == StepKind::prefill;
  ++(prefill ? counters_.prefill_steps : counters_.decode_steps);
  std::vector<SchedEvent> out = end_step();
  const auto at = now();
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int slot = prefill ? p.prefill[i].slot : p.decode[i].slot;
    BatchSlot& s = slots_[static_cast<size_t>(slot)];
    ++s.timings.steps;
    if (prefill) {
      s.phase = BatchSlot::Phase::decoding;
      s.position = s.prompt_len;
    } else {
      ++s.position;  // the decode appended last_token
    }
    if (s.cancel_requested) {  // the token is dropped: the client asked for no more
      out.push_back(finish_slot(slot, FinishReason::cancelled));
      continue;
    }
    const int32_t t = tokens[i];
    const int index = s.generated++;
    s.last_token = t;
    if (index == 0) s.timings.first_token = at;
    const bool eog = !s.ignore_eos && cfg_.is_eog && cfg_.is_eog(t);
    out.push_back(TokenEvent{s.request, slot, t, index, eog});
    ++counters_.tokens_generated;
    if (eog) {
      out.push_back(finish_slot(slot, FinishReason::stop));
    } else if ((s.max_tokens > 0 && s.generated >= s.max_tokens) ||
               s.prompt_len + s.generated >= cfg_.max_context) {
      out.push_back(finish_slot(slot, FinishReason::length));
    }
  }
  return out;
}

std::vector<SchedEvent> BatchedDecodeState::fail_step(const StepPlan& p,
                                                      const std::string& message) {
  check_in_flight(p, "fail_step");
  const bool prefill = p.kind == StepKind::prefill;
  ++(prefill ? counters_.prefill_steps : counters_.decode_steps);
  ++counters_.failed_steps;
  std::vector<SchedEvent> out = end_step();
  for (size_t i = 0; i < p.size(); ++i) {
    const int slot = prefill ? p.prefill[i].slot : p.decode[i].slot;
    BatchSlot& s = slots_[static_cast<size_t>(slot)];
    ++s.timings.steps;
    if (s.cancel_requested)
      out.push_back(finish_slot(slot, FinishReason::cancelled));
    else
      out.push_back(fail_slot(slot, message));
  }
  return out;
}

std::vector<SchedEvent> BatchedDecodeState::abort_all(const std::string& message) {
  std::vector<SchedEvent> out = end_step();
  for (Queued& q : queue_) {
    FailedEvent ev;
    ev.request = q.req.ref;
    ev.code = ErrorCode::internal;
    ev.message = message;
    ev.usage.prompt_tokens = static_cast<int>(q.req.prompt.size());
    ev.timings.enqueued = q.enqueued;
    ev.timings.finished = now();
    ++counters_.failed;
    live_.erase(q.req.ref.id);
    out.push_back(std::move(ev));
  }
  queue_.clear();
  for (int i = 0; i < cfg_.max_slots; ++i) {
    BatchSlot& s = slots_[static_cast<size_t>(i)];
    if (!s.busy()) continue;
    out.push_back(s.cancel_requested ? finish_slot(i, FinishReason::cancelled)
                                     : fail_slot(i, message));
  }
  return out;
}

}  // namespace rz
