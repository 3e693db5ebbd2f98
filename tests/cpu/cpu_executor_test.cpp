// Tests of the CPU executor (cpu/cpu_executor.cpp) against golden data from Hugging Face
// transformers running the same GGUF in fp32 (tests/golden/make_cpu_golden.py): greedy tokens
// must match exactly and logits within kLogitTol; prompts run alone and batched (joining late,
// released and recycled mid-way) give the same tokens; user errors throw and change nothing.
#include "cpu/cpu_executor.hpp"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "formats/common.hpp"
#include "formats/model_file.hpp"

namespace rz {
namespace {

const std::string kModel = RZ_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
const std::string kGolden = RZ_SOURCE_DIR "/tests/golden/smollm2_cpu_golden.json";

// Largest allowed |ours - reference| of a logit. The logits of this model span about
// [-30, 30]; the measured maximum difference is 4e-5 over the golden top-50 of every prompt and
// step and 7e-5 over all 49152 logits of prompt 0's first step (the golden file rounds to 5 and
// 4 decimals, so part of that is rounding). 1e-3 (about 3e-5 of the logit range) leaves room for
// other fp32 summation orders and still catches real errors in the math, which show up as
// differences of 0.05 and more.
constexpr float kLogitTol = 1e-3f;

struct GoldenPrompt {
  std::vector<int32_t> prompt, greedy;
  std::vector<std::vector<int32_t>> top_ids;   // [step][50]
  std::vector<std::vector<float>> top_logits;  // [step][50]
};

struct Golden {
  std::vector<GoldenPrompt> prompts;
  std::vector<float> full_logits0;  // all logits of prompt 0, step 0
};

const Golden& golden() {
  static Golden g = [] {
    Golden g;
    simdjson::dom::parser parser;
    simdjson::dom::element doc = parser.load(kGolden);
    for (simdjson::dom::element p : doc["prompts"].get_array()) {
      GoldenPrompt gp;
      for (int64_t v : p["prompt_ids"].get_array()) gp.prompt.push_back(int32_t(v));
      for (int64_t v : p["greedy_ids"].get_array()) gp.greedy.push_back(int32_t(v));
      for (simdjson::dom::element row : p["top_ids"].get_array()) {
        gp.top_ids.emplace_back();
        for (int64_t v : row.get_array()) gp.top_ids.back().push_back(int32_t(v));
      }
      for (simdjson::dom::element row : p["top_logits"].get_array()) {
        gp.top_logits.emplace_back();
        for (double v : row.get_array()) gp.top_logits.back().push_back(float(v));
      }
      g.prompts.push_back(std::move(gp));
    }
    for (double v : doc["full_logits_prompt0_step0"].get_array())
      g.full_logits0.push_back(float(v));
    return g;
  }();
  return g;
}

std::shared_ptr<const ModelFile> model() {
  static std::shared_ptr<const ModelFile> m;
  if (!m && std::filesystem::exists(kModel)) m = ModelFile::open(kModel);
  return m;
}

class CpuExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kModel)) FAIL() << kModel << " missing: run scripts/setup.sh";
    ASSERT_TRUE(std::filesystem::exists(kGolden)) << kGolden;
    ASSERT_GE(golden().prompts.size(), 8u);
  }
};

// Largest |ours - golden| over the golden top-50 of one step; fails on NaN.
float top_diff(std::span<const float> logits, const GoldenPrompt& g, size_t step) {
  float worst = 0;
  for (size_t j = 0; j < g.top_ids[step].size(); ++j) {
    const float ours = logits[g.top_ids[step][j]];
    const float d = std::fabs(ours - g.top_logits[step][j]);
    if (!(d <= worst)) worst = std::isnan(d) ? INFINITY : d;
  }
  return worst;
}

PrefillRequest greedy_request(int slot, const std::vector<int32_t>& prompt) {
  PrefillRequest r;
  r.slot = slot;
  r.tokens = prompt;
  r.sampling.temperature = 0.0f;
  return r;
}

