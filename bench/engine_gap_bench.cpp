// The host's time between executor steps through the actor engine (a benchmark, not a test):
// what serving adds to every step on top of the executor's own time, with no GPU and no network.
// The engine (session actors, the batcher, the gpu actor) runs over the scheduler tests' fake
// executor (tests/sched/fake_executor.hpp), each of whose steps is padded by a busy wait to
// --step-us, the time of a real decode step. B sessions each generate --tokens tokens at once.
// Per stream count: the gap from one step's end to the next step's start (p50 / p90 / p99 /
// mean: the gpu actor's reply, the batcher's apply, routing and planning, the next message),
// and the steps' share of the wall time, the ceiling these gaps put on served / engine
// throughput (docs/performance.md, "Serving follows the engine?").
//
//   engine_gap_bench [--streams 1,16,64,256] [--step-us 1500] [--tokens 400]
//                    [--model models/SmolLM2-135M-Instruct.Q4_1.gguf]   (its tokenizer only)
//                    [--moderate-polls N] [--moderate-sleep-us N]
//
// The last two set CAF's work-stealing scheduler (work-stealing.moderate-poll-attempts,
// .moderate-sleep-duration; CAF's defaults 500 and 50 us): an idle worker polls its queue that
// many times, sleeping that long between polls, before it waits on a condition variable, and
// only that wait is woken by a message from outside the scheduler (the gpu actor's thread).
//
// The gaps are host work and thread wake-ups: on a machine busy with other work they grow.
#include <caf/all.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "actors/engine.hpp"
#include "formats/gguf.hpp"
#include "tests/sched/fake_executor.hpp"
#include "tests/sched/forwarding_executor.hpp"
#include "tokenizer/tokenizer.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::vector<int> streams = {1, 16, 64, 256};
  int step_us = 1500, tokens = 400;
  std::string model = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  long moderate_polls = -1, moderate_sleep_us = -1;  // -1: CAF's default
};

// The fake executor, each step padded to step_us and its start and end recorded.
class PacedExecutor : public rz_test::ForwardingExecutor {
 public:
  PacedExecutor(std::unique_ptr<rz::Executor> inner, int step_us)
      : ForwardingExecutor(std::move(inner)), step_(std::chrono::microseconds(step_us)) {}
  std::vector<int32_t> step(std::span<const rz::StepSeq> seqs) override {
    const Clock::time_point start = Clock::now();
    std::vector<int32_t> out = ForwardingExecutor::step(seqs);
    while (Clock::now() - start < step_) {
    }
    std::lock_guard<std::mutex> lock(mu_);
    times_.emplace_back(start, Clock::now());
    return out;
  }
  std::vector<std::pair<Clock::time_point, Clock::time_point>> times() const {
    std::lock_guard<std::mutex> lock(mu_);
    return times_;
  }

 private:
  Clock::duration step_;
  mutable std::mutex mu_;
  std::vector<std::pair<Clock::time_point, Clock::time_point>> times_;
};

// Counts a session's final frames (done or error).
class CountingSink : public rz::engine::FrameSink {
 public:
  void deliver(rz::proto::ServerFrame frame) override {
    if (std::holds_alternative<rz::proto::TokenFrame>(frame)) return;
    std::lock_guard<std::mutex> lock(mu_);
    ++finals_;
  }
  int finals() const {
    std::lock_guard<std::mutex> lock(mu_);
    return finals_;
  }

 private:
  mutable std::mutex mu_;
  int finals_ = 0;
};

double quantile(const std::vector<double>& sorted, double q) {
  return sorted.empty() ? 0.0 : sorted[size_t(q * double(sorted.size() - 1))];
}

