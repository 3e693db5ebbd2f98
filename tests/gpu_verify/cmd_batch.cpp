// gpu_verify batch: batch invariance of one executor (the GPU's, or --cpu). All n prompts run
// through the engine's scheduling state (BatchedDecodeState + run_step, sched/driver.hpp)
// with fewer slots than requests, a small token budget per step (so prompts run in chunks over
// several steps, in steps mixed with other requests' decode tokens), staggered submission and
// different max_tokens, so that requests join while others decode and finished slots are recycled
// mid-run (both are counted, and a run with none of either, or with no mixed step, fails); the
// last request is submitted only after the others finished, so it runs on the alone path
// throughout (unless its prompt is longer than the budget). Then each request runs alone (its
// prompt in one step, then decode steps of one; a SlotRunner), teacher-forced on the tokens it
// got batched, so every step compares position by position. What rz guarantees, and this checks:
// the same greedy tokens alone and batched, and bit-identical logits wherever the same kernels
// ran, i.e. while every step of the request so far (its prompt and each decode) had the same
// shape batched as alone (one entry, the same token count, the same kernel path). Where a step
// ran batched with others (or its prompt ran in chunks, or reused cached blocks) the kernels
// differ (GEMV per batch size and its split-row choice, cuBLAS GEMM above 16 tokens, prefill
// attention for mixed steps, the attention partition per slot count): there the logit difference
// is reported and must be within tol, and a token may differ only where excused (README.md).
#include <cstdio>
#include <string>
#include <variant>
#include <vector>

#include "formats/common.hpp"
#include "sched/batch_state.hpp"
#include "sched/driver.hpp"
#include "sched/slot_runner.hpp"
#include "tests/gpu_verify/verify_commands.hpp"
#include "tests/gpu_verify/verify_common.hpp"

namespace rz::verify {
namespace {

// The shape of an executor step: what decides which kernels run.
struct StepShape {
  bool decode = false;  // every entry one token that samples: the decode path (CUDA graphs)
  int entries = 0, tokens = 0;
  bool operator==(const StepShape&) const = default;
};

StepShape shape_of(std::span<const StepSeq> seqs) {
  StepShape s{!seqs.empty(), static_cast<int>(seqs.size()), 0};
  for (const StepSeq& e : seqs) {
    s.tokens += static_cast<int>(e.tokens.size());
    s.decode = s.decode && e.tokens.size() == 1 && e.sample;
  }
  return s;
}

// Passes every call through to `inner` and records the shape of the last step, and how many
// steps mixed decode tokens with prompt chunks.
class ShapeRecorder final : public Executor {
 public:
  explicit ShapeRecorder(Executor& inner) : in_(inner) {}
  const ModelConfig& config() const override { return in_.config(); }
  int max_slots() const override { return in_.max_slots(); }
  int max_context() const override { return in_.max_context(); }
  int kv_block_size() const override { return in_.kv_block_size(); }
  int64_t kv_blocks() const override { return in_.kv_blocks(); }
  std::vector<int32_t> step(std::span<const StepSeq> seqs) override {
    last = shape_of(seqs);
    bool decodes = false, chunks = false;
    for (const StepSeq& e : seqs) {
      const bool decode = !e.begin && e.tokens.size() == 1 && e.sample;
      (decode ? decodes : chunks) = true;
      chunked_prompts += e.begin && !e.sample ? 1 : 0;  // a first chunk: more follow
    }
    mixed_steps += decodes && chunks ? 1 : 0;
    return in_.step(seqs);
  }
  void release(int slot) override { in_.release(slot); }
  bool slot_active(int slot) const override { return in_.slot_active(slot); }
  int slot_length(int slot) const override { return in_.slot_length(slot); }
  void set_keep_logits(bool keep) override { in_.set_keep_logits(keep); }
  std::span<const float> last_logits(int slot) const override { return in_.last_logits(slot); }
  StepShape last;
  int mixed_steps = 0;
  int chunked_prompts = 0;  // prompts that ran in more than one step

