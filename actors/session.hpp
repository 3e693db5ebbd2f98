// The session actor, one per session (per connection): takes its handle's generate / cancel /
// ping / slow_consumer / close messages, tokenizes and validates requests, submits them to the
// batcher, turns the batcher's events for its requests into protocol frames (detokenized, stop
// strings applied; actors/session_stream.hpp) and hands them to its FrameSink, which it holds
// only weakly (sink gone: cancel everything and stop).
//
//   Session handle ──▶ session actor ──(submit/cancel)──▶ batcher
//                           ▲  │                              │
//                           │  └── FrameSink::deliver        │
//                           └──────(subres, events)───────────┘
#pragma once
#include <cstdint>
#include <memory>

#include <caf/fwd.hpp>

#include "actors/engine.hpp"
#include "actors/session_context.hpp"

namespace rz::engine {

// Spawns a session actor with RequestRef::owner `owner`. It quits on close_atom, on estop_atom
// (engine shutdown: every live request ends with done/cancelled first), when its sink is found
// gone, or once orphaned (orphan_atom: no handle left) with no live request.
caf::actor spawn_session(caf::actor_system& sys, std::shared_ptr<EngineContext> ctx,
                         std::weak_ptr<FrameSink> sink, uint64_t owner);

}  // namespace rz::engine
