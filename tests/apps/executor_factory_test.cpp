// The executor factory (apps/executor_factory.hpp): --device resolution, and make_executor
// building the executor a device names with the options it is given (the default context rule
// of model/executor.hpp when none), on a tiny random GGUF model. The CUDA case runs where a GPU
// is present and checks the refusal elsewhere.
#include "apps/executor_factory.hpp"

#include <gtest/gtest.h>

#include <string>

#include "formats/common.hpp"
#include "sched/slot_runner.hpp"
#include "tests/formats/model_test_files.hpp"

namespace rz {
namespace {

class ExecutorFactoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.file("tiny.gguf");
    test::tiny_gguf(test::TinyDims{}).write(path_);  // context_length 256
    model_ = ModelFile::open(path_);
  }
  test::TempDir dir_;
  std::string path_;
  std::shared_ptr<const ModelFile> model_;
};

bool have_gpu() { return cuda_available(); }

TEST(ResolveDevice, NamesTheExecutor) {
  EXPECT_EQ(resolve_device("cpu"), "cpu");
  EXPECT_EQ(resolve_device("cuda"), "cuda");
  std::string why;
  const std::string dev = resolve_device("auto", &why);
  EXPECT_EQ(dev, have_gpu() ? "cuda" : "cpu");
  if (dev == "cpu") {
    EXPECT_FALSE(why.empty());
  }
  try {
    resolve_device("gpu");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--device"), std::string::npos) << e.what();
  }
}

TEST(Fp8WeightsFlag, StoredOrFp8) {
  EXPECT_FALSE(fp8_weights_flag("stored"));
  EXPECT_TRUE(fp8_weights_flag("fp8"));
  for (const char* bad : {"", "FP8", "fp16", "int8"}) {
    try {
      fp8_weights_flag(bad);
      FAIL() << "no throw for '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--weights"), std::string::npos) << e.what();
    }
  }
}

TEST_F(ExecutorFactoryTest, CpuRefusesFp8Weights) {
  try {
    make_executor("cpu", model_, {.slots = 1, .threads = 1, .fp8_weights = true});
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA executor only"), std::string::npos) << e.what();
  }
}

TEST_F(ExecutorFactoryTest, CpuTakesTheOptionsAndTheDefaultContext) {
  ASSERT_EQ(model_->config().n_ctx_train, 256);
  BuiltExecutor b = make_executor("cpu", model_, {.slots = 3, .threads = 1});
  ASSERT_NE(b.executor, nullptr);
  EXPECT_EQ(b.executor->max_slots(), 3);
  EXPECT_EQ(b.executor->max_context(), default_context(model_->config()));
  EXPECT_EQ(b.executor->max_context(), 256);
  EXPECT_EQ(b.executor->kv_block_size(), 16);
  EXPECT_EQ(b.executor->kv_blocks(), 3 * 16);  // a full context per slot
  EXPECT_EQ(b.description, "cpu, 1 threads");
  EXPECT_TRUE(b.memory_plan.empty());

  BuiltExecutor c = make_executor("cpu", model_, {.slots = 1, .max_context = 64, .threads = 2});
  EXPECT_EQ(c.executor->max_slots(), 1);
  EXPECT_EQ(c.executor->max_context(), 64);
  EXPECT_EQ(c.description, "cpu, 2 threads");
  BuiltExecutor k = make_executor(
      "cpu", model_, {.slots = 2, .max_context = 40, .kv_block_size = 8, .kv_blocks = 10});
  EXPECT_EQ(k.executor->kv_block_size(), 8);
  EXPECT_EQ(k.executor->kv_blocks(), 10);

  // It runs: a prefill gives one token in the vocabulary.
  SlotRunner run(*c.executor);
  const int32_t t = run.prefill(PrefillRequest{0, {1, 2, 3}, {}});
  EXPECT_GE(t, 0);
  EXPECT_LT(t, model_->config().n_vocab);
}

TEST_F(ExecutorFactoryTest, UnknownDeviceIsAnError) {
  for (const char* dev : {"auto", "gpu", ""}) {
    try {
      make_executor(dev, model_, {});
      FAIL() << "no throw for '" << dev << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("unknown device"), std::string::npos) << e.what();
    }
  }
}

TEST_F(ExecutorFactoryTest, CudaTakesTheOptionsOrSaysThereIsNoDevice) {
  if (!have_gpu()) {
    try {
      make_executor("cuda", model_, {.slots = 2});
      FAIL() << "no throw without a GPU";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(RZ_HAVE_CUDA ? "no CUDA device"
                                                        : "this build of rz has no CUDA"),
                std::string::npos)
          << e.what();
    }
    return;
  }
  BuiltExecutor b = make_executor(
      "cuda", model_, {.slots = 2, .max_context = 40, .kv_block_size = 8, .kv_blocks = 10});
  ASSERT_NE(b.executor, nullptr);
  EXPECT_EQ(b.executor->max_slots(), 2);
  EXPECT_EQ(b.executor->max_context(), 40);
  EXPECT_EQ(b.executor->kv_block_size(), 8);
  EXPECT_EQ(b.executor->kv_blocks(), 10);
  EXPECT_EQ(b.description.rfind("cuda: ", 0), 0u) << b.description;
  EXPECT_NE(b.memory_plan.find("10 blocks x 8 tokens"), std::string::npos) << b.memory_plan;
  BuiltExecutor d = make_executor("cuda", model_, {.slots = 1});
  EXPECT_EQ(d.executor->max_context(), 256);   // the default context rule
  EXPECT_EQ(d.executor->kv_block_size(), 16);  // the executor's default
}

}  // namespace
}  // namespace rz
