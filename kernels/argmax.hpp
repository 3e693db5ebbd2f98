// Greedy sampling on the GPU: the index of the largest logit of each row, with
// model/sampling.cpp's argmax rules: ties go to the lowest index, NaN is never the maximum, and a
// row with nothing above -inf (all -inf or NaN) gives 0.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace rz::gpu {

// logits: device [n_rows, n_vocab] fp32; out: device [n_rows] int32.
// Throws rz::Error for n_vocab <= 0 or n_rows < 0; n_rows == 0 launches nothing.
void argmax_rows(const float* logits, int n_rows, int n_vocab, int32_t* out, cudaStream_t stream);

}  // namespace rz::gpu
