// SwiGLU over fused gate/up rows on the GPU: after one GEMV over the concatenated gate and up
// weights, each token row is [gate (n_ff) | up (n_ff)]; this gates it into a dense [n_ff] row for
// the down matmul. Bit-identical to swiglu (kernels/swiglu.hpp) on de-interleaved gate and up:
// out = (g / (1 + expf(-g))) * u, each operation rounded as there.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/act_forms.hpp"
#include "kernels/swiglu.hpp"

namespace rz::gpu {

// gu: device [n_rows, 2 * n_ff] fp32, row r = [gate | up]; out: device [n_rows, n_ff] fp32 dense,
// must not overlap gu. out[r, i] = silu(gu[r, i]) * gu[r, n_ff + i].
// Throws rz::Error for n_rows < 0, n_ff <= 0 or a null pointer; n_rows == 0 launches nothing.
// forms: the matmul input forms of out to write beside it (kernels/act_forms.hpp; they need n_ff
// a multiple of 4 and 16-byte aligned gu and out, else rz::Error).
// act: the gate's activation (kernels/swiglu.hpp).
void swiglu_rows(const float* gu, float* out, int64_t n_rows, int64_t n_ff, cudaStream_t stream,
                 const ActForms& forms = {}, GateAct act = GateAct::silu);

}  // namespace rz::gpu
