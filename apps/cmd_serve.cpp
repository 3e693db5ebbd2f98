// rz serve: placeholder until the server lands; it refuses to run rather than pretend.
#include <cstdio>

#include "apps/commands.hpp"

namespace rz::cmd {

int serve(int, char**) {
  std::fprintf(stderr, "rz serve: not built yet\n");
  return 1;
}

}  // namespace rz::cmd
