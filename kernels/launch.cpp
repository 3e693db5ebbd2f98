// The programmatic-launch switch (kernels/launch.hpp).
#include "kernels/launch.hpp"

#include <atomic>

namespace rz::gpu {
namespace {
std::atomic<bool> g_programmatic{true};
}  // namespace

void set_programmatic_launch(bool on) { g_programmatic.store(on, std::memory_order_relaxed); }
bool programmatic_launch() { return g_programmatic.load(std::memory_order_relaxed); }

}  // namespace rz::gpu
