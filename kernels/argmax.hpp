// Greedy sampling on the GPU: the index of the largest logit of each row, with
// model/sampling.cpp's argmax rules: ties go to the lowest index, NaN is never the maximum, and a
// row with nothing above -inf (all -inf or NaN) gives 0.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace rz::gpu {

// logits: device [n_rows, n_vocab] fp32; out: device [n_rows] int32.
// Throws rz::Error for n_vocab <= 0 or n_rows < 0; n_rows == 0 launches nothing.
// One thread block per row: slow for long rows at small batch; prefer the workspace overload.
void argmax_rows(const float* logits, int n_rows, int n_vocab, int32_t* out, cudaStream_t stream);

// Bytes of device workspace the overload below needs for [n_rows, n_vocab]: one (value, index)
// pair per row and chunk of kArgmaxChunk logits; 0 when a row fits one chunk (workspace unused).
// Throws rz::Error for n_vocab <= 0 or n_rows < 0.
constexpr int kArgmaxChunk = 2048;
size_t argmax_workspace_bytes(int n_rows, int n_vocab);

// The same result as above, the rows split over several blocks: a first kernel writes each
// chunk's best (value, index) into `workspace` ([n_rows, n_chunks] floats then [n_rows, n_chunks]
// int32), a second reduces them per row. workspace: device, at least
// argmax_workspace_bytes(n_rows, n_vocab) bytes, 4-byte aligned (may be null when that is 0);
// workspace_bytes is its size, checked. No allocation or synchronisation: capturable in a CUDA
// graph. Throws rz::Error for bad shapes, null pointers or a workspace too small.
void argmax_rows(const float* logits, int n_rows, int n_vocab, int32_t* out, void* workspace,
                 size_t workspace_bytes, cudaStream_t stream);

}  // namespace rz::gpu
