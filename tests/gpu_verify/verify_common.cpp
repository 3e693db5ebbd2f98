// gpu_verify's shared pieces (see verify_common.hpp).
#include "tests/gpu_verify/verify_common.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <random>

#include "apps/executor_factory.hpp"
#include "formats/common.hpp"
#include "formats/gguf.hpp"
#include "gpu/device.hpp"
#include "sched/slot_runner.hpp"
#include "tokenizer/tokenizer.hpp"

namespace rz::verify {

Args::Args(int argc, char** argv, const std::vector<std::string>& valued,
           const std::vector<std::string>& bare) {
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) throw Error("unexpected argument '" + a + "' (flags start with --)");
    std::string k = a.substr(2), val;
    const size_t eq = k.find('=');
    if (eq != std::string::npos) {
      val = k.substr(eq + 1);
      k = k.substr(0, eq);
    }
    if (std::find(bare.begin(), bare.end(), k) != bare.end()) {
      if (eq != std::string::npos) throw Error("--" + k + " takes no value");
      v_[k] = std::string(1, '1');  // not = "1": GCC 12 -Wrestrict false positive (PR 105651)
    } else if (std::find(valued.begin(), valued.end(), k) != valued.end()) {
      if (eq == std::string::npos) {
        if (i + 1 >= argc) throw Error("--" + k + " needs a value");
        val = argv[++i];
      }
      v_[k] = val;
    } else {
      throw Error("unknown flag --" + k);
    }
  }
}

std::string Args::str(const std::string& k, const std::string& def) const {
  auto it = v_.find(k);
  return it == v_.end() ? def : it->second;
}

long long Args::integer(const std::string& k, long long def) const {
  if (!has(k)) return def;
  const std::string s = str(k);
  size_t pos = 0;
  long long v = 0;
  try {
    v = std::stoll(s, &pos);
  } catch (...) {
    pos = 0;
  }
  if (pos != s.size() || s.empty())
    throw Error("--" + k + ": expected an integer, got '" + s + "'");
  return v;
}

double Args::real(const std::string& k, double def) const {
  if (!has(k)) return def;
  const std::string s = str(k);
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(s, &pos);
  } catch (...) {
    pos = 0;
  }
  if (pos != s.size() || s.empty() || !std::isfinite(v))
    throw Error("--" + k + ": expected a number, got '" + s + "'");
  return v;
}

std::string Args::require(const std::string& k) const {
  if (!has(k)) throw Error("--" + k + " is required");
  return str(k);
}

bool gpu_available(std::string* why) { return !gpu::list_devices(why).empty(); }

std::unique_ptr<Executor> make_cpu_executor(std::shared_ptr<const ModelFile> f, int slots,
                                            int max_context) {
  return make_executor("cpu", std::move(f), {.slots = slots, .max_context = max_context}).executor;
}

std::unique_ptr<Executor> make_gpu_executor(std::shared_ptr<const ModelFile> f, int slots,
                                            int max_context, bool fp8) {
  // Exactly enough KV blocks for every slot at full context: start-up stays small and no step
  // can run out of blocks.
  const int block = kDefaultKvBlockSize;  // rz serve's default --kv-block
  const int64_t blocks = int64_t{slots} * ((max_context + block - 1) / block);
  BuiltExecutor b = make_executor("cuda", std::move(f),
                                  {.slots = slots,
                                   .max_context = max_context,
                                   .kv_block_size = block,
                                   .kv_blocks = blocks,
                                   .fp8_weights = fp8});
  std::printf("gpu executor: %s\n", b.memory_plan.c_str());
  return std::move(b.executor);
}

std::string dominant_layer_type(const ModelFile& f) {
  std::map<GgmlType, int64_t> elems;
  for (const TensorView& t : f.tensors()) {
    if (t.n_dims < 2 || t.name.rfind("blk.", 0) != 0) continue;
    int64_t n = 1;
    for (int d = 0; d < t.n_dims; ++d) n *= t.ne[d];
    elems[t.type] += n;
  }
  if (elems.empty()) throw Error("the model has no 2-D layer weights");
  const auto best = std::max_element(
      elems.begin(), elems.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  return std::string(type_traits(best->first).name);
}

Tolerance default_tolerance(const ModelFile& f) {
  const ModelConfig& c = f.config();
  return tolerance_for(shape_name(c.n_layer, c.n_embd), dominant_layer_type(f));
}

std::vector<std::vector<int32_t>> random_prompts(int n, int n_vocab, uint64_t seed, int min_len,
                                                 int max_len) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 12345);
  std::uniform_int_distribution<int32_t> tok(0, n_vocab - 1);
  std::uniform_int_distribution<int> jitter(-2, 2);
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    int len = n > 1 ? min_len + (max_len - min_len) * i / (n - 1) : min_len;
    len = std::clamp(len + jitter(rng), min_len, max_len);
    std::vector<int32_t> p(static_cast<size_t>(len));
    for (auto& t : p) t = tok(rng);
    out.push_back(std::move(p));
  }
  // Interleave lengths so a batch is not sorted by length.
  std::shuffle(out.begin(), out.end(), rng);
  return out;
}

