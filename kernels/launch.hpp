// The process-wide switch for programmatic dependent launch (kernels/launch.cuh), for host code.
#pragma once

namespace rz::gpu {

// On by default: kernels are launched with programmatic stream serialization (each waits for
// its predecessor inside the kernel, so launches overlap). Off: plain stream order, for
// comparison (rz bench --no-pdl). Read at every launch; set it before capturing graphs.
void set_programmatic_launch(bool on);
bool programmatic_launch();

}  // namespace rz::gpu
