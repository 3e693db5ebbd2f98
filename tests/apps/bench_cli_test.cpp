// `rz bench` end to end on the CPU executor and a tiny random GGUF model: --json prints one JSON
// object (simdjson parses all of stdout) with every workload measured and positive figures; the
// default output is the markdown tables with --json-out writing the same object to a file; bad
// flags give one error line and a non-zero exit.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/apps/cli_test_util.hpp"
#include "tests/formats/model_test_files.hpp"

namespace rz {
namespace {

namespace fs = std::filesystem;
using test::CommandResult;
using test::TempDir;

using test::rz_bin;
CommandResult rz(const std::string& args) { return test::run_rz(args); }

class BenchCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(rz_bin())) << "missing " << rz_bin();
    model_ = dir_.file("tiny.gguf");
    test::tiny_gguf(test::TinyDims{}).write(model_);
  }
  // Small workloads: pp16, tg4, B=1 and B=2 of 4-token prompts and 3 steps, one timed run.
  std::string args() const {
    return "bench --device cpu --threads 1 --model " + test::shell_quote(model_) +
           " --pp 16 --tg 4 --batches 1,2 --prompt 4 --gen 3 --reps 1";
  }
  TempDir dir_;
  std::string model_;
};

std::string str(simdjson::dom::element e) { return std::string(std::string_view(e)); }

// Every workload of `d` measured with positive figures; decode rows have MBU and a ceiling.
void expect_all_measured(simdjson::dom::element d, const std::vector<std::string>& names) {
  simdjson::dom::array ws = d["workloads"];
  ASSERT_EQ(ws.size(), names.size());
  size_t i = 0;
  for (simdjson::dom::element w : ws) {
    const std::string name = str(w["name"]);
    SCOPED_TRACE(name);
    EXPECT_EQ(name, names[i++]);
    EXPECT_TRUE(bool(w["ok"]));
    EXPECT_TRUE(w["error"].is_null());
    for (const char* k : {"seconds", "tokens_per_s", "step_ms", "tflops", "flops"})
      EXPECT_GT(double(w[k]), 0) << k;
    EXPECT_GT(uint64_t(w["peak_mem_bytes"]), 0u);
    if (str(w["kind"]) == "pp") {
      EXPECT_EQ(str(w["limit"]), "compute");
      EXPECT_TRUE(w["mbu"].is_null());
    } else {
      EXPECT_EQ(str(w["limit"]), "bandwidth");
      for (const char* k : {"mbu", "limit_share", "limit_value", "bytes_per_step",
                            "kv_bytes_per_step", "ceiling_tokens_per_s"})
        EXPECT_GT(double(w[k]), 0) << k;
    }
    if (str(w["kind"]) == "batched") {
      EXPECT_GT(double(w["prefill_tokens_per_s"]), 0);
      EXPECT_GT(double(w["prefill_tflops"]), 0);
    }
  }
}

