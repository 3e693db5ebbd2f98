// rz bench's flags (apps/bench/bench_options.hpp): defaults, every flag's value, the batch list,
// and the errors a bad value gives (rz::Error naming the flag; unknown flags exit 2).
#include "apps/bench/bench_options.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "formats/common.hpp"
#include "tests/apps/cli_test_util.hpp"

namespace rz::bench {
namespace {

using rz::test::Argv;

BenchOptions parse(std::vector<std::string> args) {
  cli::Flags f = bench_flags();
  Argv a(std::move(args));
  int code = -1;
  if (!f.parse(a.argc(), a.argv(), code)) throw std::runtime_error("parse stopped");
  return bench_options(f);
}

// The message of the rz::Error that parsing `args` throws ("" when none).
std::string error_of(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(BenchOptions, Defaults) {
  const BenchOptions o = parse({"--model", "/models/q.gguf"});
  EXPECT_EQ(o.model, "/models/q.gguf");
  EXPECT_EQ(o.label, "q");
  EXPECT_EQ(o.device, "auto");
  EXPECT_EQ(o.pp, 512);
  EXPECT_EQ(o.tg, 128);
  EXPECT_FALSE(o.batches.has_value());
  EXPECT_EQ(o.prompt, 128);
  EXPECT_EQ(o.gen, 128);
  EXPECT_EQ(o.reps, 3);
  EXPECT_EQ(o.seed, 1u);
  EXPECT_EQ(o.context, 0);
  EXPECT_EQ(o.threads, 0);
  EXPECT_EQ(o.gpu, 0);
  EXPECT_TRUE(o.cuda_graphs);
  EXPECT_TRUE(o.qmm);
  EXPECT_FALSE(o.int8);
  EXPECT_FALSE(o.fp8);
  EXPECT_TRUE(o.fp16_copies);
  EXPECT_TRUE(o.pdl);
  EXPECT_TRUE(o.fused_forms);
  EXPECT_TRUE(o.tune_gemm);
  EXPECT_EQ(o.bandwidth, 0);
  EXPECT_EQ(o.peak_flops, 0);
  EXPECT_FALSE(o.json);
  EXPECT_EQ(o.json_out, "");
}

TEST(BenchOptions, EveryFlag) {
  const BenchOptions o = parse({"--model",
                                "m.gguf",
                                "--label",
                                "qwen Q4_K_M",
                                "--device",
                                "cuda",
                                "--gpu",
                                "1",
                                "--threads",
                                "4",
                                "--pp",
                                "0",
                                "--tg",
                                "64",
                                "--batches",
                                "1,4,16",
                                "--prompt",
                                "32",
                                "--gen",
                                "16",
                                "--reps",
                                "5",
                                "--seed",
                                "42",
                                "--context",
                                "4096",
                                "--no-graphs",
                                "--no-qmm",
                                "--int8",
                                "--no-pdl",
                                "--bandwidth",
                                "4300",
                                "--peak-tflops",
                                "989",
                                "--json",
                                "--json-out",
                                "/tmp/x.json",
                                "--weights",
                                "fp8",
                                "--no-fp16-copies",
                                "--no-fused-forms",
                                "--no-gemm-tune"});
  EXPECT_EQ(o.label, "qwen Q4_K_M");
  EXPECT_EQ(o.device, "cuda");
  EXPECT_EQ(o.gpu, 1);
  EXPECT_EQ(o.threads, 4);
  EXPECT_EQ(o.pp, 0);
  EXPECT_EQ(o.tg, 64);
  ASSERT_TRUE(o.batches.has_value());
  EXPECT_EQ(*o.batches, (std::vector<int>{1, 4, 16}));
  EXPECT_EQ(o.prompt, 32);
  EXPECT_EQ(o.gen, 16);
  EXPECT_EQ(o.reps, 5);
  EXPECT_EQ(o.seed, 42u);
  EXPECT_EQ(o.context, 4096);
  EXPECT_FALSE(o.cuda_graphs);
  EXPECT_FALSE(o.qmm);
  EXPECT_TRUE(o.int8);
  EXPECT_TRUE(o.fp8);
  EXPECT_FALSE(o.fp16_copies);
  EXPECT_FALSE(o.pdl);
  EXPECT_FALSE(o.fused_forms);
  EXPECT_FALSE(o.tune_gemm);
  EXPECT_DOUBLE_EQ(o.bandwidth, 4.3e12);  // GB/s in, bytes/s out
  EXPECT_DOUBLE_EQ(o.peak_flops, 989e12);
  EXPECT_TRUE(o.json);
  EXPECT_EQ(o.json_out, "/tmp/x.json");
}

TEST(BenchOptions, EmptyBatchListSkipsTheBatchedPart) {
  const BenchOptions o = parse({"--model", "m.gguf", "--batches", ""});
  ASSERT_TRUE(o.batches.has_value());
  EXPECT_TRUE(o.batches->empty());
  const BenchOptions inline_form = parse({"--model", "m.gguf", "--batches="});
  ASSERT_TRUE(inline_form.batches.has_value());
  EXPECT_TRUE(inline_form.batches->empty());
}

TEST(BenchOptions, BatchLists) {
  EXPECT_EQ(parse_batches("1"), (std::vector<int>{1}));
  EXPECT_EQ(parse_batches("256,1,64"), (std::vector<int>{256, 1, 64}));
  EXPECT_TRUE(parse_batches("").empty());
  for (const char* bad : {"0", "1,,2", "1,", ",1", "a", "1.5", "-4", "70000", "4 ,8", ","}) {
    try {
      parse_batches(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--batches"), std::string::npos) << e.what();
    }
  }
}

TEST(BenchOptions, DefaultBatchesPerDevice) {
  EXPECT_EQ(default_batches("cuda"), (std::vector<int>{1, 4, 16, 64, 256}));
  EXPECT_EQ(default_batches("cpu"), (std::vector<int>{1, 8}));
}

TEST(BenchOptions, ModelStem) {
  EXPECT_EQ(model_stem("/tmp/sbs-qwen2.5-1.5b-q4_k_m.gguf"), "sbs-qwen2.5-1.5b-q4_k_m");
  EXPECT_EQ(model_stem("models/hf_dir/"), "hf_dir");
  EXPECT_EQ(model_stem("x"), "x");
}

TEST(BenchOptions, BadValuesNameTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string want;
  };
  const std::vector<Case> cases = {
      {{}, "--model"},
      {{"--model", "m", "--device", "gpu"}, "--device"},
      {{"--model", "m", "--pp", "-1"}, "--pp"},
      {{"--model", "m", "--tg", "x"}, "--tg"},
      {{"--model", "m", "--prompt", "0"}, "--prompt"},
      {{"--model", "m", "--gen", "0"}, "--gen"},
      {{"--model", "m", "--reps", "0"}, "--reps"},
      {{"--model", "m", "--seed", "-3"}, "--seed"},
      {{"--model", "m", "--context", "0"}, "--context"},
      {{"--model", "m", "--threads", "-1"}, "--threads"},
      {{"--model", "m", "--gpu", "-1"}, "--gpu"},
      {{"--model", "m", "--batches", "1,0"}, "--batches"},
      {{"--model", "m", "--bandwidth", "0"}, "--bandwidth"},
      {{"--model", "m", "--bandwidth", "fast"}, "--bandwidth"},
      {{"--model", "m", "--peak-tflops", "-989"}, "--peak-tflops"},
      {{"--model", "m", "--json-out", ""}, "--json-out"},
      {{"--model", "m", "--weights", "int4"}, "--weights"},
      {{"--model", "m", "--pp", "0", "--tg", "0", "--batches", ""}, "nothing to measure"},
  };
  for (const Case& c : cases) {
    const std::string err = error_of(c.args);
    EXPECT_NE(err.find(c.want), std::string::npos)
        << "args ending '" << (c.args.empty() ? "" : c.args.back()) << "': got '" << err << "'";
  }
}

TEST(BenchOptions, UnknownFlagAndHelpStopParsing) {
  {
    cli::Flags f = bench_flags();
    Argv a({"--model", "m", "--batch", "4"});
    int code = -1;
    EXPECT_FALSE(f.parse(a.argc(), a.argv(), code));
    EXPECT_EQ(code, 2);
  }
  {
    cli::Flags f = bench_flags();
    Argv a({"--no-graphs=1"});
    int code = -1;
    EXPECT_FALSE(f.parse(a.argc(), a.argv(), code));
    EXPECT_EQ(code, 2);
  }
  const std::string help = bench_flags().help();
  for (const char* flag : {"--model",       "--label",
                           "--device",      "--gpu",
                           "--threads",     "--pp",
                           "--tg",          "--batches",
                           "--prompt",      "--gen",
                           "--reps",        "--seed",
                           "--context",     "--no-graphs",
                           "--no-qmm",      "--int8",
                           "--no-pdl",      "--bandwidth",
                           "--peak-tflops", "--json",
                           "--json-out",    "--no-fused-forms",
                           "--no-gemm-tune"})
    EXPECT_NE(help.find(std::string("  ") + flag + " "), std::string::npos) << flag;
}

}  // namespace
}  // namespace rz::bench
