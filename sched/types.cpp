// Names and small helpers of the scheduler's vocabulary (sched/types.hpp).
#include "sched/types.hpp"

namespace rz {

const char* submit_status_name(SubmitStatus s) {
  switch (s) {
    case SubmitStatus::accepted: return "accepted";
    case SubmitStatus::overloaded: return "overloaded";
    case SubmitStatus::context_length_exceeded: return "context_length_exceeded";
    case SubmitStatus::invalid_request: return "invalid_request";
  }
  return "unknown";
}

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::cancelled: return "cancelled";
  }
  return "unknown";
}

const char* error_code_name(ErrorCode c) {
  switch (c) {
    case ErrorCode::internal: return "internal";
  }
  return "unknown";
}

namespace {
double ms_between(SchedClock::time_point a, SchedClock::time_point b) {
  if (a.time_since_epoch().count() == 0 || b.time_since_epoch().count() == 0) return 0.0;
  return std::chrono::duration<double, std::milli>(b - a).count();
}
}  // namespace

double RequestTimings::queue_ms() const { return ms_between(enqueued, admitted); }
double RequestTimings::ttft_ms() const { return ms_between(enqueued, first_token); }
double RequestTimings::total_ms() const { return ms_between(enqueued, finished); }

const RequestRef& event_request(const SchedEvent& e) {
  return std::visit([](const auto& v) -> const RequestRef& { return v.request; }, e);
}

int event_slot(const SchedEvent& e) {
  return std::visit([](const auto& v) { return v.slot; }, e);
}

bool is_final(const SchedEvent& e) { return !std::holds_alternative<TokenEvent>(e); }

}  // namespace rz
