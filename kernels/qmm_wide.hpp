// qmm's warpgroup kernels (kernels/qmm_wide.cu, kernels/QMM.md "The wide kernel"): 65 tokens and
// more on Hopper, wgmma with A (the weights, decoded from their blocks in registers) from
// registers and B (the tokens' x) from shared memory; and the same in the integer form for 33-64
// tokens of large Q4_K / Q5_K / Q6_K matrices. Internal to qmm (kernels/qmm.cu).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "formats/ggml_types.hpp"

namespace rz::gpu::qmm_detail {

// From this many tokens qmm runs the wide kernel where it is available, in tiles of kWideTokens.
constexpr int kWideMinTokens = 65;
constexpr int kWideTokens = 128;

// Whether this build has the wide kernel (compiled for sm_90a) and the current device runs it
// (compute capability 9.0).
bool wide_available();

// The integer form's kernel takes 33-64 tokens (one tile of kWideIntTokens) of the matrices of
// these formats (wide_int_format) with at least wide_int_min_bytes() bytes, where the wide kernel
// is available. Measured (H200, us at 64 tokens, bench/gpu-runs/2026-11-28-h200-qmm-wide-int.log):
// llama8b Q4_K gate+up 61 against the staged kernel's 92, Q4_K ffn_down 45 against 59, Q6_K output
// 355 against 409 (at 48 tokens 354 against 494); but 4,096 x 4,096 Q4_K 23 against 16, and at
// 17-32 tokens the staged kernel is level or ahead. Without the fp16 copies llama3.1-8b's decode
// at B = 40 / 48 / 64 4,815 / 5,614 / 7,206 -> 5,788 / 6,730 / 8,427 tokens/s.
constexpr int kWideIntMinTokens = 33;
constexpr int kWideIntTokens = 64;
constexpr double kWideIntMinBytes = 32e6;
bool wide_int_format(GgmlType type);
// The size threshold, kWideIntMinBytes unless a test lowers it (so that small matrices run it).
double& wide_int_min_bytes();

// The fp32 form's grid (kernels/QMM.md, "The wide kernel's grid"): its K splits for a shape,
// one count for every n the kernel takes (a token's result must not depend on how many tokens
// share the call: the splits set the summation order), and per call its warpgroups a block (64
// rows each, sharing each chunk's x stage): two, or one where that leaves fewer blocks idle or
// fills more SMs (the rows' sums are the same bits either way). Both minimize wide_cost, a model
// of the kernel's time in chunk times fitted to QmmBench.DISABLED_WideGroups. sms: the device's
// SM count. wide_groups_override(): 0 for the model, 1 or 2 forced (env RZ_QMM_WIDE_WG; tests and
// benches).
double wide_cost(int64_t rows, int64_t cols, int64_t n, int groups, int splits, int sms);
int wide_splits(int64_t rows, int64_t cols, int sms);
int wide_groups(int64_t rows, int64_t cols, int64_t n, int splits, int sms);
int& wide_groups_override();

// Floats of workspace the wide kernels' x layout takes for n tokens of cols columns (beside the
// split sums, after them): the fp32 form's from kWideMinTokens, else the integer form's (which is
// smaller than the fp32 form's at any n >= kWideMinTokens, so that the largest n bounds them all).
size_t wide_x_floats(int64_t n, int64_t cols);

// y (or the split workspace out, ld) = x · Wᵀ by the wide kernel: xp is qmm_prepare_x's output,
// xw wide_x_floats(n, cols) floats of scratch (16-byte aligned) that it first rearranges xp into.
// Grid: token tiles × row tiles × `splits` K splits (out = the workspace when splits > 1, whose
// sums the caller adds). int_form: the integer form's kernel (at most 64 tokens; a type of
// wide_int_format), else the fp32 form's.
void launch_wide(GgmlType type, const void* w, int64_t row_bytes, const void* xp, void* xw,
                 float* out, int64_t ld, int rows, int cols, int n, int splits, bool int_form,
                 cudaStream_t stream);

}  // namespace rz::gpu::qmm_detail