TEST_F(BenchCli, JsonOnStdoutHasEveryWorkload) {
  const CommandResult r = rz(args() + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  simdjson::dom::parser p;
  simdjson::dom::element d;
  ASSERT_EQ(p.parse(r.out).get(d), simdjson::SUCCESS) << "stdout is not one JSON object:\n"
                                                      << r.out;
  EXPECT_EQ(str(d["tool"]), "rz bench");
  EXPECT_EQ(str(d["device"]["kind"]), "cpu");
  EXPECT_FALSE(str(d["device"]["name"]).empty());
  EXPECT_EQ(str(d["device"]["executor"]), "cpu, 1 threads");
  EXPECT_EQ(str(d["model"]["path"]), model_);
  EXPECT_EQ(str(d["model"]["label"]), "tiny");
  EXPECT_EQ(int64_t(d["model"]["n_layer"]), 2);
  EXPECT_GT(double(d["model"]["weight_bytes_per_step"]), 0);
  EXPECT_EQ(int64_t(d["options"]["pp"]), 16);
  EXPECT_EQ(int64_t(d["options"]["reps"]), 1);
  EXPECT_GT(double(d["limits"]["bandwidth_bytes_per_s"]), 0);  // a memcpy measured
  EXPECT_NE(str(d["limits"]["bandwidth_source"]).find("memcpy"), std::string::npos);
  EXPECT_TRUE(d["limits"]["peak_flops"].is_null());
  EXPECT_EQ(str(d["memory_kind"]), "peak RSS");
  EXPECT_GT(uint64_t(d["peak_mem_bytes"]), 0u);
  EXPECT_TRUE(bool(d["ok"]));
  std::string_view commit;
  if (!d["commit"].get_string().get(commit)) {
    EXPECT_FALSE(commit.empty());  // present only when the build knows it
  }
  expect_all_measured(d, {"pp16", "tg4", "B=1", "B=2"});
  // Progress goes to stderr.
  EXPECT_NE(r.err.find("tg4: "), std::string::npos) << r.err;
}

TEST_F(BenchCli, TablesOnStdoutAndJsonInAFile) {
  const std::string json = dir_.file("out.json");
  const CommandResult r = rz(args() + " --batches 2,1 --label 'tiny \"q\"' --bandwidth 50" +
                             " --peak-tflops 2 --json-out " + test::shell_quote(json));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("## rz CPU executor: tiny \"q\" on "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| shape, format | pp16 tok/s | tg4 tok/s |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| shape, format | B=2 | B=1 |"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("FAILED"), std::string::npos) << r.out;
  std::ifstream f(json);
  std::stringstream ss;
  ss << f.rdbuf();
  simdjson::dom::parser p;
  simdjson::dom::element d;
  ASSERT_EQ(p.parse(ss.str()).get(d), simdjson::SUCCESS) << ss.str();
  EXPECT_EQ(str(d["model"]["label"]), "tiny \"q\"");
  EXPECT_DOUBLE_EQ(double(d["limits"]["bandwidth_bytes_per_s"]), 50e9);
  EXPECT_EQ(str(d["limits"]["bandwidth_source"]), "--bandwidth");
  EXPECT_DOUBLE_EQ(double(d["limits"]["peak_flops"]), 2e12);
  expect_all_measured(d, {"pp16", "tg4", "B=2", "B=1"});
  EXPECT_GT(double(d["workloads"].at(0)["limit_share"]), 0);  // against the given peak
}

TEST_F(BenchCli, CudaOnlySwitchesOnTheCpuAreNotes) {
  const CommandResult r =
      rz(args() + " --pp 0 --tg 0 --batches 1 --bandwidth 10 --no-graphs --int8 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("--no-graphs applies to the CUDA executor only"), std::string::npos)
      << r.err;
  simdjson::dom::parser p;
  simdjson::dom::element d;
  ASSERT_EQ(p.parse(r.out).get(d), simdjson::SUCCESS) << r.out;
  expect_all_measured(d, {"B=1"});
}

TEST_F(BenchCli, BadInputIsOneErrorLine) {
  const std::string m = " --model " + test::shell_quote(model_);
  struct Case {
    std::string args;
    int code;
  };
  for (const Case& c : std::vector<Case>{{"bench", 1},
                                         {"bench" + m + " --batches 0", 1},
                                         {"bench" + m + " --reps 0", 1},
                                         {"bench" + m + " --device tpu", 1},
                                         {"bench --model /nonexistent/x.gguf --device cpu", 1},
                                         {"bench" + m + " --json-out /nonexistent-dir/x.json", 1},
                                         {"bench" + m + " --nope", 2}}) {
    const CommandResult r = rz(c.args);
    EXPECT_EQ(r.exit_code, c.code) << c.args << ": " << r.err;
    EXPECT_EQ(r.out, "") << c.args;
    ASSERT_FALSE(r.err.empty()) << c.args;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << c.args << ": more than one line: " << r.err;
  }
}

TEST_F(BenchCli, HelpListsTheFlags) {
  const CommandResult r = rz("bench --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("--batches"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--json-out"), std::string::npos) << r.out;
  const CommandResult top = rz("--help");
  EXPECT_NE(top.out.find("bench"), std::string::npos) << top.out;
}

}  // namespace
}  // namespace rz