 private:
  Executor& in_;
};

}  // namespace

int cmd_batch(int argc, char** argv) {
  Args a(argc, argv,
         {"model", "n", "tokens", "slots", "seed", "tol", "min-margin", "pool", "max-excused",
          "step-tokens"},
         {"cpu", "ties-ok", "text", "fp8"});
  const std::string path = a.require("model");
  const int n = static_cast<int>(a.integer("n", 16));
  const int tokens = static_cast<int>(a.integer("tokens", 32));
  const int slots = static_cast<int>(a.integer("slots", 6));
  const int step_tokens = static_cast<int>(a.integer("step-tokens", 64));
  const uint64_t seed = static_cast<uint64_t>(a.integer("seed", 2));
  const bool cpu = a.has("cpu"), ties_ok = a.has("ties-ok");
  if (n < 2 || tokens < 2 || slots < 2 || slots >= n)
    throw Error("batch needs --n >= 2, --tokens >= 2 and 2 <= --slots < --n (so slots recycle)");
  if (step_tokens < slots) throw Error("--step-tokens must be at least --slots");
  std::string why;
  if (!cpu && !gpu_available(&why))
    throw Error("batch needs a CUDA device (" + why + "); --cpu runs it on the CPU executor");

  auto file = ModelFile::open(path);
  const Tolerance deftol = default_tolerance(*file);
  const double tol = a.real("tol", deftol.tol);
  ExcuseCap cap;
  cap.max_share = a.real("max-excused", 0.01);
  const double min_margin = a.real("min-margin", 0.0);
  const int pool_n =
      static_cast<int>(a.integer("pool", min_margin > 0 ? (a.has("text") ? 32 : 4 * n) : n));
  if (pool_n < n) throw Error("--pool must be at least --n");
  const auto pool = a.has("text") ? text_prompts(*file, pool_n)
                                  : random_prompts(pool_n, file->config().n_vocab, seed);
  std::vector<int> max_tok(n);
  int ctx = 0;
  for (const auto& p : pool) ctx = std::max(ctx, static_cast<int>(p.size()) + tokens);
  ctx = (ctx + 63) / 64 * 64;
  for (int i = 0; i < n; ++i) max_tok[i] = std::max(1, tokens - (i * 7) % (tokens / 2 + 1));
  const char* exname = cpu ? "cpu" : "gpu";
  std::printf(
      "batch %s: %s executor, %d requests of %d..%d tokens, %d slots, %d tokens per step; "
      "same-kernel steps bit-identical, others within tol %s (%s)%s\n",
      path.c_str(), exname, n, tokens / 2, tokens, slots, step_tokens, fmt(tol).c_str(),
      a.has("tol") ? "--tol" : deftol.basis.c_str(),
      ties_ok ? ", excused divergences allowed up to the cap" : "");
  std::fflush(stdout);

  if (cpu && a.has("fp8")) throw Error("--fp8 (FP8 weights) runs on the GPU only");
  auto ex =
      cpu ? make_cpu_executor(file, slots, ctx) : make_gpu_executor(file, slots, ctx, a.has("fp8"));
  std::string note;
  const auto prompts = select_by_margin(*ex, pool, n, tokens, min_margin, &note);
  if (!note.empty()) std::printf("%s\n", note.c_str());
  ex->set_keep_logits(true);

  // Batched: staggered submission through the scheduler.
  BatchConfig cfg;
  cfg.max_slots = slots;
  cfg.max_context = ctx;
  cfg.max_queue = n;
  cfg.max_step_tokens = step_tokens;  // prompts in chunks, mixed with decodes
  cfg.n_vocab = file->config().n_vocab;
  cfg.kv_block_size = ex->kv_block_size();  // the executor's paged cache, as the engine has it
  cfg.kv_blocks = ex->kv_blocks();
  check_fits(cfg, *ex);
  BatchedDecodeState state(cfg);
  ShapeRecorder rec(*ex);
  std::vector<std::vector<int32_t>> got(n);
  std::vector<std::vector<std::vector<float>>> got_logits(n);
  std::vector<std::vector<StepShape>> got_shape(n);
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
      if (static_cast<size_t>(t->index) != got[i].size()) {
        sink_error = "request " + std::to_string(i) + ": token index " + std::to_string(t->index) +
                     " out of order";
        return;
      }
      got[i].push_back(t->token);
      std::span<const float> l = ex->last_logits(t->slot);
      got_logits[i].emplace_back(l.begin(), l.end());
      got_shape[i].push_back(rec.last);
    } else if (auto* f = std::get_if<FinishedEvent>(&ev)) {
      done[i] = true;
      if (f->slot >= 0) slot_had_finished.at(static_cast<size_t>(f->slot)) = true;
      final_note[i] = std::string("finished ") + finish_reason_name(f->reason) + " after " +
                      std::to_string(f->usage.completion_tokens) + " tokens";
      finished_ok[i] =
          f->reason == FinishReason::length && f->usage.completion_tokens == max_tok[i];
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
      final_note[next] =
          std::string("refused: ") + submit_status_name(res.status) + " " + res.message;
      done[next] = true;
    }
    ++next;
  };
  // A third of the requests up front (fewer than the slots), then one more after every step;
  // the last one is held back until every other has finished, so that it runs its whole way on
  // the kernels it runs alone (a prefill of one, decode steps of one) in a recycled slot: its
  // logits must be bit-identical to alone at every step.
  const int upfront = std::max(1, std::min(slots - 1, n / 3));
  while (next < upfront) submit();
  auto others_done = [&] {
    for (int j = 0; j < n - 1; ++j)
      if (!done[j]) return false;
    return true;
  };
  uint64_t steps = 0;
  for (;;) {
    const bool ran = run_step(state, rec, sink);
    steps += ran ? 1 : 0;
    if (next < n - 1 || (next == n - 1 && others_done())) {
      submit();
    } else if (!ran && !state.has_work() && next == n) {
      break;
    } else if (!ran && !state.has_work()) {
      sink_error = "the scheduler went idle with requests left to submit";
      break;
    }
  }

  // Alone: one request at a time on rotating slots, teacher-forced on its batched tokens.
  SlotRunner alone(*ex);
  std::vector<StreamCompare> cmp(n);
  for (int i = 0; i < n; ++i) {
    const int steps = std::min(static_cast<int>(got[i].size()), max_tok[i]);
    if (steps == 0) continue;
    const int slot = i % slots;
    PrefillRequest pr;
    pr.slot = slot;
    pr.tokens = prompts[i];
    const int len = static_cast<int>(prompts[i].size());
    const StepShape alone_prefill{len == 1, 1, len};
    const StepShape alone_decode{true, 1, 1};
    bool same_path = true;  // every step so far ran batched with the shape it has alone
    for (int k = 0; k < steps; ++k) {
      const int32_t tok =
          k == 0 ? alone.prefill(pr) : alone.decode(slot, got[i][static_cast<size_t>(k - 1)]);
      same_path = same_path &&
                  got_shape[i][static_cast<size_t>(k)] == (k == 0 ? alone_prefill : alone_decode);
      cmp[i].step(tok, got[i][static_cast<size_t>(k)], ex->last_logits(slot),
                  got_logits[i][static_cast<size_t>(k)], NAN, same_path);
    }
    alone.release(slot);
  }

  const std::string model = basename_of(path);
  Report rep(std::string("batch ") + model + " (" + exname + ")");
  int equal = 0, total = 0, exact_rows = 0, exact_bad = 0, inexact_rows = 0;
  double worst_rel = 0, worst_inexact_rel = 0, worst_inexact_abs = 0;
  for (int i = 0; i < n; ++i) {
    const Verdict v = judge(cmp[i], tol, ties_ok);
    cap.add(cmp[i], v);
    exact_rows += cmp[i].exact_steps();
    exact_bad += cmp[i].exact_mismatches();
    inexact_rows += cmp[i].inexact_steps();
    worst_inexact_rel = std::max(worst_inexact_rel, cmp[i].worst_inexact_rel());
    worst_inexact_abs = std::max(worst_inexact_abs, cmp[i].worst_inexact_abs());
    const bool complete = finished_ok[i] && static_cast<int>(got[i].size()) == max_tok[i];
    equal += cmp[i].equal_tokens();
    total += max_tok[i];
    if (!(cmp[i].worst_rel() <= worst_rel)) worst_rel = cmp[i].worst_rel();
    std::string d = "len " + std::to_string(prompts[i].size()) + ", slot " +
                    std::to_string(slot_of[i]) + (joined[i] ? ", joined" : "") +
                    (recycled[i] ? ", recycled slot" : "") + ", tokens equal " +
                    std::to_string(cmp[i].equal_tokens()) + "/" + std::to_string(max_tok[i]) +
                    ", same-kernel steps " + std::to_string(cmp[i].exact_steps()) + " (" +
                    std::to_string(cmp[i].exact_mismatches()) + " not bit-identical), other " +
                    std::to_string(cmp[i].inexact_steps()) + " max |dlogit| " +
                    fmt(cmp[i].worst_inexact_abs()) + " (rel " + fmt(cmp[i].worst_inexact_rel()) +
                    "), " + final_note[i];
    const std::string divs = describe_divergences(cmp[i], "alone", "batched");
    if (!divs.empty()) d += "; " + divs;
    if (!v.why.empty()) d += "; " + v.why;
    rep.add({model + " request " + std::to_string(i), v.pass && complete, d});
  }
  const auto& c = state.counters();
  std::string sched = std::to_string(steps) + " steps (" + std::to_string(rec.mixed_steps) +
                      " mixing decodes with prompt chunks; " + std::to_string(rec.chunked_prompts) +
                      " prompts in several chunks; " + std::to_string(c.decode_tokens) +
                      " decode and " + std::to_string(c.prefill_tokens) +
                      " prompt tokens), joins " + std::to_string(joins) + ", recycles " +
                      std::to_string(recycles) + ", max active " + std::to_string(max_active) +
                      " of " + std::to_string(slots) + " slots";
  std::string sched_why;
  if (joins == 0) sched_why += "; no request joined while others decoded";
  if (recycles == 0) sched_why += "; no slot was recycled";
  if (rec.mixed_steps == 0) sched_why += "; no step mixed decodes with a prompt chunk";
  if (!sink_error.empty()) sched_why += "; " + sink_error;
  rep.add({model + " schedule", sched_why.empty(), sched + sched_why});
  rep.add({model + " excused share", cap.ok(), cap.summary()});
  return rep.finish("tokens equal " + std::to_string(equal) + "/" + std::to_string(total) +
                    ", same-kernel rows " + std::to_string(exact_rows - exact_bad) + "/" +
                    std::to_string(exact_rows) + " bit-identical, rows where kernels differ " +
                    std::to_string(inexact_rows) + ": max |dlogit| " + fmt(worst_inexact_abs) +
                    " rel " + fmt(worst_inexact_rel) + " (tol " + fmt(tol) + "; max rel overall " +
                    fmt(worst_rel) + "), " + cap.summary() + ", joins " + std::to_string(joins) +
                    ", recycles " + std::to_string(recycles) + (note.empty() ? "" : "; " + note));
}

}  // namespace rz::verify
