// The open-file budget of the server process: rz serve raises RLIMIT_NOFILE's soft limit to the
// hard one at start, then gives the network edge a cap on the sockets it may hold
// (ServerConfig::max_open_sockets), leaving the descriptors already open (model file, CUDA, CAF,
// logs) plus some headroom for the rest of the process. At the cap new sockets are closed at
// accept, so the accept loop never spins on EMFILE and /health gets a place as soon as one is
// free. No Boost here.
#pragma once

namespace rz::net {

struct FdBudget {
  long soft_before = 0;  // soft limit found at start
  long soft = 0;         // soft limit now (raised to the hard one when possible)
  long hard = 0;
  int open_now = 0;    // descriptors open when measured
  int socket_cap = 0;  // sockets the server may hold: soft - open_now - headroom (>= 0)
};

// Raises the soft limit to the hard one (an infinite hard limit counts as 1 << 20), counts the
// open descriptors and returns the budget.
FdBudget raise_fd_limit(int headroom = 32);

// The socket cap, given the limit and the descriptors already open; never negative.
int socket_cap_for(long soft_limit, int open_now, int headroom);

}  // namespace rz::net
