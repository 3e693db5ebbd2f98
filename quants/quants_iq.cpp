// Dequantization of the 4-bit non-linear formats IQ4_NL (32-element blocks) and IQ4_XS
// (256-element super-blocks of 8 sub-blocks with 6-bit scales), as gguf.quants does it: each
// element is a scale times kIq4Values[index], one float32 product.
#include <cstring>

#include "quants/quants.hpp"
#include "quants/quants_impl.hpp"

RZ_QUANTS_NO_FP_CONTRACT

namespace rz::quants {

// Element j < 16 of a 32-element run: the low nibble of qs[j]; element j + 16: the high nibble.
static void iq4_run(const uint8_t* qs, float d, float* y) {
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(kIq4Values[qs[j] & 0x0f]);
    y[j + 16] = d * static_cast<float>(kIq4Values[qs[j] >> 4]);
  }
}

void dequantize_iq4_nl(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockIQ4_NL*>(src);
  for (int64_t i = 0; i < n / QK4_NL; ++i, ++b, dst += QK4_NL)
    iq4_run(b->qs, fp16_to_fp32(b->d), dst);
}

// Sub-block s: scale (low nibble s % 2 of scales_l[s / 2] | bits 2 s, 2 s + 1 of scales_h << 4)
// - 32, times d; its indices qs[16 s .. 16 s + 15].
void dequantize_iq4_xs(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockIQ4_XS*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i, ++b, dst += QK_K) {
    const float d = fp16_to_fp32(b->d);
    for (int s = 0; s < QK_K / 32; ++s) {
      const int ls = ((b->scales_l[s / 2] >> (4 * (s % 2))) & 0x0f) | ((b->scales_h >> (2 * s)) & 3)
                                                                          << 4;
      iq4_run(b->qs + 16 * s, d * static_cast<float>(ls - 32), dst + 32 * s);
    }
  }
}

}  // namespace rz::quants
