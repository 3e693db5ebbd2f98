// The one place that turns a device choice into an Executor: the CPU executor
// (cpu/cpu_executor.hpp) or the CUDA executor (gpu/gpu_executor.hpp). rz serve, rz generate,
// rz bench, gpu_verify and the embedding example build theirs here (library rz_executors, which
// links both executors); the scheduler and the actors see only the Executor interface
// (model/executor.hpp) and never link the GPU library.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "formats/model_file.hpp"
#include "model/executor.hpp"

namespace rz {

// The executor a --device flag names: "cpu" or "cuda" for auto|cpu|cuda; auto is cuda when a CUDA
// device is present, and then `why_cpu` (if given) says why it fell back to the CPU. Throws
// rz::Error for any other value.
std::string resolve_device(const std::string& flag, std::string* why_cpu = nullptr);

// Whether this process can run the CUDA executor: a build with CUDA (not -DRZ_CUDA=OFF) and at
// least one CUDA device. Otherwise `why_not` (if given) says which of the two is missing.
bool cuda_available(std::string* why_not = nullptr);

// What both executors take, and what only one of them does. 0 leaves the executor's default.
struct ExecutorOptions {
  int slots = 1;           // concurrent sequences (KV cache slots)
  int max_context = 0;     // tokens per slot; 0: default_context(config) (model/executor.hpp)
  int threads = 0;         // cpu: worker threads; 0: all cores
  int gpu = 0;             // cuda: device index
  int kv_block_size = 0;   // tokens per KV cache block; 0: kDefaultKvBlockSize (16)
  double kv_fraction = 0;  // cuda: share of the free memory the KV cache may take; 0: 0.9
  int64_t kv_blocks = 0;   // > 0: exactly this many KV blocks (cuda: ignoring kv_fraction);
                           // cpu, 0: one full context per slot
  bool int8_activations = false;      // cuda: GpuExecutorOptions::int8_activations (cpu: unused)
  bool fp8_weights = false;           // cuda: GpuExecutorOptions::fp8_weights (cpu: refused)
  bool cuda_graphs = true;            // cuda: GpuExecutorOptions::cuda_graphs (cpu: unused)
  bool qmm = true;                    // cuda: GpuExecutorOptions::qmm (cpu: unused)
  bool fp16_copies = true;            // cuda: GpuExecutorOptions::fp16_copies (cpu: unused)
  bool fused_input_forms = true;      // cuda: GpuExecutorOptions::fused_input_forms (cpu: unused)
  bool tune_gemm = true;              // cuda: GpuExecutorOptions::tune_gemm (cpu: unused)
  bool graphs_in_background = false;  // cuda: GpuExecutorOptions::graphs_in_background
};

// The value of a command's `--weights` option: "stored" (false) or "fp8" (true); anything else
// throws rz::Error naming the option.
bool fp8_weights_flag(const std::string& value);

// The help text of `--weights`, one place for every command that has it.
inline constexpr const char* kWeightsHelp =
    "cuda: fp8 stores the layers' F16/BF16 matrices as FP8 (E4M3, a scale per row) and multiplies "
    "them on FP8 activations through cuBLASLt: half their memory, faster prefill; lossy "
    "(docs/gpu.md, \"FP8 weights\")";

inline constexpr const char* kNoFp16CopiesHelp =
    "cuda: do not keep fp16 copies of the quantized matrices for prompt chunks and large batches "
    "(kept by default when they take at most a quarter of the device memory; without them qmm "
    "takes batches up to 256 tokens on sm_90, elsewhere up to 64 (128 on matrices of 32 MB or "
    "more), and larger matmuls dequantize their matrix again; less memory, slower prefill)";

inline constexpr const char* kNoGemmTuneHelp =
    "cuda: keep cuBLAS's own kernel choice for every GEMM instead of timing the candidates per "
    "matrix shape and token bucket at load (a fraction of a second; the timed choice is up to "
    "1.7x faster at some token counts)";

struct BuiltExecutor {
  std::unique_ptr<Executor> executor;
  std::string description;  // "cpu, 8 threads" or "cuda: NVIDIA H200" (what runs it)
  std::string memory_plan;  // cuda: the memory plan's one-line summary; "" on the cpu
};

// Builds the executor `device` names: "cpu" or "cuda" (resolve_device turns "auto" into one of
// them). Throws rz::Error for another name, and whatever the executor's constructor throws (bad
// options, no CUDA device, weights it cannot use).
BuiltExecutor make_executor(const std::string& device, std::shared_ptr<const ModelFile> model,
                            const ExecutorOptions& opt);

}  // namespace rz
