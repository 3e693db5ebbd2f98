// One line per executor step, for finding where inter-token latency goes (`rz serve
// --step-log FILE`): when the step started, how long the executor took, how long the round trip
// through the gpu actor took, the host time since the previous step ended, and the step's shape.
// CSV, one header line:
//
//   step,start_ms,exec_ms,round_ms,gap_ms,decodes,chunks,chunk_tokens,max_context
//
// start_ms counts from the log's opening; gap_ms is the time between the previous step's result
// and this step's start (planning, routing, idling with no work); decodes are one-token entries
// that continue their sequence, chunks every other entry (prompt chunks); max_context is the
// longest sequence after the step.
#pragma once
#include <chrono>
#include <cstdint>
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
  // A step was sent to the executor.
  void started(const ExecutorStep& step, Clock::time_point now = Clock::now());
  // Its result came back after exec_seconds of executor time. No-op without a started step.
  void finished(uint64_t step, double exec_seconds, Clock::time_point now = Clock::now());

 private:
  std::ofstream out_;
  Clock::time_point opened_;
  Clock::time_point last_end_;
  bool have_last_ = false;
  bool in_flight_ = false;
  Clock::time_point start_;
  double gap_ms_ = 0.0;
  StepShape shape_;
};

}  // namespace rz
