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
  out_ << "step,start_ms,exec_ms,round_ms,gap_ms,decodes,chunks,chunk_tokens,max_context,ahead\n";
}

namespace {
double ms(StepLog::Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}
}  // namespace

void StepLog::started(const ExecutorStep& step, Clock::time_point now) {
  Pending p;
  p.shape = step_shape(step);
  p.start = now;
  p.ahead = step.ahead;
  // Sent while another step runs: no host time between the two.
  p.gap_ms = pending_.empty() && have_last_ ? ms(now - last_end_) : 0.0;
  pending_.push_back(p);
}

void StepLog::finished(uint64_t step, double exec_seconds, Clock::time_point now) {
  if (pending_.empty()) return;
  const Pending p = pending_.front();
  pending_.pop_front();
  char line[256];
  std::snprintf(line, sizeof line, "%llu,%.3f,%.3f,%.3f,%.3f,%d,%d,%d,%d,%d\n",
                static_cast<unsigned long long>(step), ms(p.start - opened_), exec_seconds * 1e3,
                ms(now - p.start), p.gap_ms, p.shape.decodes, p.shape.chunks, p.shape.chunk_tokens,
                p.shape.max_context, p.ahead ? 1 : 0);
  out_ << line;
  out_.flush();
  last_end_ = now;
  have_last_ = true;
}

}  // namespace rz