TEST_F(CpuExecutorTest, EachPromptAloneMatchesTransformers) {
  CpuExecutor ex(model(), {.slots = 1, .max_context = 512});
  ex.set_keep_logits(true);
  float worst = 0;
  for (size_t p = 0; p < golden().prompts.size(); ++p) {
    const GoldenPrompt& g = golden().prompts[p];
    PrefillRequest req = greedy_request(0, g.prompt);
    int32_t tok = ex.prefill({&req, 1})[0];
    for (size_t s = 0; s < g.greedy.size(); ++s) {
      ASSERT_EQ(tok, g.greedy[s]) << "prompt " << p << " step " << s;
      const float d = top_diff(ex.last_logits(0), g, s);
      ASSERT_LE(d, kLogitTol) << "prompt " << p << " step " << s;
      worst = std::max(worst, d);
      if (p == 0 && s == 0) {
        auto lg = ex.last_logits(0);
        ASSERT_EQ(lg.size(), golden().full_logits0.size());
        float wf = 0;
        for (size_t i = 0; i < lg.size(); ++i) {
          const float d0 = std::fabs(lg[i] - golden().full_logits0[i]);
          ASSERT_LE(d0, kLogitTol) << "full logits, id " << i;
          wf = std::max(wf, d0);
        }
        std::printf("prompt 0 step 0: max |diff| over all %zu logits %.2e\n", lg.size(), wf);
      }
      if (s + 1 < g.greedy.size()) {
        DecodeRequest d{0, tok};
        tok = ex.decode({&d, 1})[0];
      }
    }
    EXPECT_EQ(ex.slot_length(0), int(g.prompt.size() + g.greedy.size() - 1));
    ex.release(0);
    EXPECT_FALSE(ex.slot_active(0));
  }
  std::printf("max |logit diff| vs transformers over all prompts and steps: %.2e (tol %.0e)\n",
              worst, kLogitTol);
}

// All prompts through one 8-slot executor: prompts 0..7 are prefilled together in one step and
// decoded together; at step 4 two slots are released mid-way and recycled in one prefill (prompt
// 8 joins, prompt 6 restarts), at step 10 another is released and recycled (prompt 5 restarts),
// and the first slot to finish afterwards reruns the prompt cut short there (3). Every token must
// equal the golden greedy tokens, which the test above shows are the tokens of each prompt alone.
TEST_F(CpuExecutorTest, BatchedJoiningAndRecyclingGiveTheSameTokens) {
  const auto& G = golden().prompts;
  const int n_prompts = static_cast<int>(G.size());
  ASSERT_GE(n_prompts, 9);
  CpuExecutor ex(model(), {.slots = 8, .max_context = 512});
  ex.set_keep_logits(true);
  struct Run {
    int prompt = -1;  // -1: slot free
    std::vector<int32_t> out;
  };
  std::vector<Run> runs(8);
  std::vector<int> full(n_prompts, 0);  // times each prompt ran to the end
  float worst = 0;
  auto check_logits = [&](int slot) {
    const Run& r = runs[slot];
    worst = std::max(worst, top_diff(ex.last_logits(slot), G[r.prompt], r.out.size() - 1));
  };
  auto start = [&](std::vector<std::pair<int, int>> slot_prompt) {
    std::vector<PrefillRequest> reqs;
    for (auto [slot, p] : slot_prompt) {
      ASSERT_FALSE(ex.slot_active(slot));
      reqs.push_back(greedy_request(slot, G[p].prompt));
      runs[slot] = Run{p, {}};
    }
    auto toks = ex.prefill(reqs);
    for (size_t i = 0; i < reqs.size(); ++i) {
      const int slot = reqs[i].slot;
      runs[slot].out.push_back(toks[i]);
      ASSERT_EQ(toks[i], G[runs[slot].prompt].greedy[0]) << "prompt " << runs[slot].prompt;
      ASSERT_EQ(ex.slot_length(slot), int(G[runs[slot].prompt].prompt.size()));
      check_logits(slot);
    }
  };
  auto stop = [&](int slot) {  // release, mid-way or at the end
    Run& r = runs[slot];
    if (r.out.size() == G[r.prompt].greedy.size()) ++full[r.prompt];
    ex.release(slot);
    EXPECT_FALSE(ex.slot_active(slot));
    r = Run{};
  };
  start({{0, 0}, {1, 1}, {2, 2}, {3, 3}, {4, 4}, {5, 5}, {6, 6}, {7, 7}});
  ASSERT_FALSE(HasFatalFailure());
  bool reran3 = false;
  for (int it = 0; it < 200; ++it) {
    if (it == 4) {
      stop(5);
      stop(6);
      start({{5, 8}, {6, 6}});
    }
    if (it == 10) {
      stop(3);
      start({{3, 5}});
    }
    ASSERT_FALSE(HasFatalFailure());
    std::vector<DecodeRequest> reqs;
    for (int s = 0; s < 8; ++s) {
      if (runs[s].prompt >= 0 && runs[s].out.size() == G[runs[s].prompt].greedy.size()) {
        stop(s);
        if (!reran3 && it > 10) {
          reran3 = true;
          start({{s, 3}});
          ASSERT_FALSE(HasFatalFailure());
        }
      }
      if (runs[s].prompt >= 0) reqs.push_back({s, runs[s].out.back()});
    }
    if (reqs.empty()) break;
    auto toks = ex.decode(reqs);
    ASSERT_EQ(toks.size(), reqs.size());
    for (size_t i = 0; i < reqs.size(); ++i) {
      Run& r = runs[reqs[i].slot];
      const size_t step = r.out.size();
      r.out.push_back(toks[i]);
      ASSERT_EQ(toks[i], G[r.prompt].greedy[step]) << "prompt " << r.prompt << " step " << step;
      check_logits(reqs[i].slot);
    }
  }
  for (int p = 0; p < n_prompts; ++p)
    EXPECT_GE(full[p], 1) << "prompt " << p << " never ran to the end";
  EXPECT_LE(worst, kLogitTol);
  std::printf("batched: max |logit diff| vs transformers %.2e\n", worst);
}

