// RLIMIT_NOFILE at start and the socket cap derived from it (see fd_limit.hpp).
#include "net/fd_limit.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <filesystem>

namespace rz::net {

int socket_cap_for(long soft_limit, int open_now, int headroom) {
  const long cap = soft_limit - open_now - headroom;
  return static_cast<int>(std::clamp<long>(cap, 0, 1L << 20));
}

FdBudget raise_fd_limit(int headroom) {
  FdBudget b;
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    const rlim_t big = rlim_t(1) << 20;
    b.soft_before = rl.rlim_cur == RLIM_INFINITY ? long(big) : long(rl.rlim_cur);
    const rlim_t want = rl.rlim_max == RLIM_INFINITY ? std::max(rl.rlim_cur, big) : rl.rlim_max;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
      rlimit raised = rl;
      raised.rlim_cur = want;
      if (setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
    }
    b.soft = rl.rlim_cur == RLIM_INFINITY ? long(big) : long(rl.rlim_cur);
    b.hard = rl.rlim_max == RLIM_INFINITY ? long(big) : long(rl.rlim_max);
  } else {
    b.soft_before = b.soft = b.hard = 1024;  // the usual default
  }
  std::error_code ec;
  int n = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    ++n;
  b.open_now = n;
  b.socket_cap = socket_cap_for(b.soft, b.open_now, headroom);
  return b;
}

}  // namespace rz::net