std::vector<std::vector<int32_t>> text_prompts(const ModelFile& f, int n) {
  static const char* kTexts[] = {
      "Hello! Could you tell me what the weather is usually like in Lisbon in May?",
      "Write a short poem about a cat watching the rain from a window.",
      "What is the difference between a list and a tuple in Python?",
      "Explain in two sentences why the sky is blue.",
      "I have three apples and eat one. How many apples do I have left?",
      "Please summarize the plot of Romeo and Juliet for a ten year old.",
      "Give me three ideas for a quick vegetarian dinner.",
      "Translate 'good morning, how are you?' into French and Spanish.",
      "What are the main causes of inflation?",
      "Can you recommend a good book about the history of science?",
      "How do I make a cup of green tea properly?",
      "Describe the water cycle step by step.",
      "What is the capital of Australia, and why is it not Sydney?",
      "Tell me a joke about programmers.",
      "How many legs does a spider have?",
      "Write a haiku about autumn leaves.",
      "Why do we have leap years?",
      "What should I pack for a weekend hiking trip?",
      "Explain what a neural network is to a beginner.",
      "List the planets of the solar system in order from the sun.",
      "How can I improve my sleep?",
      "What is the boiling point of water at the top of a mountain?",
      "Write a friendly email inviting my neighbours to a barbecue.",
      "What is photosynthesis?",
      "Give me a simple recipe for pancakes.",
      "Who painted the Mona Lisa?",
      "What are some tips for learning a new language?",
      "Explain the rules of chess in a few sentences.",
      "Why is exercise good for your health?",
      "What is the speed of light?",
      "Suggest a name for a small coffee shop by the sea.",
      "How does a bicycle stay upright?",
  };
  constexpr int kN = static_cast<int>(sizeof kTexts / sizeof kTexts[0]);
  std::shared_ptr<Tokenizer> tok =
      f.gguf() ? Tokenizer::from_gguf(*f.gguf()) : Tokenizer::from_hf_dir(f.hf_dir());
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) out.push_back(tok->encode(kTexts[i % kN], true, false));
  return out;
}

double min_rel_margin(const std::vector<std::vector<float>>& rows) {
  double m = std::numeric_limits<double>::infinity();
  for (const auto& r : rows) {
    const RowDiff scale = row_diff(r, r);
    const double mx = scale.ref_max > 0 ? scale.ref_max : 1.0;
    m = std::min(m, top2(r).margin / mx);
  }
  return m;
}

std::vector<std::vector<int32_t>> select_by_margin(Executor& ex,
                                                   const std::vector<std::vector<int32_t>>& pool,
                                                   int n, int tokens, double min_rel,
                                                   std::string* note) {
  if (min_rel <= 0 || static_cast<int>(pool.size()) <= n) {
    if (min_rel > 0 && note) *note = "pool no larger than the set: no margin selection";
    return {pool.begin(), pool.begin() + std::min<size_t>(pool.size(), static_cast<size_t>(n))};
  }
  std::vector<std::vector<int32_t>> kept;
  std::vector<std::pair<double, size_t>> rest;  // (margin, pool index) of the rejected
  const size_t chunk = static_cast<size_t>(ex.max_slots());
  for (size_t at = 0; at < pool.size() && static_cast<int>(kept.size()) < n; at += chunk) {
    const size_t end = std::min(pool.size(), at + chunk);
    std::vector<std::vector<int32_t>> part(pool.begin() + at, pool.begin() + end);
    const GreedyRun r = run_greedy(ex, part, tokens);
    for (size_t i = 0; i < part.size(); ++i) {
      const double m = min_rel_margin(r.logits[i]);
      if (m >= min_rel && static_cast<int>(kept.size()) < n)
        kept.push_back(part[i]);
      else
        rest.push_back({m, at + i});
    }
  }
  const size_t ran = kept.size() + rest.size(), passed = kept.size();
  int low = 0;
  std::sort(rest.begin(), rest.end(), std::greater<>());
  for (size_t i = 0; static_cast<int>(kept.size()) < n && i < rest.size(); ++i, ++low)
    kept.push_back(pool[rest[i].second]);
  if (note)
    *note = "prompts chosen from a pool of " + std::to_string(pool.size()) +
            " for a top-2 margin >= " + fmt(min_rel) + " x row max (" + std::to_string(passed) +
            " of " + std::to_string(ran) + " run passed)" +
            (low ? ", " + std::to_string(low) + " below it (pool exhausted)" : "");
  return kept;
}

