// Rotary frequencies after scaling (see rope_freqs.hpp).
#include "model/rope_freqs.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "formats/common.hpp"

namespace rz {

RopeFreqs RopeFreqs::make_swa(const ModelConfig& c) {
  ModelConfig local = c;
  local.rope_theta = c.rope_theta_swa;
  local.rope_scaling = RopeScaling{};
  local.rope_freq_factors.clear();
  return make(local);
}

RopeFreqs RopeFreqs::make(const ModelConfig& c) {
  RopeFreqs f;
  const int half = c.n_rot / 2;
  const double base = c.rope_theta;
  const RopeScaling& s = c.rope_scaling;
  if (!c.rope_freq_factors.empty() && static_cast<int>(c.rope_freq_factors.size()) != half)
    throw Error("rope: " + std::to_string(c.rope_freq_factors.size()) +
                " frequency factors for n_rot / 2 = " + std::to_string(half) + " frequencies");
  f.inv_freq.resize(half);
  for (int i = 0; i < half; ++i) {
    double freq = std::pow(base, -2.0 * i / c.n_rot);
    switch (s.type) {
      case RopeScaling::Type::None: break;
      case RopeScaling::Type::Linear: freq /= s.factor; break;
      case RopeScaling::Type::Llama3: {
        // Long wavelengths are divided by the factor, short ones kept, a smooth blend between.
        const double orig = s.original_context > 0 ? s.original_context : 8192;
        const double low_wavelen = orig / s.low_freq_factor;
        const double high_wavelen = orig / s.high_freq_factor;
        const double wavelen = 2 * std::numbers::pi / freq;
        if (wavelen > low_wavelen) {
          freq /= s.factor;
        } else if (wavelen >= high_wavelen) {
          double smooth =
              (orig / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
          freq = (1 - smooth) * freq / s.factor + smooth * freq;
        }
        break;
      }
      case RopeScaling::Type::Yarn: {
        // Hugging Face's default yarn (beta_fast 32, beta_slow 1, attention factor
        // 0.1 ln(factor) + 1): a linear ramp between interpolated and original frequencies over
        // the dimensions whose wavelength lies between the two correction bounds.
        const double orig = s.original_context > 0 ? s.original_context : c.n_ctx_train;
        auto corr_dim = [&](double rotations) {
          return c.n_rot * std::log(orig / (rotations * 2 * std::numbers::pi)) /
                 (2 * std::log(base));
        };
        double low = std::max(0.0, std::floor(corr_dim(32.0)));
        double high = std::min(double(c.n_rot - 1), std::ceil(corr_dim(1.0)));
        if (low == high) high += 0.001;
        double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
        double extrapolation = 1.0 - ramp;
        freq = freq / s.factor * (1 - extrapolation) + freq * extrapolation;
        break;
      }
    }
    // llama.cpp divides each frequency by its rope_freqs factor after linear or yarn scaling.
    if (!c.rope_freq_factors.empty()) freq /= c.rope_freq_factors[i];
    f.inv_freq[i] = static_cast<float>(freq);
  }
  if (s.type == RopeScaling::Type::Yarn && s.factor > 1)
    f.attn_factor = static_cast<float>(0.1 * std::log(s.factor) + 1.0);
  return f;
}

}  // namespace rz
