// What gpu_verify's subcommands share: flag parsing, building the executors (CPU or GPU, through
// the executor factory, apps/executor_factory.hpp), prompts, the default logit tolerance, and the
// per-case lines and summary table every subcommand prints.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "formats/model_file.hpp"
#include "model/executor.hpp"
#include "tests/gpu_verify/verify_stats.hpp"
#include "tests/gpu_verify/verify_tolerances.hpp"

namespace rz::verify {

// --key value and --flag arguments. Throws rz::Error for an unknown or malformed flag.
class Args {
 public:
  // `valued`: flags that take a value; `bare`: flags that do not.
  Args(int argc, char** argv, const std::vector<std::string>& valued,
       const std::vector<std::string>& bare);
  bool has(const std::string& k) const { return v_.count(k) > 0; }
  std::string str(const std::string& k, const std::string& def = "") const;
  long long integer(const std::string& k, long long def) const;
  double real(const std::string& k, double def) const;
  std::string require(const std::string& k) const;  // throws "--k is required"

 private:
  std::map<std::string, std::string> v_;
};

// Whether a CUDA device is usable here; `why` gets the runtime's reason when not.
bool gpu_available(std::string* why);

// Executors. The GPU one keeps GpuExecutor's defaults except slots, max_context, an exact
// kv_blocks (slots * ceil(max_context / block)), so start-up allocates no more than it needs, and
// fp8 (GpuExecutorOptions::fp8_weights).
std::unique_ptr<Executor> make_cpu_executor(std::shared_ptr<const ModelFile> f, int slots,
                                            int max_context);
std::unique_ptr<Executor> make_gpu_executor(std::shared_ptr<const ModelFile> f, int slots,
                                            int max_context, bool fp8 = false);

// The default tolerance on max |dlogit| / max |reference logit| of a row: kToleranceMargin x the
// error measured on the H200 for this model's shape and format (verify_tolerances.hpp).
Tolerance default_tolerance(const ModelFile& f);
// The type holding most elements of the layers' 2-D weights ("Q4_K" for a Q4_K_M file), the
// format the tolerances are keyed by.
std::string dominant_layer_type(const ModelFile& f);

// n seeded random prompts of ids in [0, n_vocab), lengths spread over [min_len, max_len].
std::vector<std::vector<int32_t>> random_prompts(int n, int n_vocab, uint64_t seed, int min_len = 4,
                                                 int max_len = 60);
// Fixed English sentences (chat-like; 32 of them, the first 8 are the default set) tokenized with
// the model's tokenizer (GGUF metadata, or tokenizer.json beside safetensors), BOS as the
// tokenizer's metadata says. n > 32 repeats them.
std::vector<std::vector<int32_t>> text_prompts(const ModelFile& f, int n);

// Greedy generation of `tokens` tokens for all prompts at once (one prefill on slots 0..n-1,
// then tokens-1 decode steps, each slot fed its own last token), keeping the logits of every
// step: logits[p][s] is prompt p's row at step s. Slots are released at the end.
struct GreedyRun {
  std::vector<std::vector<int32_t>> tokens;             // [prompt][step]
  std::vector<std::vector<std::vector<float>>> logits;  // [prompt][step][n_vocab]
  double seconds = 0;
};
GreedyRun run_greedy(Executor& ex, const std::vector<std::vector<int32_t>>& prompts, int tokens,
                     bool keep_logits = true);

// The same, teacher-forced: step s > 0 feeds forced[p][s - 1] (the reference's token) instead of
// the executor's own pick, so both executors see the same sequence and their logits compare
// position by position after a divergence too. tokens[p][s] is still the executor's own pick.
// forced[p] must hold at least `tokens` - 1 tokens.
GreedyRun run_forced(Executor& ex, const std::vector<std::vector<int32_t>>& prompts, int tokens,
                     const std::vector<std::vector<int32_t>>& forced);

// Smallest top-2 margin over the rows, each relative to its row's max |logit|.
double min_rel_margin(const std::vector<std::vector<float>>& rows);

// Margin-selected prompts: runs `pool` greedily on `ex` (chunks of ex.max_slots()) and keeps, in
// pool order, the first n whose every step keeps a top-2 margin >= min_rel x the row's max
// |logit|, so that the 16-bit rounding of the tested executor cannot flip a near-tie. When the
// pool has too few, the best of the rest fill up and `note` says how many. min_rel <= 0: the
// first n, nothing run.
std::vector<std::vector<int32_t>> select_by_margin(Executor& ex,
                                                   const std::vector<std::vector<int32_t>>& pool,
                                                   int n, int tokens, double min_rel,
                                                   std::string* note);

// One case's result row.
struct CaseRow {
  std::string name;
  bool pass = false;
  std::string detail;  // one line
};

// Prints "PASS name: detail" / "FAIL name: detail" at once, and collects the row.
class Report {
 public:
  explicit Report(std::string title) : title_(std::move(title)) {}
  void add(CaseRow row);
  // Prints the table and "gpu_verify <title>: PASS|FAIL (k of n cases failed)"; returns the exit
  // code (0 or 1).
  int finish(const std::string& extra = "") const;

 private:
  std::string title_;
  std::vector<CaseRow> rows_;
};

// "step 17: cpu 1234 (margin 0.0021) vs gpu 5678 (margin 0.0009), |dlogit| 0.0035 (excused)"
std::string describe_divergence(const Divergence& d, const char* ref_name, const char* test_name);
// Every divergence of a stream, "; "-separated ("" when none).
std::string describe_divergences(const StreamCompare& c, const char* ref_name,
                                 const char* test_name);
std::string fmt(double v, int prec = 3);  // %.{prec}g, "nan", "inf"
std::string basename_of(const std::string& path);

}  // namespace rz::verify
