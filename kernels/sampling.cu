// GPU token sampling (see sampling.hpp): one kernel, one thread block of 512 threads per row,
// no device-wide library calls (so sizing the workspace is a pure host computation).
//
// Per row, in the CPU Sampler's order (model/sampling.cpp):
//   0. log-probabilities, when the row asks: the log-sum-exp of the raw row (max, then a double
//      sum of exp(x - max)) and the top-n ids by a radix select + sort on the raw logits' keys
//      (the workspace of 3b, free until then)
//   1. penalties on penalties[begin, end): repetition, then presence/frequency (ids outside
//      [0, n_vocab) ignored); each raw value kept in penalty_raw for the chosen token's logprob
//   2. one pass: argmax (canonical value desc, id asc; NaN read as -inf) and max_l, the largest
//      scaled logit (NaN ignored, as std::max(max_l, NaN) does). Greedy rows stop here; so does a
//      sampling row whose max_l is not finite (all -inf, +inf, overflow): the CPU's fallback.
//      min_p > 1 keeps nothing: the CPU then takes its first candidate (top-k on: the best id;
//      else id 0).
//   3a. neither top-k nor top-p: candidates in id order, no sort. Mass of the min-p survivors,
//       then the draw as a block-wide scan over the row in id order.
//   3b. top-k or top-p: each id gets a 32-bit order key (top-k: of its logit, as select_top_k
//       ranks; top-p alone: of its probability, as the CPU's top-p sort ranks). The m best ids
//       (m = top_k, or first 4096 for top-p alone) are found by a radix select on the key
//       (4 histogram passes of 8 bits, integer counts), compacted in id order, and sorted by a
//       stable LSD radix sort (best first, equal keys keep ascending ids). Over the sorted
//       candidates: min-p mask, top-p prefix (exclusive double scan < top_p * sum), mass, then
//       the draw. With top-p alone, if the
//       m-th candidate is still kept the kept prefix may run past m: redo with m = n_vocab
//       (the whole row sorted: slow, but only for very flat distributions).
// Probabilities are float(exp(double(x * inv_t - max_l))) with the multiply and subtract
// rounded separately (no FMA contraction), i.e. correctly rounded exp of the CPU's argument;
// glibc's expf agrees with that almost always. Sums are double, in a fixed order per launch
// (block scans/reductions), so a row's result does not depend on timing.
//
// Workspace: [n_rows][3][n_vocab] 32-bit words: the order keys by id, then two ping-pong buffers
// of ids for the select/sort (after the sort the spare one holds each sorted candidate's kept
// probability as float bits, -1 = not kept). Rows that need no sort do not touch theirs.
#include "kernels/launch.cuh"
#include "kernels/sampling.hpp"

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <string>

#include "kernels/cuda_common.cuh"

