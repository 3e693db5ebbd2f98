// What the tests of rz's command line share: the rz binary under test and a way to run it, and
// an argv built from strings for the option parsers.
#pragma once
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "tests/formats/model_test_files.hpp"  // run_command, shell_quote

namespace rz::test {

// The rz binary: $RZ_BIN, or the one this build made.
inline std::string rz_bin() {
  const char* e = std::getenv("RZ_BIN");
  return e && *e ? e : RZ_BINARY_DIR "/rz";
}

// `rz ARGS` (ARGS already shell-quoted where needed), its exit status and output.
inline CommandResult run_rz(const std::string& args) {
  return run_command(shell_quote(rz_bin()) + " " + args);
}

// argc / argv over owned strings, for parsers that take main's arguments.
struct Argv {
  std::vector<std::string> store;
  std::vector<char*> ptrs;
  explicit Argv(std::vector<std::string> a) : store(std::move(a)) {
    for (auto& s : store) ptrs.push_back(s.data());
  }
  int argc() { return static_cast<int>(ptrs.size()); }
  char** argv() { return ptrs.data(); }
};

}  // namespace rz::test
