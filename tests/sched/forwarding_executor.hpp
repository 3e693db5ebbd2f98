// An Executor (model/executor.hpp) that forwards every call to an inner one: the base of the
// wrappers that change one thing about a step, such as the actor tests' StepGate
// (tests/actors/engine_test_support.hpp) and engine_gap_bench's pacing.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "model/executor.hpp"

namespace rz_test {

class ForwardingExecutor : public rz::Executor {
 public:
  explicit ForwardingExecutor(std::unique_ptr<rz::Executor> inner) : inner_(std::move(inner)) {}
  const rz::ModelConfig& config() const override { return inner_->config(); }
  int max_slots() const override { return inner_->max_slots(); }
  int max_context() const override { return inner_->max_context(); }
  int kv_block_size() const override { return inner_->kv_block_size(); }
  int64_t kv_blocks() const override { return inner_->kv_blocks(); }
  std::vector<int32_t> step(std::span<const rz::StepSeq> seqs) override {
    return inner_->step(seqs);
  }
  std::span<const rz::TokenLogprobs> step_logprobs() const override {
    return inner_->step_logprobs();
  }
  void release(int slot) override { inner_->release(slot); }
  bool slot_active(int slot) const override { return inner_->slot_active(slot); }
  int slot_length(int slot) const override { return inner_->slot_length(slot); }
  void set_keep_logits(bool keep) override { inner_->set_keep_logits(keep); }
  std::span<const float> last_logits(int slot) const override { return inner_->last_logits(slot); }

 private:
  std::unique_ptr<rz::Executor> inner_;
};

}  // namespace rz_test
