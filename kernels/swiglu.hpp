// SwiGLU on the GPU: the gate of the feed-forward block, between the gate/up matmuls and the down
// matmul. out = silu(gate) * up elementwise, silu(g) = g / (1 + exp(-g)), rounded as
// cpu/cpu_ops.cpp's swiglu: (g / (1 + expf(-g))) * up (expf, not the fast __expf).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace rz::gpu {

// gate, up, out: device [n] fp32 (n = n_tokens * n_ff, rows contiguous); out may alias gate or
// up. Throws rz::Error for n < 0; n == 0 launches nothing.
// The gate's activation: silu (SwiGLU) or gelu's tanh approximation (GeGLU: gemma).
enum class GateAct { silu, gelu_tanh };

void swiglu(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream,
            GateAct act = GateAct::silu);

}  // namespace rz::gpu
