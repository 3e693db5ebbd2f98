// Tests of the CPU executor (cpu/cpu_executor.cpp) against golden data from Hugging Face
// transformers running the same GGUF in fp32 (tests/golden/make_cpu_golden.py): greedy tokens
// must match exactly and logits within kLogitTol; prompts run alone and batched (joining late,
// released and recycled mid-way) give the same tokens. Steps with explicit block tables: a prompt
// in chunks, a reused prefix in shared blocks and a step mixing decodes and prompt chunks give
// the logits of the plain runs bit for bit; malformed steps throw and change nothing.
#include "cpu/cpu_executor.hpp"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "formats/common.hpp"
#include "formats/model_file.hpp"
#include "sched/slot_runner.hpp"

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
  SlotRunner run(ex);
  ex.set_keep_logits(true);
  float worst = 0;
  for (size_t p = 0; p < golden().prompts.size(); ++p) {
    const GoldenPrompt& g = golden().prompts[p];
    int32_t tok = run.prefill(greedy_request(0, g.prompt));
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
      if (s + 1 < g.greedy.size()) tok = run.decode(0, tok);
    }
    EXPECT_EQ(ex.slot_length(0), int(g.prompt.size() + g.greedy.size() - 1));
    run.release(0);
    EXPECT_FALSE(ex.slot_active(0));
    EXPECT_EQ(run.blocks().free_blocks(), ex.kv_blocks());
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
  SlotRunner runner(ex);
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
    auto toks = runner.prefill(reqs);
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
    runner.release(slot);
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
    auto toks = runner.decode(reqs);
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

// ---- Steps with explicit block tables ----

// A `begin` entry: a free slot starts with `cached` (KV already in the blocks) then `tokens`.
StepSeq begin_seq(int slot, std::vector<int32_t> cached, std::vector<int32_t> tokens,
                  std::vector<int32_t> blocks, bool sample, SamplingParams sp = {}) {
  StepSeq s;
  s.slot = slot;
  s.begin = true;
  s.sampling = sp;
  s.start = static_cast<int>(cached.size());
  s.cached = std::move(cached);
  s.tokens = std::move(tokens);
  s.blocks = std::move(blocks);
  s.sample = sample;
  return s;
}

// An entry continuing a slot's sequence at `start`.
StepSeq continue_seq(int slot, int start, std::vector<int32_t> tokens, std::vector<int32_t> blocks,
                     bool sample) {
  StepSeq s;
  s.slot = slot;
  s.start = start;
  s.tokens = std::move(tokens);
  s.blocks = std::move(blocks);
  s.sample = sample;
  return s;
}

std::vector<int32_t> run_step(Executor& ex, std::vector<StepSeq> seqs) { return ex.step(seqs); }

std::vector<int32_t> slice(const std::vector<int32_t>& v, size_t b, size_t e) {
  return {v.begin() + b, v.begin() + std::min(e, v.size())};
}

std::vector<int32_t> concat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// Number of logits that differ in any bit (different sizes or no logits count as differences).
size_t bit_differences(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size() || a.empty()) return std::max<size_t>(1, std::max(a.size(), b.size()));
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}

float max_abs_diff(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size() || a.empty()) return INFINITY;
  float worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const float d = std::fabs(a[i] - b[i]);
    if (!(d <= worst)) worst = std::isnan(d) ? INFINITY : d;
  }
  return worst;
}

std::vector<float> logits_of(const Executor& ex, int slot) {
  auto l = ex.last_logits(slot);
  return {l.begin(), l.end()};
}

// Decoding of one slot alone (with its own sampler), one step per token, with the block table
// `blocks`: the tokens and the logits of each step.
struct Decoded {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
};
Decoded decode_alone(Executor& ex, int slot, int32_t tok, const std::vector<int32_t>& blocks,
                     int n) {
  Decoded d;
  for (int i = 0; i < n; ++i) {
    tok = run_step(ex, {continue_seq(slot, ex.slot_length(slot), {tok}, blocks, true)}).at(0);
    d.tokens.push_back(tok);
    d.logits.push_back(logits_of(ex, slot));
  }
  return d;
}

