// The engine's public face (actors/engine.hpp): starts the gpu and batcher actors, opens session
// actors, reads metrics and shuts everything down in order:
//
//   shutdown: stop admitting ─▶ wait for live requests (up to the drain time)
//             ─▶ batcher stop (cancel the rest, route the last events, release slots, stop gpu)
//             ─▶ wait for the gpu actor to go ─▶ estop every session ─▶ wait for them to go
#include "actors/engine.hpp"

#include <algorithm>
#include <mutex>
#include <utility>
#include <vector>

#include <caf/all.hpp>

#include "actors/batcher.hpp"
#include "actors/gpu_actor.hpp"
#include "actors/messages.hpp"
#include "actors/metrics.hpp"
#include "actors/session.hpp"
#include "actors/session_context.hpp"
#include "formats/common.hpp"
#include "sched/driver.hpp"
#include "sched/step_log.hpp"

namespace rz::engine {

// ---- Session handle -------------------------------------------------------------------------

struct Session::Impl {
  caf::actor actor;
  // The last handle is gone: the session finishes its live requests and then stops.
  ~Impl() { caf::anon_send(actor, orphan_atom::value); }
};

void Session::generate(proto::GenerateRequest req) const {
  if (impl_) caf::anon_send(impl_->actor, generate_atom::value, std::move(req));
}

void Session::cancel(std::string id) const {
  if (impl_) caf::anon_send(impl_->actor, cancel_atom::value, std::move(id));
}

void Session::ping() const {
  if (impl_) caf::anon_send(impl_->actor, ping_atom::value);
}

void Session::slow_consumer() const {
  if (impl_) caf::anon_send(impl_->actor, slow_atom::value);
}

void Session::close() const {
  if (impl_) caf::anon_send(impl_->actor, close_atom::value);
}

// ---- Engine ---------------------------------------------------------------------------------

struct Engine::Impl {
  explicit Impl(caf::actor_system& s) : sys(s) {}
  caf::actor_system& sys;
  std::shared_ptr<EngineContext> ctx;
  caf::actor gpu;
  std::mutex shutdown_mu;
  bool shut_down = false;
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() {
  if (impl_) shutdown(std::chrono::milliseconds(0));
}

std::shared_ptr<Engine> Engine::start(caf::actor_system& sys, std::unique_ptr<Executor> executor,
                                      const std::shared_ptr<const Tokenizer>& tokenizer,
                                      std::optional<ChatTemplate> chat, EngineConfig config) {
  if (!executor) throw Error("engine: no executor");
  if (!tokenizer) throw Error("engine: no tokenizer");
  if (config.max_slots < 0) throw Error("engine: max_slots must be 0 (all) or more");
  if (config.max_inflight_per_session < 1)
    throw Error("engine: max_inflight_per_session must be at least 1");
  if (config.max_slots == 0) config.max_slots = executor->max_slots();
  const int max_context = executor->max_context();
  if (max_context < 2) throw Error("engine: the executor's context is too small");
  config.limits.max_tokens = std::min(config.limits.max_tokens, max_context - 1);

  BatchConfig bc;
  bc.max_slots = config.max_slots;
  bc.max_context = max_context;
  bc.max_queue = config.max_queue;
  if (config.max_step_tokens == 0)
    config.max_step_tokens = default_max_step_tokens(config.max_slots);
  bc.max_step_tokens = config.max_step_tokens;
  if (config.idle_step_tokens == 0) config.idle_step_tokens = kDefaultIdleStepTokens;
  if (config.idle_step_tokens < -1)
    throw Error("engine: idle_step_tokens must be -1, 0 or positive");
  bc.idle_step_tokens = std::max(config.idle_step_tokens, 0);
  bc.prefix_cache = config.prefix_cache;
  bc.n_vocab = executor->config().n_vocab > 0 ? executor->config().n_vocab : tokenizer->n_vocab();
  bc.is_eog = [tokenizer](int32_t id) { return tokenizer->is_eog(id); };
  // The scheduler hands out the executor's KV blocks: admission waits for blocks as well as
  // slots, and the prefix cache keeps finished requests' blocks until they are needed.
  bc.kv_block_size = executor->kv_block_size();
  bc.kv_blocks = executor->kv_blocks();
  bc.validate();
  check_fits(bc, *executor);  // max_slots and the KV cache within the executor's

  auto ctx = std::make_shared<EngineContext>();
  ctx->tokenizer = tokenizer;
  ctx->chat = std::move(chat);
  ctx->config = config;
  ctx->max_context = max_context;
  ctx->metrics =
      std::make_shared<MetricsRegistry>(config.max_slots, bc.kv_block_count(), bc.kv_block_size);

  auto impl = std::make_unique<Impl>(sys);
  impl->gpu = spawn_gpu_actor(sys, std::move(executor), ctx->metrics);
  // Opened here, so that a path that cannot be written fails start, not the actor.
  auto step_log = config.step_log.empty() ? nullptr : std::make_shared<StepLog>(config.step_log);
  ctx->batcher = spawn_batcher(sys, std::move(bc), impl->gpu, ctx->metrics, std::move(step_log),
                               config.plan_ahead);
  impl->ctx = std::move(ctx);
  return std::shared_ptr<Engine>(new Engine(std::move(impl)));
}

Session Engine::open_session(std::weak_ptr<FrameSink> sink) {
  EngineContext& ctx = *impl_->ctx;
  const uint64_t owner = ctx.next_session_id.fetch_add(1);
  Session s;
  s.impl_ = std::make_shared<Session::Impl>();
  s.impl_->actor = spawn_session(impl_->sys, impl_->ctx, std::move(sink), owner);
  {
    std::lock_guard<std::mutex> lock(ctx.mu);
    ctx.sessions.emplace(owner, s.impl_->actor.address());
  }
  ctx.metrics->session_opened();
  return s;
}

EngineMetrics Engine::metrics() const { return impl_->ctx->metrics->snapshot(); }

const EngineConfig& Engine::config() const { return impl_->ctx->config; }

int Engine::max_context() const { return impl_->ctx->max_context; }

void Engine::shutdown(std::chrono::milliseconds drain) {
  // Held throughout: a second caller returns only once the first one's shutdown is complete.
  std::lock_guard<std::mutex> once(impl_->shutdown_mu);
  if (impl_->shut_down) return;
  impl_->shut_down = true;
  EngineContext& ctx = *impl_->ctx;
  ctx.accepting.store(false);
  {
    std::unique_lock<std::mutex> lock(ctx.mu);
    ctx.cv.wait_for(lock, drain, [&] { return ctx.live_requests <= 0; });
  }
  {
    caf::scoped_actor self{impl_->sys};
    self->monitor(impl_->gpu);
    self->request(ctx.batcher, caf::infinite, stop_atom::value)
        .receive([](const caf::unit_t&) {}, [](caf::error&) {});
    // The batcher told the gpu actor to stop (or it is gone already): wait for the executor.
    caf::anon_send(impl_->gpu, stop_atom::value);
    self->receive([](caf::down_msg&) {});
  }
  // Sessions opened from here on answer `overloaded` and are not waited for.
  std::vector<std::pair<uint64_t, caf::actor_addr>> sessions;
  {
    std::lock_guard<std::mutex> lock(ctx.mu);
    sessions.assign(ctx.sessions.begin(), ctx.sessions.end());
  }
  for (const auto& [owner, addr] : sessions)
    if (auto a = caf::actor_cast<caf::actor>(addr)) caf::anon_send(a, estop_atom::value);
  std::unique_lock<std::mutex> lock(ctx.mu);
  ctx.cv.wait(lock, [&] {
    return std::none_of(sessions.begin(), sessions.end(),
                        [&](const auto& s) { return ctx.sessions.count(s.first) > 0; });
  });
}

}  // namespace rz::engine
