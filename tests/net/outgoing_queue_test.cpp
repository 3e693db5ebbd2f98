// OutgoingQueue: order, coalescing of token frames per request (text, tokens, index of the
// first), no merging across a request's end or into the frame being written, and the bounds.
#include "net/outgoing_queue.hpp"

#include <gtest/gtest.h>

#include "proto/serialize.hpp"

namespace rz::net {
namespace {

proto::TokenFrame tok(std::string id, std::string text, std::vector<int32_t> ids, uint64_t index) {
  return proto::TokenFrame{std::move(id), std::move(text), std::move(ids), index, std::nullopt, {}};
}

const proto::TokenFrame& as_tok(const std::optional<proto::ServerFrame>& f) {
  return std::get<proto::TokenFrame>(*f);
}

TEST(OutgoingQueue, KeepsOrderOfDifferentFrames) {
  OutgoingQueue q;
  EXPECT_FALSE(q.push(proto::PongFrame{}).coalesced);
  q.push(tok("a", "x", {1}, 0));
  q.push(proto::DoneFrame{"a", proto::FinishReason::stop, {}, {}, std::nullopt});
  ASSERT_EQ(q.size(), 3u);
  EXPECT_TRUE(std::holds_alternative<proto::PongFrame>(*q.pop()));
  EXPECT_EQ(as_tok(q.pop()).text, "x");
  EXPECT_TRUE(std::holds_alternative<proto::DoneFrame>(*q.pop()));
  EXPECT_FALSE(q.pop().has_value());
  EXPECT_EQ(q.bytes(), 0u);
}

TEST(OutgoingQueue, CoalescesTokenFramesOfOneRequest) {
  OutgoingQueue q;
  q.push(tok("a", "Hel", {10}, 0));
  q.push(tok("b", "X", {7}, 0));
  EXPECT_TRUE(q.push(tok("a", "lo", {11, 12}, 1)).coalesced);
  EXPECT_TRUE(q.push(tok("b", "Y", {8}, 1)).coalesced);
  EXPECT_TRUE(q.push(tok("a", "", {13}, 3)).coalesced);
  ASSERT_EQ(q.size(), 2u);
  const auto a = q.pop();
  EXPECT_EQ(as_tok(a).id, "a");
  EXPECT_EQ(as_tok(a).text, "Hello");
  EXPECT_EQ(as_tok(a).tokens, (std::vector<int32_t>{10, 11, 12, 13}));
  EXPECT_EQ(as_tok(a).index, 0u);
  const auto b = q.pop();
  EXPECT_EQ(as_tok(b).text, "XY");
  EXPECT_EQ(as_tok(b).tokens, (std::vector<int32_t>{7, 8}));
}

TEST(OutgoingQueue, NeverMergesIntoAPoppedFrameOrAcrossTheEnd) {
  OutgoingQueue q;
  q.push(tok("a", "1", {1}, 0));
  (void)q.pop();  // being written
  EXPECT_FALSE(q.push(tok("a", "2", {2}, 1)).coalesced);
  q.push(proto::ErrorFrame{proto::ErrorCode::slow_consumer, "slow", std::string("a")});
  // The id is reused by a new request after its end: a fresh frame, not merged.
  EXPECT_FALSE(q.push(tok("a", "3", {3}, 0)).coalesced);
  EXPECT_EQ(q.size(), 3u);
  EXPECT_EQ(as_tok(q.pop()).text, "2");
  (void)q.pop();
  EXPECT_EQ(as_tok(q.pop()).text, "3");
  // After a done frame too.
  q.push(tok("c", "x", {1}, 0));
  q.push(proto::DoneFrame{"c", proto::FinishReason::length, {}, {}, std::nullopt});
  EXPECT_FALSE(q.push(tok("c", "y", {2}, 0)).coalesced);
  EXPECT_EQ(q.size(), 3u);
}

TEST(OutgoingQueue, MergedFramesStayOrderedAfterPops) {
  OutgoingQueue q;
  q.push(tok("a", "a0", {0}, 0));
  q.push(tok("b", "b0", {0}, 0));
  (void)q.pop();                   // a0 written
  q.push(tok("a", "a1", {1}, 1));  // new waiting frame for a
  EXPECT_TRUE(q.push(tok("b", "b1", {1}, 1)).coalesced);
  EXPECT_TRUE(q.push(tok("a", "a2", {2}, 2)).coalesced);
  EXPECT_EQ(as_tok(q.pop()).text, "b0b1");
  const auto a = q.pop();
  EXPECT_EQ(as_tok(a).text, "a1a2");
  EXPECT_EQ(as_tok(a).index, 1u);
  EXPECT_TRUE(q.empty());
}

TEST(OutgoingQueue, FrameBound) {
  OutgoingQueue q({.max_frames = 3, .max_bytes = 1 << 20});
  EXPECT_FALSE(q.push(proto::PongFrame{}).over_limit);
  EXPECT_FALSE(q.push(proto::PongFrame{}).over_limit);
  EXPECT_FALSE(q.push(proto::PongFrame{}).over_limit);
  EXPECT_TRUE(q.push(proto::PongFrame{}).over_limit);
  EXPECT_EQ(q.size(), 4u);  // kept all the same
  (void)q.pop();
  EXPECT_FALSE(q.over_limit());
}

TEST(OutgoingQueue, ByteBoundCountsCoalescedText) {
  OutgoingQueue q({.max_frames = 100, .max_bytes = 600});
  std::size_t pushes = 0;
  OutgoingQueue::PushResult r;
  do {
    r = q.push(tok("a", std::string(20, 'x'), {1}, pushes));
    ++pushes;
  } while (!r.over_limit && pushes < 1000);
  EXPECT_TRUE(r.over_limit);
  EXPECT_EQ(q.size(), 1u);  // all merged into one frame
  EXPECT_GT(q.bytes(), 600u);
  EXPECT_LT(pushes, 40u);
  // The estimate bounds the real serialized size for ASCII text.
  const auto f = q.pop();
  EXPECT_GE(estimated_bytes(*f), proto::to_json(*f).size());
}

TEST(OutgoingQueue, EstimateBoundsRealSize) {
  const proto::ServerFrame frames[] = {
      tok("request-1", "Hello, world", {1, 22, 333, 4444, 55555, 2147483647}, 12),
      proto::DoneFrame{"r",
                       proto::FinishReason::cancelled,
                       {123456, 654321},
                       {12345.678, 99999.5},
                       std::nullopt},
      proto::ErrorFrame{proto::ErrorCode::context_length_exceeded, "the prompt is too long",
                        std::string("abc")},
      proto::PongFrame{}};
  for (const auto& f : frames) EXPECT_GE(estimated_bytes(f), proto::to_json(f).size());
}

// Found by tests/net/hostile_clients.py (a client that never reads, asking for logprobs): merged
// frames lost the log-probabilities of every token after the first, and the byte estimate left
// them out, so such a reader was never cut off. And frames of two choices of one request (n > 1)
// share the id: they must never merge.
proto::TokenFrame tok_lp(std::string id, std::string text, int32_t id_tok, uint64_t index,
                         std::optional<int> choice = std::nullopt) {
  proto::TokenFrame f{std::move(id), text, {id_tok}, index, choice, {}};
  proto::TokenLogprob l{id_tok, text, -0.5f, {}};
  for (int k = 0; k < 20; ++k) l.top.push_back({id_tok + k, text + "x", -0.5f - k});
  f.logprobs.push_back(std::move(l));
  return f;
}

TEST(OutgoingQueue, CoalescingKeepsEveryLogprobEntryAndCountsItsBytes) {
  OutgoingQueue q;
  q.push(tok_lp("a", "He", 7, 0));
  EXPECT_TRUE(q.push(tok_lp("a", "llo", 8, 1)).coalesced);
  EXPECT_TRUE(q.push(tok_lp("a", "!", 9, 2)).coalesced);
  auto f = q.pop();
  const proto::TokenFrame& t = as_tok(f);
  EXPECT_EQ(t.tokens, (std::vector<int32_t>{7, 8, 9}));
  ASSERT_EQ(t.logprobs.size(), 3u);
  EXPECT_EQ(t.logprobs[1].token, 8);
  EXPECT_EQ(t.logprobs[2].text, "!");
  EXPECT_EQ(t.logprobs[2].top.size(), 20u);
  EXPECT_GE(estimated_bytes(*f), proto::to_json(*f).size());
  EXPECT_GT(estimated_bytes(*f), 3u * 20u * 50u);  // the alternatives count

  OutgoingQueue small(OutgoingQueueLimits{512, 16 << 10});
  bool over = false;
  for (uint64_t i = 0; i < 12 && !over; ++i)
    over = small.push(tok_lp("b", "word", 5, i)).over_limit;
  EXPECT_TRUE(over) << "12 tokens with 20 alternatives each are over 16 KiB";
}

TEST(OutgoingQueue, ChoicesOfOneRequestNeverMerge) {
  OutgoingQueue q;
  q.push(tok_lp("n", "a", 1, 0, 0));
  EXPECT_FALSE(q.push(tok_lp("n", "b", 2, 0, 1)).coalesced);
  EXPECT_TRUE(q.push(tok_lp("n", "c", 3, 1, 0)).coalesced);
  EXPECT_TRUE(q.push(tok_lp("n", "d", 4, 1, 1)).coalesced);
  // Choice 0 ends; choice 1's frame still takes its next token, choice 0's a new frame.
  q.push(proto::DoneFrame{"n", proto::FinishReason::stop, {}, {}, 0});
  EXPECT_TRUE(q.push(tok_lp("n", "e", 5, 2, 1)).coalesced);
  auto a = q.pop(), b = q.pop();
  EXPECT_EQ(as_tok(a).choice, std::optional<int>(0));
  EXPECT_EQ(as_tok(a).tokens, (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(as_tok(b).choice, std::optional<int>(1));
  EXPECT_EQ(as_tok(b).tokens, (std::vector<int32_t>{2, 4, 5}));
  EXPECT_EQ(as_tok(b).logprobs.size(), 3u);
  // An error for the whole request ends every choice's merging.
  q.push(tok_lp("m", "x", 1, 0, 0));
  q.push(tok_lp("m", "y", 1, 0, 1));
  q.push(proto::ErrorFrame{proto::ErrorCode::internal, "boom", std::string("m")});
  EXPECT_FALSE(q.push(tok_lp("m", "z", 2, 1, 1)).coalesced);
}

TEST(OutgoingQueue, ClearEmptiesAndForgetsRequests) {
  OutgoingQueue q;
  q.push(tok("a", "x", {1}, 0));
  q.clear();
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.bytes(), 0u);
  EXPECT_FALSE(q.push(tok("a", "y", {2}, 1)).coalesced);
  EXPECT_EQ(as_tok(q.pop()).text, "y");
}

}  // namespace
}  // namespace rz::net