void expect_same_decodes(const Decoded& a, const Decoded& b, const char* what) {
  EXPECT_EQ(a.tokens, b.tokens) << what;
  ASSERT_EQ(a.logits.size(), b.logits.size()) << what;
  for (size_t i = 0; i < a.logits.size(); ++i)
    EXPECT_EQ(bit_differences(a.logits[i], b.logits[i]), 0u) << what << ", decode step " << i;
}

// The 80-token golden prompt, computed in one step and in chunks of 16, 32 and 32 over three
// steps (sampling only on the last), each with its own block table: the same logits
// bit for bit (chunks of a multiple of 8 tokens keep the matrix products' token groups, see
// cpu/cpu_executor.hpp), the golden first token, and the same next 8 greedy tokens and logits.
// Chunks of 5, 27 and 48 tokens change the token groups: the same tokens, logits to rounding.
TEST_F(CpuExecutorTest, PromptInChunksGivesTheLogitsOfTheWholePrompt) {
  const GoldenPrompt& g = golden().prompts[8];
  const std::vector<int32_t>& P = g.prompt;
  ASSERT_EQ(P.size(), 80u);
  CpuExecutor ex(model(), {.slots = 3, .max_context = 128, .kv_blocks = 40});
  ex.set_keep_logits(true);
  EXPECT_EQ(ex.kv_block_size(), 16);
  const std::vector<int32_t> whole_blocks = {0, 1, 2, 3, 4, 5, 6, 7};
  const std::vector<int32_t> chunk_blocks = {39, 12, 30, 8, 21, 15, 33, 9};
  const std::vector<int32_t> odd_blocks = {10, 11, 24, 25, 26, 27, 28, 29};

  const int32_t t_whole = run_step(ex, {begin_seq(0, {}, P, whole_blocks, true)}).at(0);
  EXPECT_EQ(t_whole, g.greedy[0]);
  const std::vector<float> l_whole = logits_of(ex, 0);

  EXPECT_TRUE(run_step(ex, {begin_seq(1, {}, slice(P, 0, 16), chunk_blocks, false)}).empty());
  EXPECT_TRUE(ex.slot_active(1));
  EXPECT_EQ(ex.slot_length(1), 16);
  EXPECT_TRUE(ex.last_logits(1).empty()) << "no logits before the first sampling step";
  EXPECT_TRUE(run_step(ex, {continue_seq(1, 16, slice(P, 16, 48), chunk_blocks, false)}).empty());
  EXPECT_EQ(ex.slot_length(1), 48);
  const int32_t t_chunks =
      run_step(ex, {continue_seq(1, 48, slice(P, 48, 80), chunk_blocks, true)}).at(0);
  EXPECT_EQ(ex.slot_length(1), 80);
  EXPECT_EQ(t_chunks, t_whole);
  EXPECT_EQ(bit_differences(logits_of(ex, 1), l_whole), 0u);

  run_step(ex, {begin_seq(2, {}, slice(P, 0, 5), odd_blocks, false)});
  run_step(ex, {continue_seq(2, 5, slice(P, 5, 32), odd_blocks, false)});
  const int32_t t_odd =
      run_step(ex, {continue_seq(2, 32, slice(P, 32, 80), odd_blocks, true)}).at(0);
  EXPECT_EQ(t_odd, t_whole);
  const float d_odd = max_abs_diff(logits_of(ex, 2), l_whole);
  EXPECT_LE(d_odd, kLogitTol);

  const Decoded a = decode_alone(ex, 0, t_whole, whole_blocks, 8);
  const Decoded b = decode_alone(ex, 1, t_chunks, chunk_blocks, 8);
  const Decoded c = decode_alone(ex, 2, t_odd, odd_blocks, 8);
  expect_same_decodes(a, b, "chunks of 16, 32, 32");
  EXPECT_EQ(c.tokens, a.tokens) << "chunks of 5, 27, 48";
  EXPECT_EQ(a.tokens, slice(g.greedy, 1, 9));
  std::printf("chunks of 5, 27, 48: max |logit diff| vs the whole prompt %.2e\n", d_odd);
}