namespace rz::gpu {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
static_assert(kThreads % 32 == 0 && kThreads >= 256 && kThreads <= 1024, "one thread per digit");
constexpr int kFirstTopP = 4096;  // candidates sorted first when only top-p is on
constexpr int kMaxVocab = 1 << 30;

using ScanD = cub::BlockScan<double, kThreads>;
using ScanI = cub::BlockScan<int, kThreads>;
using ReduceD = cub::BlockReduce<double, kThreads>;
using ReduceI = cub::BlockReduce<int, kThreads>;

struct MaxInt {
  __device__ int operator()(int a, int b) const { return a > b ? a : b; }
};

struct Shared {
  union {
    typename ScanD::TempStorage scan_d;
    typename ScanI::TempStorage scan_i;
    typename ReduceD::TempStorage reduce_d;
    typename ReduceI::TempStorage reduce_i;
  } tmp;
  int cnt[kWarps][256];  // radix sort: per-warp digit counts, then per-warp offsets
  int hist[256];
  int base[256];
  float warp_v[kWarps];
  int warp_i[kWarps];
  float warp_m[kWarps];
  uint32_t prefix, mask;  // radix select
  int rem;
  int flag;
  int hit;
  int am_id;    // argmax id
  float max_l;  // largest scaled logit
  double dval;
  int ival;
};

// NaN -> -inf (never chosen), -0 -> +0 (equal to +0, so ties go by id as on the CPU).
__device__ __forceinline__ float canon(float x) {
  return isnan(x) ? -INFINITY : (x == 0.0f ? 0.0f : x);
}

// Unsigned key ordering candidates best first: smaller key = larger canonical value.
__device__ __forceinline__ uint32_t desc_key(float x) {
  const uint32_t u = __float_as_uint(canon(x));
  const uint32_t ord = (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // ascending with the value
  return ~ord;
}

// Unnormalised probability exp(x / T - max_l), as the CPU computes it (separately rounded).
__device__ __forceinline__ float prob(float x, float inv_t, float max_l) {
  const float d = __fsub_rn(__fmul_rn(canon(x), inv_t), max_l);
  return __double2float_rn(exp(static_cast<double>(d)));
}

// Block sums / maxima broadcast to every thread.
__device__ double block_sum(double x, Shared& s) {
  __syncthreads();
  const double r = ReduceD(s.tmp.reduce_d).Sum(x);
  if (threadIdx.x == 0) s.dval = r;
  __syncthreads();
  const double out = s.dval;
  __syncthreads();
  return out;
}

__device__ int block_max(int x, Shared& s) {
  __syncthreads();
  const int r = ReduceI(s.tmp.reduce_i).Reduce(x, MaxInt{});
  if (threadIdx.x == 0) s.ival = r;
  __syncthreads();
  const int out = s.ival;
  __syncthreads();
  return out;
}

// Argmax (value desc, id asc) and fmaxf of the scaled values: results in s.am_id, s.max_l.
__device__ void argmax_and_max(const float* row, int n, float inv_t, Shared& s) {
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  float bv = -INFINITY, ms = -INFINITY;
  int bi = INT_MAX;
  for (int i = tid; i < n; i += kThreads) {
    const float x = canon(row[i]);
    if (argmax_better(x, i, bv, bi)) bv = x, bi = i;
    ms = fmaxf(ms, __fmul_rn(x, inv_t));
  }
  warp_argmax(bv, bi);  // lane 0 gets the warp's best pair
  ms = warp_max_to_lane0(ms);
  __syncthreads();
  if (lane == 0) s.warp_v[warp] = bv, s.warp_i[warp] = bi, s.warp_m[warp] = ms;
  __syncthreads();
  if (warp == 0) {
    bv = lane < kWarps ? s.warp_v[lane] : -INFINITY;
    bi = lane < kWarps ? s.warp_i[lane] : INT_MAX;
    ms = lane < kWarps ? s.warp_m[lane] : -INFINITY;
    warp_argmax(bv, bi);
    ms = warp_max_to_lane0(ms);
    if (lane == 0) s.am_id = bi == INT_MAX ? 0 : bi, s.max_l = ms;
  }
  __syncthreads();
}

// dst[0, m) = the m best ids of the row (smallest key, ties to the lower id), in id order.
__device__ void select_top(const uint32_t* key, int n, int m, int* dst, Shared& s) {
  const int tid = threadIdx.x;
  if (m >= n) {
    for (int i = tid; i < n; i += kThreads) dst[i] = i;
    __syncthreads();
    return;
  }
  if (tid == 0) s.prefix = 0, s.mask = 0, s.rem = m;
  for (int shift = 24; shift >= 0; shift -= 8) {  // the m-th smallest key, 8 bits at a time
    if (tid < 256) s.hist[tid] = 0;
    __syncthreads();
    const uint32_t prefix = s.prefix, mask = s.mask;
    for (int i = tid; i < n; i += kThreads) {
      const uint32_t k = key[i];
      if ((k & mask) == prefix) atomicAdd(&s.hist[(k >> shift) & 255u], 1);
    }
    __syncthreads();
    if (tid == 0) {
      const int rem = s.rem;
      int cum = 0, d = 0;
      for (; d < 255; ++d) {
        if (cum + s.hist[d] >= rem) break;
        cum += s.hist[d];
      }
      s.prefix = prefix | (uint32_t(d) << shift);
      s.mask = mask | (255u << shift);
      s.rem = rem - cum;
    }
    __syncthreads();
  }
  // keys < T all go in; of the keys == T, the first `rem` in id order (total m)
  const uint32_t T = s.prefix;
  const int rem = s.rem;
  int c_lt = 0, c_eq = 0;
  for (int b = 0; b < n; b += kThreads) {
    const int i = b + tid;
    int lt = 0, eq = 0;
    if (i < n) {
      const uint32_t k = key[i];
      lt = k < T;
      eq = k == T;
    }
    int excl, agg;  // packed counts: low 16 bits "<", high bits "==" (a tile has <= kThreads each)
    ScanI(s.tmp.scan_i).ExclusiveSum(lt | (eq << 16), excl, agg);
    const int lt_before = c_lt + (excl & 0xffff), eq_before = c_eq + (excl >> 16);
    if (lt || (eq && eq_before < rem)) dst[lt_before + min(eq_before, rem)] = i;
    c_lt += agg & 0xffff;
    c_eq += agg >> 16;
    __syncthreads();
  }
}

// Stable LSD radix sort (8-bit digits) of the ids src[0, m) by key[id] ascending (best first),
// using dst as the other buffer. Returns the buffer holding the sorted ids.
__device__ int* sort_desc(const uint32_t* key, int m, int* src, int* dst, Shared& s) {
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  if (tid < 256)
    for (int w = 0; w < kWarps; ++w) s.cnt[w][tid] = 0;
  for (int shift = 0; shift < 32; shift += 8) {
    if (tid < 256) s.hist[tid] = 0;
    __syncthreads();
    for (int i = tid; i < m; i += kThreads) atomicAdd(&s.hist[(key[src[i]] >> shift) & 255u], 1);
    __syncthreads();
    if (tid == 0) {
      int run = 0, one = 0;
      for (int d = 0; d < 256; ++d) {
        s.base[d] = run;
        if (s.hist[d] == m) one = 1;
        run += s.hist[d];
      }
      s.flag = one;
    }
    __syncthreads();
    const bool skip = s.flag;  // one digit holds everything: the pass would move nothing
    __syncthreads();
    if (skip) continue;
    for (int b = 0; b < m; b += kThreads) {
      const int i = b + tid;
      const bool valid = i < m;
      int id = 0, d = 256;  // invalid lanes share a digit no valid lane has
      if (valid) {
        id = src[i];
        d = (key[id] >> shift) & 255u;
      }
      const unsigned peers = __match_any_sync(0xffffffffu, d);
      const int rank = __popc(peers & ((1u << lane) - 1u));  // same digit, lower lane
      if (valid && rank == 0) s.cnt[warp][d] = __popc(peers);
      __syncthreads();
      int total = 0;
      if (tid < 256) {  // per digit: exclusive scan over the warps (tile order = id order)
        for (int w = 0; w < kWarps; ++w) {
          const int c = s.cnt[w][tid];
          s.cnt[w][tid] = total;
          total += c;
        }
      }
      __syncthreads();
      if (valid) dst[s.base[d] + s.cnt[warp][d] + rank] = id;
      __syncthreads();
      if (tid < 256) {
        s.base[tid] += total;
        for (int w = 0; w < kWarps; ++w) s.cnt[w][tid] = 0;
      }
      __syncthreads();
    }
    int* t = src;
    src = dst;
    dst = t;
  }
  return src;
}

// The draw: the first position j in [0, count) with kept(j) and target < (inclusive cumulative
// kept mass at j), or -1. kept_e(j) gives the kept probability, or -1 when j is not kept.
template <class KeptE>
__device__ int draw(int count, double target, KeptE kept_e, Shared& s) {
  const int tid = threadIdx.x;
  double carry = 0.0;
  for (int b = 0; b < count; b += kThreads) {
    const int j = b + tid;
    const float e = j < count ? kept_e(j) : -1.0f;
    const bool kept = e != -1.0f;
    double incl, agg;
    ScanD(s.tmp.scan_d).InclusiveSum(kept ? double(e) : 0.0, incl, agg);
    incl += carry;
    if (tid == 0) s.hit = INT_MAX;
    __syncthreads();
    if (kept && target < incl) atomicMin(&s.hit, j);
    __syncthreads();
    const int hit = s.hit;
    if (hit != INT_MAX) return hit;
    carry += agg;
    __syncthreads();
  }
  return -1;
}

// rz::token_logprobs' value for raw logit x: float(double(x) - lse), NaN read as -inf.
__device__ __forceinline__ float logprob_of(float x, double lse) {
  const double v = static_cast<double>(canon(x)) - lse;
  return isnan(v) ? -INFINITY : __double2float_rn(v);
}

// Step 0: the raw row's log-sum-exp (returned to every thread) and its top_n ids with their
// log-probabilities in lp, ranked as select_top_k ranks (logit desc, id asc).
__device__ double raw_logprobs(const float* row, int n, int top_n, uint32_t* key, int* buf0,
                               int* buf1, LogprobsRow* lp, Shared& s) {
  const int tid = threadIdx.x;
  argmax_and_max(row, n, 1.0f, s);
  const float mx = s.max_l;
  double lse = mx;
  if (isfinite(mx)) {
    double part = 0.0;
    for (int i = tid; i < n; i += kThreads)
      part += exp(static_cast<double>(canon(row[i])) - static_cast<double>(mx));
    lse = static_cast<double>(mx) + log(block_sum(part, s));
  }
  const int m = min(min(top_n, kMaxLogprobs), n);
  if (m > 0) {
    for (int i = tid; i < n; i += kThreads) key[i] = desc_key(row[i]);
    __syncthreads();
    select_top(key, n, m, buf0, s);
    const int* sorted = sort_desc(key, m, buf0, buf1, s);
    if (tid < m) {
      const int id = sorted[tid];
      lp->top_ids[tid] = id;
      lp->top_logprobs[tid] = logprob_of(row[id], lse);
    }
  }
  if (tid == 0) lp->n_top = max(m, 0);
  __syncthreads();  // the row is read above and penalised next
  return lse;
}

// The row's result, by thread 0: the chosen id and, when asked, its log-probability from its
// raw logit (kept in penalty_raw when a penalty changed it; the entries are sorted by id).
__device__ void emit(int r, int chosen, const float* row, const SampleRow& p,
                     const PenaltyEntry* penalties, const float* penalty_raw, double lse,
                     int32_t* out, LogprobsRow* lp) {
  out[r] = chosen;
  if (p.logprobs < 0 || !lp) return;
  float raw = row[chosen];
  if (penalties && penalty_raw) {
    int lo = p.penalty_begin, hi = p.penalty_end;  // binary search for chosen in [lo, hi)
    while (lo < hi) {
      const int mid = lo + (hi - lo) / 2;
      if (penalties[mid].id < chosen)
        lo = mid + 1;
      else
        hi = mid;
    }
    if (lo < p.penalty_end && penalties[lo].id == chosen) raw = penalty_raw[lo];
  }
  lp[r].logprob = logprob_of(raw, lse);
}

__global__ void __launch_bounds__(kThreads)
    sample_kernel(float* logits, int n, const SampleRow* __restrict__ rows,
                  const PenaltyEntry* __restrict__ penalties, float* penalty_raw,
                  int32_t* __restrict__ out, LogprobsRow* __restrict__ lp,
                  void* __restrict__ workspace) {
  grid_dependency_sync();
  __shared__ Shared s;
  const int tid = threadIdx.x;
  const int r = blockIdx.x;
  float* row = logits + static_cast<size_t>(r) * n;  // written (penalty), then read: no restrict
  const SampleRow p = rows[r];
  uint32_t* key = static_cast<uint32_t*>(workspace) + static_cast<size_t>(r) * 3 * n;
  int* buf0 = reinterpret_cast<int*>(key + n);
  int* buf1 = buf0 + n;

  // 0. log-probabilities of the raw row
  const bool want_lp = p.logprobs >= 0 && lp;
  const double lse = want_lp ? raw_logprobs(row, n, p.logprobs, key, buf0, buf1, lp + r, s) : 0.0;
  const float* raw_kept = want_lp ? penalty_raw : nullptr;

  // 1. penalties (ids unique per row: no two threads touch one logit)
  if (penalties && p.penalty_end > p.penalty_begin && p.penalty_begin >= 0) {
    for (int j = p.penalty_begin + tid; j < p.penalty_end; j += kThreads) {
      const PenaltyEntry e = penalties[j];
      if (e.id < 0 || e.id >= n) continue;
      float l = row[e.id];
      if (raw_kept) penalty_raw[j] = l;
      if (e.repeat != 1.0f) l = l > 0.0f ? __fdiv_rn(l, e.repeat) : __fmul_rn(l, e.repeat);
      row[e.id] = __fsub_rn(l, e.subtract);
    }
    __syncthreads();
  }
  auto finish = [&](int chosen) { emit(r, chosen, row, p, penalties, raw_kept, lse, out, lp); };

  // 2. argmax and the largest scaled logit
  const bool greedy = p.temperature <= 0.0f;
  const float inv_t = greedy ? 0.0f : __fdiv_rn(1.0f, p.temperature);
  argmax_and_max(row, n, inv_t, s);
  const int am_id = s.am_id;
  const float max_l = s.max_l;
  const bool use_top_k = p.top_k > 0 && p.top_k < n;
  const bool use_top_p = p.top_p < 1.0f;
  const bool use_min_p = p.min_p > 0.0f;
  if (greedy || !isfinite(max_l) || (use_min_p && p.min_p > 1.0f)) {
    if (tid == 0) finish((!greedy && isfinite(max_l) && !use_top_k) ? 0 : am_id);
    return;
  }
  const float thr = p.min_p;  // min_p * max_p, and max_p = exp(0) = 1

  // 3a. candidates in id order: min-p survivors, drawn in id order
  if (!use_top_k && !use_top_p) {
    double part = 0.0;
    int last = -1;
    for (int i = tid; i < n; i += kThreads) {
      const float e = prob(row[i], inv_t, max_l);
      if (!use_min_p || e >= thr) part += e, last = i;
    }
    const double mass = block_sum(part, s);
    last = block_max(last, s);
    const int j = draw(
        n, p.u * mass,
        [&](int i) {
          const float e = prob(row[i], inv_t, max_l);
          return (!use_min_p || e >= thr) ? e : -1.0f;
        },
        s);
    if (tid == 0) finish(j >= 0 ? j : last);
    return;
  }

  // 3b. sorted candidates, ranked as the CPU ranks them: with top-k by (logit desc, id asc)
  // (select_top_k's order, kept through top-p and the draw); with top-p alone by (probability
  // desc, id asc) (the CPU sorts the probabilities; distinct logits can round to one
  // probability, and then the lower id goes first)
  double row_sum = 0.0;  // top-p's total without top-k: every candidate's mass
  {
    double part = 0.0;
    for (int i = tid; i < n; i += kThreads) {
      float v = row[i];
      if (!use_top_k) {
        v = prob(v, inv_t, max_l);
        part += v;
      }
      key[i] = desc_key(v);
    }
    row_sum = block_sum(part, s);  // (also the barrier after the key writes)
  }
  int m = use_top_k ? p.top_k : min(n, kFirstTopP);
  const int* sorted;
  int* kept_bits;  // float bits of each sorted candidate's kept probability, -1.0f: not kept
  double mass;
  int last;
  for (;;) {
    select_top(key, n, m, buf0, s);
    int* sb = sort_desc(key, m, buf0, buf1, s);
    sorted = sb;
    kept_bits = sb == buf0 ? buf1 : buf0;
    double sum = row_sum;
    if (use_top_k) {
      double part = 0.0;
      for (int j = tid; j < m; j += kThreads) part += prob(row[sorted[j]], inv_t, max_l);
      sum = block_sum(part, s);
    }
    const double target_p = double(p.top_p) * sum;
    double carry = 0.0, part = 0.0;
    last = -1;
    for (int b = 0; b < m; b += kThreads) {
      const int j = b + tid;
      const bool valid = j < m;
      const float e = valid ? prob(row[sorted[j]], inv_t, max_l) : 0.0f;
      const bool ok = valid && (!use_min_p || e >= thr);
      double excl, agg;
      ScanD(s.tmp.scan_d).ExclusiveSum(ok ? double(e) : 0.0, excl, agg);
      excl += carry;
      // the first candidate always stays (CPU: count = max(keep, 1)); min-p and top-p keep
      // prefixes of the sorted order
      const bool kept = valid && (j == 0 || (ok && (!use_top_p || excl < target_p)));
      if (valid) kept_bits[j] = __float_as_int(kept ? e : -1.0f);
      if (kept) part += e, last = j;
      carry += agg;
      __syncthreads();
    }
    mass = block_sum(part, s);
    last = block_max(last, s);
    if (use_top_k || m == n || last < m - 1) break;
    m = n;  // top-p alone reached past the first m candidates: sort them all
  }
  const int j = draw(
      m, p.u * mass, [&](int i) { return __int_as_float(kept_bits[i]); }, s);
  if (tid == 0) finish(sorted[j >= 0 ? j : last]);
}

}  // namespace

size_t sample_rows_workspace_bytes(int n_rows, int n_vocab) {
  if (n_rows < 0 || n_vocab <= 0 || n_vocab > kMaxVocab)
    throw Error("sample_rows_workspace_bytes: bad shape [" + std::to_string(n_rows) + ", " +
                std::to_string(n_vocab) + "]");
  return static_cast<size_t>(n_rows) * 3 * static_cast<size_t>(n_vocab) * sizeof(int32_t);
}

void sample_rows(float* logits, int n_rows, int n_vocab, const SampleRow* rows,
                 const PenaltyEntry* penalties, float* penalty_raw, int32_t* out,
                 LogprobsRow* logprobs, void* workspace, size_t workspace_bytes,
                 cudaStream_t stream) {
  if (n_rows < 0 || n_vocab <= 0 || n_vocab > kMaxVocab)
    throw Error("sample_rows: bad shape [" + std::to_string(n_rows) + ", " +
                std::to_string(n_vocab) + "]");
  if (n_rows == 0) return;
  if (!logits || !rows || !out || !workspace) throw Error("sample_rows: null pointer");
  const size_t need = sample_rows_workspace_bytes(n_rows, n_vocab);
  if (workspace_bytes < need)
    throw Error("sample_rows: workspace of " + std::to_string(workspace_bytes) + " bytes, need " +
                std::to_string(need));
  if (reinterpret_cast<uintptr_t>(workspace) % alignof(int32_t) != 0)
    throw Error("sample_rows: misaligned workspace");
  launch_kernel(sample_kernel, static_cast<unsigned>(n_rows), kThreads, 0, stream, logits, n_vocab,
                rows, penalties, penalty_raw, out, logprobs, workspace);
  RZ_CUDA_CHECK_LAUNCH("sample_kernel");
}

}  // namespace rz::gpu
