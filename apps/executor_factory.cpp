// The executor factory (apps/executor_factory.hpp).
#include "apps/executor_factory.hpp"

#include <utility>

#include "cpu/cpu_executor.hpp"
#include "formats/common.hpp"
#if RZ_HAVE_CUDA
#include "gpu/device.hpp"
#include "gpu/gpu_executor.hpp"
#endif

namespace rz {

#if !RZ_HAVE_CUDA
namespace {
const char* const kNoCudaBuild =
    "this build of rz has no CUDA support (configured with -DRZ_CUDA=OFF)";
}
#endif

std::string resolve_device(const std::string& flag, std::string* why_cpu) {
  if (flag != "auto" && flag != "cpu" && flag != "cuda")
    throw Error("--device: expected auto, cpu or cuda, got '" + flag + "'");
  if (flag != "auto") return flag;
  std::string why;
  if (cuda_available(&why)) return "cuda";
  if (why_cpu) *why_cpu = why;
  return "cpu";
}

bool cuda_available(std::string* why_not) {
#if RZ_HAVE_CUDA
  std::string why;
  if (!gpu::list_devices(&why).empty()) return true;
  if (why_not) *why_not = why;
#else
  if (why_not) *why_not = kNoCudaBuild;
#endif
  return false;
}

bool fp8_weights_flag(const std::string& value) {
  if (value == "stored") return false;
  if (value == "fp8") return true;
  throw Error("--weights: expected stored or fp8, got '" + value + "'");
}

BuiltExecutor make_executor(const std::string& device, std::shared_ptr<const ModelFile> model,
                            const ExecutorOptions& opt) {
  BuiltExecutor b;
  if (device == "cpu") {
    if (opt.fp8_weights)
      throw Error("--weights fp8: FP8 weights run on the CUDA executor only (--device cuda)");
    auto ex = std::make_unique<CpuExecutor>(std::move(model),
                                            CpuExecutorOptions{.slots = opt.slots,
                                                               .max_context = opt.max_context,
                                                               .threads = opt.threads,
                                                               .kv_block_size = opt.kv_block_size,
                                                               .kv_blocks = opt.kv_blocks});
    b.description = "cpu, " + std::to_string(ex->threads()) + " threads";
    b.executor = std::move(ex);
  } else if (device == "cuda") {
#if RZ_HAVE_CUDA
    gpu::GpuExecutorOptions o;
    o.device = opt.gpu;
    o.slots = opt.slots;
    o.max_context = opt.max_context;
    if (opt.kv_block_size > 0) o.kv_block_size = opt.kv_block_size;
    if (opt.kv_fraction > 0) o.kv_memory_fraction = opt.kv_fraction;
    o.kv_blocks = opt.kv_blocks;
    o.int8_activations = opt.int8_activations;
    o.fp8_weights = opt.fp8_weights;
    o.cuda_graphs = opt.cuda_graphs;
    o.qmm = opt.qmm;
    o.fp16_copies = opt.fp16_copies;
    o.fused_input_forms = opt.fused_input_forms;
    o.tune_gemm = opt.tune_gemm;
    o.graphs_in_background = opt.graphs_in_background;
    auto ex = std::make_unique<gpu::GpuExecutor>(std::move(model), o);
    b.description = "cuda: " + ex->memory_plan().device_name;
    b.memory_plan = ex->memory_plan().summary();
    b.executor = std::move(ex);
#else
    throw Error(std::string("--device cuda: ") + kNoCudaBuild);
#endif
  } else {
    throw Error("executor: unknown device '" + device + "' (expected cpu or cuda)");
  }
  return b;
}

}  // namespace rz
