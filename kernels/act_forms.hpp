// The forms of an activation matrix that the matmul paths read (gpu/matmul_path.hpp), written by
// the kernel that produces the matrix (RMSNorm, the residual add + RMSNorm, SwiGLU over fused
// rows) beside its fp32 output, so that the matmuls after it need no conversion kernel of their
// own. Each form is byte for byte what its stand-alone preparation kernel writes from the same
// fp32 values:
//   f16  convert_to_half(.., HalfType::f16, ..): [n, cols] fp16 row-major (the cuBLAS path)
//   qmm  qmm_prepare_x: fp16 in qmm's fragment order, rows n .. round_up(n, 8) - 1 zero
//        (kernels/qmm.hpp; cols a multiple of kQmmChunk)
//   q8   quantize_x_q8: int8 quants per 32 columns and their {d, d * sum} pairs, for n rows
//        (kernels/gemv_q8.hpp; cols a multiple of kQ8Group)
// A null pointer leaves that form out. The producer's fp32 output is written unless f32 is false
// (the norms and swiglu_rows: when every reader of the matrix reads one of its forms, so the fp32
// matrix would be bytes written for no one; at least one form must be set then).
#pragma once

namespace rz::gpu {

struct ActForms {
  void* f16 = nullptr;
  void* qmm = nullptr;
  void* q8 = nullptr;
  // Whether the producer writes its fp32 output (false: the forms alone).
  bool f32 = true;
  constexpr bool any() const { return f16 || qmm || q8; }  // constexpr: device code calls it too
};

// Throws rz::Error when a producer of rows of `cols` columns cannot write `forms` (`who` names
// it): cols not a multiple of 4 (of kQmmChunk for qmm, of kQ8Group for q8), a form not 16-byte
// aligned, or f32 false without a form.
void check_act_forms(const ActForms& forms, long long cols, const char* who);

}  // namespace rz::gpu
