// StopMatcher (actors/session_stop.hpp): stop strings split across pushes, false starts,
// overlapping prefixes, the earliest match among several stops, and a randomised comparison
// with a plain search over the text received so far after each piece.
#include "actors/session_stop.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

using rz::engine::StopMatcher;

namespace {

// Feeds `pieces` and returns what the client would see (released text, flushed if no match).
std::string run(const std::vector<std::string>& stops, const std::vector<std::string>& pieces,
                bool* stopped = nullptr) {
  StopMatcher m(stops);
  std::string out;
  for (const auto& p : pieces) {
    auto r = m.push(p);
    out += r.text;
    if (r.stopped) break;
  }
  if (!m.stopped()) out += m.flush();
  if (stopped) *stopped = m.stopped();
  return out;
}

}  // namespace

TEST(StopMatcher, PassesTextThroughWithoutStops) {
  StopMatcher m({});
  EXPECT_EQ(m.push("Hello").text, "Hello");
  EXPECT_EQ(m.push(" world").text, " world");
  EXPECT_FALSE(m.holding());
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, HoldsBackAPossibleStartAndCutsBeforeTheMatch) {
  StopMatcher m({"\n\n"});
  auto r = m.push("Hel");
  EXPECT_EQ(r.text, "Hel");
  r = m.push("lo\n");
  EXPECT_EQ(r.text, "lo");
  EXPECT_TRUE(m.holding());
  r = m.push("\nmore");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "");
  EXPECT_TRUE(m.push("after").text.empty()) << "nothing after a match";
}

TEST(StopMatcher, StopSplitOverThreePieces) {
  bool stopped = false;
  EXPECT_EQ(run({"END"}, {"abc E", "N", "Dxyz"}, &stopped), "abc ");
  EXPECT_TRUE(stopped);
}

TEST(StopMatcher, FalseStartIsReleased) {
  StopMatcher m({"abc"});
  EXPECT_EQ(m.push("xab").text, "x");
  EXPECT_EQ(m.push("x").text, "abx");
  EXPECT_FALSE(m.holding());
}

TEST(StopMatcher, OverlappingPrefix) {
  bool stopped = false;
  EXPECT_EQ(run({"aab"}, {"a", "a", "a", "b"}, &stopped), "a");
  EXPECT_TRUE(stopped);
}

TEST(StopMatcher, EarliestMatchWins) {
  bool stopped = false;
  EXPECT_EQ(run({"bc", "abcd"}, {"xabcd"}, &stopped), "x");
  EXPECT_TRUE(stopped);
  EXPECT_EQ(run({"cd", "b"}, {"xa", "bcd"}, &stopped), "xa");
}

TEST(StopMatcher, FlushReleasesHeldTextWhenNothingMatched) {
  bool stopped = true;
  EXPECT_EQ(run({"\n\n"}, {"one\n"}, &stopped), "one\n");
  EXPECT_FALSE(stopped);
}

TEST(StopMatcher, MultiByteStopString) {
  bool stopped = false;
  const std::string e = "\xC3\xA9";  // é
  EXPECT_EQ(run({e + "t"}, {"caf\xC3", "\xA9", "t!"}, &stopped), "caf");
  EXPECT_TRUE(stopped);
}

TEST(StopMatcher, RandomTextsAgreeWithSearchingTheWholeText) {
  std::mt19937 rng(7);
  const std::string alphabet = "ab\n";
  auto rand_str = [&](int min_len, int max_len) {
    std::string s(std::uniform_int_distribution<int>(min_len, max_len)(rng), 'a');
    for (char& c : s) c = alphabet[std::uniform_int_distribution<int>(0, 2)(rng)];
    return s;
  };
  for (int iter = 0; iter < 3000; ++iter) {
    const std::string text = rand_str(0, 30);
    std::vector<std::string> stops;
    const int n_stops = std::uniform_int_distribution<int>(1, 3)(rng);
    for (int i = 0; i < n_stops; ++i) stops.push_back(rand_str(1, 4));
    // Random split into pieces (tokens).
    std::vector<std::string> pieces;
    for (size_t i = 0; i < text.size();) {
      const size_t n = std::uniform_int_distribution<size_t>(0, 5)(rng);
      pieces.push_back(text.substr(i, n));
      i += n;
    }
    // Reference: after the first piece whose arrival makes the text contain a stop string, the
    // text ends before the earliest stop string found in the text so far.
    size_t cut = std::string::npos;
    std::string seen;
    for (const auto& p : pieces) {
      seen += p;
      for (const auto& st : stops) cut = std::min(cut, seen.find(st));
      if (cut != std::string::npos) break;
    }
    const std::string expected = cut == std::string::npos ? text : text.substr(0, cut);
    bool stopped = false;
    ASSERT_EQ(run(stops, pieces, &stopped), expected) << "iteration " << iter;
    ASSERT_EQ(stopped, cut != std::string::npos) << "iteration " << iter;
  }
}
