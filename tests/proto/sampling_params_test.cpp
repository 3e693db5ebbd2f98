// Tests of proto/sampling_params.hpp: every sampling field reaches rz::SamplingParams, and the
// fallback seed is used only when the request gave none.
#include "proto/sampling_params.hpp"

#include <gtest/gtest.h>

#include "proto/parse.hpp"

namespace rz::proto {
namespace {

TEST(ProtoSamplingParams, CopiesEveryField) {
  Sampling s{0.3f, 12, 0.8f, 0.02f, 1.15f, 99};
  SamplingParams p = to_sampling_params(s, 5);
  EXPECT_EQ(p.temperature, 0.3f);
  EXPECT_EQ(p.top_k, 12);
  EXPECT_EQ(p.top_p, 0.8f);
  EXPECT_EQ(p.min_p, 0.02f);
  EXPECT_EQ(p.repetition_penalty, 1.15f);
  EXPECT_EQ(p.seed, 99u);
  EXPECT_EQ(p.repetition_last_n, SamplingParams{}.repetition_last_n);
}

TEST(ProtoSamplingParams, RandomSeedOnlyWhenAbsent) {
  Sampling s;
  EXPECT_EQ(to_sampling_params(s, 5).seed, 5u);
  s.seed = 0;
  EXPECT_EQ(to_sampling_params(s, 5).seed, 0u);
}

TEST(ProtoSamplingParams, RequestDefaultsAreTheClis) {
  // A request that gives no sampling fields samples with the CLI defaults, not the executor's
  // "off" defaults.
  auto r = parse_client_message(R"({"type":"generate","id":"r","prompt":"x"})");
  ASSERT_TRUE(std::holds_alternative<GenerateRequest>(r));
  SamplingParams p = to_sampling_params(std::get<GenerateRequest>(r).sampling, 1);
  EXPECT_EQ(p.temperature, 0.7f);
  EXPECT_EQ(p.top_k, 40);
  EXPECT_EQ(p.top_p, 0.95f);
  EXPECT_EQ(p.min_p, 0.05f);
  EXPECT_EQ(p.repetition_penalty, 1.0f);
}

}  // namespace
}  // namespace rz::proto
