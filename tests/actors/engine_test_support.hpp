// Test helpers for the actor engine: a FrameSink that records frames and lets a test wait for
// them, a gate that lets a test run the executor one step at a time (so that cancels and sink
// losses land at a known step boundary), and the default model's tokenizer.
#pragma once
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "actors/engine.hpp"
#include "formats/common.hpp"
#include "formats/gguf.hpp"
#include "model/executor.hpp"
#include "model/executor_checks.hpp"
#include "tests/sched/forwarding_executor.hpp"
#include "tokenizer/tokenizer.hpp"

namespace rz_test {

inline std::string default_model_path() {
  return RZ_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

inline std::shared_ptr<const rz::Tokenizer> default_tokenizer() {
  static std::shared_ptr<const rz::Tokenizer> tok = [] {
    return std::shared_ptr<const rz::Tokenizer>(
        rz::Tokenizer::from_gguf(*rz::GgufFile::open(default_model_path())));
  }();
  return tok;
}

// Records every frame; tests wait on predicates over the record.
class RecordingSink : public rz::engine::FrameSink {
 public:
  using Frames = std::vector<rz::proto::ServerFrame>;

  void deliver(rz::proto::ServerFrame frame) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      frames_.push_back(std::move(frame));
    }
    cv_.notify_all();
  }

  Frames frames() const {
    std::lock_guard<std::mutex> lock(mu_);
    return frames_;
  }

  // Waits up to `timeout` for pred(frames) to hold; returns whether it did.
  bool wait(const std::function<bool(const Frames&)>& pred,
            std::chrono::milliseconds timeout = std::chrono::seconds(20)) const {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return pred(frames_); });
  }

  // The frames about request `id`, in order.
  Frames of(const std::string& id) const {
    Frames out;
    for (const auto& f : frames()) {
      if (const auto* t = std::get_if<rz::proto::TokenFrame>(&f); t && t->id == id)
        out.push_back(f);
      if (const auto* d = std::get_if<rz::proto::DoneFrame>(&f); d && d->id == id) out.push_back(f);
      if (const auto* e = std::get_if<rz::proto::ErrorFrame>(&f); e && e->id == id)
        out.push_back(f);
    }
    return out;
  }

  static bool is_final_for(const rz::proto::ServerFrame& f, const std::string& id) {
    if (const auto* d = std::get_if<rz::proto::DoneFrame>(&f)) return d->id == id;
    if (const auto* e = std::get_if<rz::proto::ErrorFrame>(&f)) return e->id && *e->id == id;
    return false;
  }
  static int count_final(const Frames& fs, const std::string& id) {
    int n = 0;
    for (const auto& f : fs) n += is_final_for(f, id);
    return n;
  }
  bool wait_final(const std::string& id,
                  std::chrono::milliseconds timeout = std::chrono::seconds(20)) const {
    return wait([&](const Frames& fs) { return count_final(fs, id) > 0; }, timeout);
  }
  static int count_tokens(const Frames& fs, const std::string& id) {
    int n = 0;
    for (const auto& f : fs)
      if (const auto* t = std::get_if<rz::proto::TokenFrame>(&f); t && t->id == id)
        n += static_cast<int>(t->tokens.size());
    return n;
  }
  bool wait_tokens(const std::string& id, int n,
                   std::chrono::milliseconds timeout = std::chrono::seconds(20)) const {
    return wait([&](const Frames& fs) { return count_tokens(fs, id) >= n; }, timeout);
  }
  bool wait_pongs(int n) const {
    return wait([&](const Frames& fs) {
      int k = 0;
      for (const auto& f : fs) k += std::holds_alternative<rz::proto::PongFrame>(f);
      return k >= n;
    });
  }

  // The request's final frame (done or error), if any.
  std::optional<rz::proto::ServerFrame> final_of(const std::string& id) const {
    for (const auto& f : frames())
      if (is_final_for(f, id)) return f;
    return std::nullopt;
  }
  std::optional<rz::proto::DoneFrame> done_of(const std::string& id) const {
    auto f = final_of(id);
    if (!f) return std::nullopt;
    if (const auto* d = std::get_if<rz::proto::DoneFrame>(&*f)) return *d;
    return std::nullopt;
  }
  std::optional<rz::proto::ErrorFrame> error_of(const std::string& id) const {
    auto f = final_of(id);
    if (!f) return std::nullopt;
    if (const auto* e = std::get_if<rz::proto::ErrorFrame>(&*f)) return *e;
    return std::nullopt;
  }
  std::string text_of(const std::string& id) const {
    std::string s;
    for (const auto& f : of(id))
      if (const auto* t = std::get_if<rz::proto::TokenFrame>(&f)) s += t->text;
    return s;
  }
  std::vector<int32_t> tokens_of(const std::string& id) const {
    std::vector<int32_t> v;
    for (const auto& f : of(id))
      if (const auto* t = std::get_if<rz::proto::TokenFrame>(&f))
        v.insert(v.end(), t->tokens.begin(), t->tokens.end());
    return v;
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  Frames frames_;
};

