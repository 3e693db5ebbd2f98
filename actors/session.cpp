// The session actor (actors/session.hpp).
//
// A request of this session is "live" from its accepted generate message until the session
// sends its done or error frame. A request with n > 1 choices is n engine requests, each live
// on its own (key: client id and choice), each ending with its own done or error frame. Requests
// that ended here first (a stop string matched, slow_consumer) while the batcher may still hold
// them become "zombies": cancelled at the batcher, their remaining events ignored until the
// batcher's final one.
#include "actors/session.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <map>

#include <caf/all.hpp>

#include "actors/messages.hpp"
#include "actors/session_stream.hpp"
#include "proto/sampling_params.hpp"

namespace rz::engine {

namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

struct LiveRequest {
  uint64_t gid = 0;
  std::string id;
  std::optional<int> choice;  // set when the request has n > 1 choices
  TokenStream stream;
  int prompt_tokens = 0;
  int cached_tokens = 0;  // from the scheduler's events
  Clock::time_point arrival;
  std::optional<Clock::time_point> first_token;
  bool accepted = false;  // the batcher took it
  bool cancel_sent = false;
};

struct SessionState {
  std::shared_ptr<EngineContext> ctx;
  std::weak_ptr<FrameSink> sink;
  uint64_t owner = 0;
  using Key = std::pair<std::string, int>;  // client id, choice
  std::map<Key, LiveRequest> live;
  std::unordered_map<uint64_t, Key> by_gid;  // RequestRef::id -> its key
  // Whether any choice of client id `id` is live.
  bool has_id(const std::string& id) const {
    auto it = live.lower_bound(Key{id, 0});
    return it != live.end() && it->first.first == id;
  }
  std::unordered_set<uint64_t> zombies;
  std::mt19937_64 seeds{std::random_device{}()};
  bool orphaned = false;
  bool stopped = false;
  static inline const char* name = "rz.session";
};

using Self = caf::stateful_actor<SessionState>;

void cancel_at_batcher(Self* self, uint64_t gid) {
  self->send(self->state.ctx->batcher, cancel_atom::value, gid);
}

// Ends the actor: every live request is cancelled at the batcher and counted as cancelled; no
// frame goes out any more.
void drop_all(Self* self) {
  auto& st = self->state;
  if (st.stopped) return;
  for (auto& [id, r] : st.live) {
    cancel_at_batcher(self, r.gid);
    st.ctx->metrics->request_done(proto::FinishReason::cancelled);
    st.ctx->request_ended();
  }
  st.live.clear();
  st.by_gid.clear();
  st.zombies.clear();
  st.stopped = true;
  self->quit();
}

// Hands a frame to the sink; when the sink is gone, drops everything and returns false.
bool deliver(Self* self, proto::ServerFrame frame) {
  auto& st = self->state;
  if (st.stopped) return false;
  std::shared_ptr<FrameSink> sink = st.sink.lock();
  if (sink) {
    try {
      sink->deliver(std::move(frame));
      return true;
    } catch (...) {
      // A sink that throws is treated as gone.
    }
  }
  drop_all(self);
  return false;
}

void maybe_quit_orphan(Self* self) {
  auto& st = self->state;
  if (st.orphaned && st.live.empty() && !st.stopped) {
    st.stopped = true;
    self->quit();
  }
}

using Key = SessionState::Key;

// Removes a live request (the caller has taken what it needs from it).
void erase_request(Self* self, const Key& key) {
  auto& st = self->state;
  auto it = st.live.find(key);
  if (it == st.live.end()) return;
  st.by_gid.erase(it->second.gid);
  st.live.erase(it);
  st.ctx->request_ended();
}

proto::DoneFrame done_frame(const LiveRequest& r, proto::FinishReason reason) {
  proto::DoneFrame d;
  d.id = r.id;
  d.choice = r.choice;
  d.finish_reason = reason;
  d.usage.prompt_tokens = static_cast<uint64_t>(r.prompt_tokens);
  d.usage.completion_tokens = r.stream.sent_tokens();
  d.usage.cached_tokens = static_cast<uint64_t>(r.cached_tokens);
  if (r.first_token) d.timings.ttft_ms = ms_between(r.arrival, *r.first_token);
  d.timings.total_ms = ms_between(r.arrival, Clock::now());
  return d;
}

// The request's end. `key` is taken by value: callers often pass the map entry being erased.
void finish_done(Self* self, Key key, proto::FinishReason reason) {
  auto& st = self->state;
  proto::DoneFrame d = done_frame(st.live.at(key), reason);
  erase_request(self, key);
  st.ctx->metrics->request_done(reason);
  if (deliver(self, std::move(d))) maybe_quit_orphan(self);
}

void finish_error(Self* self, Key key, proto::ErrorCode code, std::string message, bool accepted) {
  auto& st = self->state;
  const std::optional<int> choice = st.live.at(key).choice;
  erase_request(self, key);
  if (accepted)
    st.ctx->metrics->request_failed();
  else
    st.ctx->metrics->request_rejected();
  if (deliver(self, proto::ErrorFrame{code, std::move(message), key.first, choice}))
    maybe_quit_orphan(self);
}

void reject(Self* self, const std::string& id, proto::ErrorCode code, std::string message) {
  self->state.ctx->metrics->request_rejected();
  deliver(self, proto::ErrorFrame{code, std::move(message), id});
}

void on_generate(Self* self, proto::GenerateRequest& req) {
  auto& st = self->state;
  if (st.stopped) return;
  const Clock::time_point arrival = Clock::now();
  const EngineContext& ctx = *st.ctx;
  if (st.has_id(req.id)) {
    reject(self, req.id, proto::ErrorCode::duplicate_id,
           "id: a request with id \"" + req.id + "\" is still running on this connection");
    return;
  }
  if (req.n < 1 || req.n > proto::kMaxChoices) {
    reject(self, req.id, proto::ErrorCode::bad_value,
           "n: must be between 1 and " + std::to_string(proto::kMaxChoices));
    return;
  }
  if (req.logprobs > proto::kMaxTopLogprobs) {
    reject(self, req.id, proto::ErrorCode::bad_value,
           "logprobs: must be at most " + std::to_string(proto::kMaxTopLogprobs));
    return;
  }
  // Each choice is a request of the engine and counts against the connection's limit.
  if (static_cast<int>(st.live.size()) + req.n > ctx.config.max_inflight_per_session) {
    reject(self, req.id, proto::ErrorCode::overloaded,
           "this connection already runs " + std::to_string(st.live.size()) +
               " requests (choices count one each) of its limit of " +
               std::to_string(ctx.config.max_inflight_per_session) + "; retry when one has ended");
    return;
  }
  if (!ctx.accepting.load()) {
    reject(self, req.id, proto::ErrorCode::overloaded, "the server is shutting down");
    return;
  }
  // Counted as one live request until the choices are submitted (each counts then); before the
  // second look, so that shutdown's drain waits for it.
  st.ctx->request_began();
  auto refuse = [&](proto::ErrorCode code, std::string message) {
    st.ctx->request_ended();
    reject(self, req.id, code, std::move(message));
  };
  if (!ctx.accepting.load())
    return refuse(proto::ErrorCode::overloaded, "the server is shutting down");
  if (req.max_tokens < 1 || req.max_tokens > ctx.config.limits.max_tokens)
    return refuse(proto::ErrorCode::bad_value, "max_tokens: must be between 1 and " +
                                                   std::to_string(ctx.config.limits.max_tokens));
  // Token ids the request names itself (logit_bias, token prompts; the parser took them >= 0).
  const int32_t n_vocab = ctx.tokenizer->n_vocab();
  const auto refuse_id = [&](std::string_view field, int32_t id) {
    refuse(proto::ErrorCode::bad_value, std::string(field) + ": token id " + std::to_string(id) +
                                            " is not in the vocabulary (ids 0 to " +
                                            std::to_string(n_vocab - 1) + ")");
  };
  if (const auto& bias = req.sampling.logit_bias;  // sorted by id: the largest is last
      !bias.empty() && bias.back().first >= n_vocab)
    return refuse_id("logit_bias", bias.back().first);
  std::vector<int32_t> prompt;
  try {
    if (!req.prompt_tokens.empty()) {  // token ids as given (the HTTP API's token prompts)
      const auto bad = std::find_if(req.prompt_tokens.begin(), req.prompt_tokens.end(),
                                    [&](int32_t t) { return t < 0 || t >= n_vocab; });
      if (bad != req.prompt_tokens.end()) return refuse_id("prompt", *bad);
      prompt = std::move(req.prompt_tokens);
    } else if (!req.is_chat()) {
      // The model's special tokens written in the text become those tokens (a prompt rendered
      // with the chat template by the client reads as the chat request would), as Hugging Face
      // tokenizers, vLLM and llama.cpp's server read a prompt.
      prompt = ctx.tokenizer->encode(*req.prompt, true, true);
    } else {
      if (!ctx.chat)
        return refuse(proto::ErrorCode::bad_value,
                      "messages: the model has no chat template; send a prompt instead");
      prompt = ctx.tokenizer->encode(ctx.chat->apply(req.messages, true), false, true);
    }
  } catch (const std::exception& e) {
    return refuse(proto::ErrorCode::bad_value,
                  std::string(req.is_chat() ? "messages: " : "prompt: ") + e.what());
  }
  if (prompt.empty())
    return refuse(proto::ErrorCode::bad_value,
                  std::string(req.is_chat() ? "messages" : "prompt") + ": encodes to no tokens");
  if (req.fit_max_tokens) {  // an upper bound: what the context leaves after the prompt
    const int64_t room = int64_t(ctx.max_context) - int64_t(prompt.size());
    if (room < 1)
      return refuse(proto::ErrorCode::context_length_exceeded,
                    "the prompt has " + std::to_string(prompt.size()) +
                        " tokens, which leaves no room in the context of " +
                        std::to_string(ctx.max_context) + " tokens");
    req.max_tokens = int(std::min<int64_t>(req.max_tokens, room));
  }
  if (static_cast<int64_t>(prompt.size()) + req.max_tokens > ctx.max_context)
    return refuse(proto::ErrorCode::context_length_exceeded,
                  "the prompt has " + std::to_string(prompt.size()) + " tokens; with max_tokens " +
                      std::to_string(req.max_tokens) + " that exceeds the context of " +
                      std::to_string(ctx.max_context) + " tokens");

  const int prompt_tokens = static_cast<int>(prompt.size());
  uint32_t timeout_ms = ctx.config.request_timeout_ms;
  if (req.timeout_ms > 0 && (timeout_ms == 0 || req.timeout_ms < timeout_ms))
    timeout_ms = req.timeout_ms;
  for (int i = 0; i < req.n; ++i) {
    if (i > 0) st.ctx->request_began();
    BatchRequest b;
    b.ref = RequestRef{st.ctx->next_request_id.fetch_add(1), st.owner};
    proto::Sampling sampling = req.sampling;
    if (sampling.seed) sampling.seed = *sampling.seed + static_cast<uint64_t>(i);
    b.sampling = proto::to_sampling_params(sampling, st.seeds());
    b.sampling.logprobs = req.logprobs;
    b.max_tokens = req.max_tokens;
    b.ignore_eos = req.ignore_eos;
    b.prompt = i + 1 < req.n ? prompt : std::move(prompt);
    const uint64_t gid = b.ref.id;
    const std::optional<int> choice = req.n > 1 ? std::optional<int>(i) : std::nullopt;
    const Key key{req.id, i};
    st.live.emplace(
        key, LiveRequest{gid, req.id, choice, TokenStream(*ctx.tokenizer, req.id, req.stop, choice),
                         prompt_tokens, 0, arrival, std::nullopt, false, false});
    st.by_gid.emplace(gid, key);
    self->send(ctx.batcher, submit_atom::value, SubmitMsg{std::move(b)},
               caf::actor_cast<caf::actor>(self));
    if (timeout_ms > 0) {
      const auto left =
          std::chrono::milliseconds(timeout_ms) -
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - arrival);
      self->delayed_send(self, std::max(left, std::chrono::milliseconds(0)), rtimeout_atom::value,
                         gid, timeout_ms);
    }
  }
}

