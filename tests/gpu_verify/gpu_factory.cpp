// The one place gpu_verify names rz::gpu::GpuExecutor (gpu/gpu_executor.hpp).
#include <cstdio>
#include <memory>

#include "gpu/gpu_executor.hpp"
#include "tests/gpu_verify/verify_common.hpp"

namespace rz::verify {

std::unique_ptr<Executor> make_gpu_executor(std::shared_ptr<const ModelFile> f, int slots,
                                            int max_context) {
  gpu::GpuExecutorOptions o;
  o.slots = slots;
  o.max_context = max_context;
  // Exactly enough KV blocks for every slot at full context: start-up stays small and no step
  // can run out of blocks.
  o.kv_blocks = static_cast<int64_t>(slots) * ((max_context + o.kv_block_size - 1) / o.kv_block_size);
  auto ex = std::make_unique<gpu::GpuExecutor>(std::move(f), o);
  std::printf("gpu executor: %s\n", ex->memory_plan().summary().c_str());
  return ex;
}

}  // namespace rz::verify