namespace {

// Prefill every prompt (one step), then `tokens` - 1 decode steps; each step feeds a stream's own
// last pick, or with `forced` the reference's token of that step (teacher forcing). A SlotRunner
// keeps the block tables.
GreedyRun run_streams(Executor& ex, const std::vector<std::vector<int32_t>>& prompts, int tokens,
                      bool keep_logits, const std::vector<std::vector<int32_t>>* forced) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t n = prompts.size();
  ex.set_keep_logits(keep_logits);
  GreedyRun r;
  r.tokens.assign(n, {});
  r.logits.assign(n, {});
  auto keep = [&](size_t p) {
    if (!keep_logits) return;
    std::span<const float> l = ex.last_logits(static_cast<int>(p));
    r.logits[p].emplace_back(l.begin(), l.end());
  };
  SlotRunner run(ex);
  std::vector<PrefillRequest> pre(n);
  for (size_t p = 0; p < n; ++p) {
    pre[p].slot = static_cast<int>(p);
    pre[p].tokens = prompts[p];
  }
  std::vector<int32_t> got = run.prefill(pre);
  for (size_t p = 0; p < n; ++p) {
    r.tokens[p].push_back(got.at(p));
    keep(p);
  }
  std::vector<DecodeRequest> dec(n);
  for (int s = 1; s < tokens; ++s) {
    for (size_t p = 0; p < n; ++p)
      dec[p] = {static_cast<int>(p), forced ? (*forced)[p][s - 1] : r.tokens[p].back()};
    got = run.decode(dec);
    for (size_t p = 0; p < n; ++p) {
      r.tokens[p].push_back(got.at(p));
      keep(p);
    }
  }
  for (size_t p = 0; p < n; ++p) run.release(static_cast<int>(p));
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace

GreedyRun run_greedy(Executor& ex, const std::vector<std::vector<int32_t>>& prompts, int tokens,
                     bool keep_logits) {
  return run_streams(ex, prompts, tokens, keep_logits, nullptr);
}

GreedyRun run_forced(Executor& ex, const std::vector<std::vector<int32_t>>& prompts, int tokens,
                     const std::vector<std::vector<int32_t>>& forced) {
  if (forced.size() != prompts.size()) throw Error("run_forced: one forced stream per prompt");
  for (const auto& f : forced)
    if (static_cast<int>(f.size()) < tokens - 1) throw Error("run_forced: forced stream too short");
  return run_streams(ex, prompts, tokens, true, &forced);
}

void Report::add(CaseRow row) {
  std::printf("%s %s: %s\n", row.pass ? "PASS" : "FAIL", row.name.c_str(), row.detail.c_str());
  std::fflush(stdout);
  rows_.push_back(std::move(row));
}

int Report::finish(const std::string& extra) const {
  size_t w = 4;
  int failed = 0;
  for (const CaseRow& r : rows_) {
    w = std::max(w, r.name.size());
    failed += r.pass ? 0 : 1;
  }
  std::printf("\n%-*s  %-6s  %s\n", static_cast<int>(w), "case", "result", "detail");
  for (const CaseRow& r : rows_)
    std::printf("%-*s  %-6s  %s\n", static_cast<int>(w), r.name.c_str(), r.pass ? "pass" : "FAIL",
                r.detail.c_str());
  const bool ok = failed == 0 && !rows_.empty();
  std::printf("gpu_verify %s: %s (%d of %zu cases failed)%s%s\n", title_.c_str(),
              ok ? "PASS" : "FAIL", failed, rows_.size(), extra.empty() ? "" : "; ", extra.c_str());
  std::fflush(stdout);
  return ok ? 0 : 1;
}

std::string fmt(double v, int prec) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", prec, v);
  return buf;
}

std::string describe_divergence(const Divergence& d, const char* ref_name, const char* test_name) {
  std::string s = "step " + std::to_string(d.step) + ": " + ref_name + " " +
                  std::to_string(d.ref_token) + " (top-2 margin " + fmt(d.ref_margin) + ") vs " +
                  test_name + " " + std::to_string(d.test_token) + " (margin " +
                  fmt(d.test_margin) + "), |dlogit| there " + fmt(d.max_abs);
  if (d.excused())
    s += " (excused: margin < |dlogit|)";
  else if (d.exact)
    s += " (same kernels: never excused)";
  else
    s += std::isnan(d.max_abs) ? " (no reference row: not excused)" : " (NOT excused)";
  return s;
}

std::string describe_divergences(const StreamCompare& c, const char* ref_name,
                                 const char* test_name) {
  std::string s;
  for (const Divergence& d : c.divergences())
    s += (s.empty() ? "divergence at " : "; divergence at ") +
         describe_divergence(d, ref_name, test_name);
  return s;
}

std::string basename_of(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

}  // namespace rz::verify