// Permits for executor steps: each step call takes one (or runs freely once opened).
class StepGate {
 public:
  void allow(int n) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      permits_ += n;
    }
    cv_.notify_all();
  }
  void open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  // Once opened, each step first sleeps this long (a slow executor).
  void set_delay(std::chrono::milliseconds d) {
    std::lock_guard<std::mutex> lock(mu_);
    delay_ = d;
  }
  void take() {
    std::unique_lock<std::mutex> lock(mu_);
    if (open_ && delay_.count() > 0) {
      const auto d = delay_;
      lock.unlock();
      std::this_thread::sleep_for(d);
      lock.lock();
    }
    ++waiting_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_ || permits_ > 0; });
    --waiting_;
    if (!open_) --permits_;
    ++taken_;
    cv_.notify_all();
  }
  // Waits until a step is blocked at the gate with no permit left (the engine is between a
  // plan and its result, and everything before that step has run).
  bool wait_blocked(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return waiting_ > 0 && permits_ == 0; });
  }
  // Waits until exactly n steps have passed and the next one is blocked.
  bool wait_blocked_after(int n, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout,
                        [&] { return waiting_ > 0 && permits_ == 0 && taken_ == n; });
  }
  int taken() const {
    std::lock_guard<std::mutex> lock(mu_);
    return taken_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int permits_ = 0;
  int waiting_ = 0;
  int taken_ = 0;
  bool open_ = false;
  std::chrono::milliseconds delay_{0};
};

// Runs another executor behind a StepGate.
class GatedExecutor : public ForwardingExecutor {
 public:
  GatedExecutor(std::unique_ptr<rz::Executor> inner, std::shared_ptr<StepGate> gate)
      : ForwardingExecutor(std::move(inner)), gate_(std::move(gate)) {}
  std::vector<int32_t> step(std::span<const rz::StepSeq> seqs) override {
    gate_->take();
    return ForwardingExecutor::step(seqs);
  }

 private:
  std::shared_ptr<StepGate> gate_;
};

// Every slot plays the same token script: its first sampled token is script[0], each later one
// the next (the last one again past the end). Checks its inputs like a real executor
// (model/executor_checks.hpp), with one full context of blocks per slot.
class ScriptedExecutor : public rz::Executor {
 public:
  ScriptedExecutor(int max_slots, int max_context, int n_vocab, std::vector<int32_t> script)
      : max_slots_(max_slots),
        max_context_(max_context),
        script_(std::move(script)),
        slots_(static_cast<size_t>(max_slots)) {
    cfg_.n_vocab = n_vocab;
  }
  const rz::ModelConfig& config() const override { return cfg_; }
  int max_slots() const override { return max_slots_; }
  int max_context() const override { return max_context_; }
  int kv_block_size() const override { return rz::kDefaultKvBlockSize; }
  int64_t kv_blocks() const override {
    return int64_t{max_slots_} * ((max_context_ + kv_block_size() - 1) / kv_block_size());
  }
  std::vector<int32_t> step(std::span<const rz::StepSeq> seqs) override {
    rz::check_step(seqs, rz::SlotView{max_slots_, max_context_, cfg_.n_vocab, kv_block_size(),
                                      kv_blocks(), [this](int i) { return at(i).active; },
                                      [this](int i) { return at(i).length; }});
    std::vector<int32_t> out;
    for (const auto& e : seqs) {
      Slot& s = at(e.slot);
      if (e.begin) s = Slot{true, e.start, 0};
      s.length = e.end();
      if (e.sample) out.push_back(next(s));
    }
    return out;
  }
  void release(int slot) override { at(slot) = Slot{}; }
  bool slot_active(int slot) const override { return slots_.at(static_cast<size_t>(slot)).active; }
  int slot_length(int slot) const override { return slots_.at(static_cast<size_t>(slot)).length; }
  void set_keep_logits(bool) override {}
  std::span<const float> last_logits(int) const override { return {}; }

 private:
  struct Slot {
    bool active = false;
    int length = 0;
    size_t produced = 0;
  };
  Slot& at(int slot) {
    if (slot < 0 || slot >= max_slots_) throw rz::Error("scripted: slot out of range");
    return slots_[static_cast<size_t>(slot)];
  }
  const Slot& at(int slot) const {
    if (slot < 0 || slot >= max_slots_) throw rz::Error("scripted: slot out of range");
    return slots_[static_cast<size_t>(slot)];
  }
  int32_t next(Slot& s) {
    const size_t i = std::min(s.produced++, script_.size() - 1);
    return script_[i];
  }
  rz::ModelConfig cfg_;
  int max_slots_, max_context_;
  std::vector<int32_t> script_;
  std::vector<Slot> slots_;
};

}  // namespace rz_test
