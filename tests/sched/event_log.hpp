// Test helpers for the scheduler: an event sink that records each request's events and notes
// every breach of the event contract (a token index out of order, anything after a final event,
// usage that disagrees with the delivered tokens, cached prompt tokens that leave none to
// compute), the reference token sequence of a request under the fake executor, and the check
// that a run left both clean.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "sched/driver.hpp"
#include "tests/sched/fake_executor.hpp"

namespace rz_test {

struct RequestLog {
  rz::RequestRef ref;
  std::vector<int32_t> tokens;
  int finals = 0;
  bool finished = false;  // a FinishedEvent came
  bool failed = false;    // a FailedEvent came
  rz::FinishReason reason = rz::FinishReason::stop;
  rz::FinishedEvent finished_event;
  rz::FailedEvent failed_event;
  bool last_eog = false;  // the last TokenEvent had eog set
};

class EventLog {
 public:
  std::map<uint64_t, RequestLog> req;
  std::vector<rz::SchedEvent> all;
  std::vector<std::string> violations;

  void operator()(const rz::SchedEvent& e) {
    all.push_back(e);
    const rz::RequestRef& r = rz::event_request(e);
    RequestLog& l = req[r.id];
    const std::string who = "request " + std::to_string(r.id) + ": ";
    if (l.finals > 0) violations.push_back(who + "an event after its final event");
    if (l.ref.id == r.id && !(l.ref == r)) violations.push_back(who + "owner changed");
    l.ref = r;
    if (const auto* t = std::get_if<rz::TokenEvent>(&e)) {
      if (t->index != static_cast<int>(l.tokens.size()))
        violations.push_back(who + "token index " + std::to_string(t->index) + ", expected " +
                             std::to_string(l.tokens.size()));
      l.tokens.push_back(t->token);
      l.last_eog = t->eog;
      return;
    }
    ++l.finals;
    const rz::Usage& u = std::visit(
        [](const auto& v) -> const rz::Usage& {
          if constexpr (std::is_same_v<std::decay_t<decltype(v)>, rz::TokenEvent>) {
            static const rz::Usage none;
            return none;
          } else {
            return v.usage;
          }
        },
        e);
    if (u.cached_tokens < 0 || (u.cached_tokens > 0 && u.cached_tokens >= u.prompt_tokens))
      violations.push_back(who + "usage.cached_tokens " + std::to_string(u.cached_tokens) + " of " +
                           std::to_string(u.prompt_tokens) + " prompt tokens");
    if (const auto* f = std::get_if<rz::FinishedEvent>(&e)) {
      l.finished = true;
      l.reason = f->reason;
      l.finished_event = *f;
      if (f->usage.completion_tokens != static_cast<int>(l.tokens.size()))
        violations.push_back(who + "usage.completion_tokens disagrees with its tokens");
      if ((f->reason == rz::FinishReason::stop) != l.last_eog)
        violations.push_back(who + "stop must follow exactly an eog token");
    } else {
      const auto& fe = std::get<rz::FailedEvent>(e);
      l.failed = true;
      l.failed_event = fe;
      if (fe.usage.completion_tokens != static_cast<int>(l.tokens.size()))
        violations.push_back(who + "usage.completion_tokens disagrees with its tokens");
    }
  }

  rz::SchedEventSink sink() {
    return [this](const rz::SchedEvent& e) { (*this)(e); };
  }
  bool done(uint64_t id) const {
    auto it = req.find(id);
    return it != req.end() && it->second.finals > 0;
  }
  const RequestLog& at(uint64_t id) const { return req.at(id); }
};

// The first n tokens a request generates under FakeExecutor, computed on its own.
inline std::vector<int32_t> reference_tokens(const std::vector<int32_t>& prompt, uint64_t seed,
                                             int n, int n_vocab) {
  std::vector<int32_t> seq = prompt, out;
  for (int i = 0; i < n; ++i) {
    const int32_t t = FakeExecutor::next_token(seed, seq, n_vocab);
    out.push_back(t);
    seq.push_back(t);
  }
  return out;
}

// No contract breach in the log and no feed, KV or shared-write error in the executor.
inline void expect_clean(const EventLog& log, const FakeExecutor& ex) {
  EXPECT_TRUE(log.violations.empty()) << log.violations.front();
  EXPECT_EQ(ex.feed_mismatches, 0);
  EXPECT_EQ(ex.kv_mismatches, 0) << ex.kv_report();
  EXPECT_EQ(ex.shared_writes, 0) << ex.kv_report();
}

}  // namespace rz_test
