// rz bench: the throughput of the CPU or CUDA executor on one model, in the workloads of
// llama-bench and llama-batched-bench (pp, tg, batched decode at several B), each with its share
// of the device's limit and the peak memory. The measuring is apps/bench/bench_runner.hpp, the
// limits apps/bench/bench_limits.hpp, the output apps/bench/bench_report.hpp (markdown tables,
// the default) and apps/bench/bench_json.hpp (--json, --json-out FILE). Progress lines go to
// stderr. Exit status: 0 when every workload was measured, 1 when one failed (the output says
// which and why) or on a bad flag value or model, 2 for an unknown flag.
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "apps/bench/bench_json.hpp"
#include "apps/bench/bench_options.hpp"
#include "apps/bench/bench_report.hpp"
#include "apps/bench/bench_runner.hpp"
#include "apps/cli.hpp"
#include "apps/commands.hpp"
#include "apps/executor_factory.hpp"
#include "formats/common.hpp"
#include "formats/model_file.hpp"

namespace rz::cmd {
namespace {

// Notes for flags that the chosen executor does not use.
void warn_unused(const bench::BenchOptions& o, const std::string& device) {
  auto note = [](const char* flag, const char* dev) {
    std::fprintf(stderr, "rz bench: note: %s applies to the %s executor only\n", flag, dev);
  };
  if (device == "cpu") {
    if (!o.cuda_graphs) note("--no-graphs", "CUDA");
    if (!o.qmm) note("--no-qmm", "CUDA");
    if (o.int8) note("--int8", "CUDA");
    if (!o.pdl) note("--no-pdl", "CUDA");
    if (!o.fused_forms) note("--no-fused-forms", "CUDA");
    if (!o.tune_gemm) note("--no-gemm-tune", "CUDA");
    if (o.gpu != 0) note("--gpu", "CUDA");
  } else if (o.threads != 0) {
    note("--threads", "CPU");
  }
}

}  // namespace

int bench(int argc, char** argv) {
  cli::Flags f = bench::bench_flags();
  int code = 0;
  if (!f.parse(argc, argv, code)) return code;
  const bench::BenchOptions o = bench::bench_options(f);

  std::string why_cpu;
  const std::string device = resolve_device(o.device, &why_cpu);
  std::string why_not;
  if (device == "cuda" && !cuda_available(&why_not)) throw Error("--device cuda: " + why_not);
  warn_unused(o, device);
  std::ofstream json_file;
  if (!o.json_out.empty()) {
    json_file.open(o.json_out, std::ios::binary | std::ios::trunc);
    if (!json_file) throw Error("--json-out: cannot write " + o.json_out);
  }

  std::shared_ptr<const ModelFile> file = ModelFile::open(o.model);
  std::fprintf(stderr, "rz bench: %s (%s) on %s%s\n", o.model.c_str(), o.label.c_str(),
               device.c_str(), why_cpu.empty() ? "" : (" (auto: " + why_cpu + ")").c_str());
  const bench::BenchRun run = bench::run_bench(o, device, file, stderr);

  const std::string json = o.json || json_file.is_open() ? bench::json_report(run) : "";
  if (json_file.is_open()) {
    json_file << json;
    json_file.close();
    if (!json_file) throw Error("--json-out: cannot write " + o.json_out);
  }
  if (o.json) {
    std::fputs(json.c_str(), stdout);
  } else {
    std::fputs(bench::markdown_report(run).c_str(), stdout);
    std::printf("\n(total %.1f s)\n", run.total_seconds);
  }
  std::fflush(stdout);
  return run.ok() ? 0 : 1;
}

}  // namespace rz::cmd
