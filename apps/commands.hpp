// The rz subcommands. Each lives in its own cmd_*.cpp; main.cpp dispatches by name.
#pragma once

namespace rz::cmd {

int generate(int argc, char** argv);
int tokenize(int argc, char** argv);
int info(int argc, char** argv);
int serve(int argc, char** argv);
int synth(int argc, char** argv);
int bench(int argc, char** argv);

}  // namespace rz::cmd
