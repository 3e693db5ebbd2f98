// One line per executor step, for finding where inter-token latency goes (`rz serve
// --step-log FILE`): when the step started, how long the executor took, how long the round trip
// through the gpu actor took, the host time since the previous step ended, and the step's shape.
// CSV, one header line:
//
//   step,start_ms,exec_ms,round_ms,gap_ms,decodes,chunks,chunk_tokens,max_context,ahead
//
// start_ms counts from the log's opening (when the step was sent); gap_ms is the time between
// the previous step's result and this step's start (planning, routing, idling with no work; 0
// for a step sent while another one ran); decodes are one-token entries that continue their
// sequence, chunks every other entry (prompt chunks); max_context is the longest sequence after
// the step; ahead is 1 for a step planned ahead (BatchedDecodeState::plan_ahead), whose round
// trip includes the wait for the step before it.
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <fstream>
#include <string>

#include "sched/types.hpp"

namespace rz {

struct StepShape {
  int decodes = 0;
  int chunks = 0;
  int chunk_tokens = 0;
  int max_context = 0;
};

StepShape step_shape(const ExecutorStep& step);

class StepLog {
 public:
  using Clock = std::chrono::steady_clock;
  // Opens (truncates) path and writes the header; throws rz::Error when it cannot.
  explicit StepLog(const std::string& path);
  // A step was sent to the executor (a second one may follow while the first runs).
  void started(const ExecutorStep& step, Clock::time_point now = Clock::now());
  // The oldest started step's result came back after exec_seconds of executor time. No-op
  // without a started step.
  void finished(uint64_t step, double exec_seconds, Clock::time_point now = Clock::now());

 private:
  std::ofstream out_;
  Clock::time_point opened_;
  Clock::time_point last_end_;
  bool have_last_ = false;
  struct Pending {
    StepShape shape;
    Clock::time_point start;
    double gap_ms = 0.0;
    bool ahead = false;
  };
  std::deque<Pending> pending_;  // started, not finished: oldest first
};

}  // namespace rz