// A request's time bound ran out. With a token already out it ends now with what it has,
// finish_reason timeout (the text held back flushed first); with none yet (queued, or its prompt
// still running) it ends with an error of code timeout. Either way it is cancelled at the batcher
// (a zombie until the batcher's final event) and counted as timed out.
void on_timeout(Self* self, uint64_t gid, uint32_t timeout_ms) {
  auto& st = self->state;
  if (st.stopped || st.zombies.count(gid)) return;
  auto g = st.by_gid.find(gid);
  if (g == st.by_gid.end()) return;  // it ended in time
  const Key key = g->second;
  LiveRequest& r = st.live.at(key);
  st.zombies.insert(gid);
  cancel_at_batcher(self, gid);
  if (!r.first_token) {
    const std::optional<int> choice = r.choice;
    erase_request(self, key);
    st.ctx->metrics->request_done(proto::FinishReason::timeout);
    std::string why = "the request's time bound of " + std::to_string(timeout_ms) +
                      " ms ran out before its first token (timeout_ms, --request-timeout)";
    if (deliver(self,
                proto::ErrorFrame{proto::ErrorCode::timeout, std::move(why), key.first, choice}))
      maybe_quit_orphan(self);
    return;
  }
  std::optional<proto::TokenFrame> f = r.stream.finish();
  if (f && !deliver(self, std::move(*f))) return;
  finish_done(self, key, proto::FinishReason::timeout);
}

