// Byte layouts of the GGUF quantized blocks (identical to ggml's). d/m/dmin are fp16 bits.
#pragma once
#include <cstdint>

namespace rz {

constexpr int QK4_0 = 32, QK4_1 = 32, QK5_0 = 32, QK5_1 = 32, QK8_0 = 32, QK_K = 256;
constexpr int K_SCALE_SIZE = 12;
constexpr int QK4_NL = 32;

#pragma pack(push, 1)
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[QK4_0 / 2];
};
struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[QK4_1 / 2];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[QK5_0 / 2];
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[QK5_1 / 2];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[QK8_0];
};
struct BlockQ2_K {
  uint8_t scales[QK_K / 16];
  uint8_t qs[QK_K / 4];
  uint16_t d, dmin;
};
struct BlockQ3_K {
  uint8_t hmask[QK_K / 8];
  uint8_t qs[QK_K / 4];
  uint8_t scales[12];
  uint16_t d;
};
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[K_SCALE_SIZE];
  uint8_t qs[QK_K / 2];
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[K_SCALE_SIZE];
  uint8_t qh[QK_K / 8];
  uint8_t qs[QK_K / 2];
};
struct BlockQ6_K {
  uint8_t ql[QK_K / 2];
  uint8_t qh[QK_K / 4];
  int8_t scales[QK_K / 16];
  uint16_t d;
};
// IQ4_NL / IQ4_XS: 4-bit indices into the fixed non-linear table kIq4Values (below).
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[QK4_NL / 2];
};
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;  // the high 2 bits of the 8 sub-blocks' 6-bit scales
  uint8_t scales_l[QK_K / 64];
  uint8_t qs[QK_K / 2];
};
#pragma pack(pop)

// The values IQ4_NL and IQ4_XS indices select (ggml's kvalues_iq4nl, gguf.quants' IQ4_NL.kvalues).
inline constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210 && sizeof(BlockIQ4_NL) == 18 && sizeof(BlockIQ4_XS) == 136);

}  // namespace rz
