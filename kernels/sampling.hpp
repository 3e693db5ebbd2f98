// Token sampling on the GPU: one row of logits per sequence in, one token id per row out, with the
// same stages and order as the CPU Sampler (model/sampling.cpp):
//   penalties -> greedy (temperature <= 0) -> top-k -> temperature -> softmax ->
//   min-p -> top-p -> draw
// Candidates are ranked by (logit descending, id ascending), the draw walks the kept candidates'
// cumulative mass in that order (in id order when neither top-k nor top-p is on, as the CPU does)
// with the row's uniform `u`, which the host draws from the slot's seeded std::mt19937_64 stream
// exactly as the CPU Sampler does (top 53 bits of one output). So the GPU picks what the CPU
// picks for the same logits and seed, up to float rounding of exp and of the sums.
// Rows that ask for log-probabilities get them from the raw logits, before the penalties, as
// rz::token_logprobs computes them (the log-sum-exp summed in another order).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "model/sampling.hpp"  // PenaltyEntry, kMaxLogprobs

namespace rz::gpu {

// One row's settings (SamplingParams, plus where its penalty entries are and its uniform draw).
struct SampleRow {
  float temperature = 0.0f;  // <= 0: greedy argmax (ties to the lowest id), after the penalties
  int top_k = 0;             // 0 (or >= n_vocab): off
  float top_p = 1.0f;        // >= 1: off
  float min_p = 0.0f;        // <= 0: off
  int penalty_begin = 0;     // this row's penalties: penalties[penalty_begin, penalty_end), ids
  int penalty_end = 0;       //   sorted and distinct (rz::penalty_entries)
  int logprobs = -1;         // < 0: none; k >= 0: the chosen token's and the k best (<= 20)
  double u = 0.0;            // uniform in [0, 1), used when temperature > 0
};

// One row's log-probabilities (rows with logprobs >= 0).
struct LogprobsRow {
  float logprob = 0.0f;  // the chosen token's
  int n_top = 0;
  int32_t top_ids[kMaxLogprobs] = {};
  float top_logprobs[kMaxLogprobs] = {};
};

// Bytes of device workspace sample_rows needs for n_rows rows of n_vocab logits.
size_t sample_rows_workspace_bytes(int n_rows, int n_vocab);

// logits: device [n_rows, n_vocab] fp32; modified in place (penalties, temperature, ...)
// rows: device [n_rows] SampleRow
// penalties: device PenaltyEntry (may be null if no row has any)
// penalty_raw: device float, as many as penalties: the kernel keeps each penalised logit's raw
//   value there for the chosen token's log-probability (may be null if no row asks for them)
// out: device [n_rows] int32, the chosen ids
// logprobs: device [n_rows] LogprobsRow, written for the rows that ask (may be null if none)
// workspace: device, sample_rows_workspace_bytes(n_rows, n_vocab) bytes
// Throws rz::Error for bad sizes; n_rows == 0 launches nothing.
void sample_rows(float* logits, int n_rows, int n_vocab, const SampleRow* rows,
                 const PenaltyEntry* penalties, float* penalty_raw, int32_t* out,
                 LogprobsRow* logprobs, void* workspace, size_t workspace_bytes,
                 cudaStream_t stream);

}  // namespace rz::gpu