// Prefix reuse: slot 0 computes prompt A (80 tokens); slot 1 begins a prompt B that shares A's
// first 32 tokens with `cached` = those 32 tokens and a block table that starts with slot 0's
// first two blocks, and computes only B's other 18 tokens; slot 2 computes B from scratch. Slots
// 1 and 2 give the same logits bit for bit and, with a repetition penalty over the whole history,
// the same tokens, then the same decodes; slot 0's decodes equal those of A alone in a fresh
// executor (the shared blocks were only read).
TEST_F(CpuExecutorTest, CachedPrefixInSharedBlocksGivesTheLogitsOfTheWholePrompt) {
  const auto& G = golden().prompts;
  const std::vector<int32_t>& A = G[8].prompt;
  const std::vector<int32_t> B = concat({slice(A, 0, 32), G[2].prompt});
  ASSERT_EQ(B.size(), 50u);
  SamplingParams penalty;
  penalty.repetition_penalty = 1.3f;
  penalty.repetition_last_n = -1;  // the whole history
  const std::vector<int32_t> a_blocks = {3, 7, 1, 5, 11, 0, 2, 4};
  const std::vector<int32_t> b_blocks = {3, 7, 8, 9, 10, 12};  // A's first two, then its own
  const std::vector<int32_t> c_blocks = {20, 19, 18, 17, 16, 15};

  CpuExecutor ex(model(), {.slots = 3, .max_context = 128, .kv_blocks = 24});
  ex.set_keep_logits(true);
  const int32_t ta = run_step(ex, {begin_seq(0, {}, A, a_blocks, true)}).at(0);
  const int32_t tb =
      run_step(ex, {begin_seq(1, slice(B, 0, 32), slice(B, 32, 50), b_blocks, true, penalty)})
          .at(0);
  EXPECT_EQ(ex.slot_length(1), 50);
  const std::vector<float> lb = logits_of(ex, 1);
  const int32_t tc = run_step(ex, {begin_seq(2, {}, B, c_blocks, true, penalty)}).at(0);
  EXPECT_EQ(bit_differences(lb, logits_of(ex, 2)), 0u);
  EXPECT_EQ(tb, tc);
  const Decoded b = decode_alone(ex, 1, tb, b_blocks, 6);
  const Decoded c = decode_alone(ex, 2, tc, c_blocks, 6);
  expect_same_decodes(b, c, "cached prefix vs from scratch");
  const Decoded a = decode_alone(ex, 0, ta, a_blocks, 6);

  CpuExecutor alone(model(), {.slots = 1, .max_context = 128});
  alone.set_keep_logits(true);
  const std::vector<int32_t> alone_blocks = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(run_step(alone, {begin_seq(0, {}, A, alone_blocks, true)}).at(0), ta);
  expect_same_decodes(a, decode_alone(alone, 0, ta, alone_blocks, 6), "slot 0 vs alone");
}

// The sampler's history is the whole sequence, cached tokens included: after 32 cached tokens of
// A (a 4-token pattern repeated) and A[32] computed, the model continues the pattern with a token
// that only the cached part holds, and a strong repetition penalty turns it away exactly as it
// does for the 33 tokens computed from scratch.
TEST_F(CpuExecutorTest, RepetitionPenaltySeesTheCachedTokens) {
  const std::vector<int32_t>& A = golden().prompts[8].prompt;
  SamplingParams penalty;
  penalty.repetition_penalty = 4.0f;
  penalty.repetition_last_n = -1;  // the whole history
  CpuExecutor ex(model(), {.slots = 3, .max_context = 64, .kv_blocks = 12});
  ex.set_keep_logits(true);
  run_step(ex, {begin_seq(0, {}, slice(A, 0, 32), {4, 9}, false)});
  const int32_t cached =
      run_step(ex, {begin_seq(1, slice(A, 0, 32), {A[32]}, {4, 9, 2}, true, penalty)}).at(0);
  const int32_t scratch =
      run_step(ex, {begin_seq(2, {}, slice(A, 0, 33), {0, 1, 3}, true, penalty)}).at(0);
  EXPECT_EQ(cached, scratch);
  EXPECT_EQ(bit_differences(ex.last_logits(1), ex.last_logits(2)), 0u);
  // Without the penalty the pattern goes on with A[33], which the computed token is not.
  EXPECT_EQ(argmax(ex.last_logits(1)), A[33]);
  ASSERT_NE(A[33], A[32]);
  std::vector<float> l = logits_of(ex, 1);
  EXPECT_EQ(Sampler(penalty).sample(l, slice(A, 32, 33)), A[33])
      << "the penalty on the computed token alone would keep the pattern";
  EXPECT_NE(cached, A[33]);
}

