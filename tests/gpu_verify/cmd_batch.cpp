// gpu_verify batch: batch invariance of one executor (the GPU's, or --cpu). Each of n prompts
// first runs alone (a prefill of one, then decode steps of one, greedy); then all n run through
// the engine's scheduling state (BatchedDecodeState + run_step, actors/sched_driver.hpp) with
// fewer slots than requests, staggered submission and different max_tokens, so that requests
// join while others decode and finished slots are recycled mid-run (both are counted, and a run
// with none of either fails). Every request must produce the same tokens as alone; logits are
// compared step by step while the tokens agree (the GPU takes different matmul paths for one
// token and for many, so they are close, not equal).
#include <cstdio>
#include <string>
#include <variant>
#include <vector>

#include "actors/batch_state.hpp"
#include "actors/sched_driver.hpp"
#include "model/common.hpp"
#include "tests/gpu_verify/verify_commands.hpp"
#include "tests/gpu_verify/verify_common.hpp"

namespace rz::verify {

int cmd_batch(int argc, char** argv) {
  Args a(argc, argv, {"model", "n", "tokens", "slots", "seed", "tol", "min-margin", "pool"}, {"cpu", "ties-ok", "text"});
  const std::string path = a.require("model");
  const int n = static_cast<int>(a.integer("n", 16));
  const int tokens = static_cast<int>(a.integer("tokens", 32));
  const int slots = static_cast<int>(a.integer("slots", 6));
  const uint64_t seed = static_cast<uint64_t>(a.integer("seed", 2));
  const bool cpu = a.has("cpu"), ties_ok = a.has("ties-ok");
  if (n < 2 || tokens < 2 || slots < 2 || slots >= n)
    throw Error("batch needs --n >= 2, --tokens >= 2 and 2 <= --slots < --n (so slots recycle)");
  std::string why;
  if (!cpu && !gpu_available(&why))
    throw Error("batch needs a CUDA device (" + why + "); --cpu runs it on the CPU executor");

  auto file = ModelFile::open(path);
  const double tol = a.real("tol", default_tol(*file));
  const double min_margin = a.real("min-margin", 0.0);
  const int pool_n = static_cast<int>(a.integer("pool", min_margin > 0 ? (a.has("text") ? 32 : 4 * n) : n));
  if (pool_n < n) throw Error("--pool must be at least --n");
  const auto pool = a.has("text") ? text_prompts(*file, pool_n)
                                  : random_prompts(pool_n, file->config().n_vocab, seed);
  std::vector<int> max_tok(n);
  int ctx = 0;
  for (const auto& p : pool) ctx = std::max(ctx, static_cast<int>(p.size()) + tokens);
  ctx = (ctx + 63) / 64 * 64;
  for (int i = 0; i < n; ++i) max_tok[i] = std::max(1, tokens - (i * 7) % (tokens / 2 + 1));
  const char* exname = cpu ? "cpu" : "gpu";
  std::printf("batch %s: %s executor, %d requests of %d..%d tokens, %d slots, tol %s%s\n",
              path.c_str(), exname, n, tokens / 2, tokens, slots, fmt(tol).c_str(),
              ties_ok ? ", near-tie divergences allowed" : "");
  std::fflush(stdout);

  auto ex = cpu ? make_cpu_executor(file, slots, ctx) : make_gpu_executor(file, slots, ctx);
  std::string note;
  const auto prompts = select_by_margin(*ex, pool, n, tokens, min_margin, &note);
  if (!note.empty()) std::printf("%s\n", note.c_str());
  ex->set_keep_logits(true);

  // Alone: one request at a time, on rotating slots.
  std::vector<std::vector<int32_t>> alone(n);
  std::vector<std::vector<std::vector<float>>> alone_logits(n);
  for (int i = 0; i < n; ++i) {
    const int slot = i % slots;
    auto keep = [&] {
      std::span<const float> l = ex->last_logits(slot);
      alone_logits[i].emplace_back(l.begin(), l.end());
    };
    PrefillRequest pr;
    pr.slot = slot;
    pr.tokens = prompts[i];
    pr.reserve_tokens = static_cast<int>(prompts[i].size()) + max_tok[i];
    alone[i].push_back(ex->prefill({&pr, 1}).at(0));
    keep();
    while (static_cast<int>(alone[i].size()) < max_tok[i]) {
      const DecodeRequest dr{slot, alone[i].back()};
      alone[i].push_back(ex->decode({&dr, 1}).at(0));
      keep();
    }
    ex->release(slot);
  }

  // Batched: staggered submission through the scheduler.
  BatchConfig cfg;
  cfg.max_slots = slots;
  cfg.max_context = ctx;
  cfg.max_queue = n;
  cfg.max_prefill_batch = 4;
  cfg.n_vocab = file->config().n_vocab;
  cfg.kv_block_size = ex->kv_block_size();  // as the engine fills them (the GPU's paged cache)
  cfg.kv_blocks = ex->kv_blocks();
  check_fits(cfg, *ex);
  BatchedDecodeState state(cfg);
  std::vector<std::vector<int32_t>> got(n);
  std::vector<StreamCompare> cmp(n);
  std::vector<std::string> final_note(n, "no final event");
  std::vector<bool> finished_ok(n, false), joined(n, false), recycled(n, false), started(n, false),
      done(n, false);
  std::vector<int> slot_of(n, -1);
  std::vector<bool> slot_had_finished(static_cast<size_t>(slots), false);
  int joins = 0, recycles = 0, max_active = 0;
  std::string sink_error;
  auto sink = [&](const SchedEvent& ev) {
    const int i = static_cast<int>(event_request(ev).id);
    if (i < 0 || i >= n) {
      sink_error = "event for unknown request " + std::to_string(i);
      return;
    }
    if (auto* t = std::get_if<TokenEvent>(&ev)) {
      if (t->index == 0) {
        started[i] = true;
        slot_of[i] = t->slot;
        int others = 0;
        for (int j = 0; j < n; ++j) others += (j != i && started[j] && !done[j]) ? 1 : 0;
        if (others > 0 && !joined[i]) joined[i] = true, ++joins;
        if (slot_had_finished.at(static_cast<size_t>(t->slot)) && !recycled[i])
          recycled[i] = true, ++recycles;
      }
      int active = 0;
      for (int j = 0; j < n; ++j) active += (started[j] && !done[j]) ? 1 : 0;
      max_active = std::max(max_active, active);
      got[i].push_back(t->token);
      const size_t k = static_cast<size_t>(t->index);
      if (k >= alone[i].size()) {
        cmp[i].step(-1, t->token, {}, {});  // more tokens than alone: a divergence
        return;
      }
      cmp[i].step(alone[i][k], t->token, alone_logits[i][k], ex->last_logits(t->slot));
    } else if (auto* f = std::get_if<FinishedEvent>(&ev)) {
      done[i] = true;
      if (f->slot >= 0) slot_had_finished.at(static_cast<size_t>(f->slot)) = true;
      final_note[i] = std::string("finished ") + finish_reason_name(f->reason) + " after " +
                      std::to_string(f->usage.completion_tokens) + " tokens";
      finished_ok[i] = f->reason == FinishReason::length && f->usage.completion_tokens == max_tok[i];
    } else if (auto* e = std::get_if<FailedEvent>(&ev)) {
      done[i] = true;
      if (e->slot >= 0) slot_had_finished.at(static_cast<size_t>(e->slot)) = true;
      final_note[i] = "failed: " + e->message;
    }
  };

  int next = 0;
  auto submit = [&] {
    BatchRequest r;
    r.ref = {static_cast<uint64_t>(next), 1};
    r.prompt = prompts[next];
    r.max_tokens = max_tok[next];
    r.ignore_eos = true;
    const SubmitResult res = state.submit(std::move(r));
    if (!res.ok()) {
      final_note[next] = std::string("refused: ") + submit_status_name(res.status) + " " + res.message;
      done[next] = true;
    }
    ++next;
  };
  // A third of the requests up front (fewer than the slots), then one more after every step.
  const int upfront = std::max(1, std::min(slots - 1, n / 3));
  while (next < upfront) submit();
  uint64_t steps = 0;
  for (;;) {
    const bool ran = run_step(state, *ex, sink);
    steps += ran ? 1 : 0;
    if (next < n) {
      submit();
    } else if (!ran && !state.has_work()) {
      break;
    }
  }

  const std::string model = basename_of(path);
  Report rep(std::string("batch ") + model + " (" + exname + ")");
  int equal = 0, total = 0;
  double worst_rel = 0;
  for (int i = 0; i < n; ++i) {
    const Verdict v = judge(cmp[i], tol, ties_ok);
    const bool complete = finished_ok[i] && static_cast<int>(got[i].size()) == max_tok[i];
    equal += cmp[i].equal_tokens();
    total += max_tok[i];
    if (!(cmp[i].worst_rel() <= worst_rel)) worst_rel = cmp[i].worst_rel();
    std::string d = "len " + std::to_string(prompts[i].size()) + ", slot " +
                    std::to_string(slot_of[i]) + (joined[i] ? ", joined" : "") +
                    (recycled[i] ? ", recycled slot" : "") + ", tokens equal " +
                    std::to_string(cmp[i].equal_tokens()) + "/" + std::to_string(max_tok[i]) +
                    ", max |dlogit| " + fmt(cmp[i].worst_abs()) + " (rel " +
                    fmt(cmp[i].worst_rel()) + "), " + final_note[i];
    if (!cmp[i].aligned()) d += "; " + describe_divergence(cmp[i].divergence(), "alone", "batched");
    if (!v.why.empty()) d += "; " + v.why;
    rep.add({model + " request " + std::to_string(i), v.pass && complete, d});
  }
  const auto& c = state.counters();
  std::string sched = std::to_string(steps) + " steps (" + std::to_string(c.prefill_steps) +
                      " prefill, " + std::to_string(c.decode_steps) + " decode), joins " +
                      std::to_string(joins) + ", recycles " + std::to_string(recycles) +
                      ", max active " + std::to_string(max_active) + " of " +
                      std::to_string(slots) + " slots";
  std::string sched_why;
  if (joins == 0) sched_why += "; no request joined while others decoded";
  if (recycles == 0) sched_why += "; no slot was recycled";
  if (!sink_error.empty()) sched_why += "; " + sink_error;
  rep.add({model + " schedule", sched_why.empty(), sched + sched_why});
  return rep.finish("tokens equal " + std::to_string(equal) + "/" + std::to_string(total) +
                    ", max rel |dlogit| " + fmt(worst_rel) + " (tol " + fmt(tol) + "), joins " +
                    std::to_string(joins) + ", recycles " + std::to_string(recycles) +
                    (note.empty() ? "" : "; " + note));
}

}  // namespace rz::verify