void on_submit_reply(Self* self, const SubmitReply& rep) {
  auto& st = self->state;
  const bool ok = rep.status == SubmitStatus::accepted;
  if (st.zombies.count(rep.id)) {
    if (!ok) st.zombies.erase(rep.id);  // no event will come for it
    return;
  }
  auto g = st.by_gid.find(rep.id);
  if (g == st.by_gid.end()) return;
  LiveRequest& r = st.live.at(g->second);
  if (ok) {
    r.accepted = true;
    st.ctx->metrics->request_started(r.prompt_tokens);
    return;
  }
  proto::ErrorCode code = proto::ErrorCode::bad_value;
  if (rep.status == SubmitStatus::overloaded)
    code = proto::ErrorCode::overloaded;
  else if (rep.status == SubmitStatus::context_length_exceeded)
    code = proto::ErrorCode::context_length_exceeded;
  finish_error(self, g->second, code, rep.message, false);
}

proto::FinishReason to_proto(FinishReason r) {
  switch (r) {
    case FinishReason::stop: return proto::FinishReason::stop;
    case FinishReason::length: return proto::FinishReason::length;
    case FinishReason::cancelled: return proto::FinishReason::cancelled;
  }
  return proto::FinishReason::stop;
}

// One scheduler event; returns false once the actor stopped (sink gone).
bool on_event(Self* self, const SchedEvent& e) {
  auto& st = self->state;
  const uint64_t gid = event_request(e).id;
  if (st.zombies.count(gid)) {
    if (is_final(e)) st.zombies.erase(gid);
    return true;
  }
  auto g = st.by_gid.find(gid);
  if (g == st.by_gid.end()) return true;
  const Key id = g->second;
  LiveRequest& r = st.live.at(id);
  if (const auto* t = std::get_if<TokenEvent>(&e)) {
    r.cached_tokens = t->cached_tokens;
    if (t->eog) return true;  // ends the request; neither sent nor counted
    if (!r.first_token) {
      r.first_token = Clock::now();
      st.ctx->metrics->first_token(ms_between(r.arrival, *r.first_token) / 1e3);
    }
    st.ctx->metrics->tokens_generated(1);
    std::optional<proto::TokenFrame> f = r.stream.push(t->token, t->logprobs);
    if (r.stream.stopped()) {
      // The stop string ends it here; the batcher still holds it until the next boundary.
      st.zombies.insert(gid);
      cancel_at_batcher(self, gid);
      if (f && !deliver(self, std::move(*f))) return false;
      finish_done(self, id, proto::FinishReason::stop);
      return !st.stopped;
    }
    return !f || deliver(self, std::move(*f));
  }
  if (const auto* fin = std::get_if<FinishedEvent>(&e)) {
    r.cached_tokens = fin->usage.cached_tokens;
    std::optional<proto::TokenFrame> f = r.stream.finish();
    const proto::FinishReason reason =
        r.stream.stopped() ? proto::FinishReason::stop : to_proto(fin->reason);
    if (f && !deliver(self, std::move(*f))) return false;
    finish_done(self, id, reason);
    return !st.stopped;
  }
  const auto& fail = std::get<FailedEvent>(e);
  finish_error(self, id, proto::ErrorCode::internal, "the request failed: " + fail.message,
               r.accepted);
  return !st.stopped;
}

