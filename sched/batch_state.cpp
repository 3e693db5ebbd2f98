// BatchedDecodeState: admission, step planning, and applying step results (see the header for
// the policy and the executor-release contract).
#include "sched/batch_state.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <unordered_map>

#include "formats/common.hpp"
#include "sched/stop_check.hpp"

namespace rz {

void BatchConfig::validate() const {
  auto need = [](bool ok, const std::string& cause) {
    if (!ok) throw Error("batch config: " + cause);
  };
  need(max_slots >= 1, "max_slots must be at least 1, got " + std::to_string(max_slots));
  need(max_context >= 2, "max_context must be at least 2, got " + std::to_string(max_context));
  need(max_queue >= 0, "max_queue must not be negative, got " + std::to_string(max_queue));
  need(max_step_tokens >= max_slots,
       "max_step_tokens (" + std::to_string(max_step_tokens) + ") must be at least max_slots (" +
           std::to_string(max_slots) + "): every running request decodes in each step");
  need(idle_step_tokens >= 0,
       "idle_step_tokens must not be negative, got " + std::to_string(idle_step_tokens));
  need(n_vocab >= 0, "n_vocab must not be negative, got " + std::to_string(n_vocab));
  need(kv_block_size >= 1,
       "kv_block_size must be at least 1, got " + std::to_string(kv_block_size));
  need(kv_blocks >= 0, "kv_blocks must not be negative, got " + std::to_string(kv_blocks));
}

int64_t BatchConfig::kv_block_count() const {
  return kv_blocks > 0 ? kv_blocks : int64_t{max_slots} * kv_blocks_for(max_context);
}

int64_t BatchConfig::kv_reserve_tokens(int64_t prompt, int max_tokens) const {
  const int64_t want = prompt + (max_tokens > 0 ? max_tokens : max_context - prompt);
  return std::min<int64_t>(want, max_context);
}

int64_t BatchConfig::kv_blocks_for(int64_t tokens) const {
  return (tokens + kv_block_size - 1) / kv_block_size;
}

namespace {
const BatchConfig& validated(const BatchConfig& c) {
  c.validate();
  return c;
}
}  // namespace

BatchedDecodeState::BatchedDecodeState(BatchConfig cfg)
    : cfg_(std::move(cfg)),
      kv_(validated(cfg_).kv_block_count(), cfg_.kv_block_size, cfg_.prefix_cache) {
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
  const int64_t reserve = cfg_.kv_reserve_tokens(n, req.max_tokens);
  const int64_t blocks = cfg_.kv_blocks_for(reserve);
  if (blocks > kv_.n_blocks()) {
    const std::string gen = req.max_tokens > 0 ? "max_tokens " + std::to_string(req.max_tokens)
                                               : "generation up to the context of " +
                                                     std::to_string(cfg_.max_context) + " tokens";
    return refuse(SubmitStatus::context_length_exceeded,
                  "the prompt has " + std::to_string(n) + " tokens; with " + gen + " it needs " +
                      std::to_string(reserve) + " tokens of KV cache (" + std::to_string(blocks) +
                      " blocks of " + std::to_string(cfg_.kv_block_size) +
                      "), more than the whole cache of " + std::to_string(kv_.n_blocks()) +
                      " blocks");
  }
  // Requests that free slots will take are never refused: only live requests beyond every slot
  // and the queue bound are.
  if (static_cast<int64_t>(live_.size()) >= int64_t{cfg_.max_slots} + cfg_.max_queue)
    return refuse(SubmitStatus::overloaded, "the server is busy: " + std::to_string(active_) +
                                                " requests run and " +
                                                std::to_string(queue_.size()) + " wait");
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
  return !flight_.empty() || !queue_.empty() || active_ > 0 || !pending_release_.empty() ||
         !pending_events_.empty();
}

void BatchedDecodeState::free_slot(int i) {
  BatchSlot& s = slots_[static_cast<size_t>(i)];
  live_.erase(s.request.id);
  promised_ -= s.reserved_blocks - static_cast<int64_t>(s.blocks.size());
  kv_.release_all(s.blocks);
  s = BatchSlot{};
  --active_;
  // The executor slot may hold this request's sequence (release of a free one is a no-op).
  pending_release_.push_back(i);
}

SchedEvent BatchedDecodeState::finish_slot(int i, FinishReason reason) {
  BatchSlot& s = slots_[static_cast<size_t>(i)];
  FinishedEvent ev;
  ev.request = s.request;
  ev.slot = i;
  ev.reason = reason;
  ev.usage = {s.prompt_len, s.generated, s.cached_tokens};
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
  ev.usage = {s.prompt_len, s.generated, s.cached_tokens};
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

std::size_t BatchedDecodeState::next_waiting() const {
  if (queue_.size() == 1) return 0;
  std::unordered_map<uint64_t, int> running;  // owner -> requests in slots
  for (const BatchSlot& s : slots_)
    if (s.busy()) ++running[s.request.owner];
  std::size_t best = 0;
  int fewest = std::numeric_limits<int>::max();
  for (std::size_t i = 0; i < queue_.size(); ++i) {
    auto it = running.find(queue_[i].req.ref.owner);
    const int n = it == running.end() ? 0 : it->second;
    if (n < fewest) {  // strictly fewer: the first (oldest) of equals stays
      fewest = n;
      best = i;
      if (n == 0) break;
    }
  }
  return best;
}

BatchedDecodeState::Admission BatchedDecodeState::try_admission() const {
  Admission a;
  if (queue_.empty() || active_ >= cfg_.max_slots) return a;
  a.index = next_waiting();
  const BatchRequest& r = queue_[a.index].req;
  const auto n = static_cast<int64_t>(r.prompt.size());
  a.reserve_blocks = cfg_.kv_blocks_for(cfg_.kv_reserve_tokens(n, r.max_tokens));
  // At least the prompt's last token is computed: its logits give the first token.
  a.cached = kv_.match_prefix(r.prompt, (n - 1) / cfg_.kv_block_size);
  int64_t revived = 0;  // cached blocks nobody references: reusing them takes them off the free
  for (int32_t b : a.cached) revived += kv_.refs(b) == 0 ? 1 : 0;
  const int64_t need = a.reserve_blocks - static_cast<int64_t>(a.cached.size());
  a.fits = need <= kv_.free_blocks() - revived - promised_;
  return a;
}

void BatchedDecodeState::admit(const Admission& a, int slot) {
  Queued q = std::move(queue_[a.index]);
  queue_.erase(queue_.begin() + static_cast<std::ptrdiff_t>(a.index));
  BatchSlot& s = slots_[static_cast<size_t>(slot)];
  s.phase = BatchSlot::Phase::prefilling;
  s.request = q.req.ref;
  s.sampling = q.req.sampling;
  s.prompt_len = static_cast<int>(q.req.prompt.size());
  s.tokens = std::move(q.req.prompt);
  s.max_tokens = q.req.max_tokens;
  s.ignore_eos = q.req.ignore_eos;
  for (int32_t b : a.cached) kv_.acquire(b);
  s.blocks = a.cached;
  s.registered = a.cached.size();
  s.cached_tokens = static_cast<int>(a.cached.size()) * cfg_.kv_block_size;
  s.computed = s.cached_tokens;
  s.reserved_blocks = a.reserve_blocks;
  promised_ += a.reserve_blocks - static_cast<int64_t>(a.cached.size());
  s.admission = ++admissions_;
  s.timings.enqueued = q.enqueued;
  s.timings.admitted = now();
  live_[s.request.id] = slot;
  ++active_;
  ++counters_.admitted;
  counters_.prompt_tokens += static_cast<uint64_t>(s.prompt_len);
  if (kv_.prefix_cache()) {
    ++counters_.prefix_lookups;
    counters_.prefix_hit_tokens += static_cast<uint64_t>(s.cached_tokens);
  }
}

void BatchedDecodeState::grow_blocks(BatchSlot& s, int end) {
  while (static_cast<int64_t>(s.blocks.size()) < cfg_.kv_blocks_for(end)) {
    // The reservation guarantees a block (free_blocks >= promised_ at every boundary).
    if (static_cast<int64_t>(s.blocks.size()) >= s.reserved_blocks)
      throw std::logic_error("BatchedDecodeState: a request outgrew its KV reservation");
    const int32_t b = kv_.allocate();
    if (b < 0) throw std::logic_error("BatchedDecodeState: a reserved KV block was not free");
    s.blocks.push_back(b);
    --promised_;
  }
}

void BatchedDecodeState::add_entry(StepPlan& p, int slot, int start, int n_tokens) {
  BatchSlot& s = slots_[static_cast<size_t>(slot)];
  const int end = start + n_tokens;
  grow_blocks(s, end);
  StepSeq e;
  e.slot = slot;
  e.begin = !s.started;
  if (e.begin) {
    e.sampling = s.sampling;
    e.cached.assign(s.tokens.begin(), s.tokens.begin() + start);
  }
  e.start = start;
  const int have = static_cast<int>(s.tokens.size());
  e.tokens.assign(s.tokens.begin() + start, s.tokens.begin() + std::min(end, have));
  // Behind a step in flight: the token at position `have` is the one that step samples.
  if (end > have) e.tokens.push_back(kTokenOfLastStep);
  e.blocks = s.blocks;
  // A decode, or the chunk that ends the prompt: its last token's logits give the next token.
  e.sample = end >= have;
  s.started = true;
  s.planned_step = step_ + 1;  // the plan's number once it holds an entry
  s.planned_sample = e.sample;
  s.planned_end = end;
  p.seqs.push_back(std::move(e));
  p.requests.push_back(s.request);
}

void BatchedDecodeState::fill(StepPlan& p, uint64_t behind) {
  p.release = std::move(pending_release_);
  pending_release_.clear();
  // Where a slot's sequence stands for this plan: after its entry in the step in flight, if it
  // has one (`behind`; noted before add_entry marks the slots for this plan), else as computed.
  std::vector<char> after(slots_.size(), 0);
  for (size_t i = 0; i < slots_.size(); ++i)
    after[i] = behind != 0 && slots_[i].busy() && slots_[i].planned_step == behind;
  const auto next_pos = [&](int i) {
    const BatchSlot& s = slots_[static_cast<size_t>(i)];
    return after[static_cast<size_t>(i)] ? s.planned_end : s.computed;
  };
  int budget = cfg_.max_step_tokens;
  // 1. Decodes: every slot whose prompt is computed appends its last sampled token; behind a
  //    step in flight, every slot that step samples for, with that token (kTokenOfLastStep),
  //    unless that step ends its request by length whatever it samples.
  for (int i = 0; i < cfg_.max_slots; ++i) {
    const BatchSlot& s = slots_[static_cast<size_t>(i)];
    if (!s.busy()) continue;
    if (after[static_cast<size_t>(i)]) {
      if (!s.planned_sample) continue;
      if (stop_reason({false, s.generated + 1, s.max_tokens, s.prompt_len, cfg_.max_context}))
        continue;
    } else if (s.phase != BatchSlot::Phase::decoding) {
      continue;
    }
    add_entry(p, i, next_pos(i), 1);
    --budget;
  }
  // No decodes: no stream waits on this step for its next token, so prompts may take more.
  const bool decodes = budget < cfg_.max_step_tokens;
  if (!decodes) budget = std::max(budget, cfg_.idle_step_tokens);
  // 2. Prompts part-way through, oldest admission first.
  std::vector<int> partial;
  for (int i = 0; i < cfg_.max_slots; ++i) {
    const BatchSlot& s = slots_[static_cast<size_t>(i)];
    if (s.phase == BatchSlot::Phase::prefilling &&
        !(after[static_cast<size_t>(i)] && s.planned_sample))
      partial.push_back(i);
  }
  std::sort(partial.begin(), partial.end(), [this](int a, int b) {
    return slots_[static_cast<size_t>(a)].admission < slots_[static_cast<size_t>(b)].admission;
  });
  auto chunk = [&](int i) {
    const int start = next_pos(i);
    const int n = std::min(slots_[static_cast<size_t>(i)].prompt_len - start, budget);
    add_entry(p, i, start, n);
    budget -= n;
  };
  for (int i : partial) {
    if (budget <= 0) break;
    chunk(i);
  }
  // 3. New requests, fairly across owners (next_waiting), into the lowest free slots.
  int next_free = 0;
  while (budget > 0) {
    const Admission a = try_admission();
    if (!a.fits) break;
    while (slots_[static_cast<size_t>(next_free)].busy()) ++next_free;
    admit(a, next_free);
    chunk(next_free);
  }
}

StepPlan BatchedDecodeState::plan_ahead() {
  StepPlan p;
  if (flight_.size() != 1) return p;
  for (const BatchSlot& s : slots_)
    if (s.busy() && s.cancel_requested) return p;  // cancels take effect at an ordinary plan
  fill(p, flight_.back());
  if (p.idle()) {  // nothing to run: the releases wait for the next plan
    pending_release_.insert(pending_release_.end(), p.release.begin(), p.release.end());
    return StepPlan{};
  }
  p.step = ++step_;
  p.ahead = true;
  ++counters_.steps_ahead;
  flight_.push_back(p.step);
  return p;
}

StepPlan BatchedDecodeState::plan() {
  if (!flight_.empty()) throw std::logic_error("BatchedDecodeState::plan: a step is in flight");
  take_cancellations();
  StepPlan p;
  p.events = std::move(pending_events_);
  pending_events_.clear();
  fill(p, 0);
  if (!p.idle()) {
    p.step = ++step_;
    flight_.push_back(p.step);
  }
  return p;
}

bool BatchedDecodeState::holds(const StepPlan& p, size_t i) const {
  const BatchSlot& s = slots_[static_cast<size_t>(p.seqs[i].slot)];
  return s.busy() && s.request == p.requests[i];
}

void BatchedDecodeState::check_in_flight(const StepPlan& p, const char* what) const {
  const auto fail = [what](const char* cause) {
    throw std::logic_error(std::string("BatchedDecodeState::") + what + ": " + cause);
  };
  if (flight_.empty()) fail("no step is in flight");
  if (p.idle() || p.step != flight_.front()) fail("the plan is not the oldest step in flight");
  if (p.seqs.size() != p.requests.size()) fail("the plan's entries and requests differ in number");
  for (size_t i = 0; i < p.seqs.size(); ++i) {
    const int slot = p.seqs[i].slot;
    if (slot < 0 || slot >= cfg_.max_slots) fail("a slot of the plan is out of range");
    // Only a step planned ahead may outlive its entries' requests (ended by the step before).
    if (!holds(p, i) && p.ahead) continue;
    if (!holds(p, i) || slots_[static_cast<size_t>(slot)].computed != p.seqs[i].start)
      fail("a slot of the plan no longer holds its request");
  }
}

std::vector<SchedEvent> BatchedDecodeState::end_step() {
  if (!flight_.empty()) flight_.pop_front();
  std::vector<SchedEvent> out = std::move(pending_events_);
  pending_events_.clear();
  return out;
}

void BatchedDecodeState::register_full_blocks(BatchSlot& s) {
  const auto bs = static_cast<size_t>(cfg_.kv_block_size);
  while ((s.registered + 1) * bs <= static_cast<size_t>(s.computed)) {
    const size_t i = s.registered;
    s.blocks[i] = kv_.register_full(s.blocks[i], i > 0 ? s.blocks[i - 1] : -1,
                                    std::span<const int32_t>(s.tokens).subspan(i * bs, bs));
    ++s.registered;
  }
}

std::vector<SchedEvent> BatchedDecodeState::apply(const StepPlan& p,
                                                  std::span<const int32_t> tokens,
                                                  std::span<const TokenLogprobs> logprobs) {
  check_in_flight(p, "apply");
  if (tokens.size() != p.sampled())
    throw std::invalid_argument("BatchedDecodeState::apply: " + std::to_string(tokens.size()) +
                                " tokens for a step that samples " + std::to_string(p.sampled()));
  if (!logprobs.empty() && logprobs.size() != tokens.size())
    throw std::invalid_argument("BatchedDecodeState::apply: " + std::to_string(logprobs.size()) +
                                " log-probabilities for " + std::to_string(tokens.size()) +
                                " tokens");
  ++counters_.steps;
  std::vector<SchedEvent> out = end_step();
  const auto at = now();
  size_t k = 0;
  for (size_t i = 0; i < p.seqs.size(); ++i) {
    const StepSeq& e = p.seqs[i];
    if (!holds(p, i)) {  // planned ahead of its request's end: its token is dropped
      k += e.sample ? 1 : 0;
      continue;
    }
    BatchSlot& s = slots_[static_cast<size_t>(e.slot)];
    ++s.timings.steps;
    const bool decode = s.phase == BatchSlot::Phase::decoding;
    (decode ? counters_.decode_tokens : counters_.prefill_tokens) += e.tokens.size();
    s.computed = e.end();
    register_full_blocks(s);
    const size_t entry = k;
    const int32_t t = e.sample ? tokens[k++] : -1;
    if (s.cancel_requested) {  // the token, if any, is dropped: the client asked for no more
      out.push_back(finish_slot(e.slot, FinishReason::cancelled));
      continue;
    }
    if (!e.sample) continue;  // an earlier chunk of the prompt
    s.phase = BatchSlot::Phase::decoding;
    s.tokens.push_back(t);
    const int index = s.generated++;
    if (index == 0) s.timings.first_token = at;
    const bool eog = !s.ignore_eos && cfg_.is_eog && cfg_.is_eog(t);
    TokenEvent ev{s.request, e.slot, t, index, eog, s.cached_tokens, {}};
    if (!logprobs.empty()) ev.logprobs = logprobs[entry];
    out.push_back(std::move(ev));
    ++counters_.tokens_generated;
    const auto reason =
        stop_reason({eog, s.generated, s.max_tokens, s.prompt_len, cfg_.max_context});
    if (reason) out.push_back(finish_slot(e.slot, *reason));
  }
  return out;
}

std::vector<SchedEvent> BatchedDecodeState::fail_step(const StepPlan& p,
                                                      const std::string& message) {
  check_in_flight(p, "fail_step");
  ++counters_.steps;
  ++counters_.failed_steps;
  std::vector<SchedEvent> out = end_step();
  for (size_t i = 0; i < p.seqs.size(); ++i) {
    const StepSeq& e = p.seqs[i];
    if (!holds(p, i)) continue;  // planned ahead of its request's end
    BatchSlot& s = slots_[static_cast<size_t>(e.slot)];
    ++s.timings.steps;
    if (s.cancel_requested)
      out.push_back(finish_slot(e.slot, FinishReason::cancelled));
    else
      out.push_back(fail_slot(e.slot, message));
  }
  return out;
}

std::vector<SchedEvent> BatchedDecodeState::abort_all(const std::string& message) {
  flight_.clear();
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
