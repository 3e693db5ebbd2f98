// SlotRunner (sched/slot_runner.hpp).
#include "sched/slot_runner.hpp"

#include <string>

#include "formats/common.hpp"

namespace rz {

SlotRunner::SlotRunner(Executor& ex)
    : ex_(ex),
      blocks_(ex.kv_blocks(), ex.kv_block_size(), false),
      tables_(static_cast<size_t>(ex.max_slots())) {}

std::vector<int32_t> SlotRunner::run(std::vector<StepSeq>& seqs) {
  // Grow each table to cover its entry; undo all of it if the blocks run out or the step fails.
  std::vector<size_t> before;
  auto undo = [&] {
    for (size_t i = 0; i < before.size(); ++i) {
      auto& t = tables_.at(size_t(seqs[i].slot));
      while (t.size() > before[i]) {
        blocks_.release(t.back());
        t.pop_back();
      }
    }
  };
  for (StepSeq& s : seqs) {
    if (s.slot < 0 || s.slot >= ex_.max_slots()) break;  // the executor says why
    auto& t = tables_[size_t(s.slot)];
    // A slot the executor released after a failure.
    if (s.begin && !ex_.slot_active(s.slot)) blocks_.release_all(t);
    before.push_back(t.size());
    while (static_cast<int64_t>(t.size()) < blocks_.blocks_for(s.end())) {
      const int32_t b = blocks_.allocate();
      if (b < 0) {
        undo();
        throw Error("no free KV block: " + std::to_string(blocks_.n_blocks()) +
                    " blocks are all in use");
      }
      t.push_back(b);
    }
    s.blocks = t;
  }
  try {
    return ex_.step(seqs);
  } catch (...) {
    undo();
    throw;
  }
}

std::vector<int32_t> SlotRunner::prefill(std::span<const PrefillRequest> reqs) {
  std::vector<StepSeq> seqs;
  for (const PrefillRequest& r : reqs) {
    StepSeq s;
    s.slot = r.slot;
    s.begin = true;
    s.sampling = r.sampling;
    s.tokens = r.tokens;
    s.sample = true;
    seqs.push_back(std::move(s));
  }
  return run(seqs);
}

std::vector<int32_t> SlotRunner::decode(std::span<const DecodeRequest> reqs) {
  std::vector<StepSeq> seqs;
  for (const DecodeRequest& r : reqs) {
    StepSeq s;
    s.slot = r.slot;
    s.start = ex_.slot_active(r.slot) ? ex_.slot_length(r.slot) : 0;
    s.tokens = {r.token};
    s.sample = true;
    seqs.push_back(std::move(s));
  }
  return run(seqs);
}

void SlotRunner::release(int slot) {
  ex_.release(slot);
  blocks_.release_all(tables_.at(size_t(slot)));
}

}  // namespace rz