// Handling one of a request's events threw (a token the tokenizer has no text for, say: an
// executor whose output has more rows than the vocabulary): that request ends with an internal
// error, cancelled at the batcher unless the event was its last; the session and its other
// requests go on.
void fail_request(Self* self, const SchedEvent& e, const char* what) {
  auto& st = self->state;
  const uint64_t gid = event_request(e).id;
  auto g = st.by_gid.find(gid);
  if (st.stopped || st.zombies.count(gid) || g == st.by_gid.end()) return;
  const Key key = g->second;
  const bool accepted = st.live.at(key).accepted;
  if (!is_final(e)) {
    st.zombies.insert(gid);
    cancel_at_batcher(self, gid);
  }
  finish_error(self, key, proto::ErrorCode::internal, std::string("the request failed: ") + what,
               accepted);
}

void on_cancel(Self* self, const std::string& id) {
  auto& st = self->state;
  if (st.stopped) return;
  if (!st.has_id(id)) {
    deliver(self, proto::ErrorFrame{
                      proto::ErrorCode::unknown_id,
                      "cancel: no request with id \"" + id + "\" is running on this connection", id,
                      std::nullopt});
    return;
  }
  for (auto it = st.live.lower_bound(Key{id, 0}); it != st.live.end() && it->first.first == id;
       ++it) {
    if (!it->second.cancel_sent) {
      it->second.cancel_sent = true;
      cancel_at_batcher(self, it->second.gid);
    }
  }
}

