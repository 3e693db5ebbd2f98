// The step log (sched/step_log.hpp).
#include "sched/step_log.hpp"

#include <algorithm>
#include <cstdio>

#include "formats/common.hpp"

namespace rz {

StepShape step_shape(const ExecutorStep& step) {
  StepShape s;
  for (const StepSeq& q : step.seqs) {
    if (!q.begin && q.tokens.size() == 1) {
      ++s.decodes;
    } else {
      ++s.chunks;
      s.chunk_tokens += static_cast<int>(q.tokens.size());
    }
    s.max_context = std::max(s.max_context, q.end());
  }
  return s;
}

StepLog::StepLog(const std::string& path) : out_(path, std::ios::trunc), opened_(Clock::now()) {
  if (!out_) throw Error("cannot open the step log " + path);
  out_ << "step,start_ms,exec_ms,round_ms,gap_ms,decodes,chunks,chunk_tokens,max_context\n";
}

namespace {
double ms(StepLog::Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}
}  // namespace

void StepLog::started(const ExecutorStep& step, Clock::time_point now) {
  shape_ = step_shape(step);
  start_ = now;
  gap_ms_ = have_last_ ? ms(now - last_end_) : 0.0;
  in_flight_ = true;
}

void StepLog::finished(uint64_t step, double exec_seconds, Clock::time_point now) {
  if (!in_flight_) return;
  in_flight_ = false;
  char line[256];
  std::snprintf(line, sizeof line, "%llu,%.3f,%.3f,%.3f,%.3f,%d,%d,%d,%d\n",
                static_cast<unsigned long long>(step), ms(start_ - opened_), exec_seconds * 1e3,
                ms(now - start_), gap_ms_, shape_.decodes, shape_.chunks, shape_.chunk_tokens,
                shape_.max_context);
  out_ << line;
  out_.flush();
  last_end_ = now;
  have_last_ = true;
}

}  // namespace rz
