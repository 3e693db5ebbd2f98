// The step log (sched/step_log.hpp): shape counting and the CSV lines.
#include "sched/step_log.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "formats/common.hpp"

namespace rz {
namespace {

StepSeq seq(bool begin, int start, int n) {
  StepSeq s;
  s.begin = begin;
  s.start = start;
  s.tokens.assign(static_cast<size_t>(n), 7);
  s.sample = true;
  return s;
}

TEST(StepLog, ShapeCountsDecodesAndChunks) {
  ExecutorStep step;
  step.seqs = {seq(false, 40, 1), seq(false, 90, 1), seq(true, 0, 1), seq(false, 64, 100)};
  const StepShape s = step_shape(step);
  EXPECT_EQ(s.decodes, 2);
  EXPECT_EQ(s.chunks, 2);  // a one-token prompt that begins is a chunk, not a decode
  EXPECT_EQ(s.chunk_tokens, 101);
  EXPECT_EQ(s.max_context, 164);
}

std::vector<std::string> lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST(StepLog, WritesOneLinePerFinishedStep) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "rz_step_log_test.csv").string();
  using C = StepLog::Clock;
  {
    StepLog log(path);
    const C::time_point t = C::now();
    ExecutorStep a;
    a.step = 1;
    a.seqs = {seq(true, 0, 30)};
    log.started(a, t + std::chrono::milliseconds(10));
    log.finished(1, 0.004, t + std::chrono::milliseconds(15));
    log.finished(1, 0.004, t + std::chrono::milliseconds(16));  // nothing in flight: no line
    ExecutorStep b;
    b.step = 2;
    b.seqs = {seq(false, 30, 1)};
    log.started(b, t + std::chrono::milliseconds(17));
    log.finished(2, 0.001, t + std::chrono::milliseconds(19));
  }
  const std::vector<std::string> l = lines(path);
  ASSERT_EQ(l.size(), 3u);
  EXPECT_EQ(l[0], "step,start_ms,exec_ms,round_ms,gap_ms,decodes,chunks,chunk_tokens,max_context");
  // step 1: round 5 ms, no previous step (gap 0), one 30-token chunk
  std::istringstream r1(l[1]);
  std::vector<std::string> f;
  for (std::string x; std::getline(r1, x, ',');) f.push_back(x);
  ASSERT_EQ(f.size(), 9u);
  EXPECT_EQ(f[0], "1");
  EXPECT_EQ(f[2], "4.000");
  EXPECT_EQ(f[3], "5.000");
  EXPECT_EQ(f[4], "0.000");
  EXPECT_EQ(f[5] + f[6] + f[7] + f[8], "013030");
  // step 2: starts 2 ms after step 1's result
  EXPECT_NE(l[2].find("2,"), std::string::npos);
  EXPECT_NE(l[2].find(",1.000,2.000,2.000,1,0,0,31"), std::string::npos) << l[2];
  std::filesystem::remove(path);
}

TEST(StepLog, UnwritablePathIsAnError) {
  EXPECT_THROW(StepLog("/nonexistent-dir/rz/step.csv"), Error);
}

}  // namespace
}  // namespace rz
