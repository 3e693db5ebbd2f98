// rz-wsbench's workload: the requests it sends and, in open loop, when. Everything here is a pure
// function of --seed and the request's index, so a run can be repeated exactly (same prompts,
// same lengths, same arrival times) on any machine: the random numbers come from our own
// splitmix64 generator and our own transforms, not from <random>'s distributions, whose output
// the C++ standard leaves to each library. Header-only
// (tests/net/wsbench_workload_test.cpp).
#pragma once
#include <cmath>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>

#include "bench/wsbench_options.hpp"
#include "proto/json_writer.hpp"
#include "proto/messages.hpp"

namespace rz::wsbench {

// splitmix64 (Steele, Lea, Flood 2014): a tiny, well-mixed 64-bit generator, enough for a load
// generator's choices.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Uniform integer in [lo, hi] (inclusive), without modulo bias (rejection sampling).
  int64_t uniform_int(int64_t lo, int64_t hi) {
    const uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo) + 1;  // 0: all
    if (span == 0) return static_cast<int64_t>(next());
    const uint64_t limit = UINT64_MAX - UINT64_MAX % span;  // accept x < limit
    uint64_t x;
    do x = next();
    while (x >= limit);
    return lo + static_cast<int64_t>(x % span);
  }

 private:
  uint64_t s_;
};

// An independent stream for (seed, stream, index): requests and the arrival process do not share
// random numbers, so changing one leaves the others as they were.
inline SplitMix64 stream_rng(uint64_t seed, uint64_t stream, uint64_t index) {
  SplitMix64 mix(seed ^ (stream * 0xD1B54A32D192ED03ull));
  const uint64_t a = mix.next();
  SplitMix64 mix2(a ^ (index * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull));
  return SplitMix64(mix2.next());
}

// Poisson arrivals at `rate` per second: inter-arrival gaps are exponential with mean 1/rate,
// drawn by inversion (-ln(1 - u) / rate). next() returns the absolute arrival times, in seconds
// from the start, increasing.
class PoissonArrivals {
 public:
  PoissonArrivals(double rate, uint64_t seed) : rate_(rate), rng_(stream_rng(seed, 2, 0)) {}
  double next() {
    t_ += -std::log1p(-rng_.uniform()) / rate_;
    return t_;
  }

 private:
  double rate_;
  SplitMix64 rng_;
  double t_ = 0.0;
};

// English words that are each one token, with the leading space, in GPT-2-style BPE vocabularies
// (checked with `rz tokenize` on SmolLM2's tokenizer: the 247 words joined by spaces are 247
// tokens); so a prompt
// of N words is about N tokens (the server's usage.prompt_tokens gives the exact count).
inline constexpr std::string_view kWords[] = {
    "the",      "of",      "and",    "to",      "in",      "is",        "was",       "for",
    "on",       "that",    "with",   "as",      "by",      "at",        "from",      "his",
    "her",      "they",    "this",   "had",     "not",     "are",       "but",       "have",
    "were",     "one",     "which",  "all",     "their",   "she",       "there",     "been",
    "when",     "who",     "more",   "will",    "would",   "out",       "also",      "into",
    "some",     "what",    "time",   "only",    "other",   "new",       "about",     "these",
    "can",      "two",     "after",  "over",    "then",    "first",     "him",       "many",
    "most",     "may",     "such",   "years",   "made",    "where",     "through",   "before",
    "like",     "between", "any",    "both",    "later",   "three",     "work",      "well",
    "back",     "being",   "under",  "during",  "year",    "part",      "city",      "world",
    "while",    "since",   "known",  "used",    "people",  "water",     "life",      "house",
    "name",     "river",   "school", "state",   "small",   "great",     "land",      "music",
    "long",     "high",    "family", "group",   "early",   "light",     "place",     "power",
    "night",    "story",   "child",  "garden",  "market",  "winter",    "summer",    "stone",
    "paper",    "table",   "window", "morning", "letter",  "friend",    "road",      "horse",
    "field",    "island",  "forest", "bridge",  "village", "church",    "mountain",  "animal",
    "language", "number",  "system", "order",   "point",   "word",      "voice",     "color",
    "heart",    "hand",    "head",   "body",    "face",    "eye",       "door",      "wall",
    "floor",    "room",    "book",   "film",    "game",    "song",      "army",      "team",
    "king",     "queen",   "ship",   "train",   "bird",    "tree",      "flower",    "fruit",
    "apple",    "bread",   "milk",   "fire",    "wind",    "rain",      "snow",      "cloud",
    "star",     "moon",    "sun",    "sea",     "lake",    "hill",      "valley",    "coast",
    "north",    "south",   "east",   "west",    "red",     "blue",      "green",     "black",
    "white",    "gold",    "silver", "iron",    "glass",   "wood",      "cold",      "warm",
    "dark",     "bright",  "quiet",  "loud",    "slow",    "fast",      "young",     "old",
    "simple",   "clear",   "open",   "short",   "deep",    "strong",    "soft",      "hard",
    "rich",     "poor",    "happy",  "free",    "full",    "late",      "good",      "best",
    "large",    "little",  "low",    "true",    "real",    "close",     "right",     "left",
    "half",     "whole",   "every",  "each",    "same",    "different", "important", "public",
    "local",    "social",  "human",  "natural", "general", "common",    "special",   "modern",
    "ancient",  "final",   "major",  "minor",   "central", "political", "national"};

