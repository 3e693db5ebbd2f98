// Quantized matrix × matrix on tensor cores (batched decode and short prefill chunks):
//   y[t, r] = sum_c W[r, c] * x[t, c]     for t < n tokens, r < rows, c < cols
// W stays in its GGUF block format (Q2_K .. Q6_K, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, IQ4_XS);
// each warp decodes its rows' blocks to fp16 in registers, straight into the A operand of
// mma.sync m16n8k16 (on sm_90 from 65 tokens, and 33-64 of large matrices, of wgmma; fp32
// accumulation), so a call reads each weight byte from memory once whatever n is and never writes
// a dequantized matrix. x must first be rounded to fp16 and permuted
// by qmm_prepare_x (once per activation matrix: every weight type reads the same prepared x).
// Design, measurements and the choice against gemv / cuBLAS: kernels/QMM.md.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "formats/ggml_types.hpp"
#include "kernels/act_forms.hpp"
#include "kernels/swiglu.hpp"  // GateAct

namespace rz::gpu {

constexpr int kQmmChunk = 256;  // columns per step of the K loop (one K-quant super-block)
// Up to this many tokens qmm may run its direct kernel (weights straight into registers, one or
// two 8-token tiles), which adds its K splits itself; more take the staged kernel.
constexpr int kQmmDirectMaxTokens = 16;

// True when qmm runs `type` with `cols` columns: a quantized type of the list above and cols a
// positive multiple of kQmmChunk.
bool qmm_supported(GgmlType type, int64_t cols);

// Halves qmm_prepare_x writes for n tokens: n rounded up to 8, times cols.
int64_t qmm_x_elems(int64_t n, int64_t cols);

// xp = x rounded to fp16 (nearest even) and permuted within each 256-column chunk into the
// order the mma fragments read it; rows n .. round_up(n, 8) - 1 are zero.
//   x:  device [n, cols] fp32, row-major, 16-byte aligned; cols a multiple of kQmmChunk
//   xp: device, qmm_x_elems(n, cols) halves, 16-byte aligned
void qmm_prepare_x(const float* x, void* xp, int64_t n, int64_t cols, cudaStream_t stream);

// Whether qmm multiplies n tokens of this matrix with its direct kernel: up to 8 tokens always,
// 9-16 (two token tiles) for the formats that read their chunks in place on matrices of at most
// 16 MiB (kernels/QMM.md), else the staged kernel.
bool qmm_runs_direct(GgmlType type, int64_t rows, int64_t cols, int64_t n);

// Whether qmm multiplies n tokens with its wide kernel (kernels/qmm_wide.hpp, kernels/QMM.md): from
// 65 tokens on a compute capability 9.0 device (wgmma), in place of the staged kernel. Every
// format there dequantizes to fp32 and rounds the weights to fp16 (no integer form).
bool qmm_runs_wide(int64_t n);

// Whether qmm multiplies n tokens of this matrix with the wide kernel's integer form (wgmma,
// sm_90): 33-64 tokens of Q4_K, Q5_K and Q6_K matrices of at least 32 MB, in place of the staged
// kernel.
bool qmm_runs_wide_int(GgmlType type, int64_t rows, int64_t cols, int64_t n);

// Whether qmm multiplies n tokens of this matrix in its integer form (kernels/QMM.md): the A
// operand is the integer quant times its sub-block scale, exact in fp16 (Q6_K: rounded once above
// 2,048), and the super-block scales are applied per chunk in fp32, so the weights are not rounded
// to fp16. Q6_K (except where the fp32 wide kernel runs, from 65 tokens); Q4_K and Q5_K up to 24
// tokens (past that the staged kernel's larger token tiles dequantize to fp32 and round the
// weights to fp16, as every other format does), and where qmm_runs_wide_int.
bool qmm_integer_form(GgmlType type, int64_t rows, int64_t cols, int64_t n);

// K splits qmm's staged kernel and the wide kernel's integer form use for a matrix shape on the
// current device (the wide kernel's fp32 form, 65 tokens and more, has its own count:
// qmm_detail::wide_splits), 1 = none: few row tiles get
// their columns split over several thread blocks, whose partial sums a second kernel adds in a
// fixed order. A function of the shape and the SM count alone, so a token's result does not
// depend on how many tokens share the call.
int qmm_splits(int64_t rows, int64_t cols);

// Floats of workspace qmm needs for n tokens (0 when the shape does not split, and for up to 8
// tokens, whose direct kernel adds its splits itself; from 9 tokens an upper bound for every
// count up to n; from 33 tokens on sm_90 the wide kernels' rearranged x besides).
size_t qmm_workspace_floats(int64_t rows, int64_t cols, int64_t n);

// Launches y = x · Wᵀ on `stream` (asynchronous).
//   w:  [rows, cols] in `type`'s blocks, 16-byte aligned
//   xp: qmm_prepare_x's output for these n tokens and cols
//   y:  [n, ldy] fp32 (ldy >= rows; a slice of a wider output), fully written for columns < rows
//   ws: qmm_workspace_floats(rows, cols, n) floats (may be null when that is 0)
// Deterministic: fixed summation order, no atomics. Throws rz::Error for an unsupported type or
// cols, bad shapes, misaligned or null pointers, or too small a workspace.
void qmm(GgmlType type, const void* w, const void* xp, float* y, int64_t rows, int64_t cols,
         int64_t n, int64_t ldy, float* ws, size_t ws_floats, cudaStream_t stream);

// The feed-forward's fused [gate; up] matrix (2 ff rows: the gate's, then up's) times n tokens,
// gated in the same kernel: out[t, i] = act(gate[t, i]) * up[t, i] ([n, ff] fp32), gate and up
// summed exactly as qmm sums that matrix and the activation swiglu_rows' (kernels/gate_act.cuh),
// so out is bit for bit what qmm then swiglu_rows write; with the f16 and qmm forms of out for the
// next matmul (kernels/act_forms.hpp) written beside it. One kernel instead of two on the
// latency-bound decode step. Applies where qmm runs this matrix in its direct kernel, the format
// reads its chunks in place (not Q6_K, Q2_K), its K splits fit one block of at most 4 warps (or,
// up to 8 tokens on a device with clusters, a cluster of two blocks: kernels/qmm.cu, gated_grid),
// ff is a multiple of 16 and forms.q8 is null; elsewhere returns false and launches nothing (run
// qmm and swiglu_rows). out is always written (forms.f32 false is an error). Throws rz::Error for
// null or misaligned pointers or forms.
bool qmm_gated(GgmlType type, const void* w, const void* xp, float* out, int64_t ff, int64_t cols,
               int64_t n, GateAct act, const ActForms& forms, cudaStream_t stream);
// Whether qmm_gated runs this call (with forms that hold no q8 form).
bool qmm_gated_runs(GgmlType type, int64_t ff, int64_t cols, int64_t n);

namespace qmm_detail {
// Test seam and A/B switch: whether one-token calls of the in-place direct kernel run its
// one-token instantiation (qmm_direct_x1_kernel in kernels/qmm_direct.cuh: the same sums, another
// schedule; initially on unless RZ_QMM_X1_OFF=1).
void set_direct_x1(bool on);
// Test seam and A/B switch: whether the staged kernel's 64-token tiles of the fp32 form run two
// row tiles a warp (the same sums; initially on unless RZ_QMM_ROWS2_OFF=1).
void set_staged_rows2(bool on);
}  // namespace qmm_detail

}  // namespace rz::gpu
