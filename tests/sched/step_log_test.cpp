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
  EXPECT_EQ(l[0],
            "step,start_ms,exec_ms,round_ms,gap_ms,decodes,chunks,chunk_tokens,max_context,ahead");
  // step 1: round 5 ms, no previous step (gap 0), one 30-token chunk
  std::istringstream r1(l[1]);
  std::vector<std::string> f;
  for (std::string x; std::getline(r1, x, ',');) f.push_back(x);
  ASSERT_EQ(f.size(), 10u);
  EXPECT_EQ(f[0], "1");
  EXPECT_EQ(f[2], "4.000");
  EXPECT_EQ(f[3], "5.000");
  EXPECT_EQ(f[4], "0.000");
  EXPECT_EQ(f[5] + f[6] + f[7] + f[8] + f[9], "0130300");
  // step 2: starts 2 ms after step 1's result
  EXPECT_NE(l[2].find("2,"), std::string::npos);
  EXPECT_NE(l[2].find(",1.000,2.000,2.000,1,0,0,31,0"), std::string::npos) << l[2];
  std::filesystem::remove(path);
}

// A step planned ahead is sent while the one before runs: no gap of its own, its round trip
// from its sending, lines in the order the results come back.
TEST(StepLog, StepsPlannedAheadOverlap) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "rz_step_log_ahead_test.csv").string();
  using C = StepLog::Clock;
  {
    StepLog log(path);
    const C::time_point t = C::now();
    ExecutorStep a, b, c;
    a.step = 1;
    a.seqs = {seq(false, 40, 1)};
    b.step = 2;
    b.ahead = true;
    b.seqs = {seq(false, 41, 1)};
    c.step = 3;
    c.ahead = true;
    c.seqs = {seq(false, 42, 1)};
    log.started(a, t);
    log.started(b, t + std::chrono::milliseconds(1));
    log.finished(1, 0.003, t + std::chrono::milliseconds(3));
    log.started(c, t + std::chrono::milliseconds(4));
    log.finished(2, 0.003, t + std::chrono::milliseconds(6));
    log.finished(3, 0.003, t + std::chrono::milliseconds(9));
  }
  const std::vector<std::string> l = lines(path);
  ASSERT_EQ(l.size(), 4u);
  // Each line without its start_ms (counted from the log's opening, a moment before t), and the
  // starts relative to the first one.
  std::vector<std::vector<std::string>> f(l.size());
  for (size_t i = 1; i < l.size(); ++i) {
    std::istringstream in(l[i]);
    for (std::string x; std::getline(in, x, ',');) f[i].push_back(x);
    ASSERT_EQ(f[i].size(), 10u) << l[i];
  }
  const auto rest = [&](size_t i) {
    std::string r = f[i][0];
    for (size_t k = 2; k < f[i].size(); ++k) r += "," + f[i][k];
    return r;
  };
  EXPECT_EQ(rest(1), "1,3.000,3.000,0.000,1,0,0,41,0");
  EXPECT_EQ(rest(2), "2,3.000,5.000,0.000,1,0,0,42,1") << "round trip from its sending";
  EXPECT_EQ(rest(3), "3,3.000,5.000,0.000,1,0,0,43,1");
  EXPECT_NEAR(std::stod(f[2][1]) - std::stod(f[1][1]), 1.0, 2e-3);  // printed to 1 us
  EXPECT_NEAR(std::stod(f[3][1]) - std::stod(f[1][1]), 4.0, 2e-3);
  std::filesystem::remove(path);
}

TEST(StepLog, UnwritablePathIsAnError) {
  EXPECT_THROW(StepLog("/nonexistent-dir/rz/step.csv"), Error);
}

}  // namespace
}  // namespace rz
