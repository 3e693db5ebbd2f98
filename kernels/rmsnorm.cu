// RMSNorm, alone (rmsnorm.hpp) or fused with the residual add before it (add_rmsnorm.hpp): one
// kernel serves both, so the fused form is bit-identical to the two separate steps by
// construction. One thread block per row, each thread owning the elements
// i = threadIdx.x + k * blockDim.x: pass 1 adds y into x when there is a y (writing the sum back)
// and accumulates the squares with an fma chain in element order (eight elements' loads at a
// time); block_sum (kernels/cuda_common.cuh) reduces them;
// pass 2 re-reads the thread's own elements and scales them. A thread reads and writes only its
// own elements, so in place (out == x) is safe. With matmul input forms to write
// (kernels/act_forms.hpp) pass 2 takes four consecutive elements a thread instead (the same
// products, so out is bit for bit the same) and writes each form of them, and out itself unless
// forms.f32 is false.
#include "kernels/add_rmsnorm.hpp"
#include "kernels/launch.cuh"
#include "kernels/rmsnorm.hpp"

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <string>

#include "kernels/act_forms.cuh"
#include "kernels/cuda_common.cuh"

namespace rz::gpu {
namespace {

// grid (n_rows, or round_up(n_rows, 8) when forms.qmm is set: the blocks past n_rows write the
// qmm form's zero pad rows and nothing else); x and out may alias, so no __restrict__ on them; y
// may be null (then x is only read).
// Row r starts at (r / heads) * token_stride + (r % heads) * n (heads 1, token_stride n: rows
// one after another; more heads: the heads of token rows, normalized in place, without forms).
__global__ void add_rms_norm_kernel(float* x, const float* y, const float* __restrict__ w,
                                    float* out, int n, float eps, ActForms forms, int n_rows,
                                    int heads, int64_t token_stride) {
  act_forms_dependency_sync(forms);
  if (static_cast<int>(blockIdx.x) >= n_rows) {
    for (int i = threadIdx.x; i < n / 4; i += blockDim.x) store_qmm_pad(forms, blockIdx.x, n, i);
    return;
  }
  const size_t row = static_cast<size_t>(blockIdx.x / heads) * static_cast<size_t>(token_stride) +
                     static_cast<size_t>(blockIdx.x % heads) * n;
  float* xr = x + row;
  float* outr = out + row;
  // Pass 1 in rounds of kLoads elements a thread whose loads all go out before the round's first
  // store (x and y are not __restrict__: one element at a time, each load waited for the store
  // before it, a memory latency per element); the squares are summed in element order.
  constexpr int kLoads = 8;
  const float* yr = y ? y + row : nullptr;
  float ss = 0.0f;
  for (int i0 = threadIdx.x; i0 < n; i0 += kLoads * blockDim.x) {
    float v[kLoads];
#pragma unroll
    for (int k = 0; k < kLoads; ++k) {
      const int i = i0 + k * blockDim.x;
      v[k] = i < n ? (yr ? __fadd_rn(xr[i], yr[i]) : xr[i]) : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kLoads; ++k) {
      const int i = i0 + k * blockDim.x;
      if (i < n) {
        if (yr) xr[i] = v[k];
        ss = __fmaf_rn(v[k], v[k], ss);
      }
    }
  }
  // The weights of pass 2's first round with forms, requested before the reduction.
  const int n4 = n / 4;
  float4 w_first = make_float4(0.f, 0.f, 0.f, 0.f);
  if (forms.any() && static_cast<int>(threadIdx.x) < n4)
    w_first = __ldg(reinterpret_cast<const float4*>(w) + threadIdx.x);
  ss = block_sum(ss);  // its barriers also make every thread's x[r] visible to the whole block
  const float scale = 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
  if (!forms.any()) {  // rounds of kLoads elements, loaded before they are stored (out may be x)
    for (int i0 = threadIdx.x; i0 < n; i0 += kLoads * blockDim.x) {
      float xv[kLoads], wv[kLoads];
#pragma unroll
      for (int k = 0; k < kLoads; ++k) {
        const int i = i0 + k * blockDim.x;
        xv[k] = i < n ? xr[i] : 0.0f;
        wv[k] = i < n ? w[i] : 0.0f;
      }
#pragma unroll
      for (int k = 0; k < kLoads; ++k) {
        const int i = i0 + k * blockDim.x;
        if (i < n) outr[i] = __fmul_rn(__fmul_rn(xv[k], scale), wv[k]);
      }
    }
    return;
  }
  // With forms (n a multiple of 4, rows 16-byte aligned: checked by the host): four consecutive
  // elements a thread, the same products; every thread runs every round (the q8 form's group
  // shuffles), those past the row's end as inactive lanes.
  for (int base = 0; base < n4; base += blockDim.x) {
    const int i4 = base + threadIdx.x;
    const bool active = i4 < n4;
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
    if (active) {
      const float4 xv = reinterpret_cast<const float4*>(xr)[i4];
      const float4 wv = base == 0 ? w_first : __ldg(reinterpret_cast<const float4*>(w) + i4);
      o.x = __fmul_rn(__fmul_rn(xv.x, scale), wv.x);
      o.y = __fmul_rn(__fmul_rn(xv.y, scale), wv.y);
      o.z = __fmul_rn(__fmul_rn(xv.z, scale), wv.z);
      o.w = __fmul_rn(__fmul_rn(xv.w, scale), wv.w);
      if (forms.f32) reinterpret_cast<float4*>(outr)[i4] = o;
    }
    store_act_forms(forms, blockIdx.x, n_rows, n, 4 * i4, o, active);
  }
}

int block_threads(int n) { return n > 4096 ? 1024 : n > 1024 ? 512 : n > 256 ? 256 : 128; }

unsigned grid_rows(int n_rows, const ActForms& forms) {
  return static_cast<unsigned>(forms.qmm ? (n_rows + 7) / 8 * 8 : n_rows);
}

// The forms' own rules, and the float4 pass's: 16-byte aligned x, out and w; without the fp32
// output, out apart from x (the norm in place would leave x unnormalized).
void check_norm_forms(const ActForms& forms, const float* x, const float* out, const float* w,
                      int n, const char* who) {
  check_act_forms(forms, n, who);
  if (!forms.f32 && out == x)
    throw Error(std::string(who) + ": in place, the fp32 output cannot be left out");
  if (forms.any())
    for (const float* p : {x, out, w})
      if (reinterpret_cast<uintptr_t>(p) % 16 != 0)
        throw Error(std::string(who) + ": the matmul input forms need 16-byte aligned rows");
}

}  // namespace

void rms_norm(const float* x, const float* w, float* y, int n_rows, int n, float eps,
              cudaStream_t stream, const ActForms& forms) {
  if (n <= 0 || n_rows < 0)
    throw Error("rms_norm: bad shape [" + std::to_string(n_rows) + ", " + std::to_string(n) + "]");
  if (!(eps >= 0.0f)) throw Error("rms_norm: eps must be >= 0");
  if (n_rows == 0) return;
  if (!x || !w || !y) throw Error("rms_norm: null pointer");
  check_norm_forms(forms, x, y, w, n, "rms_norm");
  // Without a y the kernel never writes x.
  launch_kernel(add_rms_norm_kernel, grid_rows(n_rows, forms), block_threads(n), 0, stream,
                const_cast<float*>(x), nullptr, w, y, n, eps, forms, n_rows, 1, int64_t(n));
  RZ_CUDA_CHECK_LAUNCH("rms_norm (add_rms_norm_kernel)");
}

void rms_norm_heads(float* x, const float* w, int n_tokens, int n_heads, int head_dim,
                    int64_t token_stride, float eps, cudaStream_t stream) {
  if (head_dim <= 0 || n_heads <= 0 || n_tokens < 0 || token_stride < int64_t(n_heads) * head_dim ||
      int64_t(n_tokens) * n_heads > INT32_MAX)
    throw Error("rms_norm_heads: bad shape [" + std::to_string(n_tokens) + " tokens, " +
                std::to_string(n_heads) + " heads of " + std::to_string(head_dim) +
                ", token stride " + std::to_string(token_stride) + "]");
  if (!(eps >= 0.0f)) throw Error("rms_norm_heads: eps must be >= 0");
  if (n_tokens == 0) return;
  if (!x || !w) throw Error("rms_norm_heads: null pointer");
  launch_kernel(add_rms_norm_kernel, static_cast<unsigned>(n_tokens * n_heads),
                block_threads(head_dim), 0, stream, x, nullptr, w, x, head_dim, eps, ActForms{},
                n_tokens * n_heads, n_heads, token_stride);
  RZ_CUDA_CHECK_LAUNCH("rms_norm_heads (add_rms_norm_kernel)");
}

void add_rms_norm(float* x, const float* y, const float* w, float* out, int n_rows, int n,
                  float eps, cudaStream_t stream, const ActForms& forms) {
  if (n <= 0 || n_rows < 0)
    throw Error("add_rms_norm: bad shape [" + std::to_string(n_rows) + ", " + std::to_string(n) +
                "]");
  if (!(eps >= 0.0f)) throw Error("add_rms_norm: eps must be >= 0");
  if (n_rows == 0) return;
  if (!x || !w || !out) throw Error("add_rms_norm: null pointer");
  check_norm_forms(forms, x, out, w, n, "add_rms_norm");
  launch_kernel(add_rms_norm_kernel, grid_rows(n_rows, forms), block_threads(n), 0, stream, x, y, w,
                out, n, eps, forms, n_rows, 1, int64_t(n));
  RZ_CUDA_CHECK_LAUNCH("add_rms_norm_kernel");
}

}  // namespace rz::gpu
