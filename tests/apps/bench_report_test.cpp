// rz bench's markdown tables (apps/bench/bench_report.hpp): the heading and the table headers that
// scripts/gpu_bench.sh and scripts/gpu_side_by_side.sh look for, the rows they read by position,
// FAILED cells, and the number formatting.
#include "apps/bench/bench_report.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "tests/apps/bench_test_run.hpp"

namespace rz::bench {
namespace {

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// The line after the header line `head` and its separator (the first row of that table).
std::string row_after(const std::vector<std::string>& ls, const std::string& head) {
  for (size_t i = 0; i + 2 < ls.size(); ++i)
    if (ls[i].rfind(head, 0) == 0) return ls[i + 2];
  return "(no table '" + head + "')";
}

TEST(BenchReport, Grouped) {
  EXPECT_EQ(grouped(25325.4), "25,325");
  EXPECT_EQ(grouped(1234567), "1,234,567");
  EXPECT_EQ(grouped(999.6), "1,000");
  EXPECT_EQ(grouped(100), "100");
  EXPECT_EQ(grouped(99.94), "99.9");
  EXPECT_EQ(grouped(0), "0.0");
  EXPECT_EQ(grouped(-1), "n/a");
  EXPECT_EQ(grouped(NAN), "n/a");
}

TEST(BenchReport, TablesInTheScriptsLayout) {
  const std::string md = markdown_report(test::sample_run());
  const auto ls = lines(md);
  EXPECT_NE(md.find("\n## rz CUDA executor: qwen2.5-1.5b-q4_k_m on NVIDIA H200\n"),
            std::string::npos)
      << md;
  // gpu_side_by_side.sh: cells 1 and 2 of the single-stream row, the B= header's cells.
  EXPECT_EQ(row_after(ls, "| shape, format | pp512 tok/s | tg128 tok/s |"),
            "| qwen2.5-1.5b-q4_k_m | 51,200 | 200 |");
  EXPECT_EQ(row_after(ls, "| shape, format | B=1 | B=4 |"),
            "| qwen2.5-1.5b-q4_k_m | 200 | FAILED |");
  // gpu_bench.sh: the limit table. 1 GB at 4 TB/s: 0.25 ms, 4,000 tokens/s; 200 of it is 5 %;
  // MBU 4 GB / 5 ms / 4 TB/s = 20 %.
  EXPECT_EQ(row_after(ls, "| shape, format | weight bytes |"),
            "| qwen2.5-1.5b-q4_k_m | 1.00 GB | 0.250 ms | ~4,000 | 5% | 20% |");
  EXPECT_EQ(row_after(ls, "| shape, format | tokens | GFLOP |"),
            "| qwen2.5-1.5b-q4_k_m | 512 | 5000.0 | 10.00 | 500.00 | 1000 | 50% |");
  EXPECT_EQ(row_after(ls, "| B | prefill tok/s |"),
            "| 1 | 12,800 | 5.000 | 200 | 2.0 MB | 4.000 GB | 20% | 1,000 | 3.00 GiB |");
  EXPECT_NE(md.find("| 4 | FAILED: no free KV block |"), std::string::npos) << md;
  EXPECT_NE(md.find("B=4 FAILED: no free KV block"), std::string::npos) << md;
  EXPECT_NE(md.find("largest 5.00 GiB"), std::string::npos) << md;
  EXPECT_NE(md.find("bandwidth 4.00 TB/s (test table)"), std::string::npos) << md;
  EXPECT_NE(md.find("commit 0123456789ab"), std::string::npos) << md;
}

TEST(BenchReport, CpuRunWithoutLimitsSaysNa) {
  BenchRun r = test::sample_run();
  r.device = "cpu";
  r.device_name = "AMD EPYC";
  r.limits = Limits{};
  r.workloads.erase(r.workloads.begin());  // no pp
  const std::string md = markdown_report(r);
  const auto ls = lines(md);
  EXPECT_NE(md.find("## rz CPU executor: qwen2.5-1.5b-q4_k_m on AMD EPYC"), std::string::npos);
  EXPECT_EQ(md.find("CUDA graphs"), std::string::npos) << md;
  EXPECT_EQ(row_after(ls, "| shape, format | weight bytes |"),
            "| qwen2.5-1.5b-q4_k_m | 1.00 GB | n/a | n/a | n/a | n/a |");
  EXPECT_EQ(md.find("| shape, format | tokens | GFLOP |"), std::string::npos) << md;
  EXPECT_NE(md.find("bandwidth unknown"), std::string::npos) << md;
  EXPECT_EQ(row_after(ls, "| shape, format | pp512 tok/s | tg128 tok/s |"),
            "| qwen2.5-1.5b-q4_k_m | n/a | 200 |");
}

}  // namespace
}  // namespace rz::bench