// One step with slot 0 decoding, slot 1's first prompt chunk and slot 2's last prompt chunk
// gives the tokens and logits of the same three entries run as three steps, bit for bit when the
// entries keep their token groups (16 + 24 tokens, then the decode), to rounding in the
// scheduler's order (the decode first). Then slot 1's last chunk and decodes of all three agree.
TEST_F(CpuExecutorTest, MixedStepGivesTheResultsOfSeparateSteps) {
  const auto& G = golden().prompts;
  const std::vector<int32_t>& P0 = G[0].prompt;                        // 5 tokens
  const std::vector<int32_t> P1 = concat({G[2].prompt, G[6].prompt});  // 37 tokens
  const std::vector<int32_t> P2 = slice(concat({G[1].prompt, G[3].prompt, G[4].prompt}), 0, 40);
  ASSERT_EQ(P2.size(), 40u);
  const std::vector<std::vector<int32_t>> blocks = {{5, 0, 9, 14}, {1, 13, 2, 10}, {7, 3, 12, 6}};
  struct Run {
    std::unique_ptr<CpuExecutor> ex;
    int32_t t0 = 0, t1 = 0, t2 = 0;  // last token sampled per slot
  };
  auto setup = [&] {  // slot 0: P0 computed; slot 2: P2's first 16 tokens
    Run r;
    r.ex = std::make_unique<CpuExecutor>(
        model(), CpuExecutorOptions{.slots = 3, .max_context = 64, .kv_blocks = 16});
    r.ex->set_keep_logits(true);
    r.t0 = run_step(*r.ex, {begin_seq(0, {}, P0, blocks[0], true)}).at(0);
    run_step(*r.ex, {begin_seq(2, {}, slice(P2, 0, 16), blocks[2], false)});
    return r;
  };
  const StepSeq dec0 = continue_seq(0, 5, {0}, blocks[0], true);  // token set per run
  const StepSeq first1 = begin_seq(1, {}, slice(P1, 0, 16), blocks[1], false);
  const StepSeq last2 = continue_seq(2, 16, slice(P2, 16, 40), blocks[2], true);

  Run sep = setup(), mixed = setup(), sched = setup();
  ASSERT_EQ(sep.t0, mixed.t0);
  {  // three steps
    StepSeq d = dec0;
    d.tokens = {sep.t0};
    EXPECT_TRUE(run_step(*sep.ex, {first1}).empty());
    sep.t2 = run_step(*sep.ex, {last2}).at(0);
    sep.t0 = run_step(*sep.ex, {d}).at(0);
  }
  {  // one step, token groups kept
    StepSeq d = dec0;
    d.tokens = {mixed.t0};
    const auto t = run_step(*mixed.ex, {first1, last2, d});
    ASSERT_EQ(t.size(), 2u);
    mixed.t2 = t[0];
    mixed.t0 = t[1];
  }
  {  // one step, decode first
    StepSeq d = dec0;
    d.tokens = {sched.t0};
    const auto t = run_step(*sched.ex, {d, first1, last2});
    ASSERT_EQ(t.size(), 2u);
    sched.t0 = t[0];
    sched.t2 = t[1];
  }
  EXPECT_EQ(mixed.t0, sep.t0);
  EXPECT_EQ(mixed.t2, sep.t2);
  EXPECT_EQ(sched.t0, sep.t0);
  EXPECT_EQ(sched.t2, sep.t2);
  float worst = 0;
  for (int s : {0, 2}) {
    EXPECT_EQ(bit_differences(logits_of(*mixed.ex, s), logits_of(*sep.ex, s)), 0u) << "slot " << s;
    worst = std::max(worst, max_abs_diff(logits_of(*sched.ex, s), logits_of(*sep.ex, s)));
  }
  EXPECT_LE(worst, kLogitTol);
  for (Run* r : {&sep, &mixed, &sched}) {
    EXPECT_EQ(r->ex->slot_length(0), 6);
    EXPECT_EQ(r->ex->slot_length(1), 16);
    EXPECT_EQ(r->ex->slot_length(2), 40);
    r->t1 = run_step(*r->ex, {continue_seq(1, 16, slice(P1, 16, 37), blocks[1], true)}).at(0);
  }
  EXPECT_EQ(bit_differences(logits_of(*mixed.ex, 1), logits_of(*sep.ex, 1)), 0u);
  EXPECT_EQ(bit_differences(logits_of(*sched.ex, 1), logits_of(*sep.ex, 1)), 0u);
  EXPECT_EQ(mixed.t1, sep.t1);
  const int32_t* last[3] = {&sep.t0, &sep.t1, &sep.t2};
  for (int s = 0; s < 3; ++s) {
    const Decoded want = decode_alone(*sep.ex, s, *last[s], blocks[s], 4);
    expect_same_decodes(decode_alone(*mixed.ex, s, *last[s], blocks[s], 4), want, "mixed");
    EXPECT_EQ(decode_alone(*sched.ex, s, *last[s], blocks[s], 4).tokens, want.tokens) << s;
  }
  std::printf("mixed step, decode first: max |logit diff| vs separate steps %.2e\n", worst);
}

