// rz info: placeholder until the subcommand lands; it refuses to run rather than pretend.
#include <cstdio>

#include "apps/commands.hpp"

namespace rz::cmd {

int info(int, char**) {
  std::fprintf(stderr, "rz info: not built yet\n");
  return 1;
}

}  // namespace rz::cmd
