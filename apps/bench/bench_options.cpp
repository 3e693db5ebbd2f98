// rz bench's flags and their checks (see bench_options.hpp).
#include "apps/bench/bench_options.hpp"

#include <cerrno>
#include <cstdlib>
#include <filesystem>

#include "apps/executor_factory.hpp"
#include "formats/common.hpp"

namespace rz::bench {
namespace {

constexpr int kMaxBatch = 65536;

int ranged_int(const cli::Flags& f, const char* name, long long lo, long long hi) {
  const long long v = f.integer(name);
  if (v < lo || v > hi)
    throw Error(std::string("--") + name + ": must be between " + std::to_string(lo) + " and " +
                std::to_string(hi) + ", got " + std::to_string(v));
  return static_cast<int>(v);
}

double positive(const cli::Flags& f, const char* name) {
  const double v = f.number(name);
  if (!(v > 0) || v > 1e9)
    throw Error(std::string("--") + name + ": must be a positive number, got '" + f.str(name) +
                "'");
  return v;
}

}  // namespace

cli::Flags bench_flags() {
  cli::Flags f("bench",
               "Measure an executor's throughput on a model: pp (one prefill), tg (decode at "
               "batch 1) and batched decode, each with its share of the device's limit (MBU for "
               "decode, TFLOP/s for prefill) and the peak memory. Markdown tables on stdout "
               "(progress on stderr), or one JSON object with --json.");
  f.opt("model", "FILE", "model file (.gguf, .safetensors or a directory)")
      .opt("label", "TEXT", "row name in the tables and the JSON", "the model file's name")
      .opt("device", "auto|cpu|cuda", "executor; auto picks the GPU when one is present", "auto")
      .opt("gpu", "N", "cuda: device index", "0")
      .opt("threads", "N", "cpu: executor threads; 0 = all cores", "0")
      .opt("pp", "N", "prefill of N random tokens into one slot; 0 skips it", "512")
      .opt("tg", "N", "N decode steps at batch 1 after a 1-token prompt; 0 skips them", "128")
      .opt("batches", "LIST",
           "batched decode at these batch sizes (comma-separated); \"\" skips it",
           "1,4,16,64,256 on cuda, 1,8 on cpu")
      .opt("prompt", "N", "batched: prompt tokens per sequence", "128")
      .opt("gen", "N", "batched: decode steps over all sequences", "128")
      .opt("reps", "N", "timed runs per figure after a warm-up run; the median is reported", "3")
      .opt("seed", "S", "random seed of the prompt token ids", "1")
      .opt("context", "N",
           "context of every executor (a server's setting) instead of the smallest that fits",
           "the smallest that fits")
      .sw("no-graphs", "cuda: decode steps as plain launches, without CUDA graphs")
      .sw("no-qmm", "cuda: gemv and dequantize + cuBLAS only, never the qmm kernels")
      .sw("int8", "cuda: 1-4 token matmuls on int8 activations (opt-in, lossy)")
      .opt("weights", "stored|fp8", kWeightsHelp, "stored")
      .sw("no-fp16-copies", kNoFp16CopiesHelp)
      .sw("no-pdl", "cuda: plain stream order, without programmatic dependent launch")
      .sw("no-gemm-tune", kNoGemmTuneHelp)
      .sw("no-fused-forms",
          "cuda: a conversion kernel per matmul input instead of the norms and SwiGLU writing "
          "the forms the matmuls read (same results)")
      .opt("bandwidth", "GBs",
           "memory bandwidth limit in GB/s for MBU and the ceilings, instead of the device "
           "table (cuda) or a memcpy measured here (cpu)")
      .opt("peak-tflops", "T",
           "compute limit in TFLOP/s for prefill, instead of the device table (cuda: dense fp16 "
           "tensor peak; the cpu has none)")
      .sw("json", "print one JSON object on stdout instead of the tables")
      .opt("json-out", "FILE", "also write the JSON object to FILE (the tables stay on stdout)");
  return f;
}

std::vector<int> parse_batches(const std::string& list) {
  std::vector<int> out;
  for (size_t p = 0; p < list.size();) {
    size_t q = list.find(',', p);
    if (q == std::string::npos) q = list.size();
    const std::string item = list.substr(p, q - p);
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || errno != 0 || v < 1 || v > kMaxBatch)
      throw Error("--batches: expected batch sizes from 1 to " + std::to_string(kMaxBatch) +
                  " separated by commas, got '" + list + "'");
    out.push_back(static_cast<int>(v));
    p = q + 1;
    if (q + 1 == list.size())  // a trailing comma
      throw Error("--batches: expected batch sizes from 1 to " + std::to_string(kMaxBatch) +
                  " separated by commas, got '" + list + "'");
  }
  return out;
}

std::vector<int> default_batches(const std::string& device) {
  if (device == "cuda") return {1, 4, 16, 64, 256};
  return {1, 8};
}

std::string model_stem(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return std::filesystem::path(p).stem().string();
}

BenchOptions bench_options(const cli::Flags& f) {
  BenchOptions o;
  if (!f.has("model")) throw Error("--model FILE is required (see rz bench --help)");
  o.model = f.str("model");
  o.label = f.has("label") ? f.str("label") : model_stem(o.model);
  o.device = f.str("device");
  if (o.device != "auto" && o.device != "cpu" && o.device != "cuda")
    throw Error("--device: expected auto, cpu or cuda, got '" + o.device + "'");
  o.gpu = ranged_int(f, "gpu", 0, 1024);
  o.threads = ranged_int(f, "threads", 0, 1024);
  o.pp = ranged_int(f, "pp", 0, 1 << 20);
  o.tg = ranged_int(f, "tg", 0, 1 << 20);
  if (f.has("batches")) o.batches = parse_batches(f.str("batches"));
  o.prompt = ranged_int(f, "prompt", 1, 1 << 20);
  o.gen = ranged_int(f, "gen", 1, 1 << 20);
  o.reps = ranged_int(f, "reps", 1, 1000);
  const long long seed = f.integer("seed");
  if (seed < 0) throw Error("--seed: expected a non-negative integer, got '" + f.str("seed") + "'");
  o.seed = static_cast<uint64_t>(seed);
  if (f.has("context")) o.context = ranged_int(f, "context", 1, 1 << 24);
  o.cuda_graphs = !f.has("no-graphs");
  o.qmm = !f.has("no-qmm");
  o.int8 = f.has("int8");
  o.fp8 = fp8_weights_flag(f.str("weights"));
  o.fp16_copies = !f.has("no-fp16-copies");
  o.pdl = !f.has("no-pdl");
  o.fused_forms = !f.has("no-fused-forms");
  o.tune_gemm = !f.has("no-gemm-tune");
  if (f.has("bandwidth")) o.bandwidth = positive(f, "bandwidth") * 1e9;
  if (f.has("peak-tflops")) o.peak_flops = positive(f, "peak-tflops") * 1e12;
  o.json = f.has("json");
  o.json_out = f.str("json-out");
  if (f.has("json-out") && o.json_out.empty()) throw Error("--json-out: expected a file name");
  if (o.pp == 0 && o.tg == 0 && o.batches && o.batches->empty())
    throw Error("nothing to measure: --pp 0, --tg 0 and --batches \"\"");
  return o;
}

}  // namespace rz::bench