// Malformed steps throw rz::Error and change nothing: the slots' state and kept logits stay, and
// the next real step gives what an executor that never saw them gives, bit for bit.
TEST_F(CpuExecutorTest, MalformedStepsThrowAndChangeNothing) {
  CpuExecutor ex(model(), {.slots = 3, .max_context = 32});
  EXPECT_EQ(ex.max_slots(), 3);
  EXPECT_EQ(ex.max_context(), 32);
  EXPECT_EQ(ex.kv_block_size(), 16);
  EXPECT_EQ(ex.kv_blocks(), 6);  // 3 slots * 2 blocks
  ex.set_keep_logits(true);
  const int V = ex.config().n_vocab;
  const std::vector<int32_t> prompt = {1, 504, 3458, 282, 4649};
  const std::vector<int32_t> b0 = {4, 1}, b1 = {0, 5};
  const int32_t t0 = run_step(ex, {begin_seq(0, {}, prompt, b0, true)}).at(0);
  const std::vector<float> l0 = logits_of(ex, 0);

  // What every failed step must leave as it is.
  int len0 = 5;
  std::vector<float> kept0 = l0;
  auto expect_throw = [&](std::vector<StepSeq> seqs, const std::string& msg_part,
                          const char* what) {
    try {
      ex.step(seqs);
      ADD_FAILURE() << what << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(msg_part), std::string::npos)
          << what << ": " << e.what();
    }
    EXPECT_TRUE(ex.slot_active(0)) << what;
    EXPECT_EQ(ex.slot_length(0), len0) << what;
    EXPECT_EQ(bit_differences(ex.last_logits(0), kept0), 0u) << what;
    EXPECT_FALSE(ex.slot_active(1)) << what;
    EXPECT_FALSE(ex.slot_active(2)) << what;
  };
  const StepSeq ok0 = continue_seq(0, 5, {t0}, b0, true);
  const StepSeq ok1 = begin_seq(1, {}, prompt, b1, true);

  // Busy slot with begin, alone and next to valid entries.
  expect_throw({begin_seq(0, {}, prompt, b0, true)}, "busy", "begin on a busy slot");
  expect_throw({ok1, begin_seq(0, {}, prompt, b0, true)}, "busy", "busy slot after a valid one");
  // Start mismatch: a begin whose start is not the cached count, continuations at the wrong
  // position, a continuation of a free slot.
  {
    StepSeq s = ok1;
    s.start = 2;
    expect_throw({s}, "starts at 2 with 0 cached", "begin at start 2, nothing cached");
    s = begin_seq(1, {1, 2}, prompt, b1, true);
    s.start = 0;
    expect_throw({s}, "starts at 0 with 2 cached", "begin at start 0, 2 cached");
  }
  expect_throw({continue_seq(0, 4, {t0}, b0, true)}, "holds 5 tokens", "start behind");
  expect_throw({ok1, continue_seq(0, 6, {t0}, b0, true)}, "holds 5 tokens", "start ahead");
  expect_throw({ok0, continue_seq(2, 0, {t0}, {2}, true)}, "not active", "free slot");
  // Block table too short: 17 tokens in one block, a decode with no table, a cached prefix
  // beyond the table.
  expect_throw({begin_seq(1, {}, std::vector<int32_t>(17, 42), {0}, true)}, "2 needed",
               "17 tokens, one block");
  expect_throw({continue_seq(0, 5, {t0}, {}, true)}, "0 KV blocks", "no block table");
  expect_throw({ok0, begin_seq(1, std::vector<int32_t>(16, 42), {7}, {0}, true)}, "2 needed",
               "cached prefix beyond the table");
  // Block ids out of range, in the needed part of the table and beyond it.
  expect_throw({begin_seq(1, {}, prompt, {6}, true)}, "block 6 out of range", "block 6 of 6");
  expect_throw({begin_seq(1, {}, prompt, {-1}, true)}, "block -1", "block -1");
  expect_throw({ok0, begin_seq(1, {}, prompt, {0, 99}, true)}, "block 99", "unused block 99");
  // Tokens outside the vocabulary: computed and cached, at either end.
  expect_throw({begin_seq(1, {}, {1, V}, b1, true)}, "token id " + std::to_string(V),
               "token n_vocab");
  expect_throw({ok1, continue_seq(0, 5, {-1}, b0, true)}, "token id -1", "token -1");
  expect_throw({begin_seq(1, {V + 5}, {1}, b1, true)}, "token id", "cached token out of range");
  // The rest of the checks: slot out of range, a slot twice, no tokens, past the context.
  {
    StepSeq s = ok1;
    s.slot = 3;
    expect_throw({s}, "out of range", "slot 3 of 3");
    s.slot = -1;
    expect_throw({ok0, s}, "out of range", "slot -1");
  }
  expect_throw({ok1, begin_seq(1, {}, prompt, {2, 3}, true)}, "twice", "a slot twice");
  expect_throw({ok0, ok0}, "twice", "a decode twice");
  expect_throw({begin_seq(1, {}, {}, b1, true)}, "no tokens", "empty begin");
  expect_throw({continue_seq(0, 5, {}, b0, true)}, "no tokens", "empty continuation");
  expect_throw({begin_seq(1, {}, std::vector<int32_t>(33, 42), {0, 2, 3}, true)},
               "33 tokens do not fit", "past the context");

  // The next valid step gives exactly what an executor without the errors gives.
  CpuExecutor ref(model(), {.slots = 3, .max_context = 32});
  ref.set_keep_logits(true);
  ASSERT_EQ(run_step(ref, {begin_seq(0, {}, prompt, b0, true)}).at(0), t0);
  const auto got = run_step(ex, {ok0, ok1});
  const auto want = run_step(ref, {ok0, ok1});
  EXPECT_EQ(got, want);
  for (int s : {0, 1})
    EXPECT_EQ(bit_differences(ex.last_logits(s), ref.last_logits(s)), 0u) << "slot " << s;

  // Fill slot 0 to the context; the next token is refused. A step without entries returns
  // nothing.
  ex.release(1);
  int32_t t = got[0];
  while (ex.slot_length(0) < ex.max_context())
    t = run_step(ex, {continue_seq(0, ex.slot_length(0), {t}, b0, true)}).at(0);
  len0 = 32;
  kept0 = logits_of(ex, 0);
  expect_throw({continue_seq(0, 32, {t}, b0, true)}, "do not fit", "a full slot");
  EXPECT_TRUE(run_step(ex, {}).empty());
  // Release frees the slot for a new prompt (the blocks keep their KV, which the new sequence
  // overwrites); releasing a free slot is a no-op.
  ex.release(0);
  ex.release(0);
  EXPECT_FALSE(ex.slot_active(0));
  EXPECT_TRUE(ex.last_logits(0).empty());
  EXPECT_EQ(run_step(ex, {begin_seq(0, {}, prompt, b0, true)}).at(0), t0);
  EXPECT_EQ(bit_differences(ex.last_logits(0), l0), 0u);
}

