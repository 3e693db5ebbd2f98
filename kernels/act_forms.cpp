// check_act_forms (kernels/act_forms.hpp).
#include "kernels/act_forms.hpp"

#include <cstdint>
#include <string>

#include "kernels/cuda_check.hpp"
#include "kernels/gemv_q8.hpp"
#include "kernels/qmm.hpp"

namespace rz::gpu {

void check_act_forms(const ActForms& forms, long long cols, const char* who) {
  const auto fail = [&](const std::string& why) {
    throw Error(std::string(who) + ": cannot write the matmul input forms: " + why);
  };
  if (!forms.any()) {
    if (!forms.f32) fail("no fp32 output and no form: nothing would be written");
    return;
  }
  if (cols % 4 != 0) fail(std::to_string(cols) + " columns, not a multiple of 4");
  if (forms.qmm && cols % kQmmChunk != 0)
    fail("qmm needs a multiple of " + std::to_string(kQmmChunk) + " columns, got " +
         std::to_string(cols));
  if (forms.q8 && cols % kQ8Group != 0)
    fail("q8 needs a multiple of " + std::to_string(kQ8Group) + " columns, got " +
         std::to_string(cols));
  for (const void* p : {forms.f16, forms.qmm, forms.q8})
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) fail("a form is not 16-byte aligned");
}

}  // namespace rz::gpu
