// rz generate: placeholder until the subcommand lands; it refuses to run rather than pretend.
#include <cstdio>

#include "apps/commands.hpp"

namespace rz::cmd {

int generate(int, char**) {
  std::fprintf(stderr, "rz generate: not built yet\n");
  return 1;
}

}  // namespace rz::cmd