TEST_F(CpuExecutorTest, UserErrorsThrowAndChangeNothing) {
  CpuExecutor ex(model(), {.slots = 2, .max_context = 16});
  EXPECT_EQ(ex.max_slots(), 2);
  EXPECT_EQ(ex.max_context(), 16);
  const std::vector<int32_t> prompt = {1, 504, 3458, 282, 4649};
  PrefillRequest ok = greedy_request(0, prompt);
  int32_t t0 = ex.prefill({&ok, 1})[0];
  ASSERT_TRUE(ex.slot_active(0));
  ASSERT_EQ(ex.slot_length(0), 5);

  // Busy slot, alone and next to a valid request: nothing happens to either slot.
  std::vector<PrefillRequest> busy = {greedy_request(1, prompt), greedy_request(0, prompt)};
  EXPECT_THROW(ex.prefill(busy), Error);
  EXPECT_FALSE(ex.slot_active(1));
  EXPECT_EQ(ex.slot_length(0), 5);
  // The same free slot twice in one prefill.
  std::vector<PrefillRequest> twice = {greedy_request(1, prompt), greedy_request(1, prompt)};
  EXPECT_THROW(ex.prefill(twice), Error);
  EXPECT_FALSE(ex.slot_active(1));
  // Too long a prompt (17 > 16), empty prompt, bad ids, bad slot numbers.
  PrefillRequest longp = greedy_request(1, std::vector<int32_t>(17, 42));
  try {
    ex.prefill({&longp, 1});
    ADD_FAILURE() << "no error for a prompt longer than the context";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("17"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(ex.slot_active(1));
  PrefillRequest empty = greedy_request(1, {});
  EXPECT_THROW(ex.prefill({&empty, 1}), Error);
  PrefillRequest badtok = greedy_request(1, {1, ex.config().n_vocab});
  EXPECT_THROW(ex.prefill({&badtok, 1}), Error);
  PrefillRequest badslot = greedy_request(2, prompt);
  EXPECT_THROW(ex.prefill({&badslot, 1}), Error);
  EXPECT_FALSE(ex.slot_active(1));

  // Decode on an inactive slot (alone and with an active one), on a bad slot, with a bad token.
  std::vector<DecodeRequest> mixed = {{0, t0}, {1, t0}};
  EXPECT_THROW(ex.decode(mixed), Error);
  EXPECT_EQ(ex.slot_length(0), 5);
  DecodeRequest out_of_range{5, t0};
  EXPECT_THROW(ex.decode({&out_of_range, 1}), Error);
  DecodeRequest neg_tok{0, -1};
  EXPECT_THROW(ex.decode({&neg_tok, 1}), Error);
  std::vector<DecodeRequest> dup = {{0, t0}, {0, t0}};
  EXPECT_THROW(ex.decode(dup), Error);
  EXPECT_EQ(ex.slot_length(0), 5);

  // Fill the slot to the context limit; the next decode is refused.
  int32_t t = t0;
  while (ex.slot_length(0) < ex.max_context()) {
    DecodeRequest d{0, t};
    t = ex.decode({&d, 1})[0];
  }
  DecodeRequest full{0, t};
  EXPECT_THROW(ex.decode({&full, 1}), Error);
  EXPECT_EQ(ex.slot_length(0), 16);
  // Release frees it for a new prompt; releasing a free slot is a no-op.
  ex.release(0);
  ex.release(0);
  EXPECT_FALSE(ex.slot_active(0));
  EXPECT_EQ(ex.prefill({&ok, 1})[0], t0);
}

TEST_F(CpuExecutorTest, DefaultContextIsCappedTrainingContext) {
  CpuExecutor ex(model());
  EXPECT_EQ(ex.max_slots(), 1);
  EXPECT_EQ(ex.max_context(), std::min(ex.config().n_ctx_train, 4096));
  EXPECT_EQ(ex.max_context(), default_context(ex.config()));
  EXPECT_GE(ex.threads(), 1);
}

TEST(DefaultContext, IsTheTrainingContextAtMost4096) {
  ModelConfig c;
  c.n_ctx_train = 0;  // unknown
  EXPECT_EQ(default_context(c), 4096);
  c.n_ctx_train = 2048;
  EXPECT_EQ(default_context(c), 2048);
  c.n_ctx_train = 4096;
  EXPECT_EQ(default_context(c), 4096);
  c.n_ctx_train = 131072;
  EXPECT_EQ(default_context(c), 4096);
}

}  // namespace
}  // namespace rz
