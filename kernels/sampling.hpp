// Token sampling on the GPU: one row of logits per sequence in, one token id per row out, with the
// same stages and order as the CPU Sampler (model/sampling.cpp):
//   repetition penalty -> greedy (temperature <= 0) -> top-k -> temperature -> softmax ->
//   min-p -> top-p -> draw
// Candidates are ranked by (logit descending, id ascending), the draw walks the kept candidates'
// cumulative mass in that order (in id order when neither top-k nor top-p is on, as the CPU does)
// with the row's uniform `u`, which the host draws from the slot's seeded std::mt19937_64 stream
// exactly as the CPU Sampler does (top 53 bits of one output). So the GPU picks what the CPU
// picks for the same logits and seed, up to float rounding of exp and of the sums.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace rz::gpu {

// One row's settings (SamplingParams, plus where its penalised ids are and its uniform draw).
struct SampleRow {
  float temperature = 0.0f;  // <= 0: greedy argmax (ties to the lowest id), after the penalty
  int top_k = 0;             // 0 (or >= n_vocab): off
  float top_p = 1.0f;        // >= 1: off
  float min_p = 0.0f;        // <= 0: off
  float penalty = 1.0f;      // 1 (or <= 0): off
  int penalty_begin = 0;     // this row's ids to penalise: penalty_ids[penalty_begin, penalty_end),
  int penalty_end = 0;       //   each id once (the host dedups the recent history window)
  double u = 0.0;            // uniform in [0, 1), used when temperature > 0
};

// Bytes of device workspace sample_rows needs for n_rows rows of n_vocab logits.
size_t sample_rows_workspace_bytes(int n_rows, int n_vocab);

// logits: device [n_rows, n_vocab] fp32; modified in place (penalty, temperature, ...)
// rows: device [n_rows] SampleRow; penalty_ids: device int32 (may be null if no row penalises)
// out: device [n_rows] int32, the chosen ids
// workspace: device, sample_rows_workspace_bytes(n_rows, n_vocab) bytes
// Throws rz::Error for bad sizes; n_rows == 0 launches nothing.
void sample_rows(float* logits, int n_rows, int n_vocab, const SampleRow* rows,
                 const int32_t* penalty_ids, int32_t* out, void* workspace, size_t workspace_bytes,
                 cudaStream_t stream);

}  // namespace rz::gpu