void run(const Options& o, int streams, const std::shared_ptr<const rz::Tokenizer>& tok) {
  caf::actor_system_config cfg;
  if (o.moderate_polls >= 0)
    cfg.set("work-stealing.moderate-poll-attempts", size_t(o.moderate_polls));
  if (o.moderate_sleep_us >= 0)
    cfg.set("work-stealing.moderate-sleep-duration",
            caf::timespan{std::chrono::microseconds(o.moderate_sleep_us)});
  caf::actor_system sys{cfg};
  const int n_vocab = tok->n_vocab();
  auto paced = std::make_unique<PacedExecutor>(
      std::make_unique<rz_test::FakeExecutor>(streams, o.tokens + 64, n_vocab), o.step_us);
  const PacedExecutor* ex = paced.get();
  rz::engine::EngineConfig ec;
  ec.max_queue = streams;
  auto engine = rz::engine::Engine::start(sys, std::move(paced), tok, std::nullopt, ec);
  std::vector<std::shared_ptr<CountingSink>> sinks;
  std::vector<rz::engine::Session> sessions;
  for (int i = 0; i < streams; ++i) {
    sinks.push_back(std::make_shared<CountingSink>());
    sessions.push_back(engine->open_session(sinks.back()));
    rz::proto::GenerateRequest r;
    r.id = "r" + std::to_string(i);
    r.prompt = "hello world";
    r.max_tokens = o.tokens;
    r.sampling.seed = uint64_t(i) + 1;
    r.ignore_eos = true;
    sessions.back().generate(std::move(r));
  }
  for (bool done = false; !done;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    done = std::all_of(sinks.begin(), sinks.end(), [](const auto& s) { return s->finals() > 0; });
  }
  const auto t = ex->times();
  sessions.clear();
  engine.reset();
  // Steady state: past the first steps (admission) and before the last (the streams' ends).
  const size_t skip = std::min<size_t>(t.size() / 10 + 2, t.size());
  std::vector<double> gaps;
  double busy = 0;
  for (size_t i = skip; i + 1 < t.size() - std::min(skip, t.size()); ++i) {
    gaps.push_back(std::chrono::duration<double, std::micro>(t[i + 1].first - t[i].second).count());
    busy += std::chrono::duration<double, std::micro>(t[i].second - t[i].first).count();
  }
  std::sort(gaps.begin(), gaps.end());
  double sum = 0;
  for (double g : gaps) sum += g;
  const double mean = gaps.empty() ? 0 : sum / double(gaps.size());
  const double step = gaps.empty() ? 0 : busy / double(gaps.size());
  std::printf("| %d | %zu | %.0f | %.1f | %.1f | %.1f | %.1f | %.3f |\n", streams, gaps.size(),
              step, quantile(gaps, 0.5), quantile(gaps, 0.9), quantile(gaps, 0.99), mean,
              busy / (busy + sum));
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  bool bad = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      bad = true;
      break;
    }
    const std::string v = argv[++i];
    if (a == "--streams") {
      o.streams.clear();
      std::stringstream ss(v);
      for (std::string x; std::getline(ss, x, ',');) o.streams.push_back(std::atoi(x.c_str()));
    } else if (a == "--step-us") {
      o.step_us = std::atoi(v.c_str());
    } else if (a == "--tokens") {
      o.tokens = std::atoi(v.c_str());
    } else if (a == "--model") {
      o.model = v;
    } else if (a == "--moderate-polls") {
      o.moderate_polls = std::atol(v.c_str());
    } else if (a == "--moderate-sleep-us") {
      o.moderate_sleep_us = std::atol(v.c_str());
    } else {
      std::fprintf(stderr, "engine_gap_bench: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (bad || o.step_us < 0 || o.tokens < 16 || o.streams.empty() ||
      std::any_of(o.streams.begin(), o.streams.end(), [](int s) { return s < 1; })) {
    std::fprintf(stderr,
                 "usage: engine_gap_bench [--streams 1,16,64,256] [--step-us 1500] [--tokens 400] "
                 "[--model FILE] [--moderate-polls N] [--moderate-sleep-us N]\n");
    return 2;
  }
  try {
    const std::shared_ptr<const rz::Tokenizer> tok(
        rz::Tokenizer::from_gguf(*rz::GgufFile::open(o.model)));
    std::printf(
        "engine_gap_bench: fake executor, steps padded to %d us, %d tokens a stream, %u hardware "
        "threads, CAF moderate polls %ld, sleep %ld us (-1: CAF's default)\n\n",
        o.step_us, o.tokens, std::thread::hardware_concurrency(), o.moderate_polls,
        o.moderate_sleep_us);
    std::printf(
        "| streams | steps | step us | gap p50 us | p90 | p99 | mean | steps' share of wall |\n"
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (int s : o.streams) run(o, s, tok);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "engine_gap_bench: %s\n", e.what());
    return 1;
  }
}