// `words` words drawn uniformly from kWords, separated by single spaces.
inline std::string make_prompt(SplitMix64& rng, int64_t words) {
  std::string s;
  for (int64_t i = 0; i < words; ++i) {
    if (i) s.push_back(' ');
    s.append(kWords[static_cast<std::size_t>(rng.uniform_int(0, std::size(kWords) - 1))]);
  }
  return s;
}

// The index-th request of a run: id "r<index>", a prompt of --prompt-tokens words, --max-tokens,
// greedy by default with ignore_eos on; the sampling seed is derived too, so that a run with
// --temperature > 0 repeats as well.
inline proto::GenerateRequest make_request(const Options& o, uint64_t index) {
  SplitMix64 rng = stream_rng(o.seed, 1, index);
  const int64_t words = rng.uniform_int(o.prompt_tokens.min, o.prompt_tokens.max);
  const int64_t max_tokens = rng.uniform_int(o.max_tokens.min, o.max_tokens.max);
  proto::GenerateRequest r;
  r.id = "r" + std::to_string(index);
  std::string text = make_prompt(rng, words);
  if (o.chat)
    r.messages.push_back(ChatMessage{"user", std::move(text)});
  else
    r.prompt = std::move(text);
  r.max_tokens = static_cast<int>(max_tokens);
  r.sampling.temperature = o.temperature;
  r.sampling.seed = rng.next() >> 11;  // below 2^53: exact in any JSON reader
  r.ignore_eos = o.ignore_eos;
  return r;
}

// The same request for OpenAI's API (--api openai): the body of POST BASE/completions ("prompt")
// or BASE/chat/completions ("messages", for a chat request), with the same max_tokens, sampling
// fields, seed, penalties and ignore_eos as the WebSocket frame (top_k, min_p, repetition_penalty
// and ignore_eos are rz extensions that the API takes too; docs/openai.md), streamed, with the
// usage chunk asked for (it gives the request's token count). One choice: the benchmark's
// requests never ask for n or logprobs. "model" is left out unless given (rz answers any).
inline std::string openai_request_json(const proto::GenerateRequest& r,
                                       const std::optional<std::string>& model = std::nullopt) {
  std::string out = "{";
  auto key = [&](const char* k) {
    if (out.size() > 1) out.push_back(',');
    proto::append_json_string(out, k);
    out.push_back(':');
  };
  if (model) {
    key("model");
    proto::append_json_string(out, *model);
  }
  if (r.prompt) {
    key("prompt");
    proto::append_json_string(out, *r.prompt);
  } else {
    key("messages");
    out.push_back('[');
    for (std::size_t i = 0; i < r.messages.size(); ++i) {
      if (i) out.push_back(',');
      out.append("{\"role\":");
      proto::append_json_string(out, r.messages[i].role);
      out.append(",\"content\":");
      proto::append_json_string(out, r.messages[i].content);
      out.push_back('}');
    }
    out.push_back(']');
  }
  key("max_tokens");
  proto::append_int(out, r.max_tokens);
  const proto::Sampling& s = r.sampling;
  key("temperature");
  proto::append_float(out, s.temperature);
  key("top_k");
  proto::append_int(out, s.top_k);
  key("top_p");
  proto::append_float(out, s.top_p);
  key("min_p");
  proto::append_float(out, s.min_p);
  key("repetition_penalty");
  proto::append_float(out, s.repetition_penalty);
  if (s.seed) {
    key("seed");
    proto::append_uint(out, *s.seed);
  }
  if (s.presence_penalty != 0.0f) {
    key("presence_penalty");
    proto::append_float(out, s.presence_penalty);
  }
  if (s.frequency_penalty != 0.0f) {
    key("frequency_penalty");
    proto::append_float(out, s.frequency_penalty);
  }
  if (!r.stop.empty()) {
    key("stop");
    out.push_back('[');
    for (std::size_t i = 0; i < r.stop.size(); ++i) {
      if (i) out.push_back(',');
      proto::append_json_string(out, r.stop[i]);
    }
    out.push_back(']');
  }
  key("ignore_eos");
  out.append(r.ignore_eos ? "true" : "false");
  key("stream");
  out.append("true");
  key("stream_options");
  out.append("{\"include_usage\":true}");
  out.push_back('}');
  return out;
}

}  // namespace rz::wsbench
