// Logit soft-capping on the GPU (gemma's final_logit_softcapping): x = cap * tanh(x / cap)
// elementwise, as cpu/cpu_ops.cpp's softcap (tanhf may differ from the host's tanh by an ulp).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace rz::gpu {

// x: device [n] fp32, in place. Throws rz::Error for n < 0 or cap <= 0; n == 0 launches nothing.
void softcap(float* x, int64_t n, float cap, cudaStream_t stream);

}  // namespace rz::gpu