void on_slow_consumer(Self* self) {
  auto& st = self->state;
  if (st.stopped) return;
  std::vector<proto::ErrorFrame> frames;
  for (auto& [key, r] : st.live) {
    cancel_at_batcher(self, r.gid);
    st.zombies.insert(r.gid);
    frames.push_back({proto::ErrorCode::slow_consumer,
                      "the client did not read its frames fast enough; the request was ended",
                      key.first, r.choice});
    st.ctx->metrics->request_failed();
    st.ctx->request_ended();
  }
  st.live.clear();
  st.by_gid.clear();
  for (auto& f : frames)
    if (!deliver(self, std::move(f))) return;
  maybe_quit_orphan(self);
}

// Engine shutdown: the batcher has stopped; whatever is still live here ends as cancelled.
void on_engine_stop(Self* self) {
  auto& st = self->state;
  if (st.stopped) return;
  std::vector<proto::DoneFrame> frames;
  for (auto& [key, r] : st.live) {
    frames.push_back(done_frame(r, proto::FinishReason::cancelled));
    st.ctx->metrics->request_done(proto::FinishReason::cancelled);
    st.ctx->request_ended();
  }
  st.live.clear();
  st.by_gid.clear();
  for (auto& f : frames)
    if (!deliver(self, std::move(f))) return;
  st.stopped = true;
  self->quit();
}

caf::behavior session_actor(Self* self, const std::shared_ptr<EngineContext>& ctx,
                            std::weak_ptr<FrameSink> sink, uint64_t owner) {
  self->state.ctx = ctx;
  self->state.sink = std::move(sink);
  self->state.owner = owner;
  self->attach_functor([ctx, owner](const caf::error&) {
    ctx->metrics->session_closed();
    ctx->session_ended(owner);
  });
  return {
      [self](generate_atom, proto::GenerateRequest& req) { on_generate(self, req); },
      [self](cancel_atom, const std::string& id) { on_cancel(self, id); },
      [self](ping_atom) { deliver(self, proto::PongFrame{}); },
      [self](slow_atom) { on_slow_consumer(self); },
      [self](close_atom) { drop_all(self); },
      [self](orphan_atom) {
        self->state.orphaned = true;
        maybe_quit_orphan(self);
      },
      [self](estop_atom) { on_engine_stop(self); },
      [self](rtimeout_atom, uint64_t gid, uint32_t ms) { on_timeout(self, gid, ms); },
      [self](subres_atom, const SubmitReply& rep) { on_submit_reply(self, rep); },
      [self](events_atom, const EventBatch& batch) {
        // A step boundary: a sink that is gone ends everything now, frames or not.
        if (self->state.sink.expired()) return drop_all(self);
        for (const SchedEvent& e : batch.events) {
          try {
            if (!on_event(self, e)) return;
          } catch (const std::exception& ex) {
            fail_request(self, e, ex.what());
            if (self->state.stopped) return;
          }
        }
      },
  };
}

}  // namespace

caf::actor spawn_session(caf::actor_system& sys, std::shared_ptr<EngineContext> ctx,
                         std::weak_ptr<FrameSink> sink, uint64_t owner) {
  return sys.spawn(session_actor, std::move(ctx), std::move(sink), owner);
}

}  // namespace rz::engine