// SlotRunner drives the same executor with its own block tables: block size 5 (tables of
// scattered blocks that cut the prompt mid-way) gives prompt 0's golden tokens, and bit for bit
// the logits of the default block size. A runner with too few blocks refuses a prompt.
TEST_F(CpuExecutorTest, BlockSizeDoesNotChangeTheResults) {
  const GoldenPrompt& g = golden().prompts[1];
  std::vector<std::vector<float>> logits[2];
  std::vector<int32_t> tokens[2];
  for (int k = 0; k < 2; ++k) {
    CpuExecutor ex(model(), {.slots = 2, .max_context = 64, .kv_block_size = k ? 5 : 0});
    EXPECT_EQ(ex.kv_block_size(), k ? 5 : 16);
    EXPECT_EQ(ex.kv_blocks(), k ? 2 * 13 : 2 * 4);
    ex.set_keep_logits(true);
    SlotRunner run(ex);
    // Slot 0 takes (and gives back) a few blocks first, so slot 1's table is not 0, 1, 2, ...
    run.prefill(greedy_request(0, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
    int32_t t = run.prefill(greedy_request(1, g.prompt));
    run.release(0);
    for (int s = 0; s < 12; ++s) {
      tokens[k].push_back(t);
      logits[k].push_back(logits_of(ex, 1));
      t = run.decode(1, t);
    }
    EXPECT_EQ(tokens[k], slice(g.greedy, 0, 12));
    if (k) {
      EXPECT_EQ(run.table(1).size(), 5u);  // 13 + 12 = 25 tokens in blocks of 5
    }
  }
  for (size_t s = 0; s < logits[0].size(); ++s)
    EXPECT_EQ(bit_differences(logits[0][s], logits[1][s]), 0u) << "step " << s;

  CpuExecutor small(model(), {.slots = 2, .max_context = 64, .kv_blocks = 2});
  SlotRunner run(small);
  EXPECT_THROW(run.prefill(greedy_request(0, std::vector<int32_t>(40, 42))), Error);
  EXPECT_FALSE(small.slot_active(0));
  EXPECT_EQ(run.blocks().free_blocks(), 2);
}

TEST_F(CpuExecutorTest, BadKvOptionsAreRefused) {
  EXPECT_THROW(CpuExecutor ex(model(), {.kv_block_size = -1}), Error);
  EXPECT_THROW(CpuExecutor ex(model(), {.kv_blocks = -1}), Error);
}

// A KV cache larger than the machine (here 4 slots of 2^24 tokens: terabytes) is a clear error
// naming the flags to lower, before anything is allocated.
TEST_F(CpuExecutorTest, KvCacheLargerThanTheMachineIsAClearError) {
  try {
    CpuExecutor ex(model(), {.slots = 4, .max_context = 1 << 24});
    FAIL() << "a terabyte KV cache was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("KV cache of 4 slots x 16777216 tokens"), std::string::npos) << what;
    EXPECT_NE(what.find("lower --ctx or --max-slots"), std::string::npos) << what;
  }
}

TEST_F(CpuExecutorTest, DefaultContextIsCappedTrainingContext) {
  CpuExecutor ex(model());
  EXPECT_EQ(ex.max_slots(), 1);
  EXPECT_EQ(ex.max_context(), std::min(ex.config().n_ctx_train, 4096));
  EXPECT_EQ(ex.max_context(), default_context(ex.config()));
  EXPECT_EQ(ex.kv_block_size(), kDefaultKvBlockSize);
  EXPECT_EQ(ex.kv_blocks(), (ex.max_context() + kDefaultKvBlockSize - 1) / kDefaultKvBlockSize);
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
